// The data a `recemb train` run reads: the training source and the held-out set. The held-out
// set is the synthetic generator's own stream, data.eval_path's first examples, the first of the
// tail data.eval_fraction holds out of data.path, or data.path's first examples, up to a fifth of
// its bytes (a small file: the rest trains; docs/training.md, "The held-out set").
#ifndef RECEMB_TRAIN_DATA_TRAINING_DATA_H_
#define RECEMB_TRAIN_DATA_TRAINING_DATA_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dlrm/criteo_reader.h"
#include "dlrm/example_batch.h"
#include "train/config/train_config.h"
#include "train/data/synthetic_criteo.h"

namespace recemb::train {

struct TrainingData {
  // The training examples: after the held-out head, or up to eval_fraction's tail, every epoch.
  std::unique_ptr<dlrm::ExampleSource> train_source;
  dlrm::CriteoReader* train_reader = nullptr;  // train_source when it reads a file
  // The reader of the held-out set (Criteo files): data.eval_path's, data.eval_fraction's tail's
  // or data.path's head's (whose lines the training reader then starts after).
  std::unique_ptr<dlrm::CriteoReader> eval_reader;
  dlrm::ExampleBatch eval_set;
  // The malformed lines every reader of the run met, counted once each against
  // data.max_malformed (Criteo files; null for synthetic data).
  std::shared_ptr<dlrm::MalformedLines> malformed;
  std::string description;       // the training data, for messages: its files, or "synthetic..."
  double bytes_per_line = 0;     // of the held-out examples read (Criteo files)
  std::string held_out_message;  // why the held-out set is smaller than data.eval_examples
  // The synthetic generator's planted model on the held-out set: the ceiling a trained model is
  // measured against (NaN for Criteo files).
  double best_auc = 0;
  double best_log_loss = 0;
  // Synthetic data of an open vocabulary (embedding.vocabulary = "dynamic"): the generator of the
  // held-out set, which update_held_out_set redraws as of a moment of the training.
  std::unique_ptr<SyntheticCriteo> drifting_eval_source;
};

// Opens config.data as the trainer reads it (data.path's files and globs: expand_data_paths;
// train.epochs; data.strict), hashing categorical values into tables of `vocabulary_sizes`
// (embedding.vocabulary = "hashed") or keeping them as keys ("dynamic"; the synthetic data then has
// vocabulary_sizes[f] items of feature f live at a time), and reads the held-out set. Throws
// InvalidArgument for an unreadable file, a glob matching nothing, too many malformed lines or a
// non-canonical one with data.strict (CriteoReader), no held-out example, a file of fewer than 2
// examples without data.eval_path (too few to hold some out and train on the rest), or an
// data.eval_fraction that holds out no line or all of them; DataLoss for damaged gzip data.
TrainingData open_training_data(const TrainConfig& config,
                                const std::vector<int64_t>& vocabulary_sizes);

// The held-out set as the training sees it after `examples_trained` examples: with synthetic
// data of an open vocabulary, the same examples carried by the items of that moment (the keys
// drift, the examples do not: docs/training.md, "The synthetic generator"); otherwise unchanged.
void update_held_out_set(TrainingData& data, int64_t examples_trained);

// data.path's entries as files, in order: a pattern with glob characters (*, ?, [) is replaced by
// the paths it matches, sorted by bytes (InvalidArgument naming it when it matches none); any
// other entry stays as it is.
std::vector<std::string> expand_data_paths(const std::vector<std::string>& patterns);

// About how many examples the training source has left from its `position` (epochs included),
// from the bytes left and the held-out lines' mean length; nullopt for synthetic data or gzip
// files (whose size is unknown before reading them).
std::optional<int64_t> examples_left(const TrainingData& data, const std::string& position);

}  // namespace recemb::train

#endif  // RECEMB_TRAIN_DATA_TRAINING_DATA_H_
