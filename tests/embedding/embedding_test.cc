// End-to-end tests of recemb::Embedding (src/embedding/embedding.cc) against the independent
// float64 reference in tests/reference/, TF's golden fixtures (spec §8), error handling and the
// variable API. The backward step's own tests are in apply_gradients_test.cc.
#include "recemb/embedding.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <functional>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <iomanip>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "recemb/recemb.h"

#include "reference/reference_embedding.h"
#include "testing/embedding_calls.h"
#include "testing/error_of.h"
#include "testing/random_batches.h"

namespace recemb {
namespace {

using reference::ReferenceEmbedding;
using test::Bag;
using test::bitwise_equal;
using test::error_of;
using test::IdWidth;
using test::look_up;
using test::OwnedInput;
using test::product;
using test::read;
using test::Snapshot;
using test::snapshot_of;
using test::train;
using test::unchanged;
using ::testing::HasSubstr;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// ------------------------------------------------------------------------------------------------
// Comparison helpers.

// Tolerance of float32 results against the float64 reference: |a - b| <= 1e-5 * max(1, |b|).
// Relative 1e-5 for values >= 1; below 1 this becomes an absolute floor of 1e-5. The floor is
// needed because the library's errors are relative to the magnitudes that went *into* a value,
// not to the value: a row or activation near 0 is typically a difference of O(0.1..1) terms
// (w - lr * g, sums of mixed-sign weights, FTRL's z), each rounded at float32's unit roundoff
// 6e-8, and these errors random-walk over the 100 steps. Measured worst case over all the
// parameterized runs: 4.7e-6, in FTRL's "linears", where (n'^p - n^p) / lr * w amplifies float32
// cancellation by 1/lr = 10 (activations and parameters stay below 3.5e-6). All tables, slots and
// activations here are O(0.01..10), so 1e-5 is still ~100x smaller than one optimizer step
// (lr * g >= ~1e-3): dropping weight decay, clipping, bias correction, Nesterov, FTRL's beta, the
// zero-sum rule or the no-accumulation order each fails dozens of these tests.
constexpr double kTolerance = 1e-5;

::testing::AssertionResult near_reference(std::span<const float> actual,
                                          std::span<const double> expected,
                                          double tolerance = kTolerance) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << "library has " << actual.size() << " values, reference " << expected.size();
  }
  size_t mismatches = 0;
  size_t first = 0;
  double worst = 0.0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double error = std::abs(static_cast<double>(actual[i]) - expected[i]) /
                         std::max(1.0, std::abs(expected[i]));
    if (!(error <= tolerance)) {
      if (mismatches++ == 0) first = i;
      worst = std::isnan(error) ? error : std::max(worst, error);
    }
  }
  if (mismatches == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << std::setprecision(10) << mismatches << " of " << actual.size()
         << " values differ; first at flat index " << first << ": library " << actual[first]
         << ", reference " << expected[first] << "; worst scaled error " << worst;
}

void expect_matches_reference(const Embedding& layer, const ReferenceEmbedding& reference,
                              double tolerance = kTolerance) {
  EXPECT_EQ(layer.step(), reference.step());
  EXPECT_EQ(layer.skipped_rows(), reference.skipped_rows());
  for (const TableConfig& table : layer.tables()) {
    const std::vector<std::string> names = layer.variable_names(table.name);
    ASSERT_EQ(names, reference.variable_names(table.name)) << "table " << table.name;
    for (const std::string& name : names) {
      EXPECT_EQ(layer.variable_shape(table.name, name), reference.variable_shape(table.name, name))
          << table.name << "/" << name;
      EXPECT_TRUE(near_reference(read(layer, table.name, name),
                                 reference.variable(table.name, name), tolerance))
          << table.name << "/" << name;
    }
  }
}

// One training lookup recorded in both: the library's LookupBatch and the reference's Batch.
struct BatchPair {
  LookupBatch layer;
  ReferenceEmbedding::Batch reference;
};

// Looks `inputs` up in both, a training lookup into `batch` or (null) a pure lookup; checks shapes
// and activations; returns the library's activations.
std::vector<std::vector<float>> lookup_both(Embedding& layer, ReferenceEmbedding& reference,
                                            const std::vector<OwnedInput>& inputs,
                                            BatchPair* batch) {
  const std::vector<FeatureInput> views = test::views_of(inputs);
  std::vector<std::vector<float>> activations;
  for (size_t f = 0; f < views.size(); ++f) {
    const std::vector<int64_t> shape = layer.activation_shape(f, views[f]);
    EXPECT_EQ(shape, reference.activation_shape(f, views[f])) << layer.features()[f].name;
    activations.emplace_back(static_cast<size_t>(product(shape)), kNaN);
  }
  std::vector<std::span<float>> spans(activations.begin(), activations.end());
  std::vector<std::vector<double>> expected;
  if (batch != nullptr) {
    layer.lookup(views, spans, batch->layer);
    EXPECT_TRUE(batch->layer.applicable());
    expected = reference.lookup(views, batch->reference);
  } else {
    layer.lookup(views, spans);
    expected = reference.lookup(views);
  }
  for (size_t f = 0; f < views.size(); ++f) {
    EXPECT_TRUE(near_reference(activations[f], expected[f])) << layer.features()[f].name;
  }
  return activations;
}

// A training lookup into `batch`.
std::vector<std::vector<float>> lookup_both(Embedding& layer, ReferenceEmbedding& reference,
                                            const std::vector<OwnedInput>& inputs,
                                            BatchPair& batch) {
  return lookup_both(layer, reference, inputs, &batch);
}

// A pure lookup.
std::vector<std::vector<float>> lookup_both(Embedding& layer, ReferenceEmbedding& reference,
                                            const std::vector<OwnedInput>& inputs) {
  return lookup_both(layer, reference, inputs, nullptr);
}

void apply_both(Embedding& layer, ReferenceEmbedding& reference, BatchPair& batch,
                const std::vector<std::vector<float>>& gradients) {
  const std::vector<std::span<const float>> spans(gradients.begin(), gradients.end());
  layer.apply_gradients(batch.layer, spans);
  EXPECT_FALSE(batch.layer.applicable()) << "an applied batch is applied at most once";
  reference.apply_gradients(batch.reference, spans);
}

// Random gradients shaped as the activations (never zero); sometimes one feature gets an empty
// span (= zeros, rows still touched).
std::vector<std::vector<float>> random_gradients(std::mt19937_64& rng,
                                                 const std::vector<std::vector<float>>& shapes) {
  std::vector<std::vector<float>> gradients;
  for (const auto& activation : shapes) {
    gradients.push_back(test::random_gradient(rng, activation.size()));
  }
  if (test::random_int(rng, 0, 9) == 0) {
    gradients[static_cast<size_t>(
                  test::random_int(rng, 0, static_cast<int64_t>(shapes.size()) - 1))]
        .clear();
  }
  return gradients;
}

