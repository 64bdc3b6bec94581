#include "train/config/embedding_model.h"

#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "dlrm/criteo_profile.h"

namespace recemb::train {
namespace {

Optimizer optimizer_with_rate(const std::string& name, double learning_rate) {
  Optimizer optimizer = parse_optimizer(name);
  std::visit([&](auto& o) { o.learning_rate = static_cast<float>(learning_rate); }, optimizer);
  return optimizer;
}

}  // namespace

EmbeddingModel embedding_model(const TrainConfig& config) {
  std::vector<int64_t> sizes = dlrm::preset_vocabulary_sizes(config.data.preset);
  if (config.data.table_budget_mib > 0) {
    sizes = dlrm::fit_to_budget(sizes, {.dim = config.model.embedding_dim,
                                        .max_bytes = config.data.table_budget_mib << 20});
  }
  EmbeddingModel model{
      .optimizer = optimizer_with_rate(config.embedding.optimizer, config.embedding.learning_rate)};
  for (int f = 0; f < dlrm::kNumCategoricalFeatures; ++f) {
    const std::string name = dlrm::categorical_feature_name(f);
    int64_t size = sizes[static_cast<size_t>(f)];
    TableConfig table{.name = name,
                      .dim = config.model.embedding_dim,
                      .dtype = parse_dtype(config.embedding.dtype)};
    if (auto it = config.tables.find(name); it != config.tables.end()) {
      const TableOverride& o = it->second;
      if (o.vocabulary_size) size = *o.vocabulary_size;
      if (o.optimizer || o.learning_rate) {
        table.optimizer =
            optimizer_with_rate(o.optimizer.value_or(config.embedding.optimizer),
                                o.learning_rate.value_or(config.embedding.learning_rate));
      }
    }
    if (dynamic_vocabulary(config)) {
      const TrainConfig::EmbeddingOptimizer& e = config.embedding;
      table.dynamic_vocabulary = DynamicVocabulary{
          .capacity = e.capacity > 0 ? e.capacity : size + config.train.batch_size,
          .min_count = e.min_count,
          .ttl_steps = e.ttl_steps > 0 ? std::optional<int64_t>(e.ttl_steps) : std::nullopt,
          .when_full = parse_when_full(e.when_full)};
    } else {
      table.vocabulary_size = size;
    }
    model.sizes.push_back(size);
    model.tables.push_back(std::move(table));
    model.features.push_back({.name = name, .table = name});
  }
  return model;
}

}  // namespace recemb::train
