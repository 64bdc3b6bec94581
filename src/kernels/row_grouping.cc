#include "kernels/row_grouping.h"

#include <array>
#include <bit>

namespace recemb::internal {

void RowGrouping::build(std::span<const int64_t> rows, int64_t vocabulary_size) {
  const size_t n = rows.size();
  keys_.resize(n);
  order_.resize(n);
  keys_scratch_.resize(n);
  order_scratch_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    keys_[i] = static_cast<uint64_t>(rows[i]);
    order_[i] = static_cast<uint32_t>(i);
  }
  const int key_bits = static_cast<int>(std::bit_width(static_cast<uint64_t>(vocabulary_size - 1)));
  for (int shift = 0; shift < key_bits; shift += 8) {
    std::array<uint32_t, 257> starts{};
    for (size_t i = 0; i < n; ++i) ++starts[((keys_[i] >> shift) & 0xff) + 1];
    for (size_t digit = 1; digit < starts.size(); ++digit) starts[digit] += starts[digit - 1];
    for (size_t i = 0; i < n; ++i) {
      const uint32_t destination = starts[(keys_[i] >> shift) & 0xff]++;
      keys_scratch_[destination] = keys_[i];
      order_scratch_[destination] = order_[i];
    }
    keys_.swap(keys_scratch_);
    order_.swap(order_scratch_);
  }
  unique_rows_.clear();
  segment_starts_.clear();
  for (size_t i = 0; i < n; ++i) {
    if (i == 0 || keys_[i] != keys_[i - 1]) {
      unique_rows_.push_back(static_cast<int64_t>(keys_[i]));
      segment_starts_.push_back(static_cast<uint32_t>(i));
    }
  }
  segment_starts_.push_back(static_cast<uint32_t>(n));
}

}  // namespace recemb::internal
