// `recemb train`: a DLRM-style click-through model trained end to end. 26 categorical features,
// one recemb table each (C1..C26, sizes from the preset), looked up and updated by recemb's fused
// optimizer; 13 dense features through the bottom MLP; dot interactions; top MLP; log loss.
//
// Each step: next batch -> Embedding::lookup (recording a LookupBatch) -> dense forward/backward
// (gradients for the dense parameters and the activations) -> dense optimizer -> Embedding::
// apply_gradients. Every train.eval_every steps (and before the first and after the last) the
// held-out set is evaluated (log loss, AUC). Every checkpoint.every steps (and at the end) the
// tables, slots, dense parameters, dense optimizer state, data position and loss window are saved
// atomically, so a resumed run continues exactly as an uninterrupted one (same loss curve).
//
// Files in output.dir: config.toml (effective configuration), metrics.jsonl (one JSON object per
// line: {"step","examples","train_loss"} every train.log_every steps, {"step","eval_auc",
// "eval_log_loss"} at evaluations), summary.json and training.svg (loss and AUC over steps).
#ifndef RECEMB_TRAIN_TRAINER_H_
#define RECEMB_TRAIN_TRAINER_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "train/progress.h"
#include "train/train_config.h"

namespace recemb::train {

struct RunOptions {
  // Continue from the newest checkpoint in the checkpoint directory (if there is none, say so and
  // start from scratch). Without it, an existing checkpoint directory is left alone and new
  // checkpoints are added to it.
  bool resume = false;
  std::ostream* log = nullptr;  // progress and messages; nullptr: std::cerr
  ProgressMode progress = ProgressMode::kLines;
};

struct TrainSummary {
  int64_t first_step = 0;  // 0, or the step resumed from
  int64_t steps = 0;       // step counter at the end
  int64_t examples = 0;    // training examples consumed by this run
  double seconds = 0;      // wall time of this run's training loop (evaluations included)
  double examples_per_second = 0;
  double initial_auc = 0;  // of the model before this run's first step
  double final_auc = 0;
  double final_log_loss = 0;
  // Synthetic data: AUC and log loss of the planted model on the held-out set (the Bayes-optimal
  // ceiling of any model); NaN for Criteo files.
  double best_auc = 0;
  double best_log_loss = 0;
  // Where the time went (seconds, this run).
  double data_seconds = 0, lookup_seconds = 0, dense_seconds = 0, update_seconds = 0;
  double eval_seconds = 0, checkpoint_seconds = 0;
  int64_t embedding_bytes = 0;  // tables + slots
  int64_t peak_resident_bytes = 0;
  int64_t malformed_lines = 0;                       // input lines skipped (Criteo data)
  std::vector<std::string> malformed_messages = {};  // the first: "<file>:<line>: <reason>"
};

// Trains as `config` says. Throws InvalidArgument for bad configs or data (too many malformed
// lines, an unreadable file), naming the cause; files written before an error stay.
TrainSummary run_training(const TrainConfig& config, const RunOptions& options = {});

// The summary as the lines printed at the end of a run.
std::string format_summary(const TrainSummary& summary);

}  // namespace recemb::train

#endif  // RECEMB_TRAIN_TRAINER_H_
