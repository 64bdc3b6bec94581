// The recemb side of the trainer's model, as a configuration: 26 tables C1..C26 (sizes from the
// preset, cut to data.table_budget_mib if set, then the per-table overrides; dim model.
// embedding_dim; per-table optimizers where [tables.C<k>] sets one), one feature per table with
// the table's name, and the global optimizer (embedding.optimizer at embedding.learning_rate).
// With embedding.vocabulary = "dynamic" the tables are dynamic (DynamicVocabulary: capacity
// embedding.capacity, or when it is 0 the table's size + train.batch_size, room for the new keys
// of a batch beyond those live; min_count, ttl_steps (0: none) and when_full from [embedding]).
// `recemb train` builds its Embedding from it and `recemb plan` its placement.
#ifndef RECEMB_TRAIN_CONFIG_EMBEDDING_MODEL_H_
#define RECEMB_TRAIN_CONFIG_EMBEDDING_MODEL_H_

#include <cstdint>
#include <vector>

#include "recemb/config.h"
#include "recemb/optimizer.h"

#include "train/config/train_config.h"

namespace recemb::train {

struct EmbeddingModel {
  std::vector<TableConfig> tables = {};  // C1..C26, in feature order
  // The tables' sizes, C1..C26: the rows of hashed tables, the default capacity of dynamic ones
  // (with train.batch_size), and the items of each feature of the synthetic data
  // (synthetic_criteo.h).
  std::vector<int64_t> sizes = {};
  std::vector<FeatureConfig> features = {};
  Optimizer optimizer = Sgd{};  // the global one
};

// Throws InvalidArgument for an unknown preset or a budget too small for one row per table.
EmbeddingModel embedding_model(const TrainConfig& config);

}  // namespace recemb::train

#endif  // RECEMB_TRAIN_CONFIG_EMBEDDING_MODEL_H_
