// The state behind recemb::Embedding and recemb::LookupBatch, and the one step pipeline that every
// placement and rank count runs:
//
//   lookup (sharded_step.cc):  validate -> route -> exchange ids -> pool -> exchange pooled rows
//                              -> combine
//   apply (apply_gradients.cc): validate -> gradient rows -> exchange -> list -> group -> update
//
// One process holding its tables whole runs the same stages, through local views (router.h): no
// byte is routed or exchanged, pooling writes the activations, listing reads the gradients.
//
// Embedding::Impl is made of: the model (what the Embedding is and holds), the router (where ids
// go), the exchange (the Communicator and the message buffers), the execution resources (threads)
// and the per-step scratch. embedding.cc builds them and holds the public calls.
#ifndef RECEMB_EMBEDDING_EMBEDDING_IMPL_H_
#define RECEMB_EMBEDDING_EMBEDDING_IMPL_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "recemb/communicator.h"
#include "recemb/embedding.h"
#include "recemb/placement.h"
#include "recemb/serving.h"

#include "batch/csr_feature.h"
#include "embedding/dynamic_part.h"
#include "embedding/exchange.h"
#include "embedding/key_resolver.h"
#include "embedding/router.h"
#include "embedding/table_state.h"
#include "kernels/table_update.h"
#include "placement/partition.h"
#include "support/thread_pool.h"

namespace recemb {
namespace internal {

struct PublicationState;  // serving/publisher.cc

// What an Embedding is and holds: its configs, placement, the parts this rank holds, its step.
struct Model {
  // Validates the configs and plans the placement, agreeing with the other ranks of
  // `communicator` on the outcome and on the configs; allocates this rank's parts (not
  // initialised).
  Model(std::vector<TableConfig> table_configs, std::vector<FeatureConfig> feature_configs,
        EmbeddingOptions embedding_options, Communicator& communicator);

  std::vector<TableConfig> tables;
  std::vector<FeatureConfig> features;
  EmbeddingOptions options;
  std::vector<std::optional<Optimizer>> optimizers;  // per table: its effective optimizer
  Placement placement;
  Partition partition;
  std::vector<size_t> feature_table;                // feature -> table
  std::vector<std::vector<size_t>> table_features;  // table -> its features, in feature order
  std::vector<TableState> states;                   // one per partition.rank_parts(rank), in order
  bool has_dynamic_tables = false;                  // any table, held here or not
  int64_t step = 0;
  int64_t skipped_rows = 0;
  // Online publishing (recemb/publish.h): where and what this Embedding last published, kept for
  // serving/publisher.cc, which alone knows what it holds (null before the first publish). The
  // rows changed since are in each state's ChangeLog.
  std::shared_ptr<PublicationState> publication;

  // InvalidArgument for an unknown name.
  size_t table_index(std::string_view name) const;
  // The same, and FailedPrecondition naming `call` for a dynamic table (whose variables have no
  // fixed rows).
  size_t static_table_index(std::string_view table, std::string_view call) const;
  // The state holding table t whole on this rank, or nullptr.
  const TableState* whole_state(size_t table) const;
  TableState* whole_state(size_t table);
  std::vector<std::string> variable_names(std::string_view table) const;
  // Floats per row of a variable (dim for "parameters"); InvalidArgument for an unknown name.
  int64_t variable_width(std::string_view table, std::string_view name) const;
  void check_variable_size(std::string_view table, std::string_view name, size_t size) const;
  // Throws InvalidArgument "<what>: value V at index I (<row_name(I / width)>) is not finite" or
  // "... is out of range: '<name>' must be <range_text>" for the first of `values` (rows of the
  // variable's width) that the variable cannot hold: "parameters" any finite value, a slot its
  // SlotRange (optimizers/slot_spec.h). row_name(r) names row r ("row 3", "key -5").
  void check_variable_values(std::string_view table, std::string_view name,
                             std::span<const float> values, std::string_view what,
                             const std::function<std::string(int64_t)>& row_name) const;
};

// The threads an Embedding runs on.
struct Execution {
  explicit Execution(const EmbeddingOptions& options)
      : pool(options.executor ? support::ThreadPool(options.executor)
                              : support::ThreadPool(options.num_threads)) {}
  support::ThreadPool pool;
  // Runs a prefetch's background part; every call but the const accessors joins it first.
  std::thread prefetch_thread;
  void join_prefetch() {
    if (prefetch_thread.joinable()) prefetch_thread.join();
  }
};

// One parallel pooling task: bags [first_bag, last_bag) of one pool input, bag b into
// out + b * input.dim (pool_bags' contract).
struct PoolTask {
  PoolInput input;
  int64_t first_bag;
  int64_t last_bag;
  float* out;
};

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

// The per-step buffers, kept so that a step allocates nothing once they have grown.
struct StepScratch {
  std::vector<uint64_t> table_ids;  // ids per table in the batch being validated
  std::vector<PoolTask> pool_tasks;
  std::vector<int64_t> rank_bytes;                      // [rank]
  std::vector<std::vector<const float*>> section_rows;  // [rank][section]: pooled or gradient rows
  std::vector<size_t> combined_features;  // the features whose parts' pooled rows are combined
  std::vector<GradientCheckTask> gradient_check_tasks;     // every feature's value ranges
  std::vector<float> learning_rates;                       // per table, for the step being applied
  std::vector<std::vector<ContributionSegment>> segments;  // per state
  std::vector<TableUpdate> table_updates;                  // per trainable state, this step
  std::vector<UpdateTask> update_tasks;                    // every trainable state's row ranges
  std::vector<float> zeros;                                // max dim
  std::vector<float> thread_scratch;         // max update_scratch_floats(dim) per thread
  std::vector<int64_t> thread_skipped_rows;  // per thread
};

}  // namespace internal

struct LookupBatch::Impl {
  uint64_t owner = 0;  // id of the Embedding that filled it; 0: none
  std::vector<internal::CsrFeature> features;
  bool applicable = false;
  // A training lookup (admits and counts keys of dynamic tables), not a pure one.
  bool training = false;
  // The requests this rank sent (sections borrow `features` for local views) and received.
  internal::Requests sent;
  internal::Requests received;
  // [rank][section]: the slots of a dynamic table's keys in a received section (whose ids then
  // point here), and the registration that pins the keys until the batch is applied.
  std::vector<std::vector<std::vector<int64_t>>> key_slots;
  internal::PendingLookup pending;
  // A prefetch (Embedding::prefetch) in progress or done: what it was given, how far it got, and
  // the validation error it met (rethrown by finish_lookup).
  bool prefetched = false;
  bool pooled = false;
  std::vector<FeatureInput> prefetch_inputs;
  std::vector<std::span<float>> prefetch_activations;
  std::exception_ptr prefetch_error;
};

struct Embedding::Impl {
  const uint64_t id;
  internal::Exchange exchange;
  internal::Model model;
  internal::Router router;
  internal::Execution execution;
  internal::StepScratch scratch;
  // Runs the dynamic-key protocol of each lookup (resolve_keys), with its scratch.
  internal::KeyResolver key_resolver;
  // The training lookups not applied yet (dynamic tables never evict their keys).
  std::shared_ptr<internal::PendingLookups> pending_lookups =
      std::make_shared<internal::PendingLookups>();
  // What a pure lookup (one that keeps no LookupBatch) fills.
  LookupBatch::Impl scratch_batch;
  // What a training lookup fills before it is swapped into the caller's LookupBatch (then holding
  // that batch's previous memory, reused by the next lookup).
  std::unique_ptr<LookupBatch::Impl> staged_batch;

