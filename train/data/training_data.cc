#include "train/data/training_data.h"

#include <algorithm>
#include <cmath>
#include <glob.h>
#include <limits>
#include <optional>

#include "recemb/error.h"

#include "train/data/synthetic_criteo.h"
#include "train/report/metrics.h"

namespace recemb::train {
namespace {

// The held-out set taken from the head of data.path (no data.eval_path nor data.eval_fraction)
// holds at most this share of the data's bytes (docs/training.md, "The held-out set").
constexpr double kMaxHeldOutShare = 0.2;

dlrm::CategoricalIds categorical_ids(const TrainConfig& config) {
  return dynamic_vocabulary(config) ? dlrm::CategoricalIds::kRawKeys
                                    : dlrm::CategoricalIds::kHashedRows;
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
  if (options.ids == dlrm::CategoricalIds::kRawKeys)
    data.drifting_eval_source = std::move(eval_source);
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

std::vector<std::string> expand_data_paths(const std::vector<std::string>& patterns) {
  std::vector<std::string> paths;
  for (const std::string& pattern : patterns) {
    if (pattern.find_first_of("*?[") == std::string::npos) {
      paths.push_back(pattern);
      continue;
    }
    glob_t matches{};
    const int result = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &matches);
    std::vector<std::string> matched(matches.gl_pathv, matches.gl_pathv + matches.gl_pathc);
    globfree(&matches);
    if (result == GLOB_NOMATCH) {
      throw InvalidArgument("data.path: the pattern '" + pattern + "' matches no file");
    }
    if (result != 0) {
      throw InvalidArgument("data.path: cannot expand the pattern '" + pattern +
                            "' (a directory could not be read)");
    }
    std::sort(matched.begin(), matched.end());  // by bytes, whatever the locale
    paths.insert(paths.end(), matched.begin(), matched.end());
  }
  return paths;
}

std::optional<int64_t> examples_left(const TrainingData& data, const std::string& position) {
  if (data.train_reader == nullptr) return std::nullopt;
  const std::optional<int64_t> bytes = data.train_reader->bytes_left(position);
  if (!bytes) return std::nullopt;
  return static_cast<int64_t>(std::ceil(static_cast<double>(*bytes) / data.bytes_per_line));
}

namespace {

std::string describe_files(const std::vector<std::string>& paths) {
  if (paths.size() == 1) return paths.front();
  return std::to_string(paths.size()) + " files, " + paths.front() + " ... " + paths.back();
}

// The held-out set of data.eval_fraction: the first data.eval_examples of the tail of the lines
// of `paths`; the training reads up to that tail.
void hold_out_tail(const TrainConfig& config, const std::vector<std::string>& paths,
                   const dlrm::ReaderOptions& reader_options, dlrm::ReaderOptions& train_options,
                   TrainingData& data) {
  // Two passes over the files before training: one counts their lines, one finds where the tail
  // starts (docs/training.md, "The held-out set").
  const int64_t lines =
      dlrm::CriteoReader(paths, reader_options).skip_lines(std::numeric_limits<int64_t>::max());
  const int64_t held_out = std::llround(static_cast<double>(lines) * config.data.eval_fraction);
  if (held_out < 1 || held_out >= lines) {
    throw InvalidArgument("data.eval_fraction = " + std::to_string(config.data.eval_fraction) +
                          " of the " + std::to_string(lines) + " lines of " + data.description +
                          " holds out " + std::to_string(held_out) +
                          " of them: too few to hold some out and train on the rest; give more "
                          "data or another data.eval_fraction");
  }
  dlrm::CriteoReader splitter(paths, reader_options);
  splitter.skip_lines(lines - held_out);
  dlrm::ReaderOptions eval_options = reader_options;
  eval_options.begin = splitter.position();
  data.eval_reader = std::make_unique<dlrm::CriteoReader>(paths, eval_options);
  data.eval_reader->next(data.eval_set, config.data.eval_examples);
  train_options.end = eval_options.begin;
}

}  // namespace

TrainingData open_training_data(const TrainConfig& config,
                                const std::vector<int64_t>& vocabulary_sizes) {
  if (config.data.paths.empty()) {
    TrainingData data = synthetic_data(config, vocabulary_sizes);
    data.description = "synthetic Criteo-like";
    return data;
  }
  TrainingData data;
  data.best_auc = data.best_log_loss = std::nan("");
  const std::vector<std::string> paths = expand_data_paths(config.data.paths);
  data.description = describe_files(paths);
  const std::string& eval_path = config.data.eval_path;
  data.malformed = std::make_shared<dlrm::MalformedLines>();
  const dlrm::ReaderOptions reader_options{.vocabulary_sizes = vocabulary_sizes,
                                           .ids = categorical_ids(config),
                                           .max_malformed = config.data.max_malformed,
                                           .malformed = data.malformed,
                                           .strict = config.data.strict,
                                           .decompress_ahead = config.data.reader_threads == 2};
  dlrm::ReaderOptions train_options = reader_options;
  train_options.epochs = config.train.epochs;
  const dlrm::CriteoReader* held_out_reader = nullptr;
  if (!eval_path.empty()) {
    data.eval_reader =
        std::make_unique<dlrm::CriteoReader>(std::vector<std::string>{eval_path}, reader_options);
    data.eval_reader->next(data.eval_set, config.data.eval_examples);
    held_out_reader = data.eval_reader.get();
  } else if (config.data.eval_fraction > 0) {
    hold_out_tail(config, paths, reader_options, train_options, data);
    held_out_reader = data.eval_reader.get();
  }
  std::unique_ptr<dlrm::CriteoReader> head_reader;  // the held-out set from the head of the data
  if (held_out_reader == nullptr) {
    head_reader = std::make_unique<dlrm::CriteoReader>(paths, reader_options);
    head_reader->next(data.eval_set, config.data.eval_examples);
    held_out_reader = head_reader.get();
  }
  if (data.eval_set.size == 0) {
    throw InvalidArgument("no held-out examples could be read from " +
                          (eval_path.empty() ? data.description : eval_path));
  }
  const int64_t held_out_bytes = held_out_reader->bytes_read();
  data.bytes_per_line =
      static_cast<double>(held_out_bytes) / static_cast<double>(data.eval_set.size);
  if (head_reader != nullptr) {
    // The data's size: known for plain files, and for any once the held-out set read it all.
    const std::optional<int64_t> left = head_reader->bytes_left(head_reader->position());
    const bool read_all = data.eval_set.size < config.data.eval_examples;
    const std::optional<int64_t> data_bytes =
        left ? std::optional(held_out_bytes + *left)
             : (read_all ? std::optional(held_out_bytes) : std::nullopt);
    if (data_bytes &&
        static_cast<double>(held_out_bytes) > kMaxHeldOutShare * static_cast<double>(*data_bytes)) {
      // Small data: hold out its first examples up to a fifth of its bytes, and train on the
      // rest (docs/training.md, "The held-out set").
      const int64_t read = data.eval_set.size;
      if (read < 2) {
        throw InvalidArgument(data.description + " holds " + std::to_string(read) +
                              " example: too few to hold some out and train on the rest; give "
                              "more data, and a held-out file as data.eval_path (--eval-data)");
      }
      const int64_t kept =
          std::clamp<int64_t>(static_cast<int64_t>(static_cast<double>(read) * kMaxHeldOutShare *
                                                   static_cast<double>(*data_bytes) /
                                                   static_cast<double>(held_out_bytes)),
                              1, read - 1);
      head_reader = std::make_unique<dlrm::CriteoReader>(paths, reader_options);  // from the start
      head_reader->next(data.eval_set, kept);
      data.held_out_message =
          "data.eval_examples = " + std::to_string(config.data.eval_examples) + " would hold out " +
          std::to_string(read) + " examples of " + data.description + " (" +
          std::to_string(std::lround(100.0 * static_cast<double>(held_out_bytes) /
                                     static_cast<double>(*data_bytes))) +
          "% of the data): holding out its first " + std::to_string(data.eval_set.size) +
          " examples instead (at most a fifth of the data) and training on the rest; give a "
          "held-out file as data.eval_path (--eval-data) or hold out a tail "
          "(data.eval_fraction) to train on all of it";
    }
    // The training reads what follows the held-out head, in every epoch.
    train_options.begin = head_reader->position();
    data.eval_reader = std::move(head_reader);  // its short lines count too
  }
  auto reader = std::make_unique<dlrm::CriteoReader>(paths, train_options);
  data.train_reader = reader.get();
  data.train_source = std::move(reader);
  return data;
}

}  // namespace recemb::train
