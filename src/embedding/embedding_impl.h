// The state behind recemb::Embedding and recemb::LookupBatch, shared by the engine's two paths:
// embedding.cc (construction, the public calls, and the direct path of a process that holds
// every table whole), apply_gradients.cc (its backward step) and sharded_step.cc (the routed path:
// ids and activations exchanged with the parts' owners, placement/partition.h).
#ifndef RECEMB_EMBEDDING_EMBEDDING_IMPL_H_
#define RECEMB_EMBEDDING_EMBEDDING_IMPL_H_

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "recemb/communicator.h"
#include "recemb/embedding.h"
#include "recemb/error.h"
#include "recemb/placement.h"

#include "batch/csr_feature.h"
#include "embedding/exchange.h"
#include "embedding/table_state.h"
#include "kernels/table_update.h"
#include "placement/partition.h"
#include "util/thread_pool.h"

namespace recemb {

// A message of the routed path: the bytes for (or from) each rank, consecutively, and their counts.
struct RoutedMessage {
  std::vector<std::byte> bytes;
  std::vector<int64_t> counts;  // per rank
  // Byte offset of rank q's part: sum of counts[0 .. q).
  size_t offset(int rank) const;
};

namespace internal {

// One parallel update task: a range of rows of table_updates[update].
struct UpdateTask {
  size_t update;
  UpdateRange rows;
};

// One parallel task of the gradient finiteness check: values [first, last) of one feature's
// gradient, and the index in it of the first non-finite one found there (-1 if none).
struct GradientCheckTask {
  size_t feature;
  int64_t first;
  int64_t last;
  int64_t first_non_finite;
};

// One parallel pooling task: bags [first_bag, last_bag) of one pool input, bag b into
// out + b * input.dim (pool_bags' contract).
struct PoolTask {
  PoolInput input;
  int64_t first_bag;
  int64_t last_bag;
  float* out;
};

// The bags and ids one feature sends to one part of its table.
struct SectionCounts {
  int64_t bags = 0;
  int64_t ids = 0;
};

// The routed path's per-step buffers, kept so that a step allocates nothing once they have grown.
struct RoutedScratch {
  std::vector<std::vector<SectionCounts>> counts;       // [feature][part of its table]
  std::vector<std::vector<RequestSection*>> targets;    // [feature][part of its table]
  std::vector<int64_t> last_bag;                        // [part of a table]
  std::vector<int64_t> bags_written;                    // [part of a table]
  std::vector<int64_t> ids_written;                     // [part of a table]
  std::vector<int64_t> bytes;                           // [rank]
  std::vector<std::vector<const float*>> section_rows;  // [rank][section]: pooled or gradient rows
};

}  // namespace internal

struct LookupBatch::Impl {
  uint64_t owner = 0;  // id of the Embedding that filled it; 0: none
  std::vector<internal::CsrFeature> features;
  bool applicable = false;
  // Routed path only. The requests this rank sent (sent[q][k]: section k to rank q) and received
  // (received[q][k]: section k of the parts this rank holds, from rank q), pointing into the
  // messages kept here.
  RoutedMessage requests_sent;
  RoutedMessage requests_received;
  std::vector<std::vector<internal::RequestSection>> sent;
  std::vector<std::vector<internal::RequestSection>> received;
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
  std::vector<TableConfig> tables;
  std::vector<FeatureConfig> features;
  EmbeddingOptions options;
  std::shared_ptr<Communicator> communicator;
  int rank;
  int world_size;
  Placement placement;
  internal::Partition partition;
  std::vector<size_t> feature_table;                // feature -> table
  std::vector<std::vector<size_t>> table_features;  // table -> its features, in feature order
  // One per part this rank holds (partition.rank_parts(rank)); in the direct path that is one
  // whole part per table, in table order.
  std::vector<internal::TableState> states;
  internal::ThreadPool pool;
  // Runs a prefetch's background part; every call but the const accessors joins it first.
  std::thread prefetch_thread;
  int64_t step = 0;
  int64_t skipped_rows = 0;

  // What a pure lookup (one that keeps no LookupBatch) fills.
  LookupBatch::Impl scratch_batch;

