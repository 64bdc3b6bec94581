// The backward kernel: per touched row, reduce its gradient contributions in their fixed order and
// run the table's fused optimizer pipeline (optimizers/row_update.h) once, in one pass over the
// row.
//
// Rows come in two kinds (RowGrouping): rows with one contribution (most rows of a large table)
// are updated in the order the batch lists them, straight from their bag's gradient, which the
// contributions of one bag share, so it stays in L1 as the plain gather + update of
// roofline_bench does. Rows with several are updated in sorted order, in chunks of
// update_chunk_rows(dim), in two passes per chunk: first the gradients of the chunk's rows are
// reduced into the thread's scratch (random reads of the batch's gradient, which is small and
// mostly in cache), then the rows are updated from the scratch (reads in order) while the
// variables of the rows kPrefetchDistance ahead are prefetched into the L2. Kept apart, the second
// pass has only the table's rows in flight, so the memory-level parallelism goes to the random
// rows of the table.
//
// A 16-bit table's rows (RowVariables::halves) are updated a block of half_row_block(dim) rows at
// a time, in three passes: every row of the block decoded into the scratch, every row's optimizer
// update, every row rounded back. Row by row, the rounding of each row sat between the memory
// accesses of the next and cost the step about half its speed beyond the cache; in blocks the
// rows' and slots' loads of a block issue close together (docs/performance.md, "16-bit tables
// beside float32").
//
// Each kernel takes the row width as a template argument kDim: 0 for variables.dim at run time,
// or variables.dim itself, which makes every per-row loop (gradient, optimizer, prefetch) one of
// constant length, fully unrolled. That is worth 15-20% of a memory-bound update step: the loop
// overhead of a run-time width sits between the row's memory accesses (docs/performance.md,
// "Decisions").
#ifndef RECEMB_KERNELS_SPARSE_UPDATE_H_
#define RECEMB_KERNELS_SPARSE_UPDATE_H_

#include <algorithm>
#include <array>
#include <cstdint>

#include "recemb/config.h"

#include "kernels/half_precision.h"
#include "kernels/prefetch.h"
#include "kernels/row_grouping.h"

