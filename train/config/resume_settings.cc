// The --resume and --init-from checks of `recemb train`: which settings a resumed run may change
// (docs/training.md, "Checkpoints and --resume"), and which a run initialised from a checkpoint
// must keep (docs/training.md, "Day after day: --init-from").
#include "train/config/resume_settings.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <set>
#include <vector>

#include "recemb/error.h"
#include "recemb/optimizer.h"

#include "dlrm/model_file.h"
#include "train/config/default_config.h"

namespace recemb::train {
namespace {

// The settings a resumed run may change: they decide how long the run is, what it records and
// where, and how the work is spread, not which updates it makes (docs/training.md, "Checkpoints
// and --resume"). Any other change would make the resumed run differ from the uninterrupted one.
constexpr std::string_view kResumeMayChange[] = {"train.steps",
                                                 "train.eval_every",
                                                 "train.log_every",
                                                 "checkpoint.dir",
                                                 "checkpoint.every",
                                                 "checkpoint.keep",
                                                 "output.dir",
                                                 "embedding.threads",
                                                 "embedding.sharding",
                                                 "data.max_malformed",
                                                 "data.reader_threads",
                                                 "train.overlap",
                                                 "serving.publish_dir",
                                                 "serving.publish_every_seconds",
                                                 "serving.publish_dtype",
                                                 "serving.base_every_deltas",
                                                 "serving.base_every_bytes",
                                                 "serving.keep_versions"};

// The settings key of the dense optimizer's kind in a checkpoint's saved settings (to_toml).
constexpr char kDenseOptimizerKey[] = "dense.optimizer";

// TOML's text of a string value, as flat_settings gives it: 'adam'.
std::string toml_text(std::string_view value) { return "'" + std::string(value) + "'"; }

}  // namespace

void check_init_settings(const CheckpointInfo& info, const EmbeddingModel& model,
                         const dlrm::DlrmDenseConfig& dense, std::string_view dense_optimizer,
                         const std::string& checkpoint) {
  std::vector<std::string> differences;
  const auto differ = [&](const std::string& what, const std::string& here,
                          const std::string& saved) {
    if (here != saved) differences.push_back(what + " is " + here + ", was " + saved);
  };
  std::map<std::string, const CheckpointTable*> saved_tables;
  for (const CheckpointTable& table : info.tables) saved_tables[table.name] = &table;
  for (const TableConfig& table : model.tables) {
    const auto found = saved_tables.find(table.name);
    if (found == saved_tables.end()) {
      differences.push_back("table " + table.name + " is not in the checkpoint");
      continue;
    }
    const CheckpointTable& saved = *found->second;
    const bool dynamic = table.dynamic_vocabulary.has_value();
    const std::string prefix = "table " + table.name + ": ";
    differ(prefix + "vocabulary", dynamic ? "dynamic" : "hashed",
           saved.dynamic ? "dynamic" : "hashed");
    if (!dynamic && !saved.dynamic) {
      differ(prefix + "vocabulary_size", std::to_string(table.vocabulary_size),
             std::to_string(saved.vocabulary_size));
    }
    differ(prefix + "dim", std::to_string(table.dim), std::to_string(saved.dim));
    differ(prefix + "optimizer",
           std::string(optimizer_name(table.optimizer.value_or(model.optimizer))),
           saved.optimizer.empty() ? "(none)" : saved.optimizer);
    saved_tables.erase(found);
  }
  for (const auto& [name, table] : saved_tables) {
    differences.push_back("table " + name + " of the checkpoint is not in this run's model");
  }
  const std::map<std::string, std::string> shape = dlrm::dense_config_metadata(dense);
  for (const auto& [key, here] : shape) {
    const auto saved = info.metadata.find(key);
    if (saved == info.metadata.end()) {
      differences.push_back("the checkpoint has no dense model ('" + key +
                            "' is missing: not saved by recemb train)");
      break;
    }
    differ(key, "[" + here + "]", "[" + saved->second + "]");
  }
  if (const auto settings = info.metadata.find(kSettingsMetadata);
      settings != info.metadata.end()) {
    const std::map<std::string, std::string> saved = flat_settings(settings->second, checkpoint);
    if (const auto kind = saved.find(kDenseOptimizerKey); kind != saved.end()) {
      differ(kDenseOptimizerKey, toml_text(dense_optimizer), kind->second);
    }
  }
  if (!differences.empty()) {
    std::string list;
    for (const std::string& difference : differences)
      list += (list.empty() ? "" : "; ") + difference;
    throw InvalidArgument(
        "--init-from: the model in " + checkpoint + " is not this run's: " + list +
        ". A run initialised from a checkpoint continues its tables, optimizer slots and dense "
        "model, so their shapes and optimizers must match (the data, steps, learning rates and "
        "output may change): set these back to the checkpoint's");
  }
}

void check_resume_settings(std::string_view saved_toml, const TrainConfig& config,
                           const std::string& checkpoint) {
  // A setting added after the checkpoint was written had its default value then.
  std::map<std::string, std::string> saved = flat_settings(saved_toml, checkpoint);
  saved.merge(flat_settings(default_config_toml(), "defaults"));
  const std::map<std::string, std::string> now = flat_settings(to_toml(config), "the settings");
  std::set<std::string> keys;
  for (const auto& [key, value] : saved) keys.insert(key);
  for (const auto& [key, value] : now) keys.insert(key);
  const auto value_of = [](const std::map<std::string, std::string>& settings,
                           const std::string& key) {
    const auto it = settings.find(key);
    return it == settings.end() ? std::string("(not set)") : it->second;
  };
  std::string changes;
  for (const std::string& key : keys) {
    const std::string before = value_of(saved, key), after = value_of(now, key);
    if (before == after || std::find(std::begin(kResumeMayChange), std::end(kResumeMayChange),
                                     key) != std::end(kResumeMayChange)) {
      continue;
    }
    changes += (changes.empty() ? "" : "; ") + key + " is " + after + ", was " + before;
  }
  if (!changes.empty()) {
    throw InvalidArgument("--resume: the run in " + checkpoint +
                          " was trained with other settings: " + changes +
                          ". A resumed run continues exactly as the uninterrupted one only with "
                          "the same settings (train.steps, the evaluation, logging, checkpoint "
                          "and output settings, embedding.threads and embedding.sharding may "
                          "change): set these back; to continue the model on other data (or with "
                          "other settings), start a new run from its checkpoint with --init-from " +
                          checkpoint + " in another output.dir");
  }
}

}  // namespace recemb::train