std::string lowercase(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// ------------------------------------------------------------------------------------------------
// Every optimizer (and its main hyperparameter variants) x combiner against the reference.

struct OptimizerCase {
  std::string name;
  Optimizer optimizer;
};

const std::vector<OptimizerCase>& optimizer_cases() {
  static const std::vector<OptimizerCase> cases = [] {
    const CommonHyperparameters no_accumulation{.use_gradient_accumulation = false};
    std::vector<OptimizerCase> list;
    list.push_back({"sgd", Sgd{.learning_rate = 0.05f}});
    list.push_back({"sgd_clip_decay", Sgd{.learning_rate = 0.05f,
                                          .common = {.clip_weight_min = -0.4f,
                                                     .clip_weight_max = 0.45f,
                                                     .weight_decay_factor = 0.02f,
                                                     .clip_gradient_min = -0.3f,
                                                     .clip_gradient_max = 0.5f}}});
    list.push_back({"sgd_no_accumulation", Sgd{.learning_rate = 0.05f, .common = no_accumulation}});
    list.push_back(
        {"sgd_exponential_decay",
         Sgd{.learning_rate = ExponentialDecay{
                 .initial_learning_rate = 0.1f, .decay_steps = 10, .decay_rate = 0.9f}}});
    list.push_back({"sgd_callback", Sgd{.learning_rate = LearningRateCallback([](int64_t step) {
                                          return std::max(0.01f,
                                                          0.1f - 0.001f * static_cast<float>(step));
                                        })}});
    list.push_back({"adagrad", Adagrad{.learning_rate = 0.1f, .initial_accumulator_value = 0.1f}});
    list.push_back({"adagrad_piecewise_decay_clip",
                    Adagrad{.learning_rate = PiecewiseConstant{.boundaries = {20, 60},
                                                               .values = {0.2f, 0.1f, 0.05f}},
                            .initial_accumulator_value = 0.5f,
                            .common = {.clip_weight_min = -0.5f,
                                       .clip_weight_max = 0.6f,
                                       .weight_decay_factor = 0.1f,
                                       .multiply_weight_decay_factor_by_learning_rate = true}}});
    list.push_back(
        {"adagrad_no_accumulation", Adagrad{.learning_rate = 0.1f, .common = no_accumulation}});
    list.push_back({"adagrad_momentum",
                    AdagradMomentum{.learning_rate = 0.05f, .momentum = 0.9f, .epsilon = 1e-3f}});
    // TF's correctness-test configuration (spec §8.2).
    list.push_back({"adagrad_momentum_nesterov", AdagradMomentum{.learning_rate = 0.1f,
                                                                 .momentum = 0.9f,
                                                                 .use_nesterov = true,
                                                                 .exponent = 3.0f,
                                                                 .beta2 = 0.9f,
                                                                 .epsilon = 0.1f}});
    list.push_back({"adagrad_momentum_no_accumulation_decay",
                    AdagradMomentum{.learning_rate = 0.05f,
                                    .momentum = 0.5f,
                                    .beta2 = 0.99f,
                                    .epsilon = 1e-2f,
                                    .common = {.use_gradient_accumulation = false,
                                               .weight_decay_factor = 0.01f}}});
    list.push_back({"adam", Adam{.learning_rate = 0.01f}});
    list.push_back({"adam_dense_bias_correction_clip",
                    Adam{.learning_rate = 0.01f,
                         .lazy_adam = false,
                         .sum_inside_sqrt = false,
                         .bias_correction = true,
                         .common = {.clip_gradient_min = -0.5f, .clip_gradient_max = 0.4f}}});
    list.push_back(
        {"adam_no_accumulation", Adam{.learning_rate = 0.01f, .common = no_accumulation}});
    list.push_back({"adam_warmup_decay",
                    Adam{.learning_rate = LinearWarmup{.target_learning_rate = 0.02f,
                                                       .warmup_steps = 30,
                                                       .initial_learning_rate = 0.001f},
                         .beta_1 = 0.8f,
                         .beta_2 = 0.99f,
                         .epsilon = 1e-3f,
                         .common = {.clip_weight_min = -0.7f,
                                    .clip_weight_max = 0.7f,
                                    .weight_decay_factor = 0.05f,
                                    .multiply_weight_decay_factor_by_learning_rate = true}}});
    list.push_back({"ftrl", Ftrl{.learning_rate = 0.1f}});
    list.push_back({"ftrl_l1_l2_beta_power", Ftrl{.learning_rate = 0.1f,
                                                  .learning_rate_power = -0.3f,
                                                  .l1_regularization_strength = 0.01f,
                                                  .l2_regularization_strength = 0.1f,
                                                  .beta = 0.5f,
                                                  .initial_accumulator_value = 0.2f}});
    list.push_back({"ftrl_multiply_linear_staircase",
                    Ftrl{.learning_rate = ExponentialDecay{.initial_learning_rate = 0.2f,
                                                           .decay_steps = 20,
                                                           .decay_rate = 0.8f,
                                                           .staircase = true},
                         .l1_regularization_strength = 0.02f,
                         .l2_regularization_strength = 0.05f,
                         .beta = 0.1f,
                         .multiply_linear_by_learning_rate = true}});
    list.push_back({"ftrl_power_zero", Ftrl{.learning_rate = 0.05f,
                                            .learning_rate_power = 0.0f,
                                            .l1_regularization_strength = 0.001f}});
    list.push_back(
        {"ftrl_no_accumulation_decay",
         Ftrl{.learning_rate = 0.1f,
              .common = {.use_gradient_accumulation = false, .weight_decay_factor = 0.01f}}});
    list.push_back({"rowwise_adagrad", RowwiseAdagrad{.learning_rate = 0.1f}});
    list.push_back(
        {"rowwise_adagrad_clip_decay", RowwiseAdagrad{.learning_rate = 0.1f,
                                                      .initial_accumulator_value = 0.5f,
                                                      .epsilon = 1e-6f,
                                                      .common = {.clip_weight_min = -0.5f,
                                                                 .clip_weight_max = 0.5f,
                                                                 .weight_decay_factor = 0.02f,
                                                                 .clip_gradient_min = -0.6f,
                                                                 .clip_gradient_max = 0.6f}}});
    list.push_back(
        {"rowwise_adagrad_no_accumulation",
         RowwiseAdagrad{
             .learning_rate = 0.1f, .initial_accumulator_value = 0.1f, .common = no_accumulation}});
    return list;
  }();
  return cases;
}

// Two tables and nine features covering every input form in one call:
//   "shared" (own optimizer; the combiner under test), "other" (global optimizer; the next
//   combiner). batch_size must be even.
struct Scenario {
  std::vector<TableConfig> tables;
  std::vector<FeatureConfig> features;
  EmbeddingOptions options;
  int64_t batch_size = 6;
};

Scenario mixed_scenario(const Optimizer& optimizer, Combiner combiner, int num_threads,
                        uint64_t seed, int64_t batch_size = 6, int64_t scale = 1) {
  const Combiner next = combiner == Combiner::kSum    ? Combiner::kMean
                        : combiner == Combiner::kMean ? Combiner::kSqrtn
                                                      : Combiner::kSum;
  Scenario s;
  s.batch_size = batch_size;
  s.tables = {{.name = "shared",
               .vocabulary_size = 64 * scale,
               .dim = 5,
               .optimizer = optimizer,
               .combiner = combiner},
              {.name = "other", .vocabulary_size = 50 * scale, .dim = 3, .combiner = next}};
  s.features = {
      {.name = "single", .table = "shared"},  // dense [B]
      {.name = "bags_a", .table = "shared"},  // dense [B, N] / ragged / sparse
      {.name = "bags_b", .table = "shared"},  // same, independently drawn
      {.name = "sequence", .table = "shared", .max_sequence_length = 3},
      {.name = "bags_c", .table = "other"},     // dense [B, N] / ragged / sparse
      {.name = "sparse_3d", .table = "other"},  // sparse [B, 2, N]
      {.name = "reshaped", .table = "other", .output_shape = {2, batch_size / 2}},
      {.name = "sequence_by_shape", .table = "other", .output_shape = {batch_size / 2, 4}},
      {.name = "dense_3d", .table = "shared"},  // dense [B, 2, N]
  };
  s.options = {.optimizer = optimizer, .num_threads = num_threads, .seed = seed};
  return s;
}

std::vector<OwnedInput> mixed_inputs(std::mt19937_64& rng, const Scenario& s) {
  const int64_t batch = s.batch_size;
  const int64_t shared_rows = s.tables[0].vocabulary_size;
  const int64_t other_rows = s.tables[1].vocabulary_size;
  std::vector<OwnedInput> inputs;
  inputs.push_back(test::random_one_dim_input(rng, batch, shared_rows));
  inputs.push_back(test::random_two_dim_input(rng, batch, shared_rows, 4));
  inputs.push_back(test::random_two_dim_input(rng, batch, shared_rows, 4));
  inputs.push_back(test::random_two_dim_input(rng, batch, shared_rows, 5));  // L = 3: truncates
  inputs.push_back(test::random_two_dim_input(rng, batch, other_rows, 4));
  inputs.push_back(test::random_three_dim_sparse_input(rng, batch, other_rows));
  inputs.push_back(test::random_two_dim_input(rng, batch, other_rows, 3));
  inputs.push_back(test::random_two_dim_input(rng, batch, other_rows, 3));
  inputs.push_back(test::random_three_dim_dense_input(rng, batch, shared_rows));
  return inputs;
}

std::string param_name(const OptimizerCase& c, Combiner combiner) {
  return c.name + "_" + std::string(combiner_name(combiner));
}

class EmbeddingVsReferenceTest : public ::testing::TestWithParam<std::tuple<size_t, Combiner>> {};

TEST_P(EmbeddingVsReferenceTest, HundredRandomStepsMatchFloat64Reference) {
  const auto [case_index, combiner] = GetParam();
  const OptimizerCase& optimizer_case = optimizer_cases()[case_index];
  const uint64_t seed = 7919 + 101 * case_index + static_cast<uint64_t>(combiner);
  SCOPED_TRACE("seed " + std::to_string(seed) + ", " + param_name(optimizer_case, combiner));

  const Scenario s = mixed_scenario(optimizer_case.optimizer, combiner, 3, seed);
  Embedding layer(s.tables, s.features, s.options);
  ReferenceEmbedding reference = ReferenceEmbedding::like(layer);
  std::mt19937_64 rng(seed);
  BatchPair batch;  // reused by every step
  constexpr int kSteps = 100;
  for (int step = 0; step < kSteps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const std::vector<OwnedInput> inputs = mixed_inputs(rng, s);
    const auto activations = lookup_both(layer, reference, inputs, batch);
    apply_both(layer, reference, batch, random_gradients(rng, activations));
    if (::testing::Test::HasFailure()) break;  // the first failing step is the informative one
  }
  expect_matches_reference(layer, reference);
}

// Up to three training lookups outstanding at a time, applied in random order, with pure lookups
// in between; each lookup's inputs are released right after it (the batch keeps its own copy).
TEST_P(EmbeddingVsReferenceTest, InterleavedBatchesMatchFloat64Reference) {
  const auto [case_index, combiner] = GetParam();
  const OptimizerCase& optimizer_case = optimizer_cases()[case_index];
  const uint64_t seed = 104729 + 101 * case_index + static_cast<uint64_t>(combiner);
  SCOPED_TRACE("seed " + std::to_string(seed) + ", " + param_name(optimizer_case, combiner));

  const Scenario s = mixed_scenario(optimizer_case.optimizer, combiner, 3, seed);
  Embedding layer(s.tables, s.features, s.options);
  ReferenceEmbedding reference = ReferenceEmbedding::like(layer);
  std::mt19937_64 rng(seed);
  struct Outstanding {
    BatchPair batch;
    std::vector<std::vector<float>> gradients;
  };
  std::vector<Outstanding> outstanding;
  std::vector<BatchPair> applied;  // recycled into later lookups
  int64_t applies = 0;
  for (int action = 0; action < 60 || !outstanding.empty(); ++action) {
    SCOPED_TRACE("action " + std::to_string(action));
    const int64_t choice = test::random_int(rng, 0, 5);
    if (action < 60 && choice == 0) {
      lookup_both(layer, reference, mixed_inputs(rng, s));  // pure: changes nothing
    } else if (action < 60 && (outstanding.empty() || (choice <= 2 && outstanding.size() < 3))) {
      Outstanding next;
      if (!applied.empty() && test::random_bool(rng)) {
        next.batch = std::move(applied.back());
        applied.pop_back();
      }
      const auto activations = lookup_both(layer, reference, mixed_inputs(rng, s), next.batch);
      next.gradients = random_gradients(rng, activations);
      outstanding.push_back(std::move(next));
    } else {
      const auto k = static_cast<size_t>(
          test::random_int(rng, 0, static_cast<int64_t>(outstanding.size()) - 1));
      apply_both(layer, reference, outstanding[k].batch, outstanding[k].gradients);
      ++applies;
      applied.push_back(std::move(outstanding[k].batch));
      outstanding.erase(outstanding.begin() + static_cast<std::ptrdiff_t>(k));
    }
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_GE(applies, 20);
  expect_matches_reference(layer, reference);
}

INSTANTIATE_TEST_SUITE_P(
    AllOptimizers, EmbeddingVsReferenceTest,
    ::testing::Combine(::testing::Range<size_t>(0, optimizer_cases().size()),
                       ::testing::Values(Combiner::kSum, Combiner::kMean, Combiner::kSqrtn)),
    [](const ::testing::TestParamInfo<std::tuple<size_t, Combiner>>& param_info) {
      return param_name(optimizer_cases()[std::get<0>(param_info.param)],
                        std::get<1>(param_info.param));
    });

// ------------------------------------------------------------------------------------------------
// Determinism: bitwise identical for 1, 2, 3 and 8 threads (initial tables, activations,
// variables).

class EmbeddingDeterminismTest : public ::testing::TestWithParam<size_t> {};

TEST_P(EmbeddingDeterminismTest, BitwiseIdenticalForAnyThreadCount) {
  const OptimizerCase& optimizer_case = optimizer_cases()[GetParam()];
  const auto combiner = static_cast<Combiner>(GetParam() % 3);
  const uint64_t seed = 31337 + GetParam();
  SCOPED_TRACE("seed " + std::to_string(seed) + ", " + param_name(optimizer_case, combiner));

  std::vector<float> first_activations;
  Snapshot first_initial;
  Snapshot first_final;
  for (int threads : {1, 2, 3, 8}) {
    SCOPED_TRACE("num_threads " + std::to_string(threads));
    const Scenario s = mixed_scenario(optimizer_case.optimizer, combiner, threads, seed, 48, 3);
    Embedding layer(s.tables, s.features, s.options);
    const Snapshot initial = snapshot_of(layer);
    std::vector<float> all_activations;
    std::mt19937_64 rng(seed);
    LookupBatch batch;
    for (int step = 0; step < 15; ++step) {
      const std::vector<OwnedInput> inputs = mixed_inputs(rng, s);
      const std::vector<FeatureInput> views = test::views_of(inputs);
      std::vector<std::vector<float>> activations;
      for (size_t f = 0; f < views.size(); ++f) {
        activations.emplace_back(static_cast<size_t>(product(layer.activation_shape(f, views[f]))));
      }
      std::vector<std::span<float>> spans(activations.begin(), activations.end());
      layer.lookup(views, spans, batch);
      for (const auto& activation : activations) {
        all_activations.insert(all_activations.end(), activation.begin(), activation.end());
      }
      const auto gradients = random_gradients(rng, activations);
      const std::vector<std::span<const float>> gradient_spans(gradients.begin(), gradients.end());
      layer.apply_gradients(batch, gradient_spans);
    }
    const Snapshot final_state = snapshot_of(layer);
    if (threads == 1) {
      first_activations = all_activations;
      first_initial = initial;
      first_final = final_state;
      continue;
    }
    EXPECT_TRUE(bitwise_equal(all_activations, first_activations));
    for (const auto& [name, values] : first_initial.variables) {
      EXPECT_TRUE(bitwise_equal(initial.variables.at(name), values)) << "initial " << name;
    }
    for (const auto& [name, values] : first_final.variables) {
      EXPECT_TRUE(bitwise_equal(final_state.variables.at(name), values)) << "final " << name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllOptimizers, EmbeddingDeterminismTest,
                         ::testing::Range<size_t>(0, optimizer_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& param_info) {
                           return optimizer_cases()[param_info.param].name;
                         });

// ------------------------------------------------------------------------------------------------
// TF golden fixtures (spec §8.1 - §8.3).

// TF's "range(32) reshaped" constant initializer: value i of the row-major table is i.
InitializerCallback range_initializer() {
  return [](int64_t first_row, int64_t num_rows, int64_t dim, std::span<float> values) {
    for (int64_t i = 0; i < num_rows * dim; ++i) {
      values[static_cast<size_t>(i)] = static_cast<float>(first_row * dim + i);
    }
  };
}

const std::vector<std::vector<int64_t>> kWatched = {{0}, {0, 1}, {0, 1}, {1}};
const std::vector<std::vector<int64_t>> kFavorited = {{0, 1}, {1}, {0}, {0, 1}};
const std::vector<std::vector<int64_t>> kFriends = {{3}, {0, 1, 2}, {3}, {0, 1, 2}};

Embedding tf_fixture(std::optional<Optimizer> optimizer, std::vector<int64_t> lengths = {0, 0, 0}) {
  return Embedding({{.name = "video",
                     .vocabulary_size = 8,
                     .dim = 4,
                     .initializer = range_initializer(),
                     .combiner = Combiner::kSum},
                    {.name = "user",
                     .vocabulary_size = 16,
                     .dim = 2,
                     .initializer = range_initializer(),
                     .combiner = Combiner::kMean}},
                   {{.name = "watched", .table = "video", .max_sequence_length = lengths[0]},
                    {.name = "favorited", .table = "video", .max_sequence_length = lengths[1]},
                    {.name = "friends", .table = "user", .max_sequence_length = lengths[2]}},
                   {.optimizer = optimizer, .num_threads = 2});
}

// The first `batch` rows of a fixture feature as sparse (positions 0..n-1) or ragged ids.
OwnedInput fixture_input(const std::vector<std::vector<int64_t>>& rows, size_t batch, bool sparse,
                         float weight = 1.0f) {
  std::vector<Bag> bags;
  std::vector<std::vector<int64_t>> positions;
  int64_t longest = 0;
  for (size_t b = 0; b < batch; ++b) {
    bags.push_back({rows[b], std::vector<float>(rows[b].size(), weight)});
    positions.emplace_back();
    for (size_t j = 0; j < rows[b].size(); ++j) positions.back().push_back(static_cast<int64_t>(j));
    longest = std::max(longest, static_cast<int64_t>(rows[b].size()));
  }
  const bool weighted = weight != 1.0f;
  if (sparse) {
    return OwnedInput::sparse_from_bags(bags, {static_cast<int64_t>(batch)}, positions, longest,
                                        weighted, IdWidth::kInt32);
  }
  return OwnedInput::ragged(bags, weighted, IdWidth::kInt32, IdWidth::kInt32);
}

std::vector<OwnedInput> fixture_inputs(size_t batch, bool sparse, float weight = 1.0f) {
  std::vector<OwnedInput> inputs;
  inputs.push_back(fixture_input(kWatched, batch, sparse, weight));
  inputs.push_back(fixture_input(kFavorited, batch, sparse, weight));
  inputs.push_back(fixture_input(kFriends, batch, sparse, weight));
  return inputs;
}

// Goldens are small exact numbers; 1e-5 absorbs the float32 rounding of mean gains (1/3).
void expect_floats_eq(const std::vector<float>& actual, const std::vector<float>& expected,
                      const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_NEAR(actual[i], expected[i], 1e-5) << what << " [" << i << "]";
  }
}

class EmbeddingTfFixtureTest : public ::testing::TestWithParam<bool> {
};  // param: sparse (else ragged)

TEST_P(EmbeddingTfFixtureTest, ForwardMatchesTfGoldens) {
  Embedding layer = tf_fixture(Sgd{.learning_rate = 0.1f});
  const auto activations = look_up(layer, fixture_inputs(4, GetParam()));
  // Spec §8.2: replica 0 = examples 0-1, replica 1 = examples 2-3 (watched/favorited swapped).
  expect_floats_eq(activations[0], {0, 1, 2, 3, 4, 6, 8, 10, 4, 6, 8, 10, 4, 5, 6, 7}, "watched");
  expect_floats_eq(activations[1], {4, 6, 8, 10, 4, 5, 6, 7, 0, 1, 2, 3, 4, 6, 8, 10}, "favorited");
  expect_floats_eq(activations[2], {6, 7, 2, 3, 6, 7, 2, 3}, "friends");
}

TEST_P(EmbeddingTfFixtureTest, WeightsHalveSumAndLeaveMeanUnchanged) {
  // TF test_enqueue_with_weights: weights 0.5 halve the sum table and leave the mean table alone.
  Embedding layer = tf_fixture(Sgd{});
  const auto activations = look_up(layer, fixture_inputs(4, GetParam(), 0.5f));
  expect_floats_eq(activations[0], {0, 0.5f, 1, 1.5f, 2, 3, 4, 5, 2, 3, 4, 5, 2, 2.5f, 3, 3.5f},
                   "watched");
  expect_floats_eq(activations[2], {6, 7, 2, 3, 6, 7, 2, 3}, "friends");
}

TEST(EmbeddingTfFixture, DenseLookupIsAGather) {
  Embedding layer = tf_fixture(Sgd{});
  std::vector<OwnedInput> inputs;
  inputs.push_back(OwnedInput::dense({0, 0, 1, 0}, {4}, {}, IdWidth::kInt32));
  inputs.push_back(OwnedInput::dense({0, 1, 1, 0}, {4, 1}, {}, IdWidth::kInt64));
  inputs.push_back(OwnedInput::dense({3, 0, 1, 2}, {4}, {}, IdWidth::kInt64));
  const auto activations = look_up(layer, inputs);
  expect_floats_eq(activations[0], {0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3}, "watched");
  expect_floats_eq(activations[1], {0, 1, 2, 3, 4, 5, 6, 7, 4, 5, 6, 7, 0, 1, 2, 3}, "favorited");
  expect_floats_eq(activations[2], {6, 7, 0, 1, 2, 3, 4, 5}, "friends");
}

// One training step of TF's correctness test: loss = sum_f mean_b |act_b|^2 over the batch of 4,
// so d(loss)/d(act) = 2 * act / 4. The expected tables use the test's numpy formulas.
struct FixtureGradients {
  std::vector<std::vector<float>> per_feature;
  std::vector<double> video;  // [8 * 4] summed gradient per row
  std::vector<double> user;   // [16 * 2]
};

FixtureGradients fixture_gradients(const std::vector<std::vector<float>>& activations) {
  FixtureGradients result;
  for (const auto& activation : activations) {
    std::vector<float> gradient;
    for (float value : activation) gradient.push_back(2.0f * value / 4.0f);
    result.per_feature.push_back(gradient);
  }
  result.video.assign(32, 0.0);
  result.user.assign(32, 0.0);
  const std::vector<std::vector<int64_t>>* video_features[] = {&kWatched, &kFavorited};
  for (int f = 0; f < 2; ++f) {
    for (size_t b = 0; b < 4; ++b) {
      for (int64_t id : (*video_features[f])[b]) {  // sum combiner: gain 1 per occurrence
        for (size_t d = 0; d < 4; ++d) {
          result.video[static_cast<size_t>(id) * 4 + d] += result.per_feature[f][b * 4 + d];
        }
      }
    }
  }
  for (size_t b = 0; b < 4; ++b) {
    for (int64_t id : kFriends[b]) {  // mean combiner: divided by the bag size
      for (size_t d = 0; d < 2; ++d) {
        result.user[static_cast<size_t>(id) * 2 + d] +=
            result.per_feature[2][b * 2 + d] / static_cast<double>(kFriends[b].size());
      }
    }
  }
  return result;
}

// Expected variables after one step from the range initialization, for rows with g != 0; rows
// with g == 0 (never looked up) keep their initial values and slots.
using OneStepFormula = std::function<std::map<std::string, double>(double w, double g)>;

void check_one_step(const Optimizer& optimizer, const OneStepFormula& formula,
                    const std::map<std::string, double>& untouched_slots, bool sparse) {
  Embedding layer = tf_fixture(optimizer);
  LookupBatch batch;
  const auto activations = look_up(layer, fixture_inputs(4, sparse), batch);
  const FixtureGradients gradients = fixture_gradients(activations);
  train(layer, batch, gradients.per_feature);
  for (const auto& [table, g] :
       {std::pair<std::string, std::vector<double>>{"video", gradients.video},
        std::pair<std::string, std::vector<double>>{"user", gradients.user}}) {
    for (const std::string& name : layer.variable_names(table)) {
      std::vector<double> expected;
      for (size_t i = 0; i < 32; ++i) {
        const auto w = static_cast<double>(i);
        expected.push_back(g[i] == 0.0 ? (name == "parameters" ? w : untouched_slots.at(name))
                                       : formula(w, g[i]).at(name));
      }
      EXPECT_TRUE(near_reference(read(layer, table, name), expected, 1e-6)) << table << "/" << name;
    }
  }
  // The reference model reproduces the same goldens.
  Embedding twin = tf_fixture(optimizer);
  ReferenceEmbedding reference = ReferenceEmbedding::like(twin);
  ReferenceEmbedding::Batch reference_batch;
  const auto reference_activations =
      reference.lookup(test::views_of(fixture_inputs(4, sparse)), reference_batch);
  const std::vector<std::span<const float>> spans(gradients.per_feature.begin(),
                                                  gradients.per_feature.end());
  reference.apply_gradients(reference_batch, spans);
  for (const std::string& name : reference.variable_names("video")) {
    EXPECT_TRUE(near_reference(read(layer, "video", name), reference.variable("video", name), 1e-6))
        << "reference video/" << name;
  }
}

TEST_P(EmbeddingTfFixtureTest, SgdOneStep) {
  check_one_step(
      Sgd{.learning_rate = 0.1f},
      [](double w, double g) {
        return std::map<std::string, double>{{"parameters", w - 0.1 * g}};
      },
      {}, GetParam());
}

TEST_P(EmbeddingTfFixtureTest, AdagradOneStep) {
  check_one_step(
      Adagrad{.learning_rate = 0.1f},
      [](double w, double g) {
        const double a = 0.1 + g * g;
        return std::map<std::string, double>{{"parameters", w - 0.1 * g / std::sqrt(a)},
                                             {"accumulators", a}};
      },
      {{"accumulators", 0.1}}, GetParam());
}

// Adam's defaults as the float32 values the library receives (1 - 0.999f differs from 0.001 by
// 1.3e-5 relative, more than the tolerance).
constexpr double kBeta1 = static_cast<double>(0.9f);
constexpr double kBeta2 = static_cast<double>(0.999f);
constexpr double kEpsilon = static_cast<double>(1e-7f);

TEST_P(EmbeddingTfFixtureTest, AdamOneStep) {
  check_one_step(
      Adam{.learning_rate = 0.1f},
      [](double w, double g) {
        const double m = (1.0 - kBeta1) * g;
        const double v = (1.0 - kBeta2) * g * g;
        return std::map<std::string, double>{
            {"parameters", w - 0.1 * m / std::sqrt(v + kEpsilon * kEpsilon)},
            {"momenta", m},
            {"velocities", v}};
      },
      {{"momenta", 0.0}, {"velocities", 0.0}}, GetParam());
}

TEST_P(EmbeddingTfFixtureTest, AdamWithoutSumInsideSqrtOneStep) {
  check_one_step(
      Adam{.learning_rate = 0.1f, .sum_inside_sqrt = false},
      [](double w, double g) {
        const double m = (1.0 - kBeta1) * g;
        const double v = (1.0 - kBeta2) * g * g;
        return std::map<std::string, double>{
            {"parameters", w - 0.1 * m / (std::sqrt(v) + kEpsilon)},
            {"momenta", m},
            {"velocities", v}};
      },
      {{"momenta", 0.0}, {"velocities", 0.0}}, GetParam());
}

TEST_P(EmbeddingTfFixtureTest, AdagradMomentumOneStep) {
  check_one_step(
      AdagradMomentum{.learning_rate = 0.1f,
                      .momentum = 0.9f,
                      .use_nesterov = true,
                      .exponent = 3.0f,
                      .beta2 = 0.9f,
                      .epsilon = 0.1f},
      [](double w, double g) {
        const double a = 0.1 * g * g;
        const double s = std::pow(a + 0.1, -1.0 / 3.0) * g;
        const double m = s;
        return std::map<std::string, double>{
            {"parameters", w - 0.1 * (0.9 * m + s)}, {"accumulators", a}, {"momenta", m}};
      },
      {{"accumulators", 0.0}, {"momenta", 0.0}}, GetParam());
}

TEST_P(EmbeddingTfFixtureTest, FtrlOneStep) {
  check_one_step(
      Ftrl{.learning_rate = 0.1f},
      [](double w, double g) {
        const double n = 0.1 + g * g;
        const double z = g - (std::sqrt(n) - std::sqrt(0.1)) / 0.1 * w;
        return std::map<std::string, double>{
            {"parameters", -z / (std::sqrt(n) / 0.1)}, {"accumulators", n}, {"linears", z}};
      },
      {{"accumulators", 0.1}, {"linears", 0.0}}, GetParam());
}

TEST_P(EmbeddingTfFixtureTest, SequenceFeatureTrainsOnlyRealPositions) {
  // TF test_sequence_embeddings: max_sequence_length 2, 2, 3; SGD 0.1; batch 2; ones gradient.
  Embedding layer = tf_fixture(Sgd{.learning_rate = 0.1f}, {2, 2, 3});
  const std::vector<OwnedInput> inputs = fixture_inputs(2, GetParam());
  LookupBatch batch;
  const auto before = look_up(layer, inputs, batch);
  const std::vector<float> row0 = {0, 1, 2, 3}, row1 = {4, 5, 6, 7}, zero4(4, 0.0f);
  auto concat = [](std::initializer_list<std::vector<float>> parts) {
    std::vector<float> all;
    for (const auto& part : parts) all.insert(all.end(), part.begin(), part.end());
    return all;
  };
  EXPECT_EQ(layer.activation_shape(0, inputs[0].view()), (std::vector<int64_t>{2, 2, 4}));
  EXPECT_EQ(layer.activation_shape(2, inputs[2].view()), (std::vector<int64_t>{2, 3, 2}));
  expect_floats_eq(before[0], concat({row0, zero4, row0, row1}), "watched");
  expect_floats_eq(before[1], concat({row0, row1, row1, zero4}), "favorited");
  expect_floats_eq(before[2], {6, 7, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5}, "friends");

  std::vector<std::vector<float>> ones;
  for (const auto& activation : before) ones.emplace_back(activation.size(), 1.0f);
  train(layer, batch, ones);
  const auto after = look_up(layer, inputs);
  // Video rows 0 and 1 occur 3 times each (sum of watched and favorited): -0.3; user rows once.
  const std::vector<std::vector<float>> masks = {{1, 0, 1, 1}, {1, 1, 1, 0}, {1, 0, 0, 1, 1, 1}};
  const float deltas[] = {-0.3f, -0.3f, -0.1f};
  for (size_t f = 0; f < 3; ++f) {
    const size_t dim = f < 2 ? 4 : 2;
    for (size_t i = 0; i < after[f].size(); ++i) {
      EXPECT_NEAR(after[f][i] - before[f][i], masks[f][i / dim] * deltas[f], 1e-5)
          << "feature " << f << " [" << i << "]";
    }
  }
}

TEST_P(EmbeddingTfFixtureTest, EmptyGradientSpanIsZeroGradient) {
  // TF test_pass_none_to_apply_gradients: None (here: empty) for watched and favorited.
  Embedding layer = tf_fixture(Sgd{.learning_rate = 0.1f});
  const std::vector<OwnedInput> inputs = fixture_inputs(2, GetParam());
  LookupBatch batch;
  const auto before = look_up(layer, inputs, batch);
  train(layer, batch, {{}, {}, std::vector<float>(4, 1.0f)});
  EXPECT_EQ(layer.step(), 1);
  const auto after = look_up(layer, inputs);
  expect_floats_eq(after[0], before[0], "watched");
  expect_floats_eq(after[1], before[1], "favorited");
  const float third = 0.1f / 3.0f;
  expect_floats_eq(after[2], {6 - 0.1f, 7 - 0.1f, 2 - third, 3 - third}, "friends");
}

TEST(EmbeddingTfFixture, EmptyGradientSpanStillTouchesRowsForAdam) {
  // Spec §2.5: a None gradient sends zeros, which does update Adam's state of the looked-up rows
  // (m, v decay; with zero state nothing moves, so seed the slots first).
  Embedding layer = tf_fixture(Adam{.learning_rate = 0.1f});
  std::vector<float> momenta(32, 0.5f);
  layer.write_variable("video", "momenta", momenta);
  layer.write_variable("video", "velocities", momenta);
  ReferenceEmbedding reference = ReferenceEmbedding::like(layer);
  reference.set_variable("video", "momenta", momenta);
  reference.set_variable("video", "velocities", momenta);
  BatchPair batch;
  lookup_both(layer, reference, fixture_inputs(4, true), batch);
  apply_both(layer, reference, batch, {{}, {}, {}});
  expect_matches_reference(layer, reference);
  // Row 0 was touched (momenta decayed), row 5 was not.
  const std::vector<float> after = read(layer, "video", "momenta");
  EXPECT_FLOAT_EQ(after[0], 0.45f);
  EXPECT_EQ(after[5 * 4], 0.5f);
}

INSTANTIATE_TEST_SUITE_P(SparseAndRagged, EmbeddingTfFixtureTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& param_info) {
                           return param_info.param ? std::string("sparse") : std::string("ragged");
                         });

// ------------------------------------------------------------------------------------------------
// Bad input: the right exception, a message naming feature / example / value, no state change.
// A rejected lookup into a batch leaves that batch not applicable (and reusable) while a batch of
// an earlier valid lookup still applies exactly as the reference; a rejected apply_gradients
// leaves its batch applicable, and it then applies exactly as the reference. Then the rest of the
// LookupBatch contract: batches applied in any order, each at most once, only by the Embedding
// that filled them.

class EmbeddingErrorTest : public ::testing::Test {
 protected:
  static constexpr int64_t kBatch = 3;

  static Embedding make_layer(NonFiniteGradients policy = NonFiniteGradients::kReject) {
    return Embedding(
        std::vector<TableConfig>{
            {.name = "items",
             .vocabulary_size = 20,
             .dim = 4,
             .optimizer = Adagrad{.learning_rate = 0.2f},
             .combiner = Combiner::kMean},
            {.name = "users", .vocabulary_size = 10, .dim = 2, .combiner = Combiner::kSqrtn}},
        std::vector<FeatureConfig>{{.name = "clicks", .table = "items"},
                                   {.name = "views", .table = "items"},
                                   {.name = "friends", .table = "users"},
                                   {.name = "history", .table = "items", .max_sequence_length = 2}},
        EmbeddingOptions{.optimizer = Adam{.learning_rate = 0.05f},
                         .num_threads = 2,
                         .seed = 5,
                         .non_finite_gradients = policy});
  }

  void build(NonFiniteGradients policy = NonFiniteGradients::kReject) {
    layer_.emplace(make_layer(policy));
    reference_.emplace(ReferenceEmbedding::like(*layer_));
  }

  // clicks: ragged {1, 5, 5} {} {7, 19}, weighted; views: dense [3] int32; friends: sparse [3, 4]
  // with example 2 empty, weighted; history: ragged sequence {3, 4, 5} {6} {} (truncated at 2).
  static std::vector<OwnedInput> valid_inputs() {
    std::vector<OwnedInput> inputs;
    inputs.push_back(OwnedInput::ragged(
        {{{1, 5, 5}, {1.0f, 0.5f, 2.0f}}, {{}, {}}, {{7, 19}, {1.0f, 1.0f}}}, true));
    inputs.push_back(OwnedInput::dense({2, 0, 19}, {kBatch}, {}, IdWidth::kInt32));
    inputs.push_back(
        OwnedInput::sparse({0, 0, 0, 2, 1, 1}, {4, 9, 0}, {kBatch, 4}, {1.0f, 2.0f, 0.5f}));
    inputs.push_back(
        OwnedInput::ragged({{{3, 4, 5}, {}}, {{6}, {}}, {{}, {}}}, false, IdWidth::kInt32));
    return inputs;
  }

  // The shapes of valid_inputs() with other ids, many of them rows of valid_inputs() too.
  static std::vector<OwnedInput> other_inputs() {
    std::vector<OwnedInput> inputs = valid_inputs();
    inputs[0].ids64() = {5, 1, 2, 7, 7};
    inputs[1].ids32() = {8, 0, 2};
    inputs[2].ids64() = {4, 1, 9};
    inputs[3].ids32() = {4, 3, 6, 5};
    return inputs;
  }

  // Zero examples in every layout.
  static std::vector<OwnedInput> empty_inputs() {
    std::vector<OwnedInput> inputs;
    inputs.push_back(OwnedInput::ragged({}, true));
    inputs.push_back(OwnedInput::dense({}, {0}, {}, IdWidth::kInt32));
    inputs.push_back(OwnedInput::sparse({}, {}, {0, 4}, {}));
    inputs.push_back(OwnedInput::ragged({}, false, IdWidth::kInt32, IdWidth::kInt32));
    return inputs;
  }

  static std::vector<std::vector<float>> valid_gradients(uint64_t seed) {
    std::mt19937_64 rng(seed);
    return {test::random_gradient(rng, kBatch * 4), test::random_gradient(rng, kBatch * 4),
            test::random_gradient(rng, kBatch * 2), test::random_gradient(rng, kBatch * 2 * 4)};
  }

  void lookup_valid(BatchPair& batch) { lookup_both(*layer_, *reference_, valid_inputs(), batch); }
  void lookup_other(BatchPair& batch) { lookup_both(*layer_, *reference_, other_inputs(), batch); }
  void apply_valid(BatchPair& batch, uint64_t seed = 1) {
    apply_both(*layer_, *reference_, batch, valid_gradients(seed));
    expect_matches_reference(*layer_, *reference_);
  }

  // Applying `batch` to `layer` throws FailedPrecondition mentioning the lookup; nothing changes,
  // and the batch stays applicable or not as it was.
  static void expect_not_applicable(Embedding& layer, LookupBatch& batch) {
    const Snapshot before = snapshot_of(layer);
    const bool was_applicable = batch.applicable();
    EXPECT_THAT(error_of<FailedPrecondition>([&] { train(layer, batch, valid_gradients(1)); }),
                HasSubstr("lookup"));
    EXPECT_TRUE(unchanged(before, layer));
    EXPECT_EQ(batch.applicable(), was_applicable);
  }

  // Activations sized for `inputs` by the reference (so a bad size can be injected).
  std::vector<std::vector<float>> buffers(const std::vector<FeatureInput>& views) {
    std::vector<std::vector<float>> result;
    for (size_t f = 0; f < views.size() && f < layer_->features().size(); ++f) {
      result.emplace_back(static_cast<size_t>(product(reference_->activation_shape(f, views[f]))));
    }
    return result;
  }

  // `views` into `spans` must be rejected with InvalidArgument containing every fragment, the
  // same by the pure lookup and by a lookup into `target` (which holds a valid lookup before):
  // tables, slots and step are unchanged, and `target` is left not applicable.
  void expect_both_lookups_rejected(const std::vector<FeatureInput>& views,
                                    const std::vector<std::span<float>>& spans, BatchPair& target,
                                    const std::vector<std::string>& fragments) {
    ASSERT_TRUE(target.layer.applicable());
    const Snapshot before = snapshot_of(*layer_);
    const std::string pure = error_of<InvalidArgument>([&] { layer_->lookup(views, spans); });
    EXPECT_TRUE(unchanged(before, *layer_)) << "pure lookup";
    const std::string training =
        error_of<InvalidArgument>([&] { layer_->lookup(views, spans, target.layer); });
    EXPECT_TRUE(unchanged(before, *layer_)) << "lookup into a batch";
    EXPECT_FALSE(target.layer.applicable()) << "a rejected lookup leaves its batch empty";
    for (const std::string* message : {&pure, &training}) {
      for (const std::string& fragment : fragments) {
        EXPECT_THAT(lowercase(*message), HasSubstr(lowercase(fragment)));
      }
    }
    EXPECT_EQ(training, pure);
    expect_not_applicable(*layer_, target.layer);
  }

  // While two valid lookups are outstanding, `bad` (a modified copy of the valid inputs) is
  // rejected (see expect_both_lookups_rejected) into the second one's batch; the first one then
  // applies exactly as the reference, and the emptied batch can be looked up into again.
  void expect_lookup_rejected(const std::vector<OwnedInput>& bad,
                              const std::vector<std::string>& fragments) {
    build();
    BatchPair earlier;
    lookup_valid(earlier);
    BatchPair target;
    lookup_other(target);
    // Buffers of the valid sizes, so only the input itself is wrong.
    std::vector<std::vector<float>> activations = buffers(test::views_of(valid_inputs()));
    const std::vector<std::span<float>> spans(activations.begin(), activations.end());
    expect_both_lookups_rejected(test::views_of(bad), spans, target, fragments);
    EXPECT_TRUE(earlier.layer.applicable());
    apply_valid(earlier);
    lookup_other(target);
    apply_valid(target, 2);
  }

  // While two valid lookups are outstanding, applying `bad` to the first one is rejected with
  // InvalidArgument containing every fragment; nothing changes, both batches stay applicable and
  // then apply exactly as the reference.
  void expect_apply_rejected(const std::vector<std::vector<float>>& bad,
                             const std::vector<std::string>& fragments) {
    build();
    BatchPair batch;
    lookup_valid(batch);
    BatchPair other;
    lookup_other(other);
    const Snapshot before = snapshot_of(*layer_);
    const std::string message =
        error_of<InvalidArgument>([&] { train(*layer_, batch.layer, bad); });
    for (const std::string& fragment : fragments) {
      EXPECT_THAT(lowercase(message), HasSubstr(lowercase(fragment)));
    }
    EXPECT_TRUE(unchanged(before, *layer_));
    EXPECT_TRUE(batch.layer.applicable()) << "a rejected apply leaves its batch applicable";
    EXPECT_TRUE(other.layer.applicable());
    apply_valid(batch);
    apply_valid(other, 2);
  }

  std::optional<Embedding> layer_;
  std::optional<ReferenceEmbedding> reference_;
};

TEST_F(EmbeddingErrorTest, ValidStepsMatchReference) {
  build();
  BatchPair batch;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    lookup_valid(batch);
    apply_valid(batch, seed);
  }
}

TEST_F(EmbeddingErrorTest, OutOfRangeId) {
  std::vector<OwnedInput> bad = valid_inputs();
  bad[0].ids64()[4] = 20;  // clicks, example 2, vocabulary 20
  expect_lookup_rejected(bad, {"'clicks'", "example 2", "20"});
}

TEST_F(EmbeddingErrorTest, OutOfRangeInt32Id) {
  std::vector<OwnedInput> bad = valid_inputs();
  bad[1].ids32()[1] = 1000;  // views, example 1
  expect_lookup_rejected(bad, {"'views'", "example 1", "1000"});
}

TEST_F(EmbeddingErrorTest, NegativeId) {
  std::vector<OwnedInput> bad = valid_inputs();
  bad[2].ids64()[2] = -3;  // friends, example 1 (sparse: named by its index [1, 1])
  expect_lookup_rejected(bad, {"'friends'", "[1, 1]", "-3"});
}

TEST_F(EmbeddingErrorTest, NegativeIdInSequence) {
  std::vector<OwnedInput> bad = valid_inputs();
  bad[3].ids32()[3] = -7;  // history, example 1
  expect_lookup_rejected(bad, {"'history'", "example 1", "-7"});
}

TEST_F(EmbeddingErrorTest, WeightsCountMismatch) {
  std::vector<OwnedInput> bad = valid_inputs();
  bad[0].weights().pop_back();  // clicks: 5 ids, 4 weights
  expect_lookup_rejected(bad, {"'clicks'", "weights", "4", "5"});
}

TEST_F(EmbeddingErrorTest, NonFiniteWeight) {
  for (float value : {kNaN, kInf, -kInf}) {
    std::vector<OwnedInput> bad = valid_inputs();
    bad[2].weights()[2] = value;  // friends, example 1 (sparse: named by its index [1, 1])
    expect_lookup_rejected(bad, {"'friends'", "[1, 1]", std::isnan(value) ? "nan" : "inf"});
  }
}

TEST_F(EmbeddingErrorTest, RaggedRowSplitsNotEndingAtValues) {
  std::vector<OwnedInput> bad = valid_inputs();
  bad[0].splits64().back() = 4;  // 5 values
  expect_lookup_rejected(bad, {"'clicks'"});
}

TEST_F(EmbeddingErrorTest, SparseIndexOutsideDenseShape) {
  std::vector<OwnedInput> bad = valid_inputs();
  bad[2].indices()[3] = 4;  // position 4 of dense_shape [3, 4]
  expect_lookup_rejected(bad, {"'friends'"});
}

TEST_F(EmbeddingErrorTest, SparseIndicesNotCanonical) {
  std::vector<OwnedInput> bad = valid_inputs();
  bad[2].indices()[3] = 0;  // (0, 2) -> (0, 0): a repeat of the first entry
  expect_lookup_rejected(bad, {"'friends'"});
}

TEST_F(EmbeddingErrorTest, DenseShapeNotMatchingIds) {
  std::vector<OwnedInput> bad = valid_inputs();
  bad[1].shape() = {4};  // 3 ids
  expect_lookup_rejected(bad, {"'views'"});
}

TEST_F(EmbeddingErrorTest, WrongNumberOfInputs) {
  std::vector<OwnedInput> bad = valid_inputs();
  bad.pop_back();
  build();
  BatchPair earlier;
  lookup_valid(earlier);
  BatchPair target;
  lookup_other(target);
  std::vector<std::vector<float>> activations = buffers(test::views_of(valid_inputs()));
  const std::vector<std::span<float>> spans(activations.begin(), activations.end());
  expect_both_lookups_rejected(test::views_of(bad), spans, target, {"3", "4"});
  apply_valid(earlier);
}

TEST_F(EmbeddingErrorTest, WrongActivationBufferSize) {
  build();
  BatchPair earlier;
  lookup_valid(earlier);
  BatchPair target;
  lookup_other(target);
  const std::vector<OwnedInput> inputs = valid_inputs();
  const std::vector<FeatureInput> views = test::views_of(inputs);
  std::vector<std::vector<float>> activations = buffers(views);
  activations[2].pop_back();  // friends: [3, 2] needs 6
  std::vector<std::span<float>> spans(activations.begin(), activations.end());
  expect_both_lookups_rejected(views, spans, target, {"'friends'", "5", "6"});
  lookup_other(target);
  spans.pop_back();  // wrong number of buffers
  expect_both_lookups_rejected(views, spans, target, {});
  apply_valid(earlier);
}

TEST_F(EmbeddingErrorTest, WrongGradientSize) {
  std::vector<std::vector<float>> bad = valid_gradients(1);
  bad[3].push_back(0.5f);  // history: [3, 2, 4] = 24
  expect_apply_rejected(bad, {"'history'", "25", "24"});
}

TEST_F(EmbeddingErrorTest, WrongNumberOfGradients) {
  std::vector<std::vector<float>> bad = valid_gradients(1);
  bad.pop_back();
  expect_apply_rejected(bad, {"3", "4"});
}

TEST_F(EmbeddingErrorTest, NonFiniteGradientRejected) {
  for (float value : {kNaN, kInf, -kInf}) {
    std::vector<std::vector<float>> bad = valid_gradients(1);
    bad[0][2 * 4 + 1] = value;  // clicks, example 2
    expect_apply_rejected(bad, {"'clicks'", "example 2", std::isnan(value) ? "nan" : "inf"});
  }
}

TEST_F(EmbeddingErrorTest, ApplyWithoutLookup) {
  build();
  const Snapshot before = snapshot_of(*layer_);
  BatchPair batch;  // never looked up into
  EXPECT_FALSE(batch.layer.applicable());
  expect_not_applicable(*layer_, batch.layer);
  // A rejected lookup does not make it applicable either.
  std::vector<OwnedInput> bad = valid_inputs();
  bad[1].ids32()[0] = -1;
  std::vector<std::vector<float>> activations = buffers(test::views_of(valid_inputs()));
  std::vector<std::span<float>> spans(activations.begin(), activations.end());
  error_of<InvalidArgument>([&] { layer_->lookup(test::views_of(bad), spans, batch.layer); });
  EXPECT_FALSE(batch.layer.applicable());
  expect_not_applicable(*layer_, batch.layer);
  EXPECT_TRUE(unchanged(before, *layer_));
  lookup_valid(batch);
  apply_valid(batch);
}

TEST_F(EmbeddingErrorTest, SecondApplyOfTheSameBatch) {
  build();
  BatchPair batch;
  lookup_valid(batch);
  apply_valid(batch);
  EXPECT_FALSE(batch.layer.applicable());
  expect_not_applicable(*layer_, batch.layer);
  lookup_valid(batch);
  apply_valid(batch, 3);
}

TEST_F(EmbeddingErrorTest, SecondLookupIntoABatchReplacesItsLookup) {
  build();
  BatchPair batch;
  lookup_other(batch);
  lookup_valid(batch);  // replaces the first lookup
  apply_valid(batch);
  expect_not_applicable(*layer_, batch.layer);  // the replaced lookup is gone, not queued
}

TEST_F(EmbeddingErrorTest, BatchesAppliedInReverseOrderMatchReference) {
  build();
  BatchPair first;
  lookup_valid(first);
  BatchPair second;
  lookup_other(second);
  // The reference applying them in lookup order instead, to show that the order matters here.
  ReferenceEmbedding in_lookup_order = *reference_;
  ReferenceEmbedding::Batch first_copy = first.reference;
  ReferenceEmbedding::Batch second_copy = second.reference;
  apply_valid(second, 2);
  apply_valid(first, 1);
  const std::vector<std::vector<float>> gradients_1 = valid_gradients(1);
  const std::vector<std::vector<float>> gradients_2 = valid_gradients(2);
  in_lookup_order.apply_gradients(
      first_copy, std::vector<std::span<const float>>(gradients_1.begin(), gradients_1.end()));
  in_lookup_order.apply_gradients(
      second_copy, std::vector<std::span<const float>>(gradients_2.begin(), gradients_2.end()));
  EXPECT_FALSE(near_reference(read(*layer_, "items", "parameters"),
                              in_lookup_order.variable("items", "parameters")))
      << "applying in the other order gives the same tables, so this test proves nothing";
}

TEST_F(EmbeddingErrorTest, BatchOfAnotherEmbeddingIsRejected) {
  build();
  // The same configs and seed: the batch fits it, it just is not its own.
  Embedding other_layer = make_layer();
  const Snapshot other_before = snapshot_of(other_layer);
  BatchPair batch;
  lookup_valid(batch);
  expect_not_applicable(other_layer, batch.layer);
  EXPECT_TRUE(unchanged(other_before, other_layer));
  EXPECT_TRUE(batch.layer.applicable());
  apply_valid(batch);  // its own layer still applies it, exactly as the reference
  // A lookup into a batch makes it belong to the layer that looked up.
  BatchPair reused;
  lookup_valid(reused);
  look_up(other_layer, valid_inputs(), reused.layer);
  expect_not_applicable(*layer_, reused.layer);
  train(other_layer, reused.layer, valid_gradients(1));
  EXPECT_FALSE(reused.layer.applicable());
  // The same lookup and gradients from the same state: bitwise what layer_ computed.
  EXPECT_TRUE(unchanged(snapshot_of(*layer_), other_layer));
}

TEST_F(EmbeddingErrorTest, MovedFromBatchIsRejected) {
  build();
  BatchPair batch;
  lookup_valid(batch);
  LookupBatch moved(std::move(batch.layer));
  EXPECT_TRUE(moved.applicable());
  EXPECT_FALSE(batch.layer.applicable());
  expect_not_applicable(*layer_, batch.layer);
  LookupBatch assigned;
  assigned = std::move(moved);
  EXPECT_TRUE(assigned.applicable());
  EXPECT_FALSE(moved.applicable());
  expect_not_applicable(*layer_, moved);
  batch.layer = std::move(assigned);  // back into the first moved-from batch
  apply_valid(batch);                 // the lookup moved along: exactly as the reference
  expect_not_applicable(*layer_, assigned);
  // A moved-from batch can be looked up into again.
  BatchPair again;
  LookupBatch taken(std::move(again.layer));
  lookup_valid(again);
  apply_valid(again, 2);
  EXPECT_FALSE(taken.applicable());
}

TEST_F(EmbeddingErrorTest, PureLookupBetweenLookupAndApplyChangesNothing) {
  build();
  BatchPair batch;
  lookup_valid(batch);
  const Snapshot before = snapshot_of(*layer_);
  // Pure lookups of other ids and of other shapes while `batch` is outstanding.
  lookup_both(*layer_, *reference_, other_inputs());
  lookup_both(*layer_, *reference_, empty_inputs());
  EXPECT_TRUE(unchanged(before, *layer_));
  EXPECT_TRUE(batch.layer.applicable());
  LookupBatch fresh;
  expect_not_applicable(*layer_, fresh);  // a pure lookup records nothing
  apply_valid(batch);
  // Bitwise the same as the same step without the pure lookups.
  Embedding plain = make_layer();
  LookupBatch plain_batch;
  look_up(plain, valid_inputs(), plain_batch);
  train(plain, plain_batch, valid_gradients(1));
  EXPECT_TRUE(unchanged(snapshot_of(plain), *layer_));
}

TEST_F(EmbeddingErrorTest, InputArraysMayBeReleasedAfterTheLookup) {
  build();
  BatchPair batch;
  {
    std::vector<OwnedInput> inputs = valid_inputs();
    lookup_both(*layer_, *reference_, inputs, batch);
    // Overwrite the arrays the lookup read (in place: same sizes), then free them.
    inputs[0].ids64() = {0, 0, 0, 0, 0};
    inputs[0].weights() = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    inputs[1].ids32() = {0, 0, 0};
    inputs[2].ids64() = {0, 0, 0};
    inputs[3].ids32() = {0, 0, 0, 0};
  }
  apply_valid(batch);
}

TEST_F(EmbeddingErrorTest, MovedLayerKeepsItsStateAndOutstandingBatches) {
  build();
  BatchPair batch;
  lookup_valid(batch);
  BatchPair other;
  lookup_other(other);
  Embedding moved = std::move(*layer_);
  layer_.emplace(std::move(moved));
  apply_valid(other, 2);
  apply_valid(batch);
  lookup_valid(batch);
  apply_valid(batch, 4);
}

// A batch of a destroyed Embedding must be refused by a new Embedding even when the new one's state
// is allocated at the same address (typical after free; AddressSanitizer's quarantine delays such
// reuse, so this matters in the plain build).
TEST_F(EmbeddingErrorTest, BatchOfADestroyedEmbeddingIsRejected) {
  build();
  BatchPair batch;
  lookup_valid(batch);
  layer_.reset();
  build();
  expect_not_applicable(*layer_, batch.layer);
}

TEST_F(EmbeddingErrorTest, EmptyBatch) {
  // Zero examples in every layout: activations of size 0, nothing touched, the step still counts.
  build();
  BatchPair batch;
  const auto activations = lookup_both(*layer_, *reference_, empty_inputs(), batch);
  for (const auto& activation : activations) EXPECT_TRUE(activation.empty());
  apply_both(*layer_, *reference_, batch, {{}, {}, {}, {}});
  expect_matches_reference(*layer_, *reference_);
}

TEST_F(EmbeddingErrorTest, SkipRowsLeavesNonFiniteRowsAndUpdatesTheRest) {
  build(NonFiniteGradients::kSkipRows);
  BatchPair batch;
  lookup_valid(batch);
  const Snapshot before = snapshot_of(*layer_);
  std::vector<std::vector<float>> gradients = valid_gradients(1);
  gradients[0][0 * 4 + 1] = kNaN;  // clicks example 0: items rows 1 and 5
  gradients[2][1 * 2 + 0] = kInf;  // friends example 1: users row 0
  apply_both(*layer_, *reference_, batch, gradients);
  expect_matches_reference(*layer_, *reference_);
  EXPECT_EQ(layer_->skipped_rows(), 3);
  EXPECT_EQ(layer_->step(), 1);
  const Snapshot after = snapshot_of(*layer_);
  auto row = [](const std::vector<float>& values, size_t r, size_t dim) {
    return std::vector<float>(values.begin() + static_cast<std::ptrdiff_t>(r * dim),
                              values.begin() + static_cast<std::ptrdiff_t>((r + 1) * dim));
  };
  for (const std::string name : {"items/parameters", "items/accumulators"}) {
    for (size_t r : {1, 5}) {
      EXPECT_TRUE(
          bitwise_equal(row(after.variables.at(name), r, 4), row(before.variables.at(name), r, 4)))
          << name << " row " << r;
    }
    EXPECT_FALSE(
        bitwise_equal(row(after.variables.at(name), 7, 4), row(before.variables.at(name), 7, 4)))
        << name << " row 7 should be updated";
  }
  for (const std::string name : {"users/parameters", "users/momenta", "users/velocities"}) {
    EXPECT_TRUE(
        bitwise_equal(row(after.variables.at(name), 0, 2), row(before.variables.at(name), 0, 2)))
        << name;
    EXPECT_FALSE(
        bitwise_equal(row(after.variables.at(name), 4, 2), row(before.variables.at(name), 4, 2)))
        << name << " row 4 should be updated";
  }
  lookup_valid(batch);
  apply_valid(batch, 2);
}

TEST(EmbeddingNoOptimizer, ServingTablesLookUpButCannotTrain) {
  Embedding layer({{.name = "frozen", .vocabulary_size = 6, .dim = 2, .initializer = RowId{}},
                   {.name = "trained",
                    .vocabulary_size = 6,
                    .dim = 2,
                    .optimizer = Sgd{.learning_rate = 0.1f}}},
                  {{.name = "a", .table = "trained"}, {.name = "b", .table = "frozen"}});
  EXPECT_EQ(layer.variable_names("frozen"), (std::vector<std::string>{"parameters"}));
  std::vector<OwnedInput> inputs;
  inputs.push_back(OwnedInput::dense({1, 2}, {2}));
  inputs.push_back(OwnedInput::dense({4, 5}, {2}));
  LookupBatch batch;
  const auto activations = look_up(layer, inputs, batch);
  expect_floats_eq(activations[1], {4, 4, 5, 5}, "frozen rows");
  const Snapshot before = snapshot_of(layer);
  const std::string message = error_of<FailedPrecondition>([&] {
    train(layer, batch, {std::vector<float>(4, 1.0f), std::vector<float>(4, 1.0f)});
  });
  EXPECT_THAT(message, HasSubstr("frozen"));
  EXPECT_TRUE(unchanged(before, layer));
  EXPECT_TRUE(batch.applicable());
}

// ------------------------------------------------------------------------------------------------
// Config errors at construction: InvalidArgument naming the item and the field.

struct ConfigCase {
  std::string name;
  std::function<void(std::vector<TableConfig>&, std::vector<FeatureConfig>&, EmbeddingOptions&)>
      mutate;
  std::vector<std::string> fragments;
};

TEST(EmbeddingConfig, InvalidConfigsNameTheItemAndField) {
  const std::vector<ConfigCase> cases = {
      {"dim 0", [](auto& t, auto&, auto&) { t[1].dim = 0; }, {"audio", "dim"}},
      {"vocabulary 0",
       [](auto& t, auto&, auto&) { t[0].vocabulary_size = 0; },
       {"video", "vocabulary_size"}},
      {"negative vocabulary",
       [](auto& t, auto&, auto&) { t[0].vocabulary_size = -5; },
       {"video", "vocabulary_size"}},
      {"duplicate table", [](auto& t, auto&, auto&) { t[1].name = "video"; }, {"video"}},
      {"empty table name", [](auto& t, auto&, auto&) { t[1].name = ""; }, {"name"}},
      {"duplicate feature", [](auto&, auto& f, auto&) { f[1].name = "watched"; }, {"watched"}},
      {"empty feature name", [](auto&, auto& f, auto&) { f[0].name = ""; }, {"name"}},
      {"unknown table", [](auto&, auto& f, auto&) { f[1].table = "music"; }, {"liked", "music"}},
      {"negative sequence length",
       [](auto&, auto& f, auto&) { f[0].max_sequence_length = -1; },
       {"watched", "max_sequence_length"}},
      {"quantization buckets",
       [](auto& t, auto&, auto&) {
         t[0].quantization_config = QuantizationConfig{1, 0.0f, 1.0f};
       },
       {"video", "num_buckets"}},
      {"adagrad accumulator",
       [](auto& t, auto&, auto&) { t[1].optimizer = Adagrad{.initial_accumulator_value = 0.0f}; },
       {"audio", "initial_accumulator_value"}},
      {"adam beta_1",
       [](auto& t, auto&, auto&) { t[0].optimizer = Adam{.beta_1 = 1.0f}; },
       {"video", "beta_1"}},
      {"adam beta_2",
       [](auto& t, auto&, auto&) { t[0].optimizer = Adam{.beta_2 = -0.1f}; },
       {"video", "beta_2"}},
      {"adam epsilon",
       [](auto& t, auto&, auto&) { t[0].optimizer = Adam{.epsilon = 0.0f}; },
       {"video", "epsilon"}},
      {"non-lazy adam without accumulation",
       [](auto& t, auto&, auto&) {
         t[0].optimizer = Adam{.lazy_adam = false, .common = {.use_gradient_accumulation = false}};
       },
       {"video", "lazy_adam"}},
      {"momentum epsilon",
       [](auto& t, auto&, auto&) { t[1].optimizer = AdagradMomentum{.epsilon = 0.0f}; },
       {"audio", "epsilon"}},
      {"momentum exponent",
       [](auto& t, auto&, auto&) { t[1].optimizer = AdagradMomentum{.exponent = 0.0f}; },
       {"audio", "exponent"}},
      {"ftrl accumulator",
       [](auto& t, auto&, auto&) { t[0].optimizer = Ftrl{.initial_accumulator_value = 0.0f}; },
       {"video", "initial_accumulator_value"}},
      {"ftrl power",
       [](auto& t, auto&, auto&) { t[0].optimizer = Ftrl{.learning_rate_power = 0.5f}; },
       {"video", "learning_rate_power"}},
      {"ftrl l1",
       [](auto& t, auto&, auto&) { t[0].optimizer = Ftrl{.l1_regularization_strength = -1.0f}; },
       {"video", "l1_regularization_strength"}},
      {"rowwise epsilon",
       [](auto& t, auto&, auto&) { t[0].optimizer = RowwiseAdagrad{.epsilon = 0.0f}; },
       {"video", "epsilon"}},
      {"negative learning rate",
       [](auto& t, auto&, auto&) { t[0].optimizer = Sgd{.learning_rate = -0.1f}; },
       {"video", "learning_rate"}},
      {"empty callback",
       [](auto& t, auto&, auto&) { t[0].optimizer = Sgd{.learning_rate = LearningRateCallback()}; },
       {"video", "learning_rate"}},
      {"decay steps",
       [](auto& t, auto&, auto&) {
         t[0].optimizer = Sgd{.learning_rate = ExponentialDecay{.decay_steps = 0}};
       },
       {"video", "decay_steps"}},
      {"piecewise sizes",
       [](auto& t, auto&, auto&) {
         t[0].optimizer = Sgd{.learning_rate = PiecewiseConstant{{1, 2}, {0.1f, 0.2f}}};
       },
       {"video"}},
      {"weight clip order",
       [](auto& t, auto&, auto&) {
         t[0].optimizer = Sgd{.common = {.clip_weight_min = 1.0f, .clip_weight_max = -1.0f}};
       },
       {"video", "clip_weight"}},
      {"gradient clip without accumulation",
       [](auto& t, auto&, auto&) {
         t[0].optimizer =
             Adagrad{.common = {.use_gradient_accumulation = false, .clip_gradient_max = 1.0f}};
       },
       {"video", "clip"}},
      {"negative weight decay",
       [](auto& t, auto&, auto&) {
         t[0].optimizer = Sgd{.common = {.weight_decay_factor = -1.0f}};
       },
       {"video", "weight_decay_factor"}},
      {"bad global optimizer",
       [](auto&, auto&, auto& o) { o.optimizer = Adagrad{.initial_accumulator_value = -1.0f}; },
       {"initial_accumulator_value"}},
  };
  for (const ConfigCase& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<TableConfig> tables = {{.name = "video", .vocabulary_size = 8, .dim = 4},
                                       {.name = "audio", .vocabulary_size = 5, .dim = 2}};
    std::vector<FeatureConfig> features = {{.name = "watched", .table = "video"},
                                           {.name = "liked", .table = "audio"}};
    EmbeddingOptions options{.optimizer = Sgd{}};
    c.mutate(tables, features, options);
    const std::string message =
        error_of<InvalidArgument>([&] { Embedding layer(tables, features, options); });
    for (const std::string& fragment : c.fragments) EXPECT_THAT(message, HasSubstr(fragment));
  }
}

TEST(EmbeddingConfig, InitializerCallbackErrorPropagates) {
  EXPECT_THROW(Embedding({{.name = "t",
                           .vocabulary_size = 4,
                           .dim = 2,
                           .initializer =
                               InitializerCallback([](int64_t, int64_t, int64_t, std::span<float>) {
                                 throw std::runtime_error("disk on fire");
                               })}},
                         {{.name = "f", .table = "t"}}),
               std::runtime_error);
}

// ------------------------------------------------------------------------------------------------
// Initializers.

TEST(EmbeddingInitializers, ConstantRowIdCallbackAndTruncatedNormal) {
  std::vector<std::pair<int64_t, int64_t>> blocks;
  auto make = [&](uint64_t seed, int threads) {
    return Embedding(
        {{.name = "constant", .vocabulary_size = 5, .dim = 3, .initializer = Constant{0.75f}},
         {.name = "row_id", .vocabulary_size = 300, .dim = 2, .initializer = RowId{2.5f}},
         {.name = "callback",
          .vocabulary_size = 1000,
          .dim = 3,
          .initializer = InitializerCallback(
              [&blocks](int64_t first_row, int64_t num_rows, int64_t dim, std::span<float> values) {
                blocks.emplace_back(first_row, num_rows);
                EXPECT_EQ(values.size(), static_cast<size_t>(num_rows * dim));
                for (size_t i = 0; i < values.size(); ++i) {
                  values[i] = static_cast<float>(first_row * dim + static_cast<int64_t>(i));
                }
              })},
         {.name = "normal", .vocabulary_size = 500, .dim = 16},
         {.name = "shifted",
          .vocabulary_size = 200,
          .dim = 4,
          .initializer = TruncatedNormal{.mean = 1.0f, .stddev = 0.5f}}},
        {{.name = "f", .table = "constant"}}, {.num_threads = threads, .seed = seed});
  };
  const Embedding layer = make(11, 3);
  for (float value : read(layer, "constant", "parameters")) EXPECT_EQ(value, 0.75f);
  const std::vector<float> row_id = read(layer, "row_id", "parameters");
  for (size_t i = 0; i < row_id.size(); ++i) EXPECT_EQ(row_id[i], 2.5f + static_cast<float>(i / 2));
  // The callback's blocks cover every row exactly once.
  std::sort(blocks.begin(), blocks.end());
  int64_t next_row = 0;
  for (const auto& [first_row, num_rows] : blocks) {
    EXPECT_EQ(first_row, next_row);
    next_row = first_row + num_rows;
  }
  EXPECT_EQ(next_row, 1000);
  const std::vector<float> callback = read(layer, "callback", "parameters");
  for (size_t i = 0; i < callback.size(); ++i) {
    ASSERT_EQ(callback[i], static_cast<float>(i)) << "each block lands at its first_row";
  }
  // Truncated normal: within 2 stddev (default 1/sqrt(dim) = 0.25), mean near 0, not constant.
  const std::vector<float> normal = read(layer, "normal", "parameters");
  double sum = 0.0;
  for (float value : normal) {
    EXPECT_LE(std::abs(value), 0.5f + 1e-6f);
    sum += value;
  }
  EXPECT_NEAR(sum / static_cast<double>(normal.size()), 0.0, 0.02);
  EXPECT_NE(normal[0], normal[1]);
  for (float value : read(layer, "shifted", "parameters")) {
    EXPECT_GE(value, 0.0f - 1e-6f);
    EXPECT_LE(value, 2.0f + 1e-6f);
  }
  // Same seed: same values for any thread count; another seed: other values.
  blocks.clear();
  EXPECT_TRUE(bitwise_equal(read(make(11, 1), "normal", "parameters"), normal));
  EXPECT_FALSE(bitwise_equal(read(make(12, 3), "normal", "parameters"), normal));
}

// ------------------------------------------------------------------------------------------------
// The variable API.

Embedding one_table_per_optimizer() {
  const std::vector<std::pair<std::string, std::optional<Optimizer>>> optimizers = {
      {"sgd", Sgd{.learning_rate = 0.1f}},
      {"adagrad", Adagrad{.learning_rate = 0.1f, .initial_accumulator_value = 0.3f}},
      {"momentum", AdagradMomentum{.learning_rate = 0.1f, .epsilon = 1e-3f}},
      {"adam", Adam{.learning_rate = 0.1f}},
      // Not TF's lr 0.001: FTRL divides (n'^p - n^p) by lr, which would amplify float32
      // cancellation 1000x beyond the tolerance.
      {"ftrl", Ftrl{.learning_rate = 0.1f, .initial_accumulator_value = 0.2f}},
      {"rowwise", RowwiseAdagrad{.learning_rate = 0.1f, .initial_accumulator_value = 0.4f}},
      {"global", std::nullopt}};
  std::vector<TableConfig> tables;
  std::vector<FeatureConfig> features;
  for (const auto& [name, optimizer] : optimizers) {
    tables.push_back({.name = name, .vocabulary_size = 7, .dim = 3, .optimizer = optimizer});
    features.push_back({.name = "f_" + name, .table = name});
  }
  return Embedding(tables, features,
                   {.optimizer = Adagrad{.learning_rate = 0.5f, .initial_accumulator_value = 0.6f},
                    .num_threads = 1});
}

TEST(EmbeddingVariables, NamesShapesAndInitialSlots) {
  const Embedding layer = one_table_per_optimizer();
  using Names = std::vector<std::string>;
  EXPECT_EQ(layer.variable_names("sgd"), (Names{"parameters"}));
  EXPECT_EQ(layer.variable_names("adagrad"), (Names{"parameters", "accumulators"}));
  EXPECT_EQ(layer.variable_names("momentum"), (Names{"parameters", "accumulators", "momenta"}));
  EXPECT_EQ(layer.variable_names("adam"), (Names{"parameters", "momenta", "velocities"}));
  EXPECT_EQ(layer.variable_names("ftrl"), (Names{"parameters", "accumulators", "linears"}));
  EXPECT_EQ(layer.variable_names("rowwise"), (Names{"parameters", "accumulators"}));
  EXPECT_EQ(layer.variable_names("global"), (Names{"parameters", "accumulators"}));
  using Shape = std::vector<int64_t>;
  EXPECT_EQ(layer.variable_shape("adam", "velocities"), (Shape{7, 3}));
  EXPECT_EQ(layer.variable_shape("rowwise", "accumulators"), (Shape{7}));
  EXPECT_EQ(layer.variable_shape("rowwise", "parameters"), (Shape{7, 3}));
  const std::map<std::string, float> initial = {
      {"adagrad/accumulators", 0.3f}, {"momentum/accumulators", 0.0f},
      {"momentum/momenta", 0.0f},     {"adam/momenta", 0.0f},
      {"adam/velocities", 0.0f},      {"ftrl/accumulators", 0.2f},
      {"ftrl/linears", 0.0f},         {"rowwise/accumulators", 0.4f},
      {"global/accumulators", 0.6f}};
  const Snapshot snapshot = snapshot_of(layer);
  for (const auto& [name, value] : initial) {
    for (float element : snapshot.variables.at(name)) EXPECT_EQ(element, value) << name;
  }
}

TEST(EmbeddingVariables, WriteReadRoundTripAndTrainingFromWrittenState) {
  Embedding layer = one_table_per_optimizer();
  std::mt19937_64 rng(99);
  for (const TableConfig& table : layer.tables()) {
    for (const std::string& name : layer.variable_names(table.name)) {
      std::vector<float> values = test::random_gradient(
          rng, static_cast<size_t>(product(layer.variable_shape(table.name, name))));
      if (name != "parameters" && name != "linears" && name != "momenta") {
        for (float& value : values) value = std::abs(value);  // accumulators are >= 0
      }
      layer.write_variable(table.name, name, values);
      EXPECT_TRUE(bitwise_equal(read(layer, table.name, name), values))
          << table.name << "/" << name;
    }
  }
  // The reference starts from the written state and trains alongside.
  ReferenceEmbedding reference = ReferenceEmbedding::like(layer);
  const Snapshot written = snapshot_of(layer);
  for (const auto& [key, values] : written.variables) {
    const size_t slash = key.find('/');
    reference.set_variable(key.substr(0, slash), key.substr(slash + 1), values);
  }
  BatchPair batch;
  for (int step = 0; step < 5; ++step) {
    std::vector<OwnedInput> inputs;
    for (size_t f = 0; f < layer.features().size(); ++f) {
      inputs.push_back(test::random_two_dim_input(rng, 4, 7, 3));
    }
    const auto activations = lookup_both(layer, reference, inputs, batch);
    apply_both(layer, reference, batch, random_gradients(rng, activations));
  }
  expect_matches_reference(layer, reference);
}

TEST(EmbeddingVariables, WrittenParametersAreLookedUp) {
  Embedding layer = one_table_per_optimizer();
  std::vector<float> values(21);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f;
  layer.write_variable("sgd", "parameters", values);
  std::vector<OwnedInput> inputs;
  for (size_t f = 0; f < layer.features().size(); ++f)
    inputs.push_back(OwnedInput::dense({2, 6}, {2}));
  const auto activations = look_up(layer, inputs);
  expect_floats_eq(activations[0], {3.0f, 3.5f, 4.0f, 9.0f, 9.5f, 10.0f}, "sgd rows 2 and 6");
}

TEST(EmbeddingVariables, UnknownNamesAndWrongSizesAreRejected) {
  Embedding layer = one_table_per_optimizer();
  const Snapshot before = snapshot_of(layer);
  std::vector<float> buffer(21, 1.0f);
  std::vector<float> short_buffer(20, 1.0f);
  std::vector<float> rowwise_buffer(7, 1.0f);
  EXPECT_THAT(
      error_of<InvalidArgument>([&] { layer.read_variable("music", "parameters", buffer); }),
      HasSubstr("music"));
  EXPECT_THAT(error_of<InvalidArgument>([&] { layer.variable_names("music"); }),
              HasSubstr("music"));
  EXPECT_THAT(error_of<InvalidArgument>([&] { layer.variable_shape("adagrad", "momenta"); }),
              HasSubstr("momenta"));
  EXPECT_THAT(
      error_of<InvalidArgument>([&] { layer.read_variable("sgd", "accumulators", buffer); }),
      HasSubstr("accumulators"));
  EXPECT_THAT(
      error_of<InvalidArgument>([&] { layer.read_variable("adam", "parameters", short_buffer); }),
      HasSubstr("20"));
  error_of<InvalidArgument>([&] { layer.read_variable("rowwise", "accumulators", buffer); });
  layer.read_variable("rowwise", "accumulators", rowwise_buffer);
  EXPECT_THAT(
      error_of<InvalidArgument>([&] { layer.write_variable("adam", "momenta", short_buffer); }),
      HasSubstr("20"));
  error_of<InvalidArgument>([&] { layer.write_variable("rowwise", "accumulators", buffer); });
  error_of<InvalidArgument>([&] { layer.write_variable("adam", "velocity", buffer); });
  std::vector<float> with_nan = buffer;
  with_nan[20] = kNaN;
  error_of<InvalidArgument>([&] { layer.write_variable("ftrl", "linears", with_nan); });
  with_nan[20] = kInf;
  error_of<InvalidArgument>([&] { layer.write_variable("sgd", "parameters", with_nan); });
  EXPECT_TRUE(unchanged(before, layer));
}

TEST(EmbeddingVariables, VariableDataIsTheStorageItself) {
  Embedding layer = one_table_per_optimizer();
  std::mt19937_64 rng(7);
  std::vector<std::pair<const float*, const float*>> ranges;
  for (const TableConfig& table : layer.tables()) {
    for (const std::string& name : layer.variable_names(table.name)) {
      SCOPED_TRACE(table.name + "/" + name);
      const std::span<float> data = layer.variable_data(table.name, name);
      ASSERT_EQ(static_cast<int64_t>(data.size()), product(layer.variable_shape(table.name, name)));
      EXPECT_EQ(layer.variable_data(table.name, name).data(), data.data()) << "a stable view";
      const Embedding& const_layer = layer;
      EXPECT_EQ(const_layer.variable_data(table.name, name).data(), data.data()) << "const view";
      EXPECT_EQ(const_layer.variable_data(table.name, name).size(), data.size());
      EXPECT_TRUE(bitwise_equal(std::vector<float>(data.begin(), data.end()),
                                read(layer, table.name, name)));
      ranges.emplace_back(data.data(), data.data() + data.size());
      // A write through the view is what read_variable returns; write_variable shows through it.
      std::vector<float> values = test::random_gradient(rng, data.size());
      for (float& value : values) value = std::abs(value);  // valid for every slot
      std::copy(values.begin(), values.end(), data.begin());
      EXPECT_TRUE(bitwise_equal(read(layer, table.name, name), values));
      for (float& value : values) value *= 2.0f;
      layer.write_variable(table.name, name, values);
      EXPECT_TRUE(bitwise_equal(std::vector<float>(data.begin(), data.end()), values));
    }
  }
  // Every variable has memory of its own.
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    EXPECT_LE(ranges[i - 1].second, ranges[i].first) << "variables " << i - 1 << " and " << i;
  }
  EXPECT_EQ(layer.variable_data("rowwise", "accumulators").size(), 7u);
  EXPECT_EQ(layer.variable_data("adam", "velocities").size(), 21u);
  EXPECT_THAT(error_of<InvalidArgument>([&] { layer.variable_data("music", "parameters"); }),
              HasSubstr("music"));
  EXPECT_THAT(error_of<InvalidArgument>([&] { layer.variable_data("sgd", "accumulators"); }),
              HasSubstr("accumulators"));
  const Embedding& const_layer = layer;
  EXPECT_THAT(error_of<InvalidArgument>([&] { const_layer.variable_data("music", "parameters"); }),
              HasSubstr("music"));
}

