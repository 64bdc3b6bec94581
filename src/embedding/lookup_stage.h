// The lookup half of the step pipeline (embedding_impl.h), for every placement and rank count:
//
//   validate -> route (router.h: each id to the part holding its row) -> one all-to-all of the
//   requests -> each part's owner resolves dynamic tables' keys (key_resolver.h) and pools the bags
//   it received (pool_bags over its rows or columns) -> one all-to-all of the pooled rows back ->
//   the requester sums them (row-wise parts, in shard order) or places them (column-wise).
//
// A part this rank holds whole pools its own requests, local views of the features, straight into
// the activations: nothing is copied, exchanged or combined for it. A replicated table's requests
// go to every rank's copy: only the requester's own copy pools them (and all copies apply every
// rank's gradients, so the copies stay identical).
//
// The stage owns its scratch (the per-table id counts, the pooling tasks, where each section's
// pooled rows lie, the dynamic-key resolver): a lookup allocates nothing once they have grown.
#ifndef RECEMB_EMBEDDING_LOOKUP_STAGE_H_
#define RECEMB_EMBEDDING_LOOKUP_STAGE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "recemb/embedding.h"

#include "batch/lookup.h"
#include "embedding/batch_state.h"
#include "embedding/dynamic_part.h"
#include "embedding/exchange.h"
#include "embedding/key_resolver.h"
#include "embedding/router.h"
#include "support/thread_pool.h"

namespace recemb::internal {

struct Model;  // embedding_impl.h

// One parallel pooling task: bags [first_bag, last_bag) of one pool input, bag b into
// out + b * input.dim (pool_bags' contract).
struct PoolTask {
  PoolInput input;
  int64_t first_bag;
  int64_t last_bag;
  float* out;
};

class LookupStage {
 public:
  // Works on the Embedding's parts, router, exchange and threads, which outlive it; training
  // lookups pin their dynamic keys in `pending_lookups` until applied.
  LookupStage(Model& model, Router& router, Exchange& exchange, support::ThreadPool& pool,
              std::shared_ptr<PendingLookups> pending_lookups);

  // The part that does not read the tables: validates and normalises `inputs` into
  // `batch.features` (agreed across ranks: a validation error throws on every rank with nothing
  // changed), routes and exchanges the ids; then, when `pool_now`, pool().
  void ahead(std::span<const FeatureInput> inputs, std::span<const std::span<float>> activations,
             BatchState& batch, bool pool_now);
  // The rest: resolves dynamic keys (a training lookup admits, counts and evicts them), pools what
  // every rank asked of this rank's parts, exchanges the pooled rows and combines them into
  // `activations`.
  void pool(std::span<const std::span<float>> activations, BatchState& batch);

 private:
  // Where this rank pools the section rank `from` sent part `part`: into the activations (a local
  // view), into the responses, or nowhere (another rank's request of a replicated table, pooled by
  // that rank's own copy).
  enum class Pooled { kIntoActivations, kIntoResponses, kNot };
  Pooled pooled(int from, const TablePart& part) const;

  void normalize_inputs(std::span<const FeatureInput> inputs,
                        std::span<const std::span<float>> activations, BatchState& batch);
  // The ids of dynamic tables in the sections received become slots.
  void resolve_keys(BatchState& batch);
  void pool_requests(std::span<const std::span<float>> activations, const BatchState& batch);
  // Sums (row-wise parts, in shard order) or places (column-wise) the pooled rows received.
  void combine(std::span<const std::span<float>> activations, const BatchState& batch);

  Model& model_;
  Router& router_;
  Exchange& exchange_;
  support::ThreadPool& pool_;
  std::shared_ptr<PendingLookups> pending_lookups_;

  KeyResolver key_resolver_;
  std::vector<uint64_t> table_ids_;                       // ids per table in the batch validated
  std::vector<PoolTask> pool_tasks_;                      // every section's bags, in tasks
  std::vector<int64_t> response_bytes_;                   // [rank]
  std::vector<std::vector<const float*>> response_rows_;  // [rank][section]: its pooled rows
  std::vector<size_t> combined_features_;  // the features whose parts' pooled rows are combined
};

}  // namespace recemb::internal

#endif  // RECEMB_EMBEDDING_LOOKUP_STAGE_H_
