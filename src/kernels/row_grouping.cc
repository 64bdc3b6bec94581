#include "kernels/row_grouping.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <numeric>

#include "util/work_split.h"

namespace recemb::internal {
namespace {

constexpr int kMaxDigitBits = 11;  // 2048 counters per chunk: they and the write heads stay in L1

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
void for_each_chunk(support::ThreadPool* pool, size_t n, size_t chunks, Fn&& fn) {
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
                        support::ThreadPool* pool) {
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
                                 support::ThreadPool* pool) {
  const size_t n = rows.size();
  const size_t chunks = pool == nullptr
                            ? 1
                            : std::clamp<size_t>(n / kMinContributionsPerGroupingChunk, 1,
                                                 static_cast<size_t>(pool->num_threads()));
  const KeyOf<kPacked> key_of{rows};
  items_.resize(n + chunks);
  items_scratch_.resize(n + chunks);
  order_.resize(n);
  unique_rows_.resize(n);
  segment_starts_.resize(n + 1);
  shared_rows_.resize(n);
  const size_t words = (n + 63) / 64;
  single_bits_.assign(chunks * words, 0);
  chunk_uniques_.resize(chunks + 1);
  chunk_shared_.resize(chunks + 1);
  // Chunks are split by the key's top digit: its top kMaxDigitBits bits.
  const int top_shift = key_bits - std::min(key_bits, kMaxDigitBits);
  split_by_top_digit(rows, top_shift, key_bits - top_shift, chunks);
  const int passes = (key_bits + kMaxDigitBits - 1) / kMaxDigitBits;
  const int digit_bits = passes == 0 ? 0 : (key_bits + passes - 1) / passes;
  const size_t buckets = size_t{1} << digit_bits;
  counts_.resize(chunks * buckets);
  for_each_chunk(pool, chunks, chunks, [&](size_t chunk, size_t, size_t) {
    // Locals, not captures: the compiler cannot keep a captured int or size_t in a register across
    // stores through uint32_t* or uint64_t*.
    const size_t num_rows = n;
    const int64_t* const row_of = rows.data();
    const KeyOf<kPacked> key = key_of;
    const int num_passes = passes;
    const int shift_bits = digit_bits;
    const size_t num_buckets = buckets;
    const uint64_t mask = buckets - 1;
    const int part_shift = top_shift;
    const uint64_t low_digit = split_digits_[chunk];
    const uint64_t digit_span = split_digits_[chunk + 1] - low_digit;
    const size_t first = chunk_first_[chunk];
    const size_t last = chunk_first_[chunk + 1];
    // The chunk's part of both buffers is [first + chunk, last + chunk]: one spare slot after it,
    // where the rows of other chunks are written (and overwritten), so the loop has no branch to
    // mispredict. The first pass's digits are counted on the way.
    uint64_t* const part = items_.data() + chunk;
    uint32_t* const heads = counts_.data() + chunk * buckets;
    std::fill_n(heads, num_buckets, 0u);
    size_t out = first;
    for (size_t i = 0; i < num_rows; ++i) {
      const auto row = static_cast<uint64_t>(row_of[i]);
      const uint32_t mine = (row >> part_shift) - low_digit < digit_span ? 1 : 0;
      part[out] = kPacked ? (row << 32) | i : i;
      out += mine;
      heads[row & mask] += mine;
    }
    // Stable LSD passes over the part, between the two buffers.
    uint64_t* source = part;
    uint64_t* target = items_scratch_.data() + chunk;
    for (int pass = 0; pass < num_passes; ++pass) {
      const int shift = pass * shift_bits;
      if (pass > 0) {
        std::fill_n(heads, num_buckets, 0u);
        for (size_t i = first; i < last; ++i) ++heads[(key(source[i]) >> shift) & mask];
      }
      auto next = static_cast<uint32_t>(first);
      for (size_t digit = 0; digit < num_buckets; ++digit) {
        const uint32_t count = heads[digit];
        heads[digit] = next;
        next += count;
      }
      for (size_t i = first; i < last; ++i) {
        target[heads[(key(source[i]) >> shift) & mask]++] = source[i];
      }
      std::swap(source, target);
    }
    group_chunk(key, source, chunk, first, last, words);
  });
  finish_grouping(chunks, words, table_bytes, pool);
}

// Chunk c takes the rows whose top digit (row >> top_shift, top_bits wide) lies in
// [split_digits_[c], split_digits_[c + 1]): about n / chunks rows each, at
// [chunk_first_[c], chunk_first_[c + 1]) of the sorted order.
void RowGrouping::split_by_top_digit(std::span<const int64_t> rows, int top_shift, int top_bits,
                                     size_t chunks) {
  const size_t n = rows.size();
  const uint64_t digits = uint64_t{1} << top_bits;
  split_digits_.assign(chunks + 1, digits);
  chunk_first_.assign(chunks + 1, n);
  split_digits_[0] = 0;
  chunk_first_[0] = 0;
  if (chunks == 1) return;
  top_counts_.assign(digits, 0);
  uint32_t* const counts = top_counts_.data();
  for (const int64_t row : rows) ++counts[static_cast<uint64_t>(row) >> top_shift];
  size_t chunk = 1;
  size_t before = 0;  // rows whose top digit is below `digit`
  for (uint64_t digit = 0; digit < digits && chunk < chunks; ++digit) {
    while (chunk < chunks && before >= n * chunk / chunks) {
      split_digits_[chunk] = digit;
      chunk_first_[chunk] = before;
      ++chunk;
    }
    before += top_counts_[digit];
  }
}

// From chunk c's sorted items items[first, last): its part of the order, its groups at first +
// k (no chunk has more groups than items) and its shared rows in its own numbering, and its single
// contributions marked in its own bitmap (small enough for L1). Chunks hold disjoint rows, so a
// group never spans two.
template <class KeyOfItem>
void RowGrouping::group_chunk(const KeyOfItem& key_of, const uint64_t* items, size_t chunk,
                              size_t first, size_t last, size_t words) {
  uint32_t* const order = order_.data();
  uint64_t* const single_bits = single_bits_.data() + chunk * words;
  int64_t* const unique_rows = unique_rows_.data();
  uint32_t* const segment_starts = segment_starts_.data();
  uint32_t* const shared_rows = shared_rows_.data();
  auto k = static_cast<uint32_t>(first);
  auto s = static_cast<uint32_t>(first);
  // The keys of items i and i + 1 travel in registers; a group ends where the next one starts.
  uint64_t key = first < last ? key_of(items[first]) : 0;
  bool starts = true;
  for (size_t i = first; i < last; ++i) {
    const auto index = static_cast<uint32_t>(items[i]);
    const bool has_next = i + 1 < last;
    const uint64_t next_key = has_next ? key_of(items[i + 1]) : 0;
    const bool ends = !has_next || next_key != key;
    order[i] = index;
    single_bits[index / 64] |= static_cast<uint64_t>(starts && ends ? 1 : 0) << (index % 64);
    if (starts) {
      unique_rows[k] = static_cast<int64_t>(key);
      segment_starts[k] = static_cast<uint32_t>(i);
      if (!ends) shared_rows[s++] = k;  // this chunk's numbering; fixed by finish_grouping
      ++k;
    }
    starts = ends;
    key = next_key;
  }
  chunk_uniques_[chunk] = k - static_cast<uint32_t>(first);
  chunk_shared_[chunk] = s - static_cast<uint32_t>(first);
}

// Moves the chunks' groups together and lists the single contributions in index order.
void RowGrouping::finish_grouping(size_t chunks, size_t words, int64_t table_bytes,
                                  support::ThreadPool* pool) {
  const size_t n = order_.size();
  // Move each chunk's groups down to follow the previous chunk's; renumber its shared rows.
  uint32_t uniques = 0;
  uint32_t shared = 0;
  for (size_t chunk = 0; chunk < chunks; ++chunk) {
    const size_t first = chunk_first_[chunk];
    const auto chunk_first = static_cast<uint32_t>(first);
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
