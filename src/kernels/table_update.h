// One table's optimizer update for one step, compiled for each SIMD target and dispatched at run
// time (kernels/simd_target.h): the templates of kernels/sparse_update.h and
// optimizers/row_update.h instantiated for the table's optimizer (and for row widths 16, 32, 64
// and 128, for the width: sparse_update.h's kDim) and inlined whole into code for the best
// instruction set this CPU has, as fast as building the whole library for that instruction set
// (docs/performance.md, "Decisions").
//
// Bitwise identical on every target: a row update is element-wise IEEE operations (add, multiply,
// divide, sqrt, min, max), the same in every lane whatever its width; this file is built with
// -ffp-contract=off (no FMA), and reductions over a row (row-wise Adagrad's mean) keep their
// scalar order, as GCC does not reassociate float sums.
#ifndef RECEMB_KERNELS_TABLE_UPDATE_H_
#define RECEMB_KERNELS_TABLE_UPDATE_H_

#include <cstdint>

#include "recemb/optimizer.h"

#include "kernels/row_grouping.h"
#include "kernels/sparse_update.h"

namespace recemb::internal {

struct TableUpdate {
  const Optimizer* optimizer = nullptr;
  float learning_rate = 0.0f;
  int64_t step = 0;  // the optimizer's step count (Adam's bias correction)
  RowVariables variables;
  const RowGrouping* grouping = nullptr;
  Contributions contributions;
  UpdateMode mode;
};

// Which rows an UpdateRange indexes.
enum class UpdateRows {
  kSingle,  // grouping.single_contributions(): the rows with one contribution
  kShared,  // grouping.shared_rows(): the rows with several
  kAll,     // row numbers of a table that updates every row, touched or not (non-lazy Adam)
};

// Rows [first, last) of one table's update, in the numbering of `rows`.
struct UpdateRange {
  UpdateRows rows = UpdateRows::kShared;
  int64_t first = 0;
  int64_t last = 0;
};

// update_single_rows, update_shared_rows or update_all_rows of kernels/sparse_update.h, as
// range.rows says, with the RowPipeline of update.optimizer: the same contract (disjoint ranges
// may run on different threads; returns the rows skipped; never throws, never allocates).
int64_t update_rows(const TableUpdate& update, UpdateRange range, UpdateScratch scratch);

}  // namespace recemb::internal

#endif  // RECEMB_KERNELS_TABLE_UPDATE_H_
