// The apply half of the step pipeline (embedding_impl.h), for every placement and rank count:
//
//   validate the gradients and the learning rates -> the requester sends each part's owner the
//   gradient rows of the bags it sent there (one all-to-all) -> the owner lists each part's
//   contributions in (feature, rank, bag, position) order, which is (feature, example, position)
//   of the global batch -> groups them by row -> updates the touched rows of every part in one
//   parallel loop -> dynamic parts reset their zero rows and expire keys.
//
// The gradient rows of a local view (a part this rank holds whole) are the caller's gradients
// themselves: nothing is packed or exchanged for them.
//
// The stage owns its scratch (the check and update tasks, the learning rates, where each
// section's gradient rows lie, the segments, a row of zeros and each thread's update scratch): a
// step allocates nothing once they have grown.
#ifndef RECEMB_EMBEDDING_APPLY_STAGE_H_
#define RECEMB_EMBEDDING_APPLY_STAGE_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "recemb/embedding.h"

#include "batch/csr_feature.h"
#include "embedding/batch_state.h"
#include "embedding/dynamic_part.h"
#include "embedding/exchange.h"
#include "embedding/router.h"
#include "embedding/table_state.h"
#include "kernels/table_update.h"
#include "support/thread_pool.h"

namespace recemb::internal {

struct Model;  // embedding_impl.h

// One parallel task of the gradient finiteness check: values [first, last) of one feature's
// gradient, and the index in it of the first non-finite one found there (-1 if none).
struct GradientCheckTask {
  size_t feature;
  int64_t first;
  int64_t last;
  int64_t first_non_finite;
};

// One parallel update task: a range of rows of table_updates[update].
struct UpdateTask {
  size_t update;
  UpdateRange rows;
};

class ApplyStage {
 public:
  // Works on the parts, router, exchange and threads of the Embedding `embedding_id`, which
  // outlive it; the dynamic parts' expiry spares the keys `pending_lookups` pins. Sizes the
  // per-thread scratch for pool.num_threads() threads and the widest table.
  ApplyStage(uint64_t embedding_id, Model& model, Router& router, Exchange& exchange,
             support::ThreadPool& pool, const PendingLookups& pending_lookups);

  // Embedding::apply_gradients: validates `batch` and `gradients` (agreed across ranks: an error
  // throws on every rank with nothing changed), then updates the tables and advances the step.
  void apply(BatchState& batch, std::span<const std::span<const float>> gradients);

 private:
  // Throws for a wrong number or size of gradients or, unless non-finite gradients are allowed, for
  // a NaN or infinity (naming the first, in feature order); reads the gradients on the pool.
  void check_gradients(const std::vector<CsrFeature>& batch,
                       std::span<const std::span<const float>> gradients);
  void evaluate_learning_rates();
  float learning_rate_of(const Optimizer& optimizer, const std::string& owner) const;
  // Sends each part's owner the gradient rows of the bags sent there; locates the rows received
  // (gradient_rows_).
  void exchange_gradients(const BatchState& batch,
                          std::span<const std::span<const float>> gradients);
  // Lists, per state, the segments of its contributions (segments_).
  void list_contributions(const BatchState& batch,
                          std::span<const std::span<const float>> gradients);
  // Lists and groups every trainable state's contributions.
  void group_contributions();
  // Updates every state that has an optimizer, in one parallel loop over all their row ranges
  // (one wake-up of the pool per step, not one per table).
  void update_tables();
  // After an update of step model.step: dynamic parts reset their zero rows and expire keys.
  void finish_dynamic_step();

  const uint64_t embedding_id_;
  Model& model_;
  Router& router_;
  Exchange& exchange_;
  support::ThreadPool& pool_;
  const PendingLookups& pending_lookups_;

  std::vector<GradientCheckTask> gradient_check_tasks_;     // every feature's value ranges
  std::vector<float> learning_rates_;                       // per table, for the step being applied
  std::vector<int64_t> gradient_bytes_;                     // [rank]
  std::vector<std::vector<const float*>> gradient_rows_;    // [rank][section]: its gradient rows
  std::vector<std::vector<ContributionSegment>> segments_;  // per state
  std::vector<TableUpdate> table_updates_;                  // per trainable state, this step
  std::vector<UpdateTask> update_tasks_;                    // every trainable state's row ranges
  std::vector<float> zeros_;                                // the widest table's dim
  std::vector<float> thread_scratch_;         // update_scratch_floats(widest dim) per thread
  std::vector<int64_t> thread_skipped_rows_;  // per thread
};

}  // namespace recemb::internal

#endif  // RECEMB_EMBEDDING_APPLY_STAGE_H_
