// DlrmDenseModel against the float64 plain-loop reference (dense_reference.h): the loss, central
// finite differences for every parameter block (all entries or a sample) and for the embedding
// gradients, predictions, a numerically extreme logit; input and config validation; workspace
// reuse and the absence of allocations in steady state; and learning on two separable toy
// problems.
#include "dlrm/dlrm_dense_model.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <gtest/gtest.h>
#include <limits>
#include <memory>
#include <new>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "recemb/error.h"

#include "dlrm/dense_optimizer.h"
#include "dlrm/dense_reference.h"

// Counts the program's calls of the global operator new (every std::vector growth). Eigen's
// buffers come from malloc instead; Debug builds check those with Eigen's own switch (eigen.h,
// DenseKernels::allow_heap).
namespace {
std::atomic<int64_t> g_allocations{0};
}  // namespace

// (Not inlined: GCC would otherwise see free() of operator new's memory and warn.)
[[gnu::noinline]] void* operator new(std::size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* pointer = std::malloc(size == 0 ? 1 : size)) return pointer;
  throw std::bad_alloc();
}
[[gnu::noinline]] void operator delete(void* pointer) noexcept { std::free(pointer); }
[[gnu::noinline]] void operator delete(void* pointer, std::size_t) noexcept { std::free(pointer); }

namespace recemb::dlrm {
namespace {

using reference::central_difference;
using reference::random_floats;
using reference::to_double;

// One batch of inputs, owned, with the span views train_step takes.
struct Batch {
  std::vector<float> dense;
  std::vector<float> labels;
  std::vector<std::vector<float>> embeddings;
  std::vector<std::vector<float>> embedding_gradients;

