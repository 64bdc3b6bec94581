// The serving tests' model and inputs, shared by serving_model_test.cc (lookups) and
// serving_model_files_test.cc (opening, verifying and damaged files).
#ifndef RECEMB_TESTS_SERVING_SERVING_SCENARIO_H_
#define RECEMB_TESTS_SERVING_SERVING_SCENARIO_H_

#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "recemb/embedding.h"
#include "recemb/serving.h"

#include "testing/embedding_calls.h"
#include "testing/random_batches.h"

namespace recemb::test {

// Every dtype a model can be exported in.
inline constexpr ServingDtype kDtypes[] = {ServingDtype::kFloat32, ServingDtype::kFloat16,
                                           ServingDtype::kInt8};

// A model with every kind of feature: three tables (dims 5, 17, 4) and nine features covering
// dense [B], [B, N] / ragged / sparse bags, [B, 2, N] dense and sparse bags, sequence features
// (by max_sequence_length and by output_shape), a reshaped output and, optionally, a table with
// simulated quantization. batch_size must be even.

struct Scenario {
  std::vector<TableConfig> tables;
  std::vector<FeatureConfig> features;
  int64_t batch_size = 6;
};

inline Scenario make_scenario(Combiner combiner, bool quantized_table, int64_t batch_size = 6) {
  const Combiner next = combiner == Combiner::kSum    ? Combiner::kMean
                        : combiner == Combiner::kMean ? Combiner::kSqrtn
                                                      : Combiner::kSum;
  Scenario s;
  s.batch_size = batch_size;
  s.tables = {{.name = "shared",
               .vocabulary_size = 64,
               .dim = 5,
               .optimizer = Adagrad{.learning_rate = 0.1f},  // dropped by the export
               .combiner = combiner},
              {.name = "other", .vocabulary_size = 50, .dim = 17, .combiner = next}};
  s.features = {
      {.name = "single", .table = "shared"},
      {.name = "bags_a", .table = "shared"},
      {.name = "sequence", .table = "shared", .max_sequence_length = 3},
      {.name = "bags_c", .table = "other"},
      {.name = "sparse_3d", .table = "other"},
      {.name = "reshaped", .table = "other", .output_shape = {2, batch_size / 2}},
      {.name = "sequence_by_shape", .table = "other", .output_shape = {batch_size / 2, 4}},
      {.name = "dense_3d", .table = "shared"},
  };
  if (quantized_table) {
    s.tables.push_back({.name = "quantized",
                        .vocabulary_size = 30,
                        .dim = 4,
                        .combiner = combiner,
                        .quantization_config =
                            QuantizationConfig{.num_buckets = 11, .lower = -0.5f, .upper = 0.6f}});
    s.features.push_back({.name = "snapped", .table = "quantized"});
  }
  return s;
}

inline Embedding make_layer(const Scenario& s, uint64_t seed) {
  return Embedding(s.tables, s.features, EmbeddingOptions{.num_threads = 1, .seed = seed});
}

inline std::vector<OwnedInput> random_inputs(std::mt19937_64& rng, const Scenario& s) {
  const int64_t batch = s.batch_size;
  const int64_t shared_rows = s.tables[0].vocabulary_size;
  const int64_t other_rows = s.tables[1].vocabulary_size;
  std::vector<OwnedInput> inputs;
  inputs.push_back(random_one_dim_input(rng, batch, shared_rows));
  inputs.push_back(random_two_dim_input(rng, batch, shared_rows, 6));
  inputs.push_back(random_two_dim_input(rng, batch, shared_rows, 5));  // L = 3: truncates
  inputs.push_back(random_two_dim_input(rng, batch, other_rows, 6));
  inputs.push_back(random_three_dim_sparse_input(rng, batch, other_rows));
  inputs.push_back(random_two_dim_input(rng, batch, other_rows, 3));
  inputs.push_back(random_two_dim_input(rng, batch, other_rows, 3));
  inputs.push_back(random_three_dim_dense_input(rng, batch, shared_rows));
  if (s.tables.size() == 3) {
    inputs.push_back(random_two_dim_input(rng, batch, s.tables[2].vocabulary_size, 4));
  }
  return inputs;
}

// Activations of a lookup in `layer` (a ServingModel or an Embedding), allocated from its
// activation shapes and filled with NaN first.
template <class Layer>
std::vector<std::vector<float>> lookup_activations(Layer& layer,
                                                   const std::vector<FeatureInput>& views) {
  std::vector<std::vector<float>> activations;
  for (size_t f = 0; f < views.size(); ++f) {
    activations.emplace_back(static_cast<size_t>(product(layer.activation_shape(f, views[f]))),
                             std::numeric_limits<float>::quiet_NaN());
  }
  const std::vector<std::span<float>> spans(activations.begin(), activations.end());
  layer.lookup(views, spans);
  return activations;
}

}  // namespace recemb::test

#endif  // RECEMB_TESTS_SERVING_SERVING_SCENARIO_H_