TEST(EmbeddingVariables, VariableDataIsLookedUpTrainedAndMovedWithTheLayer) {
  Embedding layer = one_table_per_optimizer();
  const std::span<float> parameters = layer.variable_data("sgd", "parameters");
  const std::span<float> accumulators = layer.variable_data("global", "accumulators");
  for (size_t i = 0; i < parameters.size(); ++i) parameters[i] = static_cast<float>(i) * 0.5f;
  std::vector<OwnedInput> inputs;
  for (size_t f = 0; f < layer.features().size(); ++f) {
    inputs.push_back(OwnedInput::dense({2, 6}, {2}));
  }
  LookupBatch batch;
  const auto activations = look_up(layer, inputs, batch);
  expect_floats_eq(activations[0], {3.0f, 3.5f, 4.0f, 9.0f, 9.5f, 10.0f}, "sgd rows 2 and 6");
  // apply_gradients updates the memory the views show (SGD lr 0.1, gradient 1: rows 2, 6 - 0.1).
  std::vector<std::vector<float>> ones;
  for (const auto& activation : activations) ones.emplace_back(activation.size(), 1.0f);
  train(layer, batch, ones);
  for (size_t i = 0; i < parameters.size(); ++i) {
    const size_t row = i / 3;
    const float expected = static_cast<float>(i) * 0.5f - (row == 2 || row == 6 ? 0.1f : 0.0f);
    EXPECT_FLOAT_EQ(parameters[i], expected) << i;
  }
  EXPECT_TRUE(bitwise_equal(std::vector<float>(parameters.begin(), parameters.end()),
                            read(layer, "sgd", "parameters")));
  EXPECT_TRUE(bitwise_equal(std::vector<float>(accumulators.begin(), accumulators.end()),
                            read(layer, "global", "accumulators")));
  EXPECT_FLOAT_EQ(accumulators[2 * 3], 0.6f + 1.0f);  // Adagrad: 0.6 + g^2
  // The views stay valid in the Embedding the layer is moved into, and alias its storage.
  Embedding moved = std::move(layer);
  EXPECT_EQ(moved.variable_data("sgd", "parameters").data(), parameters.data());
  parameters[6] = 42.0f;  // row 2
  EXPECT_EQ(read(moved, "sgd", "parameters")[6], 42.0f);
  EXPECT_EQ(look_up(moved, inputs)[0][0], 42.0f);
}

