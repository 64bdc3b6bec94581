// Groups one table's gradient contributions of a step by row, keeping their original order within
// each row: the fixed summation order that makes apply_gradients deterministic.
#ifndef RECEMB_KERNELS_ROW_GROUPING_H_
#define RECEMB_KERNELS_ROW_GROUPING_H_

#include <cstdint>
#include <span>
#include <vector>

#include "support/thread_pool.h"

namespace recemb::internal {

class RowGrouping {
 public:
  // rows[i] is the row of contribution i, i in (feature, example, position) order; every row is in
  // [0, vocabulary_size) and rows.size() < 2^32. A stable LSD radix sort over only the key bits
  // that vocabulary_size needs, in digits of up to 11 bits: O(n) per digit. Rows below 2^32 travel
  // with their index in one 64-bit item. With a pool (not inside one of its loops), large inputs
  // are split by the rows' top bits into one part per thread, which that thread sorts and groups
  // alone (no barrier between the passes, no cache line moving between cores); the result is the
  // same. Reuses its buffers (no allocation once grown).
  //
  // row_bytes is the size of a row's variables: the rows with one contribution are listed apart
  // (single_contributions()) only when the touched rows lie more than kMinSingleRowGapBytes apart
  // on average. In a denser table every row goes with the shared ones, whose sorted order then
  // streams through memory.
  void build(std::span<const int64_t> rows, int64_t vocabulary_size, int64_t row_bytes,
             support::ThreadPool* pool = nullptr);
  static constexpr int64_t kMinSingleRowGapBytes = 4096;

  // The distinct rows, increasing.
  std::span<const int64_t> unique_rows() const { return unique_rows_; }
  // Contribution indices sorted by row; those of unique_rows()[k] are
  // order()[segment_starts()[k] .. segment_starts()[k+1]), increasing.
  std::span<const uint32_t> order() const { return order_; }
  std::span<const uint32_t> segment_starts() const { return segment_starts_; }

  // The same rows split by how many contributions they have. single_contributions(): the
  // indices of the contributions whose row has no other, increasing (their rows in the order the
  // batch lists them); empty in a dense table (build). shared_rows(): the k of every other
  // unique_rows()[k], increasing.
  std::span<const uint32_t> single_contributions() const { return single_contributions_; }
  std::span<const uint32_t> shared_rows() const { return shared_rows_; }

 private:
  template <bool kPacked>
  void sort_and_group(std::span<const int64_t> rows, int key_bits, int64_t table_bytes,
                      support::ThreadPool* pool);
  void split_by_top_digit(std::span<const int64_t> rows, int top_shift, int top_bits,
                          size_t chunks);
  template <class KeyOfItem>
  void group_chunk(const KeyOfItem& key_of, const uint64_t* items, size_t chunk, size_t first,
                   size_t last, size_t words);
  void finish_grouping(size_t chunks, size_t words, int64_t table_bytes, support::ThreadPool* pool);

  std::vector<int64_t> unique_rows_;
  std::vector<uint32_t> order_;
  std::vector<uint32_t> segment_starts_;
  std::vector<uint32_t> single_contributions_;
  std::vector<uint32_t> shared_rows_;
  // Sort scratch: items (row << 32 | index, or the index alone for wider rows; chunk c's part
  // starts c slots late, after the spare slot of each chunk before it); the split into chunks
  // (split_by_top_digit); each chunk's digit counts for the current pass, its number of unique rows
  // (then of single contributions) and of shared rows, and its bitmap of single contributions.
  std::vector<uint64_t> items_;
  std::vector<uint64_t> items_scratch_;
  std::vector<uint64_t> split_digits_;
  std::vector<size_t> chunk_first_;
  std::vector<uint32_t> top_counts_;
  std::vector<uint32_t> counts_;
  std::vector<uint32_t> chunk_uniques_;
  std::vector<uint32_t> chunk_shared_;
  std::vector<uint64_t> single_bits_;
};

}  // namespace recemb::internal

#endif  // RECEMB_KERNELS_ROW_GROUPING_H_