  Impl(std::vector<TableConfig> table_configs, std::vector<FeatureConfig> feature_configs,
       EmbeddingOptions embedding_options);
  ~Impl();

  int rank() const { return exchange.rank(); }
  int world_size() const { return exchange.world_size(); }
  // Readies `batch` for a new lookup of this Embedding, reusing its memory.
  LookupBatch::Impl& reset_batch(std::unique_ptr<LookupBatch::Impl>& batch) const;
  void initialize_tables();

  // Lookup (sharded_step.cc). lookup_ahead: the part that does not read the tables (validation,
  // normalisation, routing, the id exchange), then, when `pool_now`, the rest. A validation error
  // is thrown.
  void lookup_ahead(std::span<const FeatureInput> inputs,
                    std::span<const std::span<float>> activations, LookupBatch::Impl& batch,
                    bool pool_now);
  // Validates and normalises `inputs` into `batch.features` and checks the activation buffers.
  void normalize_inputs(std::span<const FeatureInput> inputs,
                        std::span<const std::span<float>> activations, LookupBatch::Impl& batch);
  // Resolves the keys of dynamic tables in the sections received (a training lookup admits,
  // counts and evicts them first; dynamic_part.h): their ids become slots.
  void resolve_keys(LookupBatch::Impl& batch);
  // Pools what every rank asked of this rank's parts, exchanges the pooled rows and combines them.
  void pool_activations(std::span<const std::span<float>> activations, LookupBatch::Impl& batch);
  // Where this rank pools the section rank `from` sent part `part`: into the activations (a local
  // view), into the responses, or nowhere (another rank's request of a replicated table, pooled by
  // that rank's own copy).
  enum class Pooled { kIntoActivations, kIntoResponses, kNot };
  Pooled pooled(int from, const internal::TablePart& part) const;
  void pool_requests(std::span<const std::span<float>> activations, const LookupBatch::Impl& batch);
  // Sums (row-wise parts, in shard order) or places (column-wise) the pooled rows received.
  void combine(std::span<const std::span<float>> activations, const LookupBatch::Impl& batch);

  // Apply (apply_gradients.cc).
  void apply_gradients(LookupBatch::Impl& batch, std::span<const std::span<const float>> gradients);
  // Throws for a wrong number or size of gradients or, unless non-finite gradients are allowed, for
  // a NaN or infinity (naming the first, in feature order); reads the gradients on the pool.
  void check_gradients(const std::vector<internal::CsrFeature>& batch,
                       std::span<const std::span<const float>> gradients);
  void evaluate_learning_rates();
  float learning_rate_of(const Optimizer& optimizer, const std::string& owner) const;
  // Sends each part's owner the gradient rows of the bags sent there; locates the rows received
  // (scratch.section_rows).
  void exchange_gradients(const LookupBatch::Impl& batch,
                          std::span<const std::span<const float>> gradients);
  // Lists, per state, the segments of its contributions (scratch.segments).
  void list_contributions(const LookupBatch::Impl& batch,
                          std::span<const std::span<const float>> gradients);
  // Lists and groups every trainable state's contributions.
  void group_contributions();
  // Updates every state that has an optimizer, in one parallel loop over all their row ranges
  // (one wake-up of the pool per step, not one per table).
  void update_tables();
  // After an update of step model.step: dynamic parts reset their zero rows and expire keys.
  void finish_dynamic_step();

  // Whole variables across the parts (embedding.cc).
  void read_variable(size_t table, std::string_view variable, std::span<float> out);
  void write_variable(size_t table, std::string_view variable, std::span<const float> values);
};

}  // namespace recemb

#endif  // RECEMB_EMBEDDING_EMBEDDING_IMPL_H_
