// An independent float64 model of the whole recemb::Embedding layer, for tests.
//
// Written from the specification (docs/semantics.md §2-§5, TensorFlow's TPU embedding, and the
// contracts in include/recemb/*.h), never from src/: plain loops over explicit bags of (id,
// weight), double everywhere, its own learning-rate schedules and optimizer formulas. It shares
// only the public config and input types with the library.
//
// What it models:
//   batches: like recemb::LookupBatch, a training lookup records in a caller-owned Batch what
//            apply_gradients needs (per cell, its rows and gains); several batches may be
//            outstanding and are applied in any order, each once. A pure lookup records nothing.
//   lookup:  every input (dense [B] / [..., N], ragged, sparse, sequence features, output_shape)
//            is expanded into explicit cells (one per activation vector), each a list of
//            (row, weight); a cell's activation is sum_j gain_j * row_j with the combiner's gain
//            (sum: c, mean: c / sum c, sqrtn: c / sqrt(sum c^2), 0 when that denominator is 0);
//            a sequence position is a bag of one id. Quantization is applied to gathered values.
//   apply:   per row, the contributions gain * d(loss)/d(activation) of all its occurrences
//            (features sharing the table, examples, positions) are summed, clipped, and the
//            table's optimizer runs once, then decoupled weight decay and weight clipping; lazy
//            (touched rows only) except non-lazy Adam (every row, g = 0 when absent). Without
//            gradient accumulation the pipeline runs once per contribution, in (feature, example,
//            position) order.
// It assumes valid input (the tests check rejection against the library, not against this
// model) and throws std::logic_error when misused.
#ifndef RECEMB_TESTS_REFERENCE_REFERENCE_EMBEDDING_H_
#define RECEMB_TESTS_REFERENCE_REFERENCE_EMBEDDING_H_

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "recemb/batch.h"
#include "recemb/config.h"
#include "recemb/embedding.h"
#include "recemb/learning_rate.h"
#include "recemb/optimizer.h"

namespace recemb::reference {

// The learning rate of `learning_rate` at `step`, computed in double from the schedule's formula.
// Callbacks are called.
double learning_rate_at(const LearningRate& learning_rate, int64_t step);

// Slot names in TF's order (docs/semantics.md §1; RowwiseAdagrad: "accumulators").
std::vector<std::string> slot_names_of(const Optimizer& optimizer);

class ReferenceEmbedding {
 public:
  // Tables start from `initial_parameters` (one row-major [V, dim] array per table, in table
  // order); slots start at the values the spec documents for each optimizer.
  ReferenceEmbedding(std::vector<TableConfig> tables, std::vector<FeatureConfig> features,
                     EmbeddingOptions options,
                     const std::vector<std::vector<float>>& initial_parameters);

  // The configs and options of `layer`, and a copy of its current "parameters" of every table.
  // Slots are NOT copied: they start at the spec's initial values, so comparing them later also
  // checks the library's slot initialisation.
  static ReferenceEmbedding like(const Embedding& layer);

  // "parameters", then the slot names of the table's optimizer (none without an optimizer).
  std::vector<std::string> variable_names(std::string_view table) const;
  // [V, dim], or [V] for RowwiseAdagrad's accumulators.
  std::vector<int64_t> variable_shape(std::string_view table, std::string_view variable) const;
  const std::vector<double>& variable(std::string_view table, std::string_view variable) const;
  // Overwrites a variable with float values (for example a copy of the library's).
  void set_variable(std::string_view table, std::string_view variable,
                    std::span<const float> values);

  int64_t step() const { return step_; }
  int64_t skipped_rows() const { return skipped_rows_; }

  // The activation shape of feature `feature` for `input`: output shape + [dim].
  std::vector<int64_t> activation_shape(size_t feature, const FeatureInput& input) const;

  // What apply_gradients needs from one training lookup: per feature, the rows and gains of every
  // cell (the contributions gain * d(loss)/d(activation) do not depend on the parameters, so a
  // batch can be applied after other batches changed them). Copyable, so a test can apply the
  // same lookup to two copies of a reference.
  class Batch {
   public:
    // A lookup is recorded and not applied yet.
    bool applicable() const { return applicable_; }

   private:
    friend class ReferenceEmbedding;
    // One contribution to a row's gradient: gain * gradient of the cell.
    struct Occurrence {
      int64_t row = 0;
      double gain = 0.0;
    };
    struct Cell {
      std::vector<Occurrence> occurrences;
    };
    struct Feature {
      size_t table = 0;
      int64_t dim = 0;
      std::vector<Cell> cells;
    };
    std::vector<Feature> features_;
    bool applicable_ = false;
  };

  // One activation array per feature (row-major, activation_shape). A pure lookup: records
  // nothing.
  std::vector<std::vector<double>> lookup(std::span<const FeatureInput> inputs);
  // The same, also recording the lookup in `batch` (overwriting it) for apply_gradients.
  std::vector<std::vector<double>> lookup(std::span<const FeatureInput> inputs, Batch& batch);

  // gradients: one per feature, shaped as the activation of `batch`'s lookup; empty = zeros.
  // Applies `batch` (which must be applicable; it no longer is afterwards) and increments step().
  void apply_gradients(Batch& batch, std::span<const std::span<const float>> gradients);

 private:
  // One id of a cell: the table row and its weight (1 without weights).
  struct Occurrence {
    int64_t row = 0;
    double weight = 1.0;
  };
  // The ids that produce one activation vector: a whole bag, or one position of a sequence.
  using Cell = std::vector<Occurrence>;
  struct ExpandedFeature {
    std::vector<int64_t> output_shape;  // without dim
    std::vector<Cell> cells;            // row-major over output_shape
  };
  struct Table {
    TableConfig config;
    std::optional<Optimizer> optimizer;  // own, else the global one, else none
    std::map<std::string, std::vector<double>, std::less<>> variables;
  };

  // Computes the activations; records the cells' rows and gains into `record` when not null.
  std::vector<std::vector<double>> lookup_into(std::span<const FeatureInput> inputs,
                                               std::vector<Batch::Feature>* record) const;
  ExpandedFeature expand(size_t feature, const FeatureInput& input) const;
  size_t table_index(std::string_view name) const;
  std::vector<double> gains(const Cell& cell, Combiner combiner) const;
  void update_table(
      Table& table,
      const std::map<int64_t, std::vector<std::vector<double>>>& contributions_by_row);

  std::vector<Table> tables_;
  std::vector<FeatureConfig> features_;
  EmbeddingOptions options_;
  int64_t step_ = 0;
  int64_t skipped_rows_ = 0;
};

}  // namespace recemb::reference

#endif  // RECEMB_TESTS_REFERENCE_REFERENCE_EMBEDDING_H_
