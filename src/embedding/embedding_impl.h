// The state behind recemb::Embedding and recemb::LookupBatch, and the one step pipeline that every
// placement and rank count runs:
//
//   lookup (lookup_stage.h): validate -> route -> exchange ids -> resolve keys -> pool
//                            -> exchange pooled rows -> combine
//   apply (apply_stage.h):   validate -> gradient rows -> exchange -> list -> group -> update
//
// One process holding its tables whole runs the same stages, through local views (router.h): no
// byte is routed or exchanged, pooling writes the activations, listing reads the gradients.
//
// Embedding::Impl is made of: the model (what the Embedding is and holds), the router (where ids
// go), the exchange (the Communicator and the message buffers), the execution resources (threads)
// and the two stages, each owning its scratch. embedding.cc builds them and holds the public
// calls.
#ifndef RECEMB_EMBEDDING_EMBEDDING_IMPL_H_
#define RECEMB_EMBEDDING_EMBEDDING_IMPL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "recemb/communicator.h"
#include "recemb/embedding.h"
#include "recemb/placement.h"
#include "recemb/serving.h"

#include "batch/csr_feature.h"
#include "embedding/apply_stage.h"
#include "embedding/batch_state.h"
#include "embedding/dynamic_part.h"
#include "embedding/exchange.h"
#include "embedding/lookup_stage.h"
#include "embedding/router.h"
#include "embedding/table_state.h"
#include "placement/partition.h"
#include "support/background_thread.h"
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
  // Runs a prefetch's background part; every call but the const accessors waits for it first.
  support::BackgroundThread prefetcher;
};

}  // namespace internal

// A LookupBatch's state is the stages' BatchState (batch_state.h).
struct LookupBatch::Impl : internal::BatchState {};

struct Embedding::Impl {
  const uint64_t id;
  internal::Exchange exchange;
  internal::Model model;
  internal::Router router;
  internal::Execution execution;
  // The training lookups not applied yet (dynamic tables never evict their keys).
  std::shared_ptr<internal::PendingLookups> pending_lookups =
      std::make_shared<internal::PendingLookups>();
  internal::LookupStage lookup_stage;
  internal::ApplyStage apply_stage;
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

  // Whole variables across the parts (embedding.cc).
  void read_variable(size_t table, std::string_view variable, std::span<float> out);
  void write_variable(size_t table, std::string_view variable, std::span<const float> values);
};

}  // namespace recemb

#endif  // RECEMB_EMBEDDING_EMBEDDING_IMPL_H_