// ------------------------------------------------------------------------------------------------
// Quantization (forward only, straight-through backward) against the reference.

TEST(EmbeddingQuantization, ForwardQuantizedBackwardStraightThrough) {
  Embedding layer(
      {{.name = "q",
        .vocabulary_size = 30,
        .dim = 4,
        .initializer = TruncatedNormal{.stddev = 0.4f},
        .optimizer = Adagrad{.learning_rate = 0.1f},
        .combiner = Combiner::kSqrtn,
        .quantization_config = QuantizationConfig{9, -0.5f, 0.5f}},
       {.name = "plain", .vocabulary_size = 10, .dim = 3}},
      {{.name = "a", .table = "q"}, {.name = "b", .table = "q"}, {.name = "c", .table = "plain"}},
      {.optimizer = Sgd{.learning_rate = 0.1f}, .num_threads = 2, .seed = 3});
  ReferenceEmbedding reference = ReferenceEmbedding::like(layer);
  std::mt19937_64 rng(4242);
  SCOPED_TRACE("seed 4242");
  BatchPair batch;
  for (int step = 0; step < 20; ++step) {
    std::vector<OwnedInput> inputs;
    inputs.push_back(test::random_two_dim_input(rng, 5, 30, 4));
    inputs.push_back(test::random_two_dim_input(rng, 5, 30, 4));
    inputs.push_back(test::random_two_dim_input(rng, 5, 10, 4));
    const auto activations = lookup_both(layer, reference, inputs, batch);
    apply_both(layer, reference, batch, random_gradients(rng, activations));
  }
  expect_matches_reference(layer, reference);
}

}  // namespace
}  // namespace recemb

