// End-to-end tests of recemb::Embedding (src/embedding/embedding.cc) against the independent
// float64 reference in tests/reference/: every optimizer x combiner over random steps,
// determinism across thread counts, and quantization. The other aspects are in
// embedding_<aspect>_test.cc beside this file: fixtures (TF's goldens), errors (bad input and the
// LookupBatch contract), config (config errors and initializers) and variables (the variable API).
// The backward step's own tests are in apply_stage_test.cc.
#include "recemb/embedding.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "recemb/recemb.h"

#include "reference/reference_embedding.h"
#include "support/thread_pool.h"
#include "testing/embedding_calls.h"
#include "testing/error_of.h"
#include "testing/random_batches.h"
#include "testing/reference_steps.h"
#include "testing/thread_per_index_executor.h"

namespace recemb {
namespace {

using reference::ReferenceEmbedding;
using test::apply_both;
using test::BatchPair;
using test::bitwise_equal;
using test::expect_matches_reference;
using test::lookup_both;
using test::OwnedInput;
using test::product;
using test::random_gradients;
using test::Snapshot;
using test::snapshot_of;

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
    // The configuration of TF's tpu_embedding_v2_correctness tests.
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

  auto run = [&](int threads, std::shared_ptr<ParallelExecutor> executor = nullptr) {
    Embedding layer({{.name = "a", .vocabulary_size = 5000, .dim = 8, .combiner = Combiner::kSqrtn},
                     {.name = "b",
                      .vocabulary_size = 3000,
                      .dim = 8,
                      .optimizer = Adam{.learning_rate = 0.01f, .lazy_adam = false}}},
                    {{.name = "x", .table = "a"}, {.name = "y", .table = "b"}},
                    {.optimizer = Adagrad{.learning_rate = 0.1f},
                     .num_threads = threads,
                     .executor = std::move(executor),
                     .seed = 5});
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
  // On an executor's threads (recemb/executor.h): 3 threads started in a shuffled order, and a
  // fourth whose index is beyond max_threads (it runs nothing).
  auto executor = std::make_shared<test::ThreadPerIndexExecutor>(3, std::vector<int>{2, 0, 7, 1});
  const std::vector<float> on_executor = run(0, executor);
  ASSERT_EQ(one.size(), on_executor.size());
  EXPECT_EQ(std::memcmp(one.data(), on_executor.data(), one.size() * sizeof(float)), 0);
  EXPECT_GT(executor->calls.load(), 0);
  // On a support::ThreadPool of 3 threads that another thread runs loops of its own on at the same
  // time, as the trainer's dense layers do (support/thread_pool.h).
  auto shared = std::make_shared<support::ThreadPool>(3);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> other_loops{0};
  std::thread other([&] {
    std::vector<int64_t> values(64);
    while (!stop.load()) {
      shared->parallel_for(64,
                           [&](int64_t task, int) { values[static_cast<size_t>(task)] = task; });
      other_loops.fetch_add(1);
    }
  });
  const std::vector<float> on_shared = run(0, shared);
  stop = true;
  other.join();
  ASSERT_EQ(one.size(), on_shared.size());
  EXPECT_EQ(std::memcmp(one.data(), on_shared.data(), one.size() * sizeof(float)), 0);
  EXPECT_GT(other_loops.load(), 0);
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
