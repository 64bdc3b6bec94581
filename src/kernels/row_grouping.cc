#include "kernels/row_grouping.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <numeric>

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

void RowGrouping::build(std::span<const int64_t> rows, int64_t vocabulary_size, int64_t row_bytes,
                        ThreadPool* pool) {
  const int key_bits = static_cast<int>(std::bit_width(static_cast<uint64_t>(vocabulary_size - 1)));
  // Saturating: only compared against kMinSingleRowGapBytes times the number of unique rows.
  const int64_t table_bytes = row_bytes > std::numeric_limits<int64_t>::max() / vocabulary_size
                                  ? std::numeric_limits<int64_t>::max()
                                  : vocabulary_size * row_bytes;
  if (key_bits <= 32) {
    sort_and_group<true>(rows, key_bits, table_bytes, pool);
  } else {
    sort_and_group<false>(rows, key_bits, table_bytes, pool);
  }
}

template <bool kPacked>
void RowGrouping::sort_and_group(std::span<const int64_t> rows, int key_bits, int64_t table_bytes,
                                 ThreadPool* pool) {
  const size_t n = rows.size();
  const size_t chunks =
      pool == nullptr
          ? 1
          : std::clamp<size_t>(n / kMinItemsPerChunk, 1, static_cast<size_t>(pool->num_threads()));
  const KeyOf<kPacked> key_of{rows};
  items_.resize(n);
  items_scratch_.resize(n);
  order_.resize(n);
  const int passes = (key_bits + kMaxDigitBits - 1) / kMaxDigitBits;
  const int digit_bits = passes == 0 ? 0 : (key_bits + passes - 1) / passes;
  const size_t buckets = size_t{1} << digit_bits;
  counts_.resize(chunks * buckets);
  // Each chunk counts the digits of its items for a pass; the first pass's counts are taken while
  // the items are made. Locals, not captures: the compiler cannot keep a captured int in a
  // register across stores through uint32_t*.
  const auto count_digits = [&](size_t chunk, size_t first, size_t last, int shift) {
    uint32_t* const counts = counts_.data() + chunk * buckets;
    const uint64_t* const items = items_.data();
    const uint64_t mask = buckets - 1;
    std::fill_n(counts, buckets, 0u);
    for (size_t i = first; i < last; ++i) ++counts[(key_of(items[i]) >> shift) & mask];
  };
  for_each_chunk(pool, n, chunks, [&](size_t chunk, size_t first, size_t last) {
    uint64_t* const items = items_.data();
    for (size_t i = first; i < last; ++i) {
      items[i] = kPacked ? (static_cast<uint64_t>(rows[i]) << 32) | i : i;
    }
    if (passes > 0) count_digits(chunk, first, last, 0);
  });
  for (int pass = 0; pass < passes; ++pass) {
    const int shift = pass * digit_bits;
    if (pass > 0) {
      for_each_chunk(pool, n, chunks, [&](size_t chunk, size_t first, size_t last) {
        count_digits(chunk, first, last, shift);
      });
    }
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
      uint32_t* const heads = counts_.data() + chunk * buckets;
      const uint64_t* const items = items_.data();
      uint64_t* const sorted = items_scratch_.data();
      const int digit_shift = shift;
      const uint64_t mask = buckets - 1;
      for (size_t i = first; i < last; ++i) {
        sorted[heads[(key_of(items[i]) >> digit_shift) & mask]++] = items[i];
      }
    });
    items_.swap(items_scratch_);
  }
  group_sorted(key_of, chunks, table_bytes, pool);
}

