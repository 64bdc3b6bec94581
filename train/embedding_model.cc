#include "train/embedding_model.h"

#include <string>
#include <utility>
#include <variant>

#include "train/criteo_profile.h"

namespace recemb::train {
namespace {

Optimizer optimizer_with_rate(const std::string& name, double learning_rate) {
  Optimizer optimizer = parse_optimizer(name);
  std::visit([&](auto& o) { o.learning_rate = static_cast<float>(learning_rate); }, optimizer);
  return optimizer;
}

}  // namespace

EmbeddingModel embedding_model(const TrainConfig& config) {
  std::vector<int64_t> sizes = preset_vocabulary_sizes(config.data.preset);
  if (config.data.table_budget_mib > 0) {
    sizes = fit_to_budget(sizes, {.dim = config.model.embedding_dim,
                                  .max_bytes = config.data.table_budget_mib << 20});
  }
  EmbeddingModel model{
      .optimizer = optimizer_with_rate(config.embedding.optimizer, config.embedding.learning_rate)};
  for (int f = 0; f < kNumCategoricalFeatures; ++f) {
    const std::string name = categorical_feature_name(f);
    TableConfig table{.name = name, .vocabulary_size = sizes[f], .dim = config.model.embedding_dim};
    if (auto it = config.tables.find(name); it != config.tables.end()) {
      const TableOverride& o = it->second;
      if (o.vocabulary_size) table.vocabulary_size = *o.vocabulary_size;
      if (o.optimizer || o.learning_rate) {
        table.optimizer =
            optimizer_with_rate(o.optimizer.value_or(config.embedding.optimizer),
                                o.learning_rate.value_or(config.embedding.learning_rate));
      }
    }
    model.tables.push_back(std::move(table));
    model.features.push_back({.name = name, .table = name});
  }
  return model;
}

}  // namespace recemb::train
