// The checks of `recemb train`'s settings beyond their types (which the TOML parsing checks):
// ranges, names, and the settings that must agree with each other.
#include "train/config/config_validation.h"

#include <string>

#include "recemb/config.h"
#include "recemb/embedding.h"
#include "recemb/error.h"
#include "recemb/optimizer.h"
#include "recemb/serving.h"

namespace recemb::train {
namespace {

void require(bool condition, const std::string& message) {
  if (!condition) throw InvalidArgument(message);
}

void check_optimizer_name(const std::string& name, const std::string& key) {
  try {
    parse_optimizer(name);
  } catch (const InvalidArgument& error) {
    throw InvalidArgument(key + ": " + error.what());
  }
}

}  // namespace

void validate_train_config(const TrainConfig& c) {
  require(c.data.table_budget_mib >= 0, "data.table_budget_mib must be >= 0");
  require(c.data.eval_examples >= 1, "data.eval_examples must be >= 1");
  require(c.data.max_malformed >= 0, "data.max_malformed must be >= 0");
  for (const std::string& path : c.data.paths) {
    require(!path.empty(), "data.path: an empty path in the list");
  }
  require(c.data.eval_fraction == 0 || (c.data.eval_fraction > 0 && c.data.eval_fraction < 1),
          "data.eval_fraction must be in (0, 1) (or 0: not used), not " +
              std::to_string(c.data.eval_fraction));
  require(c.data.eval_fraction == 0 || c.data.eval_path.empty(),
          "data.eval_fraction and data.eval_path both set: hold out the tail of data.path "
          "(eval_fraction) or read a held-out file (eval_path), not both");
  require(c.data.reader_threads == 1 || c.data.reader_threads == 2,
          "data.reader_threads must be 1 or 2, not " + std::to_string(c.data.reader_threads));
  require(c.train.epochs >= 1, "train.epochs must be >= 1, not " + std::to_string(c.train.epochs));
  require(c.data.synthetic_item_lifetime >= 1, "data.synthetic_item_lifetime must be >= 1, not " +
                                                   std::to_string(c.data.synthetic_item_lifetime));
  require(c.model.embedding_dim >= 1, "model.embedding_dim must be >= 1");
  require(!c.model.bottom_mlp.empty() && c.model.bottom_mlp.back() == c.model.embedding_dim,
          "model.bottom_mlp must end with model.embedding_dim (" +
              std::to_string(c.model.embedding_dim) + ")");
  for (int64_t width : c.model.bottom_mlp) require(width >= 1, "model.bottom_mlp widths >= 1");
  for (int64_t width : c.model.top_mlp) require(width >= 1, "model.top_mlp widths must be >= 1");
  check_optimizer_name(c.embedding.optimizer, "embedding.optimizer");
  require(c.embedding.learning_rate > 0.0, "embedding.learning_rate must be > 0");
  require(c.embedding.threads >= 0 && c.embedding.threads <= kMaxNumThreads,
          "embedding.threads must be in [0, " + std::to_string(kMaxNumThreads) +
              "] (0: one per core), not " + std::to_string(c.embedding.threads));
  sharding_strategy(c.embedding.sharding);
  require(c.embedding.vocabulary == "hashed" || c.embedding.vocabulary == "dynamic",
          "embedding.vocabulary must be hashed or dynamic, not '" + c.embedding.vocabulary + "'");
  require(c.embedding.capacity >= 0,
          "embedding.capacity must be >= 0 (0: each table's size + train.batch_size), not " +
              std::to_string(c.embedding.capacity));
  require(c.embedding.min_count >= 1,
          "embedding.min_count must be >= 1, not " + std::to_string(c.embedding.min_count));
  require(c.embedding.ttl_steps >= 0, "embedding.ttl_steps must be >= 0 (0: no TTL), not " +
                                          std::to_string(c.embedding.ttl_steps));
  try {
    parse_when_full(c.embedding.when_full);
  } catch (const InvalidArgument& error) {
    throw InvalidArgument(std::string("embedding.when_full: ") + error.what());
  }
  try {
    parse_dtype(c.embedding.dtype);
  } catch (const InvalidArgument& error) {
    throw InvalidArgument(std::string("embedding.dtype: ") + error.what());
  }
  require(c.dense.optimizer == "adam" || c.dense.optimizer == "adagrad",
          "dense.optimizer must be adam or adagrad, not '" + c.dense.optimizer + "'");
  require(c.dense.learning_rate > 0.0, "dense.learning_rate must be > 0");
  require(c.train.steps >= 1,
          "train.steps must be >= 1, not " + std::to_string(c.train.steps) +
              " (a run trains; to continue a finished run, --resume with a larger train.steps)");
  require(c.train.batch_size >= 1 && c.train.batch_size <= kMaxBatchSize,
          "train.batch_size must be 1 to " + std::to_string(kMaxBatchSize) + ", not " +
              std::to_string(c.train.batch_size));
  require(c.train.eval_every >= 0, "train.eval_every must be >= 0");
  require(c.train.log_every >= 1, "train.log_every must be >= 1");
  require(c.checkpoint.every >= 0, "checkpoint.every must be >= 0");
  require(c.checkpoint.keep >= 1, "checkpoint.keep must be >= 1");
  require(!c.output.dir.empty(), "output.dir must not be empty");
  require(c.serving.publish_every_seconds > 0.0,
          "serving.publish_every_seconds must be > 0 (no publishing: serving.publish_dir = \"\")");
  require(c.serving.base_every_deltas >= 0,
          "serving.base_every_deltas must be >= 0 (0: no bound), not " +
              std::to_string(c.serving.base_every_deltas));
  require(c.serving.base_every_bytes >= 0,
          "serving.base_every_bytes must be >= 0 (0: no bound), not " +
              std::to_string(c.serving.base_every_bytes));
  require(c.serving.keep_versions >= 0, "serving.keep_versions must be >= 0 (0: all), not " +
                                            std::to_string(c.serving.keep_versions));
  try {
    parse_serving_dtype(c.serving.publish_dtype);
  } catch (const InvalidArgument& error) {
    throw InvalidArgument(std::string("serving.publish_dtype: ") + error.what());
  }
  for (const auto& [name, table] : c.tables) {
    require(!table.vocabulary_size || *table.vocabulary_size >= 1,
            "tables." + name + ".vocabulary_size must be >= 1");
    if (table.optimizer) check_optimizer_name(*table.optimizer, "tables." + name + ".optimizer");
    require(!table.learning_rate || *table.learning_rate > 0.0,
            "tables." + name + ".learning_rate must be > 0");
  }
}

}  // namespace recemb::train
