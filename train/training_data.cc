#include "train/training_data.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "recemb/error.h"

#include "train/metrics.h"
#include "train/synthetic_criteo.h"

namespace recemb::train {
namespace {

// The held-out set taken from the head of data.path (no data.eval_path) holds at most this share
// of the file's bytes (docs/training.md, "The held-out set").
constexpr double kMaxHeldOutShare = 0.2;

CategoricalIds categorical_ids(const TrainConfig& config) {
  return dynamic_vocabulary(config) ? CategoricalIds::kRawKeys : CategoricalIds::kHashedRows;
}

TrainingData synthetic_data(const TrainConfig& config,
                            const std::vector<int64_t>& vocabulary_sizes) {
  TrainingData data;
  const SyntheticOptions options{.seed = config.data.synthetic_seed,
                                 .vocabulary_sizes = vocabulary_sizes,
                                 .ids = categorical_ids(config),
                                 .item_lifetime = config.data.synthetic_item_lifetime};
  data.train_source = std::make_unique<SyntheticCriteo>(options);
  SyntheticOptions eval_options = options;
  eval_options.split = SyntheticSplit::kEval;
  auto eval_source = std::make_unique<SyntheticCriteo>(eval_options);
  eval_source->set_vocabulary_time(0);
  eval_source->next(data.eval_set, config.data.eval_examples);
  std::vector<float> best(static_cast<size_t>(data.eval_set.size));
  for (int64_t i = 0; i < data.eval_set.size; ++i) {
    best[i] = static_cast<float>(1 / (1 + std::exp(-eval_source->logit(data.eval_set, i))));
  }
  data.best_auc = roc_auc(best, data.eval_set.labels);
  data.best_log_loss = log_loss(best, data.eval_set.labels);
  if (options.ids == CategoricalIds::kRawKeys) data.drifting_eval_source = std::move(eval_source);
  return data;
}

}  // namespace

void update_held_out_set(TrainingData& data, int64_t examples_trained) {
  if (data.drifting_eval_source == nullptr) return;
  SyntheticCriteo& source = *data.drifting_eval_source;
  source.set_vocabulary_time(examples_trained);
  source.seek("synthetic:0");
  source.next(data.eval_set, data.eval_set.size);
}

int64_t bytes_before(const std::string& position, const std::string& path) {
  const size_t first = position.find(':'), second = position.find(':', first + 1);
  if (std::stoll(position.substr(first + 1)) > 0) {
    return static_cast<int64_t>(std::filesystem::file_size(path));
  }
  return std::stoll(position.substr(second + 1));
}

TrainingData open_training_data(const TrainConfig& config,
                                const std::vector<int64_t>& vocabulary_sizes) {
  if (config.data.path.empty()) return synthetic_data(config, vocabulary_sizes);
  TrainingData data;
  data.best_auc = data.best_log_loss = std::nan("");
  const std::string& path = config.data.path;
  const std::string& eval_path = config.data.eval_path;
  const ReaderOptions reader_options{.vocabulary_sizes = vocabulary_sizes,
                                     .ids = categorical_ids(config),
                                     .max_malformed = config.data.max_malformed};
  const std::vector<std::string> paths{path};
  auto reader = std::make_unique<CriteoReader>(paths, reader_options);
  const CriteoReader* held_out_reader = reader.get();
  if (eval_path.empty()) {
    reader->next(data.eval_set, config.data.eval_examples);  // the file's first examples
  } else {
    data.eval_reader =
        std::make_unique<CriteoReader>(std::vector<std::string>{eval_path}, reader_options);
    data.eval_reader->next(data.eval_set, config.data.eval_examples);
    held_out_reader = data.eval_reader.get();
  }
  if (data.eval_set.size == 0) {
    throw InvalidArgument("no held-out examples could be read from " +
                          (eval_path.empty() ? path : eval_path));
  }
  data.bytes_per_line =
      static_cast<double>(bytes_before(held_out_reader->position(),
                                       held_out_reader == reader.get() ? path : eval_path)) /
      static_cast<double>(data.eval_set.size);
  const auto file_bytes = static_cast<int64_t>(std::filesystem::file_size(path));
  const int64_t held_out_bytes = bytes_before(reader->position(), path);
  if (eval_path.empty() &&
      static_cast<double>(held_out_bytes) > kMaxHeldOutShare * static_cast<double>(file_bytes)) {
    // A small file: hold out its first examples up to a fifth of its bytes, and train on the
    // rest (docs/training.md, "The held-out set").
    const int64_t read = data.eval_set.size;
    if (read < 2) {
      throw InvalidArgument(path + " holds " + std::to_string(read) +
                            " example: too few to hold some out and train on the rest; give "
                            "more data, and a held-out file as data.eval_path (--eval-data)");
    }
    const int64_t kept = std::clamp<int64_t>(
        static_cast<int64_t>(static_cast<double>(read) * kMaxHeldOutShare *
                             static_cast<double>(file_bytes) / static_cast<double>(held_out_bytes)),
        1, read - 1);
    reader = std::make_unique<CriteoReader>(paths, reader_options);  // from the start again
    reader->next(data.eval_set, kept);
    data.held_out_message =
        "data.eval_examples = " + std::to_string(config.data.eval_examples) + " would hold out " +
        std::to_string(read) + " examples of " + path + " (" +
        std::to_string(std::lround(100.0 * static_cast<double>(held_out_bytes) /
                                   static_cast<double>(file_bytes))) +
        "% of the file): holding out its first " + std::to_string(data.eval_set.size) +
        " examples instead (at most a fifth of the file) and training on the rest; give a "
        "held-out file as data.eval_path (--eval-data) to train on all of it";
  }
  data.train_reader = reader.get();
  data.train_source = std::move(reader);
  return data;
}

}  // namespace recemb::train
