// Embedding: many tables, many features, lookups with combiners, optimizers fused into the
// backward pass (TF's TPUEmbedding / TPUEmbeddingForServing, on the CPU of one process).
//
//   recemb::Embedding layer(
//       {{.name = "video", .vocabulary_size = 1000, .dim = 16}},
//       {{.name = "watched", .table = "video"}, {.name = "liked", .table = "video"}},
//       {.optimizer = recemb::Adagrad{.learning_rate = 0.1f}});
//   recemb::LookupBatch batch;
//   layer.lookup(inputs, activations, batch);   // one FeatureInput and output span per feature
//   ... the dense model computes d(loss)/d(activations) ...
//   layer.apply_gradients(batch, gradients);    // one gradient span per feature
//
// Thread safety: an Embedding is not safe for concurrent calls; each call uses the Embedding's own
// worker threads internally (or its executor's: executor.h). Different Embedding objects are
// independent.
//
// Shards and ranks. EmbeddingOptions::placement splits tables into shards (placement.h) and
// EmbeddingOptions::communicator spreads the shards over ranks (communicator.h; shard s on rank
// s % size). The layer hides both: every rank builds the same Embedding and passes its own local
// batch; the global batch is the ranks' batches concatenated in rank order. lookup returns the
// local batch's activations and apply_gradients takes their gradients; the tables then change
// exactly as the single-shard engine's would for the global batch (to float rounding, relative
// error < 1e-5; bitwise identical for a given placement, run to run and for any num_threads).
// With more than one rank, the constructor, lookup, apply_gradients, read_variable and
// write_variable are collective: every rank makes the same calls in the same order. A call that
// fails validation on one rank throws on every rank, "rank R: <message>", and changes nothing.
#ifndef RECEMB_EMBEDDING_H_
#define RECEMB_EMBEDDING_H_

#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "recemb/batch.h"
#include "recemb/communicator.h"
#include "recemb/config.h"
#include "recemb/executor.h"
#include "recemb/export.h"
#include "recemb/optimizer.h"
#include "recemb/placement.h"

