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
// worker threads internally. Different Embedding objects are independent.
#ifndef RECEMB_EMBEDDING_H_
#define RECEMB_EMBEDDING_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "recemb/batch.h"
#include "recemb/config.h"
#include "recemb/export.h"
#include "recemb/optimizer.h"

namespace recemb {

// What apply_gradients does with a gradient value that is NaN or infinite.
enum class NonFiniteGradients {
  kReject,    // throw InvalidArgument naming feature, example and value; nothing changes
  kSkipRows,  // leave the rows whose gradient contributions are non-finite (and their slots) as
              // they are; update all other rows. skipped_rows() counts them.
};

struct EmbeddingOptions {
  // The optimizer of every table without its own. Unset: tables without an optimizer have no
  // slots and cannot be trained (lookup only, as TF's optimizer=None for serving).
  std::optional<Optimizer> optimizer = {};
  // Worker threads for lookup and apply_gradients (including the calling thread); 0 = one per core.
  int num_threads = 0;
  // Seed of the random initializers; the same seed gives the same tables.
  uint64_t seed = 0;
  NonFiniteGradients non_finite_gradients = NonFiniteGradients::kReject;
};

class Embedding;

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
  // hyperparameters, ...), then allocates and initializes the tables and slots.
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
  // caller's input arrays may be released after it returns. `batch` is overwritten, reusing its
  // memory; on a throw it is left empty (not applicable).
  void lookup(std::span<const FeatureInput> inputs, std::span<const std::span<float>> activations,
              LookupBatch& batch);

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

  // Rows left unchanged by NonFiniteGradients::kSkipRows, summed over all steps.
  int64_t skipped_rows() const;

  // The variables of a table: "parameters" (the table itself) then its optimizer's slots (TF
  // names).
  std::vector<std::string> variable_names(std::string_view table) const;
  // [vocabulary_size, dim], or [vocabulary_size] for RowwiseAdagrad's accumulators.
  std::vector<int64_t> variable_shape(std::string_view table, std::string_view variable) const;
  // Copies a variable out to / in from a row-major array of exactly its size. Unknown names or a
  // wrong size throw InvalidArgument; write_variable also rejects non-finite values.
  void read_variable(std::string_view table, std::string_view variable, std::span<float> out) const;
  void write_variable(std::string_view table, std::string_view variable,
                      std::span<const float> values);
  // The variable's memory itself, row-major (zero-copy access for bindings and exporters). Valid
  // as long as the Embedding (or the object it is moved into) lives. Writing through it is
  // allowed while no other call on the Embedding runs; values written are not validated.
  std::span<float> variable_data(std::string_view table, std::string_view variable);
  std::span<const float> variable_data(std::string_view table, std::string_view variable) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace recemb

#endif  // RECEMB_EMBEDDING_H_