namespace recemb::internal {

// A table's variables as raw pointers: row r of parameters is parameters + r * dim (or of halves,
// for a 16-bit table); slot i of row r is slot_bases[i] + r * slot_widths[i].
struct RowVariables {
  float* parameters = nullptr;  // a float32 table's rows; nullptr for a 16-bit table
  int64_t dim = 0;
  int num_slots = 0;
  std::array<float*, 2> slot_bases{};
  std::array<int64_t, 2> slot_widths{};
  // A 16-bit table's rows (docs/semantics.md, "16-bit tables"): a row is decoded into the
  // thread's scratch, updated there in float32, and rounded back as `rounding` says
  // (kernels/half_precision.h), stochastic rounding with the bits of
  // rounding_row_stream(step_stream, row * row_stride + row_offset) for the columns
  // first_column + d: the table's global row and column, so any placement rounds alike. A
  // dynamic table's local rows are slots: its rows are keyed by key, row_keys[row], instead.
  uint16_t* halves = nullptr;
  DType dtype = DType::kFloat32;
  Rounding rounding = Rounding::kStochastic;
  uint64_t step_stream = 0;  // rounding_step_stream(table seed, step)
  int64_t row_stride = 1;
  int64_t row_offset = 0;
  const int64_t* row_keys = nullptr;  // a dynamic table's: the key of each slot
  int64_t first_column = 0;
};

// The gradient contributions of one table for one step. Contribution i (in summation order) adds
// gains[i] * sources[i][0 .. dim) to the gradient of row rows[i]. The same in the order of the
// RowGrouping (sorted by row; within a row in summation order) in sorted_gains and
// sorted_sources: those of grouping.unique_rows()[k] are [segment_starts()[k],
// segment_starts()[k+1]), so the update of a row with several reads them sequentially. The
// sorted arrays need to hold only what is read: the rows with several contributions for
// update_shared_rows, every row for update_all_rows; update_single_rows reads the others.
struct Contributions {
  const int64_t* rows = nullptr;
  const float* gains = nullptr;
  const float* const* sources = nullptr;
  const float* sorted_gains = nullptr;
  const float* const* sorted_sources = nullptr;
};

struct UpdateMode {
  bool accumulate = true;        // sum first, then one update; false: one update per contribution
  bool skip_non_finite = false;  // leave rows with a non-finite gradient unchanged
};

// The rows of one chunk: as many as fit in 32 KiB of gradients, 1 to kMaxUpdateChunkRows.
inline constexpr int64_t kMaxUpdateChunkRows = 128;
inline int64_t update_chunk_rows(int64_t dim) {
  return std::clamp<int64_t>(8192 / std::max<int64_t>(dim, 1), 1, kMaxUpdateChunkRows);
}

// The rows of a block of a 16-bit table's rows (above): up to 16, and no more than a chunk's (the
// gradients of a block's rows may sit in the chunk's scratch).
inline constexpr int64_t kMaxHalfRowBlock = 16;
inline int64_t half_row_block(int64_t dim) {
  return std::min(kMaxHalfRowBlock, update_chunk_rows(dim));
}

// Per-thread buffers: gradients holds update_chunk_rows(dim) * dim floats, rows
// half_row_block(dim) * dim and pipeline dim floats (update_scratch_floats(dim) in all;
// update_scratch lays them out).
struct UpdateScratch {
  float* gradients;
  float* rows;  // a block of 16-bit rows decoded
  float* pipeline;
};
inline int64_t update_scratch_floats(int64_t dim) {
  return (update_chunk_rows(dim) + half_row_block(dim) + 1) * dim;
}
// The scratch of update_scratch_floats(dim) floats from `floats` on.
inline UpdateScratch update_scratch(float* floats, int64_t dim) {
  float* rows = floats + update_chunk_rows(dim) * dim;
  return {floats, rows, rows + half_row_block(dim) * dim};
}

namespace detail {

// A row's first contributions whose gradient rows are prefetched (a hot row may have thousands;
// the gradient of a batch is mostly in cache anyway).
inline constexpr uint32_t kMaxPrefetchedSources = 4;

inline bool all_finite(const float* values, int64_t dim) {
  float sum = 0.0f;
  for (int64_t d = 0; d < dim; ++d) sum += values[d] * 0.0f;  // NaN iff some value is NaN or inf
  return sum == 0.0f;
}

// The detail functions take the row width as `dim`: v.dim, or the kernel's constant kDim.
// Row `row` of each slot.
inline std::array<float*, 2> slot_rows(const RowVariables& v, int64_t row) {
  std::array<float*, 2> slots{};
  for (int i = 0; i < v.num_slots; ++i) slots[i] = v.slot_bases[i] + row * v.slot_widths[i];
  return slots;
}

// Stores the float32 values w as 16-bit row `row`, rounded as v.rounding says.
inline void store_half_row(const RowVariables& v, int64_t dim, int64_t row, const float* w) {
  uint16_t* stored = v.halves + row * dim;
  if (v.rounding == Rounding::kNearest) {
    encode_half_values_nearest(v.dtype, w, dim, stored);
  } else {
    const int64_t id = v.row_keys != nullptr ? v.row_keys[row] : row * v.row_stride + v.row_offset;
    const uint64_t stream = rounding_row_stream(v.step_stream, id);
    encode_half_values_stochastic(v.dtype, w, dim, stream, v.first_column, stored);
  }
}

// Calls update(w) with row `row` of the parameters as float32: the row itself, or a 16-bit row
// decoded into the scratch and rounded back after.
template <class Update>
void with_float_row(const RowVariables& v, int64_t dim, int64_t row, UpdateScratch scratch,
                    Update&& update) {
  if (v.halves == nullptr) {
    update(v.parameters + row * dim);
    return;
  }
  decode_half_values(v.dtype, v.halves + row * dim, dim, scratch.rows);
  update(scratch.rows);
  store_half_row(v, dim, row, scratch.rows);
}

// The rows of a 16-bit table waiting in a block (above), each with its gradient: `source`, which
// the update must not change (the pipeline clips none), or else `gradient`, the scratch's.
template <class Pipeline>
class HalfRowBlock {
 public:
  HalfRowBlock(const Pipeline& pipeline, const RowVariables& v, int64_t dim, UpdateScratch scratch)
      : pipeline_(pipeline), v_(v), dim_(dim), scratch_(scratch), capacity_(half_row_block(dim)) {}

  int64_t size() const { return size_; }

  // Adds a row; a full block is updated at once.
  // NOLINTNEXTLINE(readability-non-const-parameter): kept, and clipped in place by update()
  void add(int64_t row, const float* source, float* gradient) {
    entries_[static_cast<size_t>(size_++)] = {row, source, gradient};
    if (size_ == capacity_) update();
  }

