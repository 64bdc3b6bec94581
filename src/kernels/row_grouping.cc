#include "kernels/row_grouping.h"

#include <algorithm>
#include <bit>

namespace recemb::internal {
namespace {

constexpr int kMaxDigitBits = 11;  // 2048 counters per chunk: they and the write heads stay in L1
constexpr size_t kMinItemsPerChunk = 16384;  // smaller inputs sort on the calling thread

// The key of an item: packed items carry the row in their high 32 bits, others are an index.
template <bool kPacked>
struct KeyOf {
  std::span<const int64_t> rows;
  uint64_t operator()(uint64_t item) const {
    if constexpr (kPacked) {
      return item >> 32;
    } else {
      return static_cast<uint64_t>(rows[static_cast<uint32_t>(item)]);
    }
  }
};

// Splits [0, n) into `chunks` ranges and runs fn(chunk, first, last) for each: on the pool's
// threads when there are several.
template <class Fn>
void for_each_chunk(ThreadPool* pool, size_t n, size_t chunks, Fn&& fn) {
  const auto range = [&](int64_t chunk, int) {
    const auto c = static_cast<size_t>(chunk);
    fn(c, n * c / chunks, n * (c + 1) / chunks);
  };
  if (chunks == 1) {
    range(0, 0);
  } else {
    pool->parallel_for(static_cast<int64_t>(chunks), range);
  }
}

}  // namespace

void RowGrouping::build(std::span<const int64_t> rows, int64_t vocabulary_size, ThreadPool* pool) {
  const int key_bits = static_cast<int>(std::bit_width(static_cast<uint64_t>(vocabulary_size - 1)));
  if (key_bits <= 32) {
    sort_and_group<true>(rows, key_bits, pool);
  } else {
    sort_and_group<false>(rows, key_bits, pool);
  }
}

template <bool kPacked>
void RowGrouping::sort_and_group(std::span<const int64_t> rows, int key_bits, ThreadPool* pool) {
  const size_t n = rows.size();
  const size_t chunks =
      pool == nullptr
          ? 1
          : std::clamp<size_t>(n / kMinItemsPerChunk, 1, static_cast<size_t>(pool->num_threads()));
  const KeyOf<kPacked> key_of{rows};
  items_.resize(n);
  items_scratch_.resize(n);
  order_.resize(n);
  for_each_chunk(pool, n, chunks, [&](size_t, size_t first, size_t last) {
    for (size_t i = first; i < last; ++i) {
      items_[i] = kPacked ? (static_cast<uint64_t>(rows[i]) << 32) | i : i;
    }
  });
  const int passes = (key_bits + kMaxDigitBits - 1) / kMaxDigitBits;
  const int digit_bits = passes == 0 ? 0 : (key_bits + passes - 1) / passes;
  const size_t buckets = size_t{1} << digit_bits;
  const uint64_t mask = buckets - 1;
  counts_.resize(chunks * buckets);
  for (int pass = 0; pass < passes; ++pass) {
    const int shift = pass * digit_bits;
    for_each_chunk(pool, n, chunks, [&](size_t chunk, size_t first, size_t last) {
      uint32_t* counts = counts_.data() + chunk * buckets;
      std::fill_n(counts, buckets, 0u);
      for (size_t i = first; i < last; ++i) ++counts[(key_of(items_[i]) >> shift) & mask];
    });
    // Each chunk's first slot for each digit: digits in order, and within a digit the chunks in
    // order, so the pass is stable.
    uint32_t next = 0;
    for (size_t digit = 0; digit < buckets; ++digit) {
      for (size_t chunk = 0; chunk < chunks; ++chunk) {
        const uint32_t count = counts_[chunk * buckets + digit];
        counts_[chunk * buckets + digit] = next;
        next += count;
      }
    }
    for_each_chunk(pool, n, chunks, [&](size_t chunk, size_t first, size_t last) {
      uint32_t* heads = counts_.data() + chunk * buckets;
      for (size_t i = first; i < last; ++i) {
        items_scratch_[heads[(key_of(items_[i]) >> shift) & mask]++] = items_[i];
      }
    });
    items_.swap(items_scratch_);
  }
  // The order, and where each chunk's rows start a new group; then the groups.
  chunk_uniques_.resize(chunks + 1);
  for_each_chunk(pool, n, chunks, [&](size_t chunk, size_t first, size_t last) {
    uint32_t starts = 0;
    for (size_t i = first; i < last; ++i) {
      order_[i] = static_cast<uint32_t>(items_[i]);
      starts += (i == 0 || key_of(items_[i]) != key_of(items_[i - 1])) ? 1 : 0;
    }
    chunk_uniques_[chunk + 1] = starts;
  });
  chunk_uniques_[0] = 0;
  for (size_t chunk = 0; chunk < chunks; ++chunk)
    chunk_uniques_[chunk + 1] += chunk_uniques_[chunk];
  unique_rows_.resize(chunk_uniques_[chunks]);
  segment_starts_.resize(chunk_uniques_[chunks] + 1);
  for_each_chunk(pool, n, chunks, [&](size_t chunk, size_t first, size_t last) {
    uint32_t k = chunk_uniques_[chunk];
    for (size_t i = first; i < last; ++i) {
      const uint64_t key = key_of(items_[i]);
      if (i == 0 || key != key_of(items_[i - 1])) {
        unique_rows_[k] = static_cast<int64_t>(key);
        segment_starts_[k] = static_cast<uint32_t>(i);
        ++k;
      }
    }
  });
  segment_starts_.back() = static_cast<uint32_t>(n);
}

}  // namespace recemb::internal
