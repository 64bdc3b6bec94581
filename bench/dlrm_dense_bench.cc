// Time of the trainer's dense layers per step (train/dlrm_dense_model.h): train_step (forward and
// backward of bottom MLP, interaction, top MLP and loss), predict, and the dense optimizer's
// update, on 1 and 2 threads (the model's num_threads), for DLRM's default shapes (13 dense
// features, 26 embeddings of dim 16, bottom MLP 64-16, top MLP 64-32-1) and batch sizes 512, 2048
// (`recemb train`'s default) and 4096.
//
// Counters: items_processed = examples, and GFLOP/s of the nominal work: 2 flops per multiply-add
// of the matrix products (forward B * sum(in * out) over all layers, backward twice that, less the
// input gradient of the first layer) and of the interaction (forward B * pairs * dim, backward
// twice that). Inputs are random and fixed; the parameters are not updated between iterations.
#include <benchmark/benchmark.h>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "train/dense_optimizer.h"
#include "train/dlrm_dense_model.h"

namespace {

using recemb::train::DenseAdam;
using recemb::train::DenseOptimizer;
using recemb::train::DlrmDenseConfig;
using recemb::train::DlrmDenseModel;
using recemb::train::ParameterBlock;

struct Inputs {
  std::vector<float> dense;
  std::vector<float> labels;
  std::vector<std::vector<float>> embeddings;
  std::vector<std::vector<float>> embedding_gradients;
  std::vector<std::span<const float>> embedding_views;
  std::vector<std::span<float>> gradient_views;
};

Inputs make_inputs(const DlrmDenseConfig& config, int64_t batch_size) {
  std::mt19937_64 random(1);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  Inputs inputs;
  inputs.dense.resize(static_cast<size_t>(batch_size * config.num_dense_features));
  for (float& value : inputs.dense) value = uniform(random);
  for (int64_t b = 0; b < batch_size; ++b) inputs.labels.push_back(uniform(random) > 0.5f);
  for (int64_t f = 0; f < config.num_sparse_features; ++f) {
    std::vector<float> embedding(static_cast<size_t>(batch_size * config.embedding_dim));
    for (float& value : embedding) value = 0.1f * uniform(random);
    inputs.embeddings.push_back(std::move(embedding));
    inputs.embedding_gradients.emplace_back(inputs.embeddings.back().size());
  }
  inputs.embedding_views.assign(inputs.embeddings.begin(), inputs.embeddings.end());
  inputs.gradient_views.assign(inputs.embedding_gradients.begin(),
                               inputs.embedding_gradients.end());
  return inputs;
}

// Nominal multiply-adds of one forward pass per example.
double forward_multiply_adds(const DlrmDenseModel& model) {
  double total = 0.0;
  for (const ParameterBlock& block : model.parameter_blocks()) {
    if (block.shape.size() == 2) total += static_cast<double>(block.shape[0] * block.shape[1]);
  }
  const DlrmDenseConfig& config = model.config();
  const int64_t vectors = config.num_sparse_features + 1;
  return total + static_cast<double>(vectors * (vectors - 1) / 2 * config.embedding_dim);
}

void BM_TrainStep(benchmark::State& state) {
  const DlrmDenseConfig config = {.num_threads = static_cast<int>(state.range(1))};
  const int64_t batch_size = state.range(0);
  DlrmDenseModel model(config);
  Inputs inputs = make_inputs(config, batch_size);
  for (auto _ : state) {
    benchmark::DoNotOptimize(model.train_step(inputs.dense, inputs.labels, inputs.embedding_views,
                                              inputs.gradient_views));
  }
  state.SetItemsProcessed(state.iterations() * batch_size);
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * 3.0 * forward_multiply_adds(model) * static_cast<double>(batch_size) * 1e-9,
      benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Predict(benchmark::State& state) {
  const DlrmDenseConfig config = {.num_threads = static_cast<int>(state.range(1))};
  const int64_t batch_size = state.range(0);
  DlrmDenseModel model(config);
  Inputs inputs = make_inputs(config, batch_size);
  std::vector<float> probabilities(static_cast<size_t>(batch_size));
  for (auto _ : state) {
    model.predict(inputs.dense, inputs.embedding_views, probabilities);
    benchmark::DoNotOptimize(probabilities.data());
  }
  state.SetItemsProcessed(state.iterations() * batch_size);
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * forward_multiply_adds(model) * static_cast<double>(batch_size) * 1e-9,
      benchmark::Counter::kIsIterationInvariantRate);
}

void BM_DenseAdamApply(benchmark::State& state) {
  DlrmDenseModel model({});
  DenseOptimizer optimizer(DenseAdam{.learning_rate = 1e-6f}, model.num_parameters());
  std::vector<float> gradients(static_cast<size_t>(model.num_parameters()), 1e-3f);
  for (auto _ : state) {
    optimizer.apply(model.parameters(), gradients);
    benchmark::DoNotOptimize(model.parameters().data());
  }
  state.SetItemsProcessed(state.iterations() * model.num_parameters());
}

BENCHMARK(BM_TrainStep)
    ->ArgNames({"batch", "threads"})
    ->ArgsProduct({{512, 2048, 4096}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Predict)
    ->ArgNames({"batch", "threads"})
    ->ArgsProduct({{512, 2048, 4096}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DenseAdamApply)->Unit(benchmark::kMicrosecond);

}  // namespace
