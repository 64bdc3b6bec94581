// Everything an Embedding keeps per part of a table it holds (placement/partition.h): the part, its
// table's config, its resolved optimizer, its storage, the log of its changes for online
// publishing (embedding/change_log.h) and the reusable buffers of the backward pass.
//
// The storage is read through storage() and written through one of two doors, so that no writer
// can leave the change log behind: the training step's (training_storage(), variables(): the step
// marks what it writes, record_update and DynamicPart's admission do) and every other writer's
// (untracked_storage(): marks the log untracked, so the next publish writes a base).
#ifndef RECEMB_EMBEDDING_TABLE_STATE_H_
#define RECEMB_EMBEDDING_TABLE_STATE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "recemb/config.h"

#include "embedding/change_log.h"
#include "embedding/dynamic_part.h"
#include "embedding/exchange.h"
#include "kernels/row_grouping.h"
#include "kernels/sparse_update.h"
#include "placement/partition.h"
#include "storage/table_storage.h"
#include "support/thread_pool.h"

namespace recemb::internal {

// A run of a part's gradient contributions: the ids of one request section (one feature's bags
// from one rank) with their gradient rows, bag i's at gradient + i * gradient_stride (stride 0: one
// row for every bag, as the zeros of an empty gradient).
struct ContributionSegment {
  const RequestSection* section = nullptr;
  const float* gradient = nullptr;
  int64_t gradient_stride = 0;
};

class TableState {
 public:
  // Allocates part `part` of `table` (part.rows rows of part.num_columns floats; a dynamic
  // table's part one more, its zero row) and the slots of `optimizer` (the table's effective one;
  // none: no slots, not trainable). Does not initialise the values (initialize does; a dynamic
  // part's rows are initialised as keys arrive, from `table_seed`). ResourceExhausted naming the
  // table when memory is short.
  TableState(TableConfig table, TablePart part, std::optional<Optimizer> optimizer,
             uint64_t table_seed);

  // The whole table's config (its vocabulary_size and dim, not the part's).
  const TableConfig& table() const { return table_; }
  const TablePart& part() const { return part_; }
  // Rows of the storage: part().rows, and a dynamic part's zero row.
  int64_t rows() const { return storage_.num_rows(); }
  int64_t columns() const { return part_.num_columns; }
  const std::optional<Optimizer>& optimizer() const { return optimizer_; }
  const TableStorage& storage() const { return storage_; }
  // The training step's door: it marks in changes() the rows it writes.
  TableStorage& training_storage() { return storage_; }
  // Every other writer's door (write_variable, write_dynamic_table, a restore, the mutable
  // variable_data): the next publish writes a base.
  TableStorage& untracked_storage() {
    changes_.mark_untracked();
    return storage_;
  }
  ChangeLog& changes() { return changes_; }
  const ChangeLog& changes() const { return changes_; }
  // A dynamic table's keys; nullptr for a static table.
  DynamicPart* dynamic() { return dynamic_.get(); }
  const DynamicPart* dynamic() const { return dynamic_.get(); }
  // Whether every row is updated each step (non-lazy Adam), touched or not.
  bool updates_all_rows() const;

  // Sets local rows [first_row, first_row + num_rows) and their slots to their initial values:
  // those of the table's rows part().global_row(local), its columns of them.
  void initialize(uint64_t table_seed, int64_t first_row, int64_t num_rows);

  // Lists this step's gradient contributions, segment by segment, bag by bag, id by id (their
  // summation order), and groups them by row. Segment ids are local rows of the part; gradient
  // rows are columns() floats. With a pool (not inside one of its loops), large segments are
  // listed, and the grouping runs, on its threads.
  void gather_contributions(std::span<const ContributionSegment> segments,
                            support::ThreadPool* pool = nullptr);

  const RowGrouping& grouping() const { return grouping_; }
  // The contributions as listed, and in the grouping's order for the rows the update reads them
  // for: those with several, or every row when the table updates all rows
  // (kernels/sparse_update.h).
  Contributions contributions() const {
    return {.rows = contribution_rows_.data(),
            .gains = contribution_gains_.data(),
            .sources = contribution_sources_.data(),
            .sorted_gains = sorted_gains_.data(),
            .sorted_sources = sorted_sources_.data()};
  }
  // The rows for the training step's update of `step` (the step it completes: a 16-bit table's
  // stochastic rounding is keyed by it) through the training door, as training_storage().
  RowVariables variables(int64_t step);
  // After the update of this step's rows: marks them in changes() (every row for a table that
  // updates all rows).
  void record_update();

 private:
  // The bytes of a row's parameters and slots.
  int64_t row_bytes() const;
  // InvalidArgument unless every value of a float16 table's initial row fits float16.
  void check_float16_range(std::span<const float> row, int64_t global_row) const;
  void group_contributions(support::ThreadPool* pool);

  TableConfig table_;
  TablePart part_;
  std::optional<Optimizer> optimizer_;
  TableStorage storage_;
  uint64_t table_seed_;
  ChangeLog changes_;
  std::unique_ptr<DynamicPart> dynamic_;
  std::vector<int64_t> contribution_rows_;
  std::vector<float> contribution_gains_;
  std::vector<const float*> contribution_sources_;
  RowGrouping grouping_;
  std::vector<float> sorted_gains_;
  std::vector<const float*> sorted_sources_;
};

}  // namespace recemb::internal

#endif  // RECEMB_EMBEDDING_TABLE_STATE_H_