  // Updates the rows waiting and empties the block.
  void update() {
    for (int64_t k = 0; k < size_; ++k) {
      decode_half_values(v_.dtype, v_.halves + entry(k).row * dim_, dim_, row(k));
    }
    for (int64_t k = 0; k < size_; ++k) {
      const std::array<float*, 2> slots = slot_rows(v_, entry(k).row);
      if (entry(k).source != nullptr) {
        pipeline_.apply_unclipped(row(k), slots.data(), entry(k).source, scratch_.pipeline, dim_);
      } else {
        pipeline_.apply(row(k), slots.data(), entry(k).gradient, scratch_.pipeline, dim_);
      }
    }
    for (int64_t k = 0; k < size_; ++k) store_half_row(v_, dim_, entry(k).row, row(k));
    size_ = 0;
  }

 private:
  struct Entry {
    int64_t row;
    const float* source;
    float* gradient;
  };
  const Entry& entry(int64_t k) const { return entries_[static_cast<size_t>(k)]; }
  float* row(int64_t k) const { return scratch_.rows + k * dim_; }

  const Pipeline& pipeline_;
  const RowVariables& v_;
  int64_t dim_;
  UpdateScratch scratch_;
  int64_t capacity_;
  int64_t size_ = 0;
  std::array<Entry, kMaxHalfRowBlock> entries_{};
};

template <class Pipeline>
void update_row(const Pipeline& pipeline, const RowVariables& v, int64_t dim, int64_t row,
                float* gradient, UpdateScratch scratch) {
  const std::array<float*, 2> slots = slot_rows(v, row);
  with_float_row(v, dim, row, scratch, [&](float* w) {
    pipeline.apply(w, slots.data(), gradient, scratch.pipeline, dim);
  });
}

// update_row with a gradient it must not change (the pipeline clips none).
template <class Pipeline>
void update_row_unclipped(const Pipeline& pipeline, const RowVariables& v, int64_t dim, int64_t row,
                          const float* gradient, UpdateScratch scratch) {
  const std::array<float*, 2> slots = slot_rows(v, row);
  with_float_row(v, dim, row, scratch, [&](float* w) {
    pipeline.apply_unclipped(w, slots.data(), gradient, scratch.pipeline, dim);
  });
}

// g = the sum of unique row k's contributions, in their order, from 0.
inline void reduce_unique_row(const RowGrouping& grouping, const Contributions& c, int64_t dim,
                              int64_t k, float* __restrict g) {
  std::fill_n(g, dim, 0.0f);
  for (uint32_t i = grouping.segment_starts()[k]; i < grouping.segment_starts()[k + 1]; ++i) {
    const float gain = c.sorted_gains[i];
    const float* __restrict source = c.sorted_sources[i];
    for (int64_t d = 0; d < dim; ++d) g[d] += gain * source[d];
  }
}

// Reduces and applies the contributions of unique row k: summed into one update, or one update
// each (UpdateMode::accumulate false). Returns false if the row was skipped.
template <class Pipeline>
bool update_unique_row(const Pipeline& pipeline, const RowVariables& v, int64_t dim,
                       const RowGrouping& grouping, const Contributions& c, UpdateMode mode,
                       int64_t k, UpdateScratch scratch) {
  const int64_t row = grouping.unique_rows()[k];
  float* __restrict g = scratch.gradients;
  if (mode.accumulate) {
    reduce_unique_row(grouping, c, dim, k, g);
    if (mode.skip_non_finite && !all_finite(g, dim)) return false;
    update_row(pipeline, v, dim, row, g, scratch);
    return true;
  }
  const uint32_t begin = grouping.segment_starts()[k];
  const uint32_t end = grouping.segment_starts()[k + 1];
  if (mode.skip_non_finite) {
    for (uint32_t i = begin; i < end; ++i) {
      if (!all_finite(c.sorted_sources[i], dim)) return false;
    }
  }
  for (uint32_t i = begin; i < end; ++i) {
    const float gain = c.sorted_gains[i];
    const float* __restrict source = c.sorted_sources[i];
    for (int64_t d = 0; d < dim; ++d) g[d] = gain * source[d];
    update_row(pipeline, v, dim, row, g, scratch);
  }
  return true;
}

// Prefetches the variables of a row (random rows of the table and its slots) into the L2 cache.
// Not prefetchw into the L1: on an AMD Zen 4 the update loop then stalled on the L1's few miss
// buffers (perf: half its time on the prefetch instructions), while requests waiting in the L2's
// queue let more rows be in flight; the step ran 1.13-1.58x faster (docs/performance.md,
// "Decisions"). The store that follows finds the line in the L2.
inline void prefetch_variables(const RowVariables& v, int64_t dim, int64_t row) {
  if (v.halves == nullptr) {
    prefetch_bytes_to_l2(v.parameters + row * dim, dim * static_cast<int64_t>(sizeof(float)));
  } else {
    prefetch_bytes_to_l2(v.halves + row * dim, dim * static_cast<int64_t>(sizeof(uint16_t)));
  }
  for (int i = 0; i < v.num_slots; ++i) {
    // A slot as wide as the row (Adagrad's, Adam's) takes the row's width: a constant with kDim.
    const int64_t width = v.slot_widths[i] == dim ? dim : v.slot_widths[i];
    prefetch_bytes_to_l2(v.slot_bases[i] + row * width,
                         width * static_cast<int64_t>(sizeof(float)));
  }
}

// Prefetches the gradient rows of unique row k's first contributions.
inline void prefetch_sources(const RowGrouping& grouping, const Contributions& c, int64_t dim,
                             int64_t k) {
  const uint32_t begin = grouping.segment_starts()[k];
  const uint32_t end = std::min(grouping.segment_starts()[k + 1], begin + kMaxPrefetchedSources);
  for (uint32_t i = begin; i < end; ++i) prefetch_row(c.sorted_sources[i], dim);
}

}  // namespace detail

// Updates the rows of the single contributions grouping.single_contributions()[first .. last),
// each from its one contribution, in that order. Each row is written by exactly one call, so
// disjoint ranges may run on different threads, and alongside update_shared_rows. Returns the
// number of rows skipped for a non-finite gradient. Never throws, never allocates.
template <int64_t kDim = 0, class Pipeline>
int64_t update_single_rows(const Pipeline& pipeline, const RowVariables& variables,
                           const RowGrouping& grouping, const Contributions& contributions,
                           UpdateMode mode, int64_t first, int64_t last, UpdateScratch scratch) {
  const int64_t dim = kDim > 0 ? kDim : variables.dim;
  const uint32_t* singles = grouping.single_contributions().data();
  const int64_t* rows = contributions.rows;
  for (int64_t j = first; j < std::min(last, first + kPrefetchDistance); ++j) {
    detail::prefetch_variables(variables, dim, rows[singles[j]]);
  }
  // A gain of 1 (a bag's gradient as it is: the sum combiner, unweighted ids) with no gradient
  // clip updates the row straight from its bag's gradient: no copy into the scratch between the
  // row's memory accesses (docs/performance.md, "Decisions"). Its result is the copy's, but for
  // the sign of a zero: 0.0f + (-0.0f) is +0.0f.
  const bool straight = !pipeline.clips_gradients();
  const bool blocks = variables.halves != nullptr;
  detail::HalfRowBlock block(pipeline, variables, dim, scratch);
  int64_t skipped = 0;
  for (int64_t j = first; j < last; ++j) {
    if (j + kPrefetchDistance < last) {
      detail::prefetch_variables(variables, dim, rows[singles[j + kPrefetchDistance]]);
    }
    const uint32_t i = singles[j];
    const float gain = contributions.gains[i];
    const float* __restrict source = contributions.sources[i];
    if (straight && gain == 1.0f) {
      if (mode.skip_non_finite && !detail::all_finite(source, dim)) {
        ++skipped;
        continue;
      }
      if (blocks) {
        block.add(rows[i], source, nullptr);
        continue;
      }
      detail::update_row_unclipped(pipeline, variables, dim, rows[i], source, scratch);
      continue;
    }
    // As the sum from 0 (update_unique_row) or the one update (accumulate false) would be; a
    // block's rows keep theirs apart.
    float* __restrict g = scratch.gradients + block.size() * dim;
    if (mode.accumulate) {
      for (int64_t d = 0; d < dim; ++d) g[d] = 0.0f + gain * source[d];
    } else {
      for (int64_t d = 0; d < dim; ++d) g[d] = gain * source[d];
    }
    if (mode.skip_non_finite && !detail::all_finite(mode.accumulate ? g : source, dim)) {
      ++skipped;
      continue;
    }
    if (blocks) {
      block.add(rows[i], nullptr, g);
      continue;
    }
    detail::update_row(pipeline, variables, dim, rows[i], g, scratch);
  }
  block.update();
  return skipped;
}

// Updates the rows with several contributions grouping.unique_rows()[grouping.shared_rows()[first
// .. last)]. Each row is written by exactly one call, so disjoint ranges may run on different
// threads, and alongside update_single_rows. Returns the number of rows skipped for a non-finite
// gradient. Never throws, never allocates.
template <int64_t kDim = 0, class Pipeline>
int64_t update_shared_rows(const Pipeline& pipeline, const RowVariables& variables,
                           const RowGrouping& grouping, const Contributions& contributions,
                           UpdateMode mode, int64_t first, int64_t last, UpdateScratch scratch) {
  const int64_t dim = kDim > 0 ? kDim : variables.dim;
  const uint32_t* shared = grouping.shared_rows().data();
  const int64_t* unique_rows = grouping.unique_rows().data();
  int64_t skipped = 0;
  for (int64_t j = first; j < std::min(last, first + kPrefetchDistance); ++j) {
    detail::prefetch_variables(variables, dim, unique_rows[shared[j]]);
  }
  if (!mode.accumulate) {  // rare: the contributions of a row go one by one anyway
    for (int64_t j = first; j < last; ++j) {
      if (j + kPrefetchDistance < last) {
        const uint32_t ahead = shared[j + kPrefetchDistance];
        detail::prefetch_variables(variables, dim, unique_rows[ahead]);
        detail::prefetch_sources(grouping, contributions, dim, ahead);
      }
      if (!detail::update_unique_row(pipeline, variables, dim, grouping, contributions, mode,
                                     shared[j], scratch)) {
        ++skipped;
      }
    }
    return skipped;
  }
  const int64_t chunk_rows = update_chunk_rows(dim);
  std::array<bool, kMaxUpdateChunkRows> finite{};
  const bool blocks = variables.halves != nullptr;
  detail::HalfRowBlock block(pipeline, variables, dim, scratch);
  for (int64_t chunk = first; chunk < last; chunk += chunk_rows) {
    const int64_t chunk_end = std::min(last, chunk + chunk_rows);
    for (int64_t j = chunk; j < chunk_end; ++j) {
      if (j + kPrefetchDistance < chunk_end) {
        detail::prefetch_sources(grouping, contributions, dim, shared[j + kPrefetchDistance]);
      }
      float* g = scratch.gradients + (j - chunk) * dim;
      detail::reduce_unique_row(grouping, contributions, dim, shared[j], g);
      finite[static_cast<size_t>(j - chunk)] = !mode.skip_non_finite || detail::all_finite(g, dim);
    }
    for (int64_t j = chunk; j < chunk_end; ++j) {
      if (j + kPrefetchDistance < last) {
        detail::prefetch_variables(variables, dim, unique_rows[shared[j + kPrefetchDistance]]);
      }
      if (!finite[static_cast<size_t>(j - chunk)]) {
        ++skipped;
        continue;
      }
      float* g = scratch.gradients + (j - chunk) * dim;
      if (blocks) {
        block.add(unique_rows[shared[j]], nullptr, g);
        continue;
      }
      detail::update_row(pipeline, variables, dim, unique_rows[shared[j]], g, scratch);
    }
    block.update();  // before the next chunk's gradients take the scratch
  }
  return skipped;
}

// Updates every row in [first_row, last_row): touched rows as update_shared_rows does, the others
// with a zero gradient (non-lazy Adam), all from the sorted contributions. Returns the number of
// rows skipped.
template <int64_t kDim = 0, class Pipeline>
int64_t update_all_rows(const Pipeline& pipeline, const RowVariables& variables,
                        const RowGrouping& grouping, const Contributions& contributions,
                        UpdateMode mode, int64_t first_row, int64_t last_row,
                        UpdateScratch scratch) {
  const int64_t dim = kDim > 0 ? kDim : variables.dim;
  int64_t skipped = 0;
  const auto unique_rows = grouping.unique_rows();
  int64_t k =
      std::lower_bound(unique_rows.begin(), unique_rows.end(), first_row) - unique_rows.begin();
  const int64_t num_unique = static_cast<int64_t>(unique_rows.size());
  for (int64_t row = first_row; row < last_row; ++row) {
    if (k < num_unique && unique_rows[k] == row) {
      if (!detail::update_unique_row(pipeline, variables, dim, grouping, contributions, mode, k,
                                     scratch)) {
        ++skipped;
      }
      ++k;
    } else {
      std::fill_n(scratch.gradients, dim, 0.0f);
      detail::update_row(pipeline, variables, dim, row, scratch.gradients, scratch);
    }
  }
  return skipped;
}

}  // namespace recemb::internal

#endif  // RECEMB_KERNELS_SPARSE_UPDATE_H_
