// The data a `recemb train` run reads: the training source and the held-out set. The held-out
// set is the synthetic generator's own stream, data.eval_path's first examples, or those of
// data.path, up to a fifth of its bytes (a small file: the rest trains; docs/training.md, "The
// held-out set").
#ifndef RECEMB_TRAIN_TRAINING_DATA_H_
#define RECEMB_TRAIN_TRAINING_DATA_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "train/criteo_reader.h"
#include "train/example_batch.h"
#include "train/synthetic_criteo.h"
#include "train/train_config.h"

namespace recemb::train {

struct TrainingData {
  std::unique_ptr<ExampleSource> train_source;  // positioned after the held-out examples it gave
  CriteoReader* train_reader = nullptr;         // train_source when it reads a file
  std::unique_ptr<CriteoReader> eval_reader;    // data.eval_path's reader, when given
  ExampleBatch eval_set;
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

// Opens config.data as the trainer reads it, hashing categorical values into tables of
// `vocabulary_sizes` (embedding.vocabulary = "hashed") or keeping them as keys ("dynamic"; the
// synthetic data then has vocabulary_sizes[f] items of feature f live at a time), and reads the
// held-out set. Throws InvalidArgument for an unreadable file,
// too many malformed lines (CriteoReader), no held-out example, or a file of fewer than 2 examples
// without data.eval_path (too few to hold some out and train on the rest).
TrainingData open_training_data(const TrainConfig& config,
                                const std::vector<int64_t>& vocabulary_sizes);

// The held-out set as the training sees it after `examples_trained` examples: with synthetic
// data of an open vocabulary, the same examples carried by the items of that moment (the keys
// drift, the examples do not: docs/training.md, "The synthetic generator"); otherwise unchanged.
void update_held_out_set(TrainingData& data, int64_t examples_trained);

// The bytes of the file `path` before a CriteoReader `position` of a reader of that file alone
// ("criteo:<file index>:<offset>:<line>", criteo_reader.h; at its end, the index is 1).
int64_t bytes_before(const std::string& position, const std::string& path);

}  // namespace recemb::train

#endif  // RECEMB_TRAIN_TRAINING_DATA_H_
