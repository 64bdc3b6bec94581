// Everything an Embedding keeps per table: its config, resolved optimizer, storage and the reusable
// buffers of the backward pass.
#ifndef RECEMB_EMBEDDING_TABLE_STATE_H_
#define RECEMB_EMBEDDING_TABLE_STATE_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "recemb/config.h"

#include "batch/csr_feature.h"
#include "kernels/row_grouping.h"
#include "kernels/sparse_update.h"
#include "storage/table_storage.h"
#include "util/thread_pool.h"

namespace recemb::internal {

class TableState {
 public:
  // Allocates the table and the slots of `optimizer` (the table's own or the global one; none:
  // no slots, not trainable). Does not initialise the values (initialize_block does).
  TableState(TableConfig config, std::optional<Optimizer> optimizer);

  const TableConfig& config() const { return config_; }
  const std::optional<Optimizer>& optimizer() const { return optimizer_; }
  TableStorage& storage() { return storage_; }
  const TableStorage& storage() const { return storage_; }
  // Whether every row is updated each step (non-lazy Adam), touched or not.
  bool updates_all_rows() const;

  // Sets rows [first_row, first_row + num_rows) and their slots to their initial values.
  void initialize_block(uint64_t table_seed, int64_t first_row, int64_t num_rows);

  // Lists this step's gradient contributions of `features` (the features looked up in this table,
  // in feature order) and groups them by row. gradients[f] is feature f's gradient or empty for
  // zeros, in which case `zeros` (dim floats of 0) is the source. With a pool (not inside one of
  // its loops), the listing of large features and the grouping run on its threads.
  void gather_contributions(const std::vector<size_t>& features,
                            const std::vector<CsrFeature>& batch,
                            std::span<const std::span<const float>> gradients, const float* zeros,
                            ThreadPool* pool = nullptr);

  // The same for contributions listed by the caller: resize_contributions(n), fill contribution i
  // (its row, gain and gradient source of dim floats) for i in [0, n) in their summation order,
  // then group_contributions().
  struct ContributionArrays {
    int64_t* rows;
    float* gains;
    const float** sources;
  };
  ContributionArrays resize_contributions(size_t count);
  void group_contributions(ThreadPool* pool = nullptr);

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
  RowVariables variables();

 private:
  // The bytes of a row's parameters and slots.
  int64_t row_bytes() const;

  TableConfig config_;
  std::optional<Optimizer> optimizer_;
  TableStorage storage_;
  std::vector<int64_t> contribution_rows_;
  std::vector<float> contribution_gains_;
  std::vector<const float*> contribution_sources_;
  RowGrouping grouping_;
  std::vector<float> sorted_gains_;
  std::vector<const float*> sorted_sources_;
};

}  // namespace recemb::internal

#endif  // RECEMB_EMBEDDING_TABLE_STATE_H_