// From the sorted items: the order, the groups and the shared rows in one pass, then the single
// contributions in index order in another. Each pass lets chunk c write from the position of its
// first item (no group or single can come before it), and moves the chunks' parts together after.
template <class KeyOfItem>
void RowGrouping::group_sorted(const KeyOfItem& key_of, size_t chunks, int64_t table_bytes,
                               ThreadPool* pool) {
  const size_t n = items_.size();
  unique_rows_.resize(n);
  segment_starts_.resize(n + 1);
  shared_rows_.resize(n);
  // Each chunk marks the single contributions it finds in its own bitmap (small enough for L1);
  // the bitmaps are OR-ed when the singles are listed.
  const size_t words = (n + 63) / 64;
  single_bits_.assign(chunks * words, 0);
  chunk_uniques_.resize(chunks + 1);
  chunk_shared_.resize(chunks + 1);
  for_each_chunk(pool, n, chunks, [&](size_t chunk, size_t first, size_t last) {
    // Raw pointers in locals, which stores through other pointers cannot change.
    const uint64_t* const items = items_.data();
    uint32_t* const order = order_.data();
    uint64_t* const single_bits = single_bits_.data() + chunk * words;
    int64_t* const unique_rows = unique_rows_.data();
    uint32_t* const segment_starts = segment_starts_.data();
    uint32_t* const shared_rows = shared_rows_.data();
    // Unique row k of this chunk is written at first + k: as many groups as items at most.
    auto k = static_cast<uint32_t>(first);
    auto s = static_cast<uint32_t>(first);
    for (size_t i = first; i < last; ++i) {
      const uint64_t key = key_of(items[i]);
      const bool starts = i == 0 || key != key_of(items[i - 1]);
      const bool ends = i + 1 == n || key != key_of(items[i + 1]);
      const auto index = static_cast<uint32_t>(items[i]);
      order[i] = index;
      single_bits[index / 64] |= static_cast<uint64_t>(starts && ends ? 1 : 0) << (index % 64);
      if (starts) {
        unique_rows[k] = static_cast<int64_t>(key);
        segment_starts[k] = static_cast<uint32_t>(i);
        if (!ends) shared_rows[s++] = k;  // this chunk's numbering; fixed below
        ++k;
      }
    }
    chunk_uniques_[chunk] = k - static_cast<uint32_t>(first);
    chunk_shared_[chunk] = s - static_cast<uint32_t>(first);
  });
  // Move each chunk's groups down to follow the previous chunk's; renumber its shared rows.
  uint32_t uniques = 0;
  uint32_t shared = 0;
  for (size_t chunk = 0; chunk < chunks; ++chunk) {
    const size_t first = n * chunk / chunks;
    const uint32_t chunk_first = static_cast<uint32_t>(first);
    std::copy_n(unique_rows_.begin() + static_cast<ptrdiff_t>(first), chunk_uniques_[chunk],
                unique_rows_.begin() + uniques);
    std::copy_n(segment_starts_.begin() + static_cast<ptrdiff_t>(first), chunk_uniques_[chunk],
                segment_starts_.begin() + uniques);
    for (uint32_t j = 0; j < chunk_shared_[chunk]; ++j) {
      shared_rows_[shared + j] = shared_rows_[chunk_first + j] - chunk_first + uniques;
    }
    uniques += chunk_uniques_[chunk];
    shared += chunk_shared_[chunk];
  }
  unique_rows_.resize(uniques);
  segment_starts_.resize(uniques + 1);
  segment_starts_.back() = static_cast<uint32_t>(n);
  shared_rows_.resize(shared);
  if (table_bytes <= kMinSingleRowGapBytes * static_cast<int64_t>(uniques)) {  // dense: no singles
    shared_rows_.resize(uniques);
    std::iota(shared_rows_.begin(), shared_rows_.end(), 0u);
    single_contributions_.clear();
    return;
  }
  // The single contributions, in index order: chunk c lists those of words [first, last) from
  // position 64 * first.
  single_contributions_.resize(n);
  for_each_chunk(pool, words, chunks, [&](size_t chunk, size_t first, size_t last) {
    const uint64_t* const single_bits = single_bits_.data();
    uint32_t* const begin = single_contributions_.data() + 64 * first;
    uint32_t* out = begin;
    for (size_t w = first; w < last; ++w) {
      uint64_t bits = 0;
      for (size_t c = 0; c < chunks; ++c) bits |= single_bits[c * words + w];
      for (; bits != 0; bits &= bits - 1) {
        *out++ = static_cast<uint32_t>(64 * w + static_cast<size_t>(std::countr_zero(bits)));
      }
    }
    chunk_uniques_[chunk] = static_cast<uint32_t>(out - begin);
  });
  uint32_t singles = 0;
  for (size_t chunk = 0; chunk < chunks; ++chunk) {
    const size_t first = 64 * (words * chunk / chunks);
    std::copy_n(single_contributions_.begin() + static_cast<ptrdiff_t>(first),
                chunk_uniques_[chunk], single_contributions_.begin() + singles);
    singles += chunk_uniques_[chunk];
  }
  single_contributions_.resize(singles);
}

}  // namespace recemb::internal
