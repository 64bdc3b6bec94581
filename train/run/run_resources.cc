#include "train/run/run_resources.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sys/resource.h>
#include <unistd.h>
#include <vector>

#include "recemb/config.h"
#include "recemb/error.h"

#include "dlrm/example_batch.h"

namespace recemb::train {
namespace {

// The bytes one step needs beyond the tables, per example of train.batch_size: the batch as read
// (the reader's copy, the one read ahead, and that of each step in flight: the one trained on and,
// with train.overlap, the next one, prefetched), for each step in flight the embedding
// activations, their gradients and the lookup's record of the ids, and the dense layers'
// activations and gradients (bottom MLP, the interaction's vectors, Gram matrix and output, top
// MLP).
int64_t bytes_per_example(const TrainConfig& config) {
  const int64_t d = config.model.embedding_dim, n = dlrm::kNumCategoricalFeatures, f = n + 1;
  const int64_t example = 4 * (1 + dlrm::kNumDenseFeatures) + 8 * n;
  int64_t dense = dlrm::kNumDenseFeatures + f * d + f * f + d + f * (f - 1) / 2 + 1;
  for (int64_t width : config.model.bottom_mlp) dense += width;
  for (int64_t width : config.model.top_mlp) dense += width;
  const int64_t steps_in_flight = config.train.overlap ? 2 : 1;
  return (2 + steps_in_flight) * example + steps_in_flight * (2 * 4 * n * d + 3 * 8 * n) +
         2 * 4 * dense;
}

// The bytes of one held-out example: its label, dense features and predicted probability (float),
// and its categorical ids.
constexpr int64_t kHeldOutExampleBytes =
    4 * (2 + dlrm::kNumDenseFeatures) + 8 * dlrm::kNumCategoricalFeatures;

std::string gib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / (1 << 30));
  return text;
}

}  // namespace

int64_t run_buffer_bytes(const TrainConfig& config) {
  return config.train.batch_size * bytes_per_example(config) +
         config.data.eval_examples * kHeldOutExampleBytes;
}

MemoryLimit memory_limit() {
  MemoryLimit limit{.bytes = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE),
                    .what = "the machine's memory"};
  rlimit address_space{};
  if (getrlimit(RLIMIT_AS, &address_space) == 0 && address_space.rlim_cur != RLIM_INFINITY &&
      static_cast<int64_t>(address_space.rlim_cur) < limit.bytes) {
    limit = {.bytes = static_cast<int64_t>(address_space.rlim_cur),
             .what = "this process's address-space limit (ulimit -v)"};
  }
  return limit;
}

void check_memory(const TrainConfig& config, const MemoryLimit& limit) {
  const int64_t step = config.train.batch_size * bytes_per_example(config);
  const int64_t held_out = config.data.eval_examples * kHeldOutExampleBytes;
  if (step + held_out > limit.bytes) {
    throw InvalidArgument("train.batch_size " + std::to_string(config.train.batch_size) +
                          " needs about " + gib(step) + " per step and data.eval_examples " +
                          std::to_string(config.data.eval_examples) + " about " + gib(held_out) +
                          ", more than " + limit.what + " (" + gib(limit.bytes) +
                          "): lower train.batch_size or data.eval_examples");
  }
}

namespace {

// The bytes of a table's variables: its rows in its dtype, the slots float32.
int64_t variable_bytes(const Embedding& embedding, const TableConfig& table) {
  int64_t bytes = 0;
  for (const std::string& variable : embedding.variable_names(table.name)) {
    int64_t values = 1;
    for (int64_t extent : embedding.variable_shape(table.name, variable)) values *= extent;
    bytes += values * dtype_bytes(variable == "parameters" ? table.dtype : DType::kFloat32);
  }
  return bytes;
}

}  // namespace

int64_t embedding_bytes(const Embedding& embedding) {
  int64_t bytes = 0;
  // A dynamic table's row and slots per key are those of a static table of one row with the same
  // dim and optimizer: a twin, local to this process.
  std::vector<TableConfig> twins;
  std::vector<FeatureConfig> twin_features;
  std::vector<int64_t> capacities;
  for (const TableConfig& table : embedding.tables()) {
    if (!table.dynamic_vocabulary) {
      bytes += variable_bytes(embedding, table);
      continue;
    }
    twins.push_back({.name = table.name,
                     .vocabulary_size = 1,
                     .dim = table.dim,
                     .optimizer = table.optimizer,
                     .combiner = table.combiner,
                     .dtype = table.dtype});
    twin_features.push_back({.name = table.name, .table = table.name});
    capacities.push_back(table.dynamic_vocabulary->capacity);
  }
  if (twins.empty()) return bytes;
  const Embedding twin(
      twins, twin_features,
      EmbeddingOptions{.optimizer = embedding.options().optimizer, .num_threads = 1});
  for (size_t t = 0; t < twins.size(); ++t) {
    bytes += capacities[t] * variable_bytes(twin, twins[t]);
  }
  return bytes;
}

std::string strategy_counts(const Placement& placement) {
  std::map<std::string, int> counts;
  for (const TablePlacement& table : placement.tables) {
    ++counts[std::string(sharding_strategy_name(table.strategy))];
  }
  std::string text;
  for (const auto& [name, count] : counts) {
    if (!text.empty()) text += ", ";
    std::string words = name;
    std::replace(words.begin(), words.end(), '_', '-');
    text += std::to_string(count) + " " + words;
  }
  return text;
}

int64_t peak_resident_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace recemb::train