  // Reused per-call buffers.
  std::vector<internal::PoolTask> pool_tasks;
  internal::RoutedScratch routed;
  std::vector<uint64_t> lookup_table_ids;   // ids per table in the batch being validated
  std::vector<float> learning_rates;        // per table, for the step being applied
  std::vector<float> state_learning_rates;  // per state (routed path), for the step being applied
  std::vector<internal::TableUpdate> table_updates;  // per trainable state, this step
  std::vector<internal::UpdateTask> update_tasks;    // every trainable state's row ranges
  std::vector<internal::GradientCheckTask> gradient_check_tasks;  // every feature's value ranges
  std::vector<float> zeros;                                       // max dim
  std::vector<float> thread_scratch;         // max update_scratch_floats(dim) per thread
  std::vector<int64_t> thread_skipped_rows;  // per thread
  RoutedMessage responses_sent;
  RoutedMessage responses_received;
  RoutedMessage gradients_sent;
  RoutedMessage gradients_received;

  Impl(std::vector<TableConfig> table_configs, std::vector<FeatureConfig> feature_configs,
       EmbeddingOptions embedding_options);

  size_t table_index(std::string_view name) const;
  const internal::TablePart& part(size_t state) const { return partition.rank_parts(rank)[state]; }
  // The state holding table t whole on this rank, or nullptr.
  const internal::TableState* whole_state(size_t table) const;

  ~Impl();
  // Readies `batch` for a new lookup of this Embedding, reusing its memory.
  LookupBatch::Impl& reset_batch(std::unique_ptr<LookupBatch::Impl>& batch) const;
  void join_prefetch();
  // The part of a lookup that does not read the tables (validation, normalisation, routing, the
  // id exchange), then, when `pool_now`, the rest. A validation error is thrown.
  void lookup_ahead(std::span<const FeatureInput> inputs,
                    std::span<const std::span<float>> activations, LookupBatch::Impl& batch,
                    bool pool_now);
  void pool_activations(std::span<const std::span<float>> activations, LookupBatch::Impl& batch);

  void initialize_tables();
  void check_same_configs_on_every_rank();

  // Validates and normalises `inputs` into `batch.features` and checks the activation buffers.
  void normalize_inputs(std::span<const FeatureInput> inputs,
                        std::span<const std::span<float>> activations, LookupBatch::Impl& batch);
  void pool_direct(std::span<const std::span<float>> activations, LookupBatch::Impl& batch);
  void apply_gradients(LookupBatch::Impl& batch, std::span<const std::span<const float>> gradients);
  // Throws for a wrong number or size of gradients or, unless non-finite gradients are allowed, for
  // a NaN or infinity (naming the first, in feature order); reads the gradients on the pool.
  void check_gradients(const std::vector<internal::CsrFeature>& batch,
                       std::span<const std::span<const float>> gradients);
  void evaluate_learning_rates();
  float learning_rate_of(const Optimizer& optimizer, const std::string& owner) const;
  // Updates every state that has an optimizer, state s at learning rate state_rates[s], in one
  // parallel loop over all their row ranges (one wake-up of the pool per step, not one per table).
  void update_tables(std::span<const float> state_rates);

  // The routed path (sharded_step.cc).
  void route_requests(LookupBatch::Impl& batch);
  // The all-to-all of the routed ids; fills batch.received.
  void exchange_requests(LookupBatch::Impl& batch);
  void pool_routed(std::span<const std::span<float>> activations, LookupBatch::Impl& batch);
  void apply_routed(LookupBatch::Impl& batch, std::span<const std::span<const float>> gradients);
  void read_variable(size_t table, std::string_view variable, std::span<float> out);
  void write_variable(size_t table, std::string_view variable, std::span<const float> values);

  std::vector<std::string> variable_names(std::string_view table) const;
  // Floats per row of a variable (dim for "parameters"); InvalidArgument for an unknown name.
  int64_t variable_width(std::string_view table, std::string_view name) const;
  void check_variable_size(std::string_view table, std::string_view name, size_t size) const;
};

}  // namespace recemb

#endif  // RECEMB_EMBEDDING_EMBEDDING_IMPL_H_