namespace recemb {
namespace {

// Batches large enough that lookup and apply_gradients run on the worker threads (small ones run
// on the calling thread): activations and every variable must be bitwise identical for 1, 2 and 3
// threads, including with several tables and non-lazy Adam's dense pass.
TEST(EmbeddingDeterminism, LargeBatchesAreBitwiseIdenticalAcrossThreadCounts) {
  const uint64_t seed = 2024;
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const int64_t batch_size = 2048, bag = 12;
  std::mt19937_64 random(seed);
  std::uniform_int_distribution<int64_t> id(0, 4999);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::vector<int64_t> ids(static_cast<size_t>(batch_size * bag)), ids2(ids.size());
  std::vector<float> weights(ids.size()), gradient(static_cast<size_t>(batch_size * 8)),
      gradient2(gradient.size());
  for (auto& x : ids) x = id(random);
  for (auto& x : ids2) x = id(random) % 3000;
  for (auto& x : weights) x = value(random);
  for (auto& x : gradient) x = value(random);
  for (auto& x : gradient2) x = value(random);

  auto run = [&](int threads) {
    Embedding layer(
        {{.name = "a", .vocabulary_size = 5000, .dim = 8, .combiner = Combiner::kSqrtn},
         {.name = "b",
          .vocabulary_size = 3000,
          .dim = 8,
          .optimizer = Adam{.learning_rate = 0.01f, .lazy_adam = false}}},
        {{.name = "x", .table = "a"}, {.name = "y", .table = "b"}},
        {.optimizer = Adagrad{.learning_rate = 0.1f}, .num_threads = threads, .seed = 5});
    std::vector<float> out(gradient.size()), out2(gradient.size()), all;
    const std::vector<FeatureInput> inputs{
        DenseIds{
            .ids = std::span<const int64_t>(ids), .shape = {batch_size, bag}, .weights = weights},
        DenseIds{.ids = std::span<const int64_t>(ids2), .shape = {batch_size, bag}}};
    const std::vector<std::span<float>> activations{out, out2};
    const std::vector<std::span<const float>> gradients{gradient, gradient2};
    for (int step = 0; step < 3; ++step) {
      LookupBatch batch;
      layer.lookup(inputs, activations, batch);
      all.insert(all.end(), out.begin(), out.end());
      all.insert(all.end(), out2.begin(), out2.end());
      layer.apply_gradients(batch, gradients);
    }
    for (const char* table : {"a", "b"}) {
      for (const std::string& variable : layer.variable_names(table)) {
        const std::span<float> data = layer.variable_data(table, variable);
        all.insert(all.end(), data.begin(), data.end());
      }
    }
    return all;
  };
  const std::vector<float> one = run(1);
  for (const int threads : {2, 3}) {
    const std::vector<float> many = run(threads);
    ASSERT_EQ(one.size(), many.size());
    EXPECT_EQ(std::memcmp(one.data(), many.data(), one.size() * sizeof(float)), 0)
        << threads << " threads";
  }
}

}  // namespace
}  // namespace recemb