namespace recemb {

// What apply_gradients does with a gradient value that is NaN or infinite.
enum class NonFiniteGradients {
  kReject,    // throw InvalidArgument naming feature, example and value; nothing changes
  kSkipRows,  // leave the rows whose gradient contributions are non-finite (and their slots) as
              // they are; update all other rows. skipped_rows() counts them.
};

// "reject", "skip_rows".
RECEMB_EXPORT std::string_view non_finite_gradients_name(NonFiniteGradients value);
// The inverse of non_finite_gradients_name; anything else throws InvalidArgument listing the
// valid names.
RECEMB_EXPORT NonFiniteGradients parse_non_finite_gradients(std::string_view name);

// What Embedding::prefetch does ahead of finish_lookup.
enum class PipelineStaleness {
  kNone,     // everything but reading the tables: the results equal a lookup made at
             // finish_lookup time, bitwise
  kOneStep,  // everything, rows included, so the activations may miss the updates of
             // apply_gradients calls made between prefetch and finish_lookup (one step old in
             // the usual loop; TF's pipeline_execution_with_tensor_core)
};

// "none", "one_step".
RECEMB_EXPORT std::string_view pipeline_staleness_name(PipelineStaleness value);
// The inverse of pipeline_staleness_name; anything else throws InvalidArgument listing the valid
// names.
RECEMB_EXPORT PipelineStaleness parse_pipeline_staleness(std::string_view name);

// The most threads an Embedding runs (EmbeddingOptions::num_threads): far beyond any useful count
// (the work of one step is split in at most a few hundred tasks), low enough that a mistyped value
// does not start thousands of OS threads.
inline constexpr int kMaxNumThreads = 1024;

struct EmbeddingOptions {
  // The optimizer of every table without its own. Unset: tables without an optimizer have no
  // slots and cannot be trained (lookup only, as TF's optimizer=None for serving).
  std::optional<Optimizer> optimizer = {};
  // Worker threads for lookup and apply_gradients (including the calling thread); 0 = one per core.
  // At most kMaxNumThreads. Must be 0 when `executor` is set.
  int num_threads = 0;
  // Set: the parallel loops run on the executor's threads (executor.h), up to its max_threads(),
  // and the Embedding starts no threads of its own. Results are the same as with num_threads =
  // max_threads(), bitwise.
  std::shared_ptr<ParallelExecutor> executor = {};
  // Seed of the random initializers; the same seed gives the same tables.
  uint64_t seed = 0;
  NonFiniteGradients non_finite_gradients = NonFiniteGradients::kReject;
  // How tables are split into shards. Unset: plan_placement with {.num_shards = the
  // communicator's size} (the automatic planner; one process alone keeps every table whole).
  std::optional<PlacementOptions> placement = {};
  // The ranks sharing the tables; null: this process alone (local_communicator()).
  std::shared_ptr<Communicator> communicator = {};
  // What prefetch does ahead of finish_lookup.
  PipelineStaleness pipeline_staleness = PipelineStaleness::kNone;
};

// A dynamic table's keys (config.h, DynamicVocabulary), all its parts together.
struct VocabularyStats {
  int64_t size = 0;  // keys held now
  // Since construction (restore_checkpoint sets them to the saved run's, recemb/checkpoint.h):
  int64_t inserted = 0;              // keys admitted
  int64_t evicted = 0;               // keys removed (TTL or when_full)
  int64_t not_admitted_lookups = 0;  // occurrences in training lookups of keys that had no row
};

// The contents of a dynamic table: its keys in increasing order, and their rows and slots.
struct DynamicTableContents {
  std::vector<int64_t> keys;
  std::vector<float> parameters;  // [keys.size(), dim], row-major
  // Per slot of the table's optimizer (variable_names order after "parameters"): its name and
  // values, [keys.size(), width] (width = dim, or 1 for row-wise slots).
  std::vector<std::pair<std::string, std::vector<float>>> slots;
};

class Embedding;
namespace internal {
struct PartAccess;    // src/embedding/parts.h: the parts a rank holds, for checkpoints
struct ChangeAccess;  // src/embedding/parts.h: their changes, for online publishing
}  // namespace internal

// The validated, normalised ids of one training lookup: what apply_gradients needs. Owned by the
// caller; reusable (a new lookup into it reuses its memory); move-only. Belongs to the Embedding
// that filled it.
class RECEMB_EXPORT LookupBatch {
 public:
  LookupBatch();
  ~LookupBatch();
  LookupBatch(LookupBatch&&) noexcept;
  LookupBatch& operator=(LookupBatch&&) noexcept;
  LookupBatch(const LookupBatch&) = delete;
  LookupBatch& operator=(const LookupBatch&) = delete;

  // Whether it holds a lookup not applied yet.
  bool applicable() const;

