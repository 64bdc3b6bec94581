#include "serving/key_rows.h"

#include <algorithm>
#include <bit>
#include <memory>
#include <string>

#include "recemb/error.h"

#include "kernels/prefetch.h"
#include "util/key_hash.h"

namespace recemb::internal {

KeyRows::KeyRows(std::span<const int64_t> keys) : size_(static_cast<int64_t>(keys.size())) {
  if (size_ > kMaxKeys) {
    throw InvalidArgument(std::to_string(size_) + " keys are more than a serving index holds (" +
                          std::to_string(kMaxKeys) + ")");
  }
  for (size_t i = 1; i < keys.size(); ++i) {
    if (keys[i] <= keys[i - 1]) {
      throw InvalidArgument("keys[" + std::to_string(i) + "] = " + std::to_string(keys[i]) +
                            " is not greater than keys[" + std::to_string(i - 1) +
                            "] = " + std::to_string(keys[i - 1]) +
                            " (the keys must be strictly increasing)");
    }
  }
  // ceil(size / 0.8) entries: at most 80% full; at least one bucket, so that a search ends.
  const int64_t entries = size_ + (size_ + 3) / 4;
  num_buckets_ =
      static_cast<size_t>(std::max<int64_t>(1, (entries + kBucketWidth - 1) / kBucketWidth));
  storage_ = FloatBuffer(num_buckets_ * sizeof(Bucket) / sizeof(float));
  auto* table = reinterpret_cast<Bucket*>(storage_.data());
  std::uninitialized_value_construct_n(table, num_buckets_);  // zero: every entry free
  for (int64_t row = 0; row < size_; ++row) {
    const int64_t key = keys[static_cast<size_t>(row)];
    // The first bucket from home with a free entry (one exists: at most 80% full); the full ones
    // before it count the key passing.
    for (size_t b = home_bucket(key);; b = b + 1 == num_buckets_ ? 0 : b + 1) {
      Bucket& bucket = table[b];
      int entry = 0;
      while (entry < kBucketWidth && bucket.rows[entry] != 0) ++entry;
      if (entry < kBucketWidth) {
        bucket.keys[entry] = key;
        bucket.rows[entry] = static_cast<uint32_t>(row + 1);
        break;
      }
      ++bucket.passed;
    }
  }
}

size_t KeyRows::home_bucket(int64_t key) const { return scale_hash(mix_key(key), num_buckets_); }

int64_t KeyRows::find(int64_t key) const {
  if (size_ == 0) return absent_row();
  return find_from(home_bucket(key), key);
}

int64_t KeyRows::find_from(size_t home, int64_t key) const {
  const Bucket* table = buckets();
  // Ends: a bucket with a free entry was never passed (nothing is erased), and one exists.
  for (size_t b = home;; b = b + 1 == num_buckets_ ? 0 : b + 1) {
    const Bucket& bucket = table[b];
    // All entries compared without branches: one well-predicted branch per bucket.
    unsigned matches = 0;
    for (int i = 0; i < kBucketWidth; ++i) {
      matches |= (static_cast<unsigned>(bucket.keys[i] == key) &
                  static_cast<unsigned>(bucket.rows[i] != 0))
                 << i;
    }
    if (matches != 0) return int64_t{bucket.rows[std::countr_zero(matches)]} - 1;
    if (bucket.passed == 0) return absent_row();
  }
}

void KeyRows::find(std::span<const int64_t> keys, int64_t* rows) const {
  const auto n = static_cast<int64_t>(keys.size());
  if (size_ == 0) {
    std::fill(rows, rows + n, absent_row());
    return;
  }
  const Bucket* table = buckets();
  // The home buckets of the keys [j, j + kPrefetchDistance), hashed once: when prefetched.
  size_t homes[kPrefetchDistance];
  const auto prefetch = [&](int64_t j) {
    const size_t home = home_bucket(keys[static_cast<size_t>(j)]);
    homes[j % kPrefetchDistance] = home;
    prefetch_line(&table[home]);
  };
  for (int64_t j = 0; j < std::min(n, kPrefetchDistance); ++j) prefetch(j);
  for (int64_t j = 0; j < n; ++j) {
    const size_t home = homes[j % kPrefetchDistance];
    const int64_t key = keys[static_cast<size_t>(j)];
    if (j + kPrefetchDistance < n) prefetch(j + kPrefetchDistance);
    rows[j] = find_from(home, key);
  }
}

int64_t KeyRows::memory_bytes() const {
  return static_cast<int64_t>(num_buckets_ * sizeof(Bucket));
}

}  // namespace recemb::internal