  std::vector<std::span<const float>> embedding_views() const {
    return {embeddings.begin(), embeddings.end()};
  }
  std::vector<std::span<float>> gradient_views() {
    return {embedding_gradients.begin(), embedding_gradients.end()};
  }
  std::vector<std::vector<double>> embeddings_double() const {
    std::vector<std::vector<double>> result;
    for (const std::vector<float>& e : embeddings) result.push_back(to_double(e));
    return result;
  }
};

// Labels are 0, 1 and, for every fourth example, a soft label in (0, 1).
Batch random_batch(const DlrmDenseConfig& config, int64_t batch_size, std::mt19937_64& random) {
  Batch batch;
  batch.dense = random_floats(random, static_cast<size_t>(batch_size * config.num_dense_features),
                              -1.5f, 1.5f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (int64_t b = 0; b < batch_size; ++b) {
    batch.labels.push_back(b % 4 == 3 ? unit(random) : (unit(random) < 0.5f ? 0.0f : 1.0f));
  }
  const size_t embedding_size = static_cast<size_t>(batch_size * config.embedding_dim);
  for (int64_t f = 0; f < config.num_sparse_features; ++f) {
    batch.embeddings.push_back(random_floats(random, embedding_size, -0.7f, 0.7f));
    batch.embedding_gradients.emplace_back(embedding_size, -7.0f);
  }
  return batch;
}

reference::DlrmShape shape_of(const DlrmDenseConfig& config) {
  return {.num_dense_features = config.num_dense_features,
          .embedding_dim = config.embedding_dim,
          .bottom_mlp = config.bottom_mlp,
          .top_mlp = config.top_mlp};
}

DlrmDenseConfig small_config() {
  return {.num_dense_features = 3,
          .num_sparse_features = 3,
          .embedding_dim = 4,
          .bottom_mlp = {5, 4},
          .top_mlp = {6, 3},
          .seed = 17};
}

struct ModelCase {
  std::string name;
  DlrmDenseConfig config;
  int64_t batch_size;
  int64_t samples_per_block;  // parameter entries checked per block; 0 = all
  int64_t embedding_samples;  // embedding-gradient entries checked; 0 = all
};

// Each case on every instruction set this CPU runs (dense_isa.h).
class DlrmDenseModelTest : public ::testing::TestWithParam<std::tuple<ModelCase, DenseIsa>> {
 protected:
  const ModelCase& model_case() const { return std::get<0>(GetParam()); }
  // The case's config on the instruction set of the test.
  DlrmDenseConfig config() const {
    DlrmDenseConfig config = model_case().config;
    config.dense_isa = std::get<1>(GetParam());
    return config;
  }
};

std::string isa_test_name(const ::testing::TestParamInfo<DenseIsa>& test_info) {
  return std::string(dense_isa_name(test_info.param));
}

TEST_P(DlrmDenseModelTest, LossMatchesReference) {
  const ModelCase& c = model_case();
  std::mt19937_64 random(41);
  DlrmDenseModel model(config());
  Batch batch = random_batch(c.config, c.batch_size, random);
  const float loss =
      model.train_step(batch.dense, batch.labels, batch.embedding_views(), batch.gradient_views());
  std::vector<bool> signs;
  const double expected = reference::dlrm_loss(shape_of(c.config), to_double(model.parameters()),
                                               to_double(batch.dense), to_double(batch.labels),
                                               batch.embeddings_double(), signs);
  EXPECT_NEAR(loss, expected, 2e-5 * (1.0 + expected));
  EXPECT_GT(expected, 0.1);  // a loss of a random model, not a degenerate one
}

TEST_P(DlrmDenseModelTest, GradientsMatchFiniteDifferencesOfReference) {
  const ModelCase& c = model_case();
  const uint64_t seed = 42;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 random(seed);
  DlrmDenseModel model(config());
  Batch batch = random_batch(c.config, c.batch_size, random);
  model.train_step(batch.dense, batch.labels, batch.embedding_views(), batch.gradient_views());
  const std::span<const float> gradients = model.gradients();

  const reference::DlrmShape shape = shape_of(c.config);
  std::vector<double> parameters = to_double(model.parameters());
  const std::vector<double> dense = to_double(batch.dense);
  const std::vector<double> labels = to_double(batch.labels);
  std::vector<std::vector<double>> embeddings = batch.embeddings_double();
  const auto loss = [&](std::vector<bool>& signs) {
    return reference::dlrm_loss(shape, parameters, dense, labels, embeddings, signs);
  };
  int checked = 0;
  int kinks = 0;
  const auto expect_derivative = [&](double& variable, float analytic, const std::string& what) {
    bool kink = false;
    const double numeric = central_difference(loss, variable, 1e-5, kink);
    if (kink) {
      ++kinks;
      return;
    }
    ++checked;
    EXPECT_NEAR(analytic, numeric, 1e-3 * std::abs(numeric) + 2e-5) << what;
  };

  for (const ParameterBlock& block : model.parameter_blocks()) {
    int64_t size = 1;
    for (int64_t extent : block.shape) size *= extent;
    const int64_t samples = c.samples_per_block == 0 ? size : std::min(size, c.samples_per_block);
    std::uniform_int_distribution<int64_t> pick(0, size - 1);
    for (int64_t s = 0; s < samples; ++s) {
      const int64_t i = block.offset + (c.samples_per_block == 0 ? s : pick(random));
      expect_derivative(parameters[i], gradients[i], block.name + " entry " + std::to_string(i));
    }
  }
  const size_t embedding_size = batch.embeddings[0].size();
  const int64_t total = c.config.num_sparse_features * static_cast<int64_t>(embedding_size);
  const int64_t samples = c.embedding_samples == 0 ? total : c.embedding_samples;
  std::uniform_int_distribution<int64_t> pick(0, total - 1);
  for (int64_t s = 0; s < samples; ++s) {
    const int64_t flat = c.embedding_samples == 0 ? s : pick(random);
    const size_t f = static_cast<size_t>(flat) / embedding_size;
    const size_t i = static_cast<size_t>(flat) % embedding_size;
    expect_derivative(embeddings[f][i], batch.embedding_gradients[f][i],
                      "embedding " + std::to_string(f) + " value " + std::to_string(i));
  }
  EXPECT_GT(checked, 0);
  EXPECT_LE(kinks, checked / 20) << "too many finite differences across a ReLU kink";
}

TEST_P(DlrmDenseModelTest, PredictIsTheSigmoidOfTheReferenceLogits) {
  const ModelCase& c = model_case();
  std::mt19937_64 random(43);
  DlrmDenseModel model(config());
  const Batch batch = random_batch(c.config, c.batch_size, random);
  std::vector<float> probabilities(static_cast<size_t>(c.batch_size), -1.0f);
  model.predict(batch.dense, batch.embedding_views(), probabilities);
  std::vector<bool> signs;
  const std::vector<double> logits =
      reference::dlrm_logits(shape_of(c.config), to_double(model.parameters()),
                             to_double(batch.dense), batch.embeddings_double(), signs);
  for (size_t b = 0; b < logits.size(); ++b) {
    EXPECT_NEAR(probabilities[b], 1.0 / (1.0 + std::exp(-logits[b])), 1e-6) << "example " << b;
  }
  EXPECT_TRUE(std::all_of(model.gradients().begin(), model.gradients().end(),
                          [](float g) { return g == 0.0f; }));
}

INSTANTIATE_TEST_SUITE_P(
    Configs, DlrmDenseModelTest,
    ::testing::Combine(::testing::Values(ModelCase{.name = "Small",
                                                   .config = small_config(),
                                                   .batch_size = 5,
                                                   .samples_per_block = 0,
                                                   .embedding_samples = 0},
                                         ModelCase{.name = "OneSparseFeatureNoTopHidden",
                                                   .config = {.num_dense_features = 2,
                                                              .num_sparse_features = 1,
                                                              .embedding_dim = 3,
                                                              .bottom_mlp = {3},
                                                              .top_mlp = {},
                                                              .seed = 3},
                                                   .batch_size = 9,
                                                   .samples_per_block = 0,
                                                   .embedding_samples = 0},
                                         // Spans two row blocks of the MLPs and a partial block of
                                         // the interaction.
                                         ModelCase{.name = "BatchOf300",
                                                   .config = small_config(),
                                                   .batch_size = 300,
                                                   .samples_per_block = 6,
                                                   .embedding_samples = 60},
                                         ModelCase{.name = "Default",
                                                   .config = {},
                                                   .batch_size = 3,
                                                   .samples_per_block = 8,
                                                   .embedding_samples = 120}),
                       ::testing::ValuesIn(supported_dense_isas())),
    [](const ::testing::TestParamInfo<std::tuple<ModelCase, DenseIsa>>& test_info) {
      return std::get<0>(test_info.param).name + "_" +
             std::string(dense_isa_name(std::get<1>(test_info.param)));
    });

TEST(DlrmDenseModelLayoutTest, DefaultModelHasDlrmShapes) {
  const DlrmDenseModel model({});
  // Bottom 13 -> 64 -> 16; top (16 + 351) -> 64 -> 32 -> 1.
  const int64_t bottom = (13 + 1) * 64 + (64 + 1) * 16;
  const int64_t top = (367 + 1) * 64 + (64 + 1) * 32 + (32 + 1) * 1;
  EXPECT_EQ(model.num_parameters(), bottom + top);
  EXPECT_EQ(model.parameters().size(), model.gradients().size());
  const std::vector<ParameterBlock> blocks = model.parameter_blocks();
  ASSERT_EQ(blocks.size(), 10u);
  EXPECT_EQ(blocks[0].name, "bottom_mlp/layer_0/weights");
  EXPECT_EQ(blocks[0].shape, (std::vector<int64_t>{13, 64}));
  EXPECT_EQ(blocks[4].name, "top_mlp/layer_0/weights");
  EXPECT_EQ(blocks[4].shape, (std::vector<int64_t>{367, 64}));
  EXPECT_EQ(blocks[4].offset, bottom);
  EXPECT_EQ(blocks[9].name, "top_mlp/layer_2/bias");
  EXPECT_EQ(blocks[9].shape, (std::vector<int64_t>{1}));
  EXPECT_EQ(blocks[9].offset + 1, model.num_parameters());
}

// parameter_count gives the parameter count of the model a config builds, without building it,
// and refuses the configs the constructor refuses.
TEST(DlrmDenseModelLayoutTest, ParameterCountIsThatOfTheBuiltModel) {
  std::mt19937_64 random(12);
  for (int i = 0; i < 50; ++i) {
    const auto width = [&] { return 1 + static_cast<int64_t>(random() % 40); };
    DlrmDenseConfig config{
        .num_dense_features = width(), .num_sparse_features = width(), .embedding_dim = width()};
    config.bottom_mlp.resize(1 + random() % 3);
    for (int64_t& w : config.bottom_mlp) w = width();
    config.bottom_mlp.back() = config.embedding_dim;
    config.top_mlp.resize(random() % 3);
    for (int64_t& w : config.top_mlp) w = width();
    EXPECT_EQ(DlrmDenseModel::parameter_count(config), DlrmDenseModel(config).num_parameters());
  }
  EXPECT_EQ(DlrmDenseModel::parameter_count({}), DlrmDenseModel({}).num_parameters());
  EXPECT_THROW(DlrmDenseModel::parameter_count({.embedding_dim = 8}), InvalidArgument);
  EXPECT_THROW(DlrmDenseModel::parameter_count({.num_dense_features = 0}), InvalidArgument);
}

TEST(DlrmDenseModelLayoutTest, InitializationDependsOnlyOnTheSeed) {
  const DlrmDenseModel a({.seed = 7});
  const DlrmDenseModel b({.seed = 7});
  const DlrmDenseModel c({.seed = 8});
  EXPECT_TRUE(std::equal(a.parameters().begin(), a.parameters().end(), b.parameters().begin()));
  EXPECT_FALSE(std::equal(a.parameters().begin(), a.parameters().end(), c.parameters().begin()));
}

// Logits of +-60 and beyond: the textbook log(sigmoid) form would give log(0) in float; the model's
// loss and gradients stay finite and exact.
TEST(DlrmDenseModelNumericsTest, ExtremeLogitsGiveExactFiniteLossAndGradients) {
  for (const float bias : {60.0f, -60.0f, 100.0f}) {
    SCOPED_TRACE("logit bias " + std::to_string(bias));
    const DlrmDenseConfig config = small_config();
    std::mt19937_64 random(44);
    DlrmDenseModel model(config);
    const ParameterBlock logit_bias = model.parameter_blocks().back();
    model.parameters()[logit_bias.offset] = bias;
    Batch batch = random_batch(config, 8, random);
    const float loss = model.train_step(batch.dense, batch.labels, batch.embedding_views(),
                                        batch.gradient_views());

    std::vector<bool> signs;
    const std::vector<double> logits =
        reference::dlrm_logits(shape_of(config), to_double(model.parameters()),
                               to_double(batch.dense), batch.embeddings_double(), signs);
    double expected = 0.0;
    double expected_bias_gradient = 0.0;
    for (size_t b = 0; b < logits.size(); ++b) {
      const double s = logits[b];
      const double y = batch.labels[b];
      expected += std::max(s, 0.0) - s * y + std::log1p(std::exp(-std::abs(s)));
      expected_bias_gradient += 1.0 / (1.0 + std::exp(-s)) - y;
    }
    expected /= static_cast<double>(logits.size());
    expected_bias_gradient /= static_cast<double>(logits.size());
    EXPECT_NEAR(loss, expected, 1e-5 * expected);
    EXPECT_NEAR(model.gradients()[logit_bias.offset], expected_bias_gradient, 1e-6);
    EXPECT_TRUE(std::all_of(model.gradients().begin(), model.gradients().end(),
                            [](float g) { return std::isfinite(g); }));
  }
}

// Averaging: the same examples twice in one batch give the same mean loss and gradients.
TEST(DlrmDenseModelNumericsTest, LossAndGradientsAreBatchMeans) {
  const DlrmDenseConfig config = small_config();
  std::mt19937_64 random(45);
  Batch single = random_batch(config, 6, random);
  Batch doubled = single;
  doubled.dense.insert(doubled.dense.end(), single.dense.begin(), single.dense.end());
  doubled.labels.insert(doubled.labels.end(), single.labels.begin(), single.labels.end());
  for (size_t f = 0; f < single.embeddings.size(); ++f) {
    doubled.embeddings[f].insert(doubled.embeddings[f].end(), single.embeddings[f].begin(),
                                 single.embeddings[f].end());
    doubled.embedding_gradients[f].resize(2 * single.embedding_gradients[f].size());
  }
  DlrmDenseModel a(config);
  DlrmDenseModel b(config);
  const float loss_single =
      a.train_step(single.dense, single.labels, single.embedding_views(), single.gradient_views());
  const float loss_doubled = b.train_step(doubled.dense, doubled.labels, doubled.embedding_views(),
                                          doubled.gradient_views());
  EXPECT_NEAR(loss_single, loss_doubled, 1e-6);
  for (size_t i = 0; i < a.gradients().size(); ++i) {
    EXPECT_NEAR(a.gradients()[i], b.gradients()[i], 1e-6 + 1e-5 * std::abs(a.gradients()[i]));
  }
  // Each copy of an example gets half of its single-batch embedding gradient.
  const size_t n = single.embedding_gradients[0].size();
  for (size_t f = 0; f < single.embedding_gradients.size(); ++f) {
    for (size_t i = 0; i < n; ++i) {
      EXPECT_NEAR(doubled.embedding_gradients[f][i], 0.5f * single.embedding_gradients[f][i], 1e-7);
      EXPECT_NEAR(doubled.embedding_gradients[f][n + i], 0.5f * single.embedding_gradients[f][i],
                  1e-7);
    }
  }
}

// The workspace and determinism tests, on every instruction set this CPU runs.
class DlrmDenseModelWorkspaceTest : public ::testing::TestWithParam<DenseIsa> {};
INSTANTIATE_TEST_SUITE_P(InstructionSets, DlrmDenseModelWorkspaceTest,
                         ::testing::ValuesIn(supported_dense_isas()), isa_test_name);

// A smaller batch after a larger one reuses the workspace: results equal a fresh model's.
TEST_P(DlrmDenseModelWorkspaceTest, ResultsDoNotDependOnEarlierBatches) {
  DlrmDenseConfig config = small_config();
  config.dense_isa = GetParam();
  std::mt19937_64 random(46);
  Batch large = random_batch(config, 40, random);
  Batch batch = random_batch(config, 7, random);
  Batch fresh_batch = batch;
  DlrmDenseModel used(config);
  DlrmDenseModel fresh(config);
  used.train_step(large.dense, large.labels, large.embedding_views(), large.gradient_views());
  const float used_loss =
      used.train_step(batch.dense, batch.labels, batch.embedding_views(), batch.gradient_views());
  const float fresh_loss =
      fresh.train_step(fresh_batch.dense, fresh_batch.labels, fresh_batch.embedding_views(),
                       fresh_batch.gradient_views());
  EXPECT_EQ(used_loss, fresh_loss);
  EXPECT_TRUE(
      std::equal(used.gradients().begin(), used.gradients().end(), fresh.gradients().begin()));
  EXPECT_EQ(batch.embedding_gradients, fresh_batch.embedding_gradients);
}

// The same inputs at every alignment give bitwise the same loss and gradients.
TEST_P(DlrmDenseModelWorkspaceTest, ResultsDoNotDependOnArrayAlignment) {
  const DlrmDenseConfig config = {.dense_isa = GetParam()};
  std::mt19937_64 random(52);
  const Batch batch = random_batch(config, 37, random);
  DlrmDenseModel model(config);
  std::vector<float> first;  // loss, gradients(), embedding gradients, concatenated
  for (int shift = 0; shift < reference::kNumShifts; ++shift) {
    SCOPED_TRACE("shift " + std::to_string(shift));
    std::vector<std::vector<float>> storage(2 + 2 * batch.embeddings.size());
    const std::span<float> dense = reference::place(storage[0], batch.dense, shift);
    const std::span<float> labels = reference::place(storage[1], batch.labels, (shift * 3) % 16);
    std::vector<std::span<const float>> embeddings;
    std::vector<std::span<float>> embedding_gradients;
    for (size_t f = 0; f < batch.embeddings.size(); ++f) {
      embeddings.push_back(reference::place(storage[2 + 2 * f], batch.embeddings[f],
                                            (shift + static_cast<int>(f)) % 16));
      embedding_gradients.push_back(reference::place(storage[3 + 2 * f], batch.embeddings[f],
                                                     (shift * 5 + static_cast<int>(f)) % 16));
    }
    std::vector<float> results = {model.train_step(dense, labels, embeddings, embedding_gradients)};
    results.insert(results.end(), model.gradients().begin(), model.gradients().end());
    for (const std::span<float> g : embedding_gradients) {
      results.insert(results.end(), g.begin(), g.end());
    }
    if (shift == 0) {
      first = results;
    } else {
      EXPECT_EQ(results, first);
    }
  }
}

TEST_P(DlrmDenseModelWorkspaceTest, NoAllocationOnceBuffersHaveGrown) {
  for (const int num_threads : {1, 2}) {
    SCOPED_TRACE(std::to_string(num_threads) + " threads");
    // DLRM's default shapes
    const DlrmDenseConfig config = {.num_threads = num_threads, .dense_isa = GetParam()};
    std::mt19937_64 random(47);
    DlrmDenseModel model(config);
    Batch batch = random_batch(config, 1000, random);  // 4 row blocks of the MLPs, the last partial
    Batch smaller = random_batch(config, 300, random);
    const std::vector<std::span<const float>> embeddings = batch.embedding_views();
    const std::vector<std::span<float>> gradients = batch.gradient_views();
    const std::vector<std::span<const float>> smaller_embeddings = smaller.embedding_views();
    const std::vector<std::span<float>> smaller_gradients = smaller.gradient_views();
    std::vector<float> probabilities(300);
    model.train_step(batch.dense, batch.labels, embeddings, gradients);

    const int64_t before = g_allocations.load();
    const DenseKernels& kernels = dense_kernels(GetParam());
    kernels.allow_heap(false);  // Eigen's heap use now aborts the test (Debug builds)
    model.train_step(batch.dense, batch.labels, embeddings, gradients);
    model.train_step(smaller.dense, smaller.labels, smaller_embeddings, smaller_gradients);
    model.predict(smaller.dense, smaller_embeddings, probabilities);
    kernels.allow_heap(true);
    EXPECT_EQ(g_allocations.load(), before);
  }
}

// Several steps of training (train_step, then Adam) on 1, 2 and 3 threads give bitwise the same
// losses, parameters, embedding gradients and probabilities, for batches of several row blocks of
// the MLPs, the last partial.
class DlrmDenseModelThreadTest : public ::testing::TestWithParam<DenseIsa> {};
INSTANTIATE_TEST_SUITE_P(InstructionSets, DlrmDenseModelThreadTest,
                         ::testing::ValuesIn(supported_dense_isas()), isa_test_name);

TEST_P(DlrmDenseModelThreadTest, ResultsDoNotDependOnThreadCount) {
  struct Results {
    std::vector<float> losses, parameters, embedding_gradients, probabilities;
  };
  // On num_threads threads of its own, or (num_threads 0) on a pool of 3 threads that another
  // thread runs loops of its own on at the same time (the trainer's Embedding does).
  const auto train = [this](int num_threads) {
    auto shared = num_threads == 0 ? std::make_shared<support::ThreadPool>(3) : nullptr;
    const DlrmDenseConfig config = {
        .seed = 5, .num_threads = num_threads, .pool = shared, .dense_isa = GetParam()};
    std::atomic<bool> stop{false};
    std::thread other([&] {
      std::vector<int64_t> values(64);
      while (shared && !stop.load()) {
        shared->parallel_for(64,
                             [&](int64_t task, int) { values[static_cast<size_t>(task)] = task; });
      }
    });

    DlrmDenseModel model(config);
    DenseOptimizer optimizer(DenseAdam{.learning_rate = 0.01f}, model.num_parameters(),
                             model.dense_isa());
    std::mt19937_64 random(48);
    Results results;
    for (int step = 0; step < 3; ++step) {
      Batch batch = random_batch(config, 1100, random);
      results.losses.push_back(model.train_step(batch.dense, batch.labels, batch.embedding_views(),
                                                batch.gradient_views()));
      optimizer.apply(model.parameters(), model.gradients());
      for (const std::vector<float>& g : batch.embedding_gradients) {
        results.embedding_gradients.insert(results.embedding_gradients.end(), g.begin(), g.end());
      }
    }
    results.parameters.assign(model.parameters().begin(), model.parameters().end());
    const Batch held_out = random_batch(config, 700, random);
    results.probabilities.resize(700);
    model.predict(held_out.dense, held_out.embedding_views(), results.probabilities);
    stop = true;
    other.join();
    return results;
  };
  const Results one = train(1);
  for (const int num_threads : {2, 3, 0}) {
    SCOPED_TRACE(std::to_string(num_threads) + " threads (0: a shared pool)");
    const Results many = train(num_threads);
    EXPECT_EQ(many.losses, one.losses);
    EXPECT_EQ(many.parameters, one.parameters);
    EXPECT_EQ(many.embedding_gradients, one.embedding_gradients);
    EXPECT_EQ(many.probabilities, one.probabilities);
  }
}

TEST(DlrmDenseModelErrorTest, ConfigErrorsNameTheFieldAndValue) {
  const auto expect_error = [](const DlrmDenseConfig& config, const std::string& fragment) {
    try {
      const DlrmDenseModel model(config);
      ADD_FAILURE() << "no error; expected one mentioning '" << fragment << "'";
    } catch (const InvalidArgument& error) {
      EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
    }
  };
  expect_error({.num_dense_features = 0}, "num_dense_features = 0");
  expect_error({.num_sparse_features = -1}, "num_sparse_features = -1");
  expect_error({.embedding_dim = 0, .bottom_mlp = {64, 0}}, "embedding_dim = 0");
  expect_error({.embedding_dim = 8}, "last width of bottom_mlp (16) must equal embedding_dim (8)");
  expect_error({.bottom_mlp = {}}, "bottom_mlp: layer_widths is empty");
  expect_error({.bottom_mlp = {64, -3, 16}}, "bottom_mlp: layer_widths[1] = -3");
  expect_error({.top_mlp = {64, 0}}, "top_mlp: layer_widths[1] = 0");
  expect_error({.num_threads = -2}, "num_threads = -2 must be >= 0");
  expect_error({.num_threads = 2, .pool = std::make_shared<support::ThreadPool>(2)},
               "num_threads = 2 must be 0 when a pool is set");
}

class DlrmDenseModelInputErrorTest : public ::testing::Test {
 protected:
  DlrmDenseModelInputErrorTest() : model_(small_config()), random_(48) {
    batch_ = random_batch(small_config(), 4, random_);
    // A first step, so that gradients() holds values an error must not change.
    Batch first = random_batch(small_config(), 4, random_);
    model_.train_step(first.dense, first.labels, first.embedding_views(), first.gradient_views());
    gradients_before_.assign(model_.gradients().begin(), model_.gradients().end());
    parameters_before_.assign(model_.parameters().begin(), model_.parameters().end());
  }

  // train_step on batch_ must throw InvalidArgument mentioning `fragment` and change nothing.
  void expect_train_step_error(const std::string& fragment) {
    const std::vector<std::vector<float>> untouched = batch_.embedding_gradients;
    try {
      model_.train_step(batch_.dense, batch_.labels, batch_.embedding_views(),
                        batch_.gradient_views());
      ADD_FAILURE() << "no error; expected one mentioning '" << fragment << "'";
    } catch (const InvalidArgument& error) {
      EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
    }
    expect_unchanged();
    EXPECT_EQ(batch_.embedding_gradients, untouched);
  }

  void expect_unchanged() const {
    EXPECT_TRUE(std::equal(model_.gradients().begin(), model_.gradients().end(),
                           gradients_before_.begin(), gradients_before_.end()));
    EXPECT_TRUE(std::equal(model_.parameters().begin(), model_.parameters().end(),
                           parameters_before_.begin(), parameters_before_.end()));
  }

  DlrmDenseModel model_;
  std::mt19937_64 random_;
  Batch batch_;
  std::vector<float> gradients_before_;
  std::vector<float> parameters_before_;
};

TEST_F(DlrmDenseModelInputErrorTest, EmptyBatch) {
  batch_.labels.clear();
  expect_train_step_error("empty batch");
}

TEST_F(DlrmDenseModelInputErrorTest, DenseOfTheWrongSize) {
  batch_.dense.pop_back();
  expect_train_step_error("dense has 11 floats; expected batch 4 x num_dense_features 3");
}

TEST_F(DlrmDenseModelInputErrorTest, NonFiniteDenseValue) {
  batch_.dense[1 * 3 + 2] = std::numeric_limits<float>::quiet_NaN();
  expect_train_step_error("dense feature 2 of example 1 is nan");
  batch_.dense[1 * 3 + 2] = 0.5f;
  batch_.dense[3 * 3 + 0] = -std::numeric_limits<float>::infinity();
  expect_train_step_error("dense feature 0 of example 3 is -inf");
}

TEST_F(DlrmDenseModelInputErrorTest, LabelOutsideZeroOne) {
  batch_.labels[2] = 1.5f;
  expect_train_step_error("labels[2] = 1.5");
  batch_.labels[2] = std::numeric_limits<float>::quiet_NaN();
  expect_train_step_error("labels[2] = nan");
  batch_.labels[2] = -0.25f;
  expect_train_step_error("labels[2] = -0.25");
}

TEST_F(DlrmDenseModelInputErrorTest, WrongNumberOfEmbeddings) {
  batch_.embeddings.pop_back();
  expect_train_step_error("embeddings has 2 spans; expected num_sparse_features = 3");
}

TEST_F(DlrmDenseModelInputErrorTest, EmbeddingOfTheWrongSize) {
  batch_.embeddings[1].resize(15);
  expect_train_step_error("embeddings[1] has 15 floats; expected batch 4 x embedding_dim 4");
}

TEST_F(DlrmDenseModelInputErrorTest, NonFiniteEmbedding) {
  batch_.embeddings[2][3 * 4 + 1] = std::numeric_limits<float>::infinity();
  expect_train_step_error("embeddings[2] of example 3 has the value inf");
}

TEST_F(DlrmDenseModelInputErrorTest, WrongEmbeddingGradients) {
  batch_.embedding_gradients.pop_back();
  expect_train_step_error("embedding_gradients has 2 spans");
  batch_.embedding_gradients.emplace_back(17, -7.0f);
  expect_train_step_error("embedding_gradients[2] has 17 floats");
}

TEST_F(DlrmDenseModelInputErrorTest, PredictValidatesAndLeavesProbabilitiesUnchanged) {
  const auto expect_predict_error = [&](std::vector<float>& probabilities,
                                        const std::string& fragment) {
    const std::vector<float> untouched = probabilities;
    try {
      model_.predict(batch_.dense, batch_.embedding_views(), probabilities);
      ADD_FAILURE() << "no error; expected one mentioning '" << fragment << "'";
    } catch (const InvalidArgument& error) {
      EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
    }
    EXPECT_EQ(probabilities, untouched);
  };
  std::vector<float> probabilities(5, -1.0f);  // one more than the batch
  expect_predict_error(probabilities, "predict: dense has 12 floats; expected batch 5");
  probabilities.resize(4);
  batch_.embeddings[0][0] = std::numeric_limits<float>::quiet_NaN();
  expect_predict_error(probabilities, "predict: embeddings[0] of example 0 has the value nan");
  expect_unchanged();
}

TEST(DlrmDenseModelLearningTest, FitsASeparableProblemOfTheDenseFeatures) {
  // y = 1 when x0 - 2 x1 > 0: linear in the dense features, so it is learnable through the bottom
  // MLP and the z columns of the top MLP's input. Embeddings are fixed noise.
  const DlrmDenseConfig config = small_config();
  DlrmDenseModel model(config);
  DenseOptimizer optimizer(DenseAdam{.learning_rate = 0.01f}, model.num_parameters(),
                           model.dense_isa());
  std::mt19937_64 random(49);
  double late_loss = 0.0;
  const int num_steps = 400;
  for (int step = 0; step < num_steps; ++step) {
    Batch batch = random_batch(config, 64, random);
    for (size_t b = 0; b < batch.labels.size(); ++b) {
      batch.labels[b] = batch.dense[b * 3] - 2.0f * batch.dense[b * 3 + 1] > 0.0f ? 1.0f : 0.0f;
    }
    const float loss = model.train_step(batch.dense, batch.labels, batch.embedding_views(),
                                        batch.gradient_views());
    optimizer.apply(model.parameters(), model.gradients());
    if (step >= num_steps - 20) late_loss += loss / 20.0;
  }
  // A constant predictor scores log(2) = 0.69; a broken gradient does not get near 0.15.
  EXPECT_LT(late_loss, 0.15);
}

TEST(DlrmDenseModelLearningTest, FitsAProblemOnlyTheEmbeddingsCanExplain) {
  // Two sparse features with ids in [0, 4) each; y = 1 when the two ids are equal. Dense features
  // are noise. Only the interaction of the learned embeddings separates the classes, so the loss
  // falls only if embedding gradients (through the interaction) are right.
  const DlrmDenseConfig config = {.num_dense_features = 2,
                                  .num_sparse_features = 2,
                                  .embedding_dim = 4,
                                  .bottom_mlp = {8, 4},
                                  .top_mlp = {16},
                                  .seed = 50};
  const int64_t vocabulary_size = 4;
  const int64_t batch_size = 64;
  DlrmDenseModel model(config);
  DenseOptimizer optimizer(DenseAdam{.learning_rate = 0.01f}, model.num_parameters(),
                           model.dense_isa());
  std::mt19937_64 random(51);
  std::vector<std::vector<float>> tables;
  for (int f = 0; f < 2; ++f) {
    tables.push_back(random_floats(random, static_cast<size_t>(vocabulary_size * 4), -0.5f, 0.5f));
  }
  std::uniform_int_distribution<int64_t> id(0, vocabulary_size - 1);
  double late_loss = 0.0;
  const int num_steps = 600;
  for (int step = 0; step < num_steps; ++step) {
    Batch batch = random_batch(config, batch_size, random);
    std::vector<std::vector<int64_t>> ids(2, std::vector<int64_t>(batch_size));
    for (int64_t b = 0; b < batch_size; ++b) {
      ids[0][b] = id(random);
      ids[1][b] = b % 2 == 0 ? ids[0][b] : id(random);  // about 5/8 positives
      batch.labels[b] = ids[0][b] == ids[1][b] ? 1.0f : 0.0f;
      for (int f = 0; f < 2; ++f) {
        std::copy_n(&tables[f][ids[f][b] * 4], 4, &batch.embeddings[f][b * 4]);
      }
    }
    const float loss = model.train_step(batch.dense, batch.labels, batch.embedding_views(),
                                        batch.gradient_views());
    optimizer.apply(model.parameters(), model.gradients());
    for (int f = 0; f < 2; ++f) {
      for (int64_t b = 0; b < batch_size; ++b) {
        for (int k = 0; k < 4; ++k) {
          tables[f][ids[f][b] * 4 + k] -= 0.5f * batch.embedding_gradients[f][b * 4 + k];
        }
      }
    }
    if (step >= num_steps - 20) late_loss += loss / 20.0;
  }
  // The labels' entropy is 0.66; without working embedding gradients the loss stays near it.
  EXPECT_LT(late_loss, 0.2);
}

TEST(DlrmDenseModelIsaTest, ModelComputesWithTheConfiguredOrTheDefaultInstructionSet) {
  EXPECT_EQ(DlrmDenseModel({}).dense_isa(), default_dense_isa());
  for (const DenseIsa isa : supported_dense_isas()) {
    EXPECT_EQ(DlrmDenseModel({.dense_isa = isa}).dense_isa(), isa);
  }
}

// The instruction sets compute the same model up to rounding (docs/training.md, "Instruction
// set"): for DLRM's default shapes and a batch of 300, each set's loss is within 2e-6 (relative)
// and its probabilities within 1e-6 of the float64 reference, and every parameter and embedding
// gradient is within 1e-5 of the largest gradient's magnitude of the widest set's (2e-7 measured).
TEST(DlrmDenseModelIsaTest, InstructionSetsAgreeUpToRounding) {
  const DlrmDenseConfig shapes = {.seed = 9};
  std::mt19937_64 random(53);
  const Batch batch = random_batch(shapes, 300, random);
  struct Results {
    float loss;
    std::vector<float> probabilities, gradients;
  };
  const auto run = [&](DenseIsa isa) {
    DlrmDenseConfig config = shapes;
    config.dense_isa = isa;
    DlrmDenseModel model(config);
    Batch copy = batch;
    Results results{.loss = model.train_step(copy.dense, copy.labels, copy.embedding_views(),
                                             copy.gradient_views()),
                    .probabilities = std::vector<float>(300),
                    .gradients = {model.gradients().begin(), model.gradients().end()}};
    for (const std::vector<float>& g : copy.embedding_gradients) {
      results.gradients.insert(results.gradients.end(), g.begin(), g.end());
    }
    model.predict(copy.dense, copy.embedding_views(), results.probabilities);
    return results;
  };
  const Results widest = run(widest_dense_isa());
  DlrmDenseModel model(shapes);
  std::vector<bool> signs;
  const std::vector<double> logits =
      reference::dlrm_logits(shape_of(shapes), to_double(model.parameters()),
                             to_double(batch.dense), batch.embeddings_double(), signs);
  const double loss =
      reference::dlrm_loss(shape_of(shapes), to_double(model.parameters()), to_double(batch.dense),
                           to_double(batch.labels), batch.embeddings_double(), signs);
  float largest = 0.0f;
  for (const float g : widest.gradients) largest = std::max(largest, std::abs(g));
  ASSERT_GT(largest, 0.0f);
  for (const DenseIsa isa : supported_dense_isas()) {
    SCOPED_TRACE(dense_isa_name(isa));
    const Results results = run(isa);
    EXPECT_NEAR(results.loss, loss, 2e-6 * loss);
    for (size_t b = 0; b < logits.size(); ++b) {
      EXPECT_NEAR(results.probabilities[b], 1.0 / (1.0 + std::exp(-logits[b])), 1e-6)
          << "example " << b;
    }
    double difference = 0.0;
    for (size_t i = 0; i < results.gradients.size(); ++i) {
      difference = std::max(
          difference, static_cast<double>(std::abs(results.gradients[i] - widest.gradients[i])));
    }
    EXPECT_LE(difference, 1e-5 * largest);
  }
}

}  // namespace
}  // namespace recemb::dlrm