 private:
  friend class Embedding;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class RECEMB_EXPORT Embedding {
 public:
  // Validates every config (InvalidArgument naming the item and field: empty or duplicate names,
  // vocabulary_size or dim < 1, a feature whose table is not in `tables`, bad optimizer
  // hyperparameters, a placement plan_placement rejects, ...), then allocates and initializes the
  // tables and slots (the parts this rank holds). With several ranks it also checks that every
  // rank passed the same configs, seed and placement (InvalidArgument naming the first rank that
  // differs from rank 0, on every rank).
  // Tables are identified by name; features keep the order given, which is the order of the
  // inputs, activations and gradients of every call.
  Embedding(std::vector<TableConfig> tables, std::vector<FeatureConfig> features,
            EmbeddingOptions options = {});
  ~Embedding();
  Embedding(Embedding&&) noexcept;
  Embedding& operator=(Embedding&&) noexcept;
  Embedding(const Embedding&) = delete;
  Embedding& operator=(const Embedding&) = delete;

  const std::vector<TableConfig>& tables() const;
  const std::vector<FeatureConfig>& features() const;
  const EmbeddingOptions& options() const;
  // The plan the tables follow, and where this process stands (0 of 1 without a communicator).
  const Placement& placement() const;
  int rank() const;
  int world_size() const;

  // Number of apply_gradients calls so far (the step of learning-rate schedules).
  int64_t step() const;
  // Sets the step counter, as a restore from a checkpoint does. Throws InvalidArgument if step < 0.
  void set_step(int64_t step);

  // The shape of feature `feature`'s activation for `input`: output shape + [dim]. Throws
  // InvalidArgument if the input does not fit the feature's config.
  std::vector<int64_t> activation_shape(size_t feature, const FeatureInput& input) const;

  // Looks up and combines every feature's ids (a pure lookup: nothing is kept for training).
  //   inputs:      one per feature, in feature order.
  //   activations: one per feature; activations[f] has exactly
  //                product(activation_shape(f, inputs[f])) floats and receives them row-major.
  // Validates all inputs first (ids in range, weights matching their ids, shapes matching the
  // config, finite weights): on error throws InvalidArgument naming the feature, the example and
  // the value, and changes nothing.
  void lookup(std::span<const FeatureInput> inputs, std::span<const std::span<float>> activations);

  // The same lookup, which also keeps in `batch` (a copy of) what apply_gradients needs, so the
  // caller's input arrays may be released after it returns. `batch` is overwritten (reusing the
  // memory of earlier batches) only when the lookup succeeds: on a throw it is left as it was, so
  // a pending lookup in it stays applicable.
  void lookup(std::span<const FeatureInput> inputs, std::span<const std::span<float>> activations,
              LookupBatch& batch);

  // Pipelining: prefetch starts the training lookup of `inputs` on a background thread and returns
  // at once, so that the caller can run the dense step of the current batch meanwhile; then
  // finish_lookup(batch) completes it: activations hold the results and `batch` is applicable, as
  // after lookup(inputs, activations, batch). The usual loop:
  //   prefetch(inputs[0], activations[0], batch[0]); finish_lookup(batch[0]);
  //   for t: prefetch(inputs[t+1], activations[t+1], batch[t+1]);  // ids validated, exchanged
  //          ... dense step t ...;  apply_gradients(batch[t], gradients[t]);
  //          finish_lookup(batch[t+1]);
  // What runs ahead depends on EmbeddingOptions::pipeline_staleness: with kNone, the validation,
  // normalisation and the id exchange (no table is read: the results equal a lookup made when
  // finish_lookup is called, bitwise); with kOneStep, the whole lookup, rows included (the rows
  // read are those before any apply_gradients made after prefetch).
  // `inputs`' arrays and `activations` must stay valid until finish_lookup returns; `inputs` and
  // `activations` themselves (the spans) are copied. Every other non-const call on the Embedding
  // (and read_variable) first waits for the background work to end; collectives keep their order
  // on every rank. Validation errors are thrown by finish_lookup, as lookup throws them, with
  // nothing changed. finish_lookup throws FailedPrecondition for a batch not given to prefetch.
  // The background thread is started by the first prefetch and kept for the next ones: when it
  // cannot be started, that prefetch throws std::system_error and `batch` holds no lookup.
  void prefetch(std::span<const FeatureInput> inputs, std::span<const std::span<float>> activations,
                LookupBatch& batch);
  void finish_lookup(LookupBatch& batch);

  // Collective: agrees with every rank on the outcome of checks made before a collective call
  // outside this class (a binding validating arguments in its own language). Waits for the
  // background work of prefetch, then calls recemb::agree_on_error (communicator.h) with `error`
  // (null: none on this rank) on the Embedding's communicator: returns when no rank passed an
  // error, else throws on every rank as agree_on_error does. Changes nothing.
  void agree_on_error(const std::exception_ptr& error);

  // Applies d(loss)/d(activations) of the lookup recorded in `batch`, marks the batch applied and
  // increments step(). Several batches may be looked up before they are applied, in any order.
  //   gradients: one per feature, in feature order, shaped as that feature's activation; an empty
  //              span stands for zeros (the feature's rows still count as touched, as TF's None).
  // For each row of each table, the contributions of all its occurrences (all features sharing the
  // table, examples, positions; weighted by the combiner's gain) are summed in a fixed order
  // (feature, example, position), then the table's optimizer updates the row and its slots once
  // (see optimizer.h). Results are bitwise identical for any num_threads.
  // Throws FailedPrecondition if `batch` holds no lookup of this Embedding or was already applied,
  // or when a touched table has no optimizer; InvalidArgument for a wrong gradient size or
  // (kReject) a non-finite value. Either way, nothing changes (the batch stays applicable).
  void apply_gradients(LookupBatch& batch, std::span<const std::span<const float>> gradients);

  // Rows left unchanged by NonFiniteGradients::kSkipRows, summed over all steps (rows of the parts
  // this rank holds).
  int64_t skipped_rows() const;

  // The variables of a table: "parameters" (the table itself) then its optimizer's slots (TF
  // names).
  std::vector<std::string> variable_names(std::string_view table) const;
  // [vocabulary_size, dim], or [vocabulary_size] for RowwiseAdagrad's accumulators.
  std::vector<int64_t> variable_shape(std::string_view table, std::string_view variable) const;
  // Copies a whole variable out to / in from a row-major array of exactly its size, whatever the
  // placement (read_variable gathers the parts from every rank; write_variable keeps the parts this
  // rank holds, so every rank passes the whole variable). Unknown names or a wrong size throw
  // InvalidArgument; write_variable also rejects non-finite values, and slot values the optimizer
  // cannot hold: accumulators and second moments (Adagrad's and FTRL's "accumulators" > 0;
  // AdagradMomentum's and RowwiseAdagrad's "accumulators", Adam's "velocities" >= 0), naming the
  // table, variable, row and value (docs/semantics.md §5).
  void read_variable(std::string_view table, std::string_view variable, std::span<float> out) const;
  void write_variable(std::string_view table, std::string_view variable,
                      std::span<const float> values);
  // The variable's memory itself, row-major (zero-copy access for bindings and exporters). Valid
  // as long as the Embedding (or the object it is moved into) lives. Writing through it is
  // allowed while no other call on the Embedding runs; values written are not validated.
  // Only for a table this rank holds whole (has_whole_table); otherwise FailedPrecondition.
  bool has_whole_table(std::string_view table) const;

  // Dynamic tables (config.h, DynamicVocabulary; docs/semantics.md, "Dynamic vocabularies"). The
  // whole-variable calls above throw FailedPrecondition for them: they have keys, not rows.
  // With several ranks all three are collective: the stats and contents are of the whole table
  // (gathered from every rank), and every rank passes write_dynamic_table the same contents, of
  // which it keeps the keys its parts hold. InvalidArgument for an unknown table,
  // FailedPrecondition for a static one.
  VocabularyStats vocabulary_stats(std::string_view table) const;
  DynamicTableContents read_dynamic_table(std::string_view table) const;
  // Replaces the table's keys, rows and slots with `contents` (as read_dynamic_table gives them),
  // each key counted as seen once at the current step. InvalidArgument, nothing changed, for keys
  // not strictly increasing, arrays of the wrong size or missing slots, non-finite values, slot
  // values the optimizer cannot hold (as write_variable; the message names table, slot, key and
  // value), or more keys than a part holds.
  void write_dynamic_table(std::string_view table, const DynamicTableContents& contents);
  std::span<float> variable_data(std::string_view table, std::string_view variable);
  std::span<const float> variable_data(std::string_view table, std::string_view variable) const;
  // A 16-bit table's parameters as it stores them: [vocabulary_size, dim] bfloat16 or float16 bit
  // patterns (TableConfig::dtype), row-major; the memory itself, as variable_data (for bindings
  // whose tensors have the type: torch's bfloat16 and float16). Writes are not validated (a
  // float16 infinity or NaN written there is the caller's). FailedPrecondition unless this rank
  // holds the table whole and its dtype is 16-bit; InvalidArgument for an unknown table.
  std::span<uint16_t> half_parameter_data(std::string_view table);
  std::span<const uint16_t> half_parameter_data(std::string_view table) const;

 private:
  friend struct internal::PartAccess;
  friend struct internal::ChangeAccess;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace recemb

#endif  // RECEMB_EMBEDDING_H_
