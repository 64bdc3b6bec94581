// The --resume check of `recemb train`: which settings a resumed run may change
// (docs/training.md, "Checkpoints and --resume").
#include "train/resume_settings.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <set>

#include "recemb/error.h"

#include "train/default_config.h"

namespace recemb::train {
namespace {

// The settings a resumed run may change: they decide how long the run is, what it records and
// where, and how the work is spread, not which updates it makes (docs/training.md, "Checkpoints
// and --resume"). Any other change would make the resumed run differ from the uninterrupted one.
constexpr std::string_view kResumeMayChange[] = {
    "train.steps",          "train.eval_every",
    "train.log_every",      "checkpoint.dir",
    "checkpoint.every",     "checkpoint.keep",
    "output.dir",           "embedding.threads",
    "embedding.sharding",   "data.max_malformed",
    "data.reader_threads",  "train.overlap",
    "serving.publish_dir",  "serving.publish_every_seconds",
    "serving.publish_dtype"};

}  // namespace

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
                          "change): set these back, or start a new run in another output.dir");
  }
}

}  // namespace recemb::train
