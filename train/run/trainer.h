// `recemb train`: a DLRM-style click-through model trained end to end. 26 categorical features,
// one recemb table each (C1..C26, sizes from the preset), looked up and updated by recemb's fused
// optimizer; 13 dense features through the bottom MLP; dot interactions; top MLP; log loss.
//
// Each step: next batch -> Embedding::lookup (recording a LookupBatch) -> dense forward/backward
// (gradients for the dense parameters and the activations) -> dense optimizer -> Embedding::
// apply_gradients. With train.overlap (one rank), the next batch is read and its lookup
// prefetched (PipelineStaleness::kNone) during the dense step and finished after the update:
// the results are bitwise the serial loop's (docs/training.md, "One training step"). Every
// train.eval_every steps (and before the first and after the last) the held-out set is evaluated
// (log loss, AUC). Every checkpoint.every steps (and at the end) the tables, slots, dense
// parameters, dense optimizer state, data position and loss window are saved atomically, so a
// resumed run continues exactly as an uninterrupted one (same loss curve).
//
// The held-out set: the synthetic generator's own stream, data.eval_path's first examples, or
// those of data.path, up to a fifth of its bytes (a small file: the rest trains; docs/training.md,
// "The held-out set"). A run stops at train.steps, when the data ends (after one step at least:
// none is an error), or when RunOptions::stop_signal asks it to; the summary says which.
//
// With embedding.vocabulary = "dynamic" the tables are dynamic, keyed by the categorical values
// themselves (docs/training.md, "Vocabularies"); the summary then reports each table's
// vocabulary, and checkpoints hold their keys, counts and last-seen steps.
//
// Files in output.dir: config.toml (effective configuration), metrics.jsonl (one JSON object per
// line: {"step","examples","train_loss"} every train.log_every steps, {"step","eval_auc",
// "eval_log_loss"} at evaluations), summary.json and training.svg (training and held-out log loss,
// and AUC, over steps), written through recemb's file system (run_report.h: write_run_file).
//
// Several ranks (RunOptions::communicator, e.g. under `mpirun -np K`): every rank calls
// run_training with the same config. The tables are sharded over the ranks (embedding.sharding,
// placement.h) and the dense layers are data-parallel (data_parallel.h): every rank reads the
// same global batches of train.batch_size examples and trains on its slice of each (rank_slice);
// the dense gradients are averaged over the global batch and every rank applies the same dense
// update, so the dense parameters stay identical on every rank; the embedding gradients are
// those of the global batch's mean loss. The run thus matches a one-process run with the same
// config up to float summation order. Evaluations split the held-out set over the ranks and
// gather the predictions: the AUC is that of the whole set. Only rank 0 writes output.dir and
// prints progress; checkpoints are collective (checkpoint.h), hold rank 0's dense state, and
// restore under any number of ranks (the data position counts global batches). Errors: an error
// one rank meets alone (reading data, writing outputs, a non-finite value in its slice) is agreed
// on at the next exchange, and every rank then throws it as "rank R: <message>", so that no rank
// is left waiting in a collective.
//
// The loop's parts: step_pipeline.h (the batches, their lookups and the overlap),
// held_out_evaluation.h (the evaluations), rank_errors.h (how the ranks meet errors) and
// run_summary.h (the summary's figures and times).
#ifndef RECEMB_TRAIN_RUN_TRAINER_H_
#define RECEMB_TRAIN_RUN_TRAINER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <ostream>

#include "recemb/communicator.h"

#include "train/config/train_config.h"
#include "train/report/progress.h"
#include "train/report/run_report.h"

namespace recemb::train {

struct RunOptions {
  // Continue from the newest checkpoint in the checkpoint directory (if there is none, say so and
  // start from scratch). Without it, an existing checkpoint directory is left alone and new
  // checkpoints are added to it.
  bool resume = false;
  // Not empty: a new run (its own steps from 0, data, outputs and checkpoints) whose tables,
  // embedding optimizer slots, dense parameters and dense optimizer slots are those of this
  // checkpoint (a ckpt-* directory, or a checkpoint directory: its newest), as `recemb train
  // --init-from` (docs/training.md, "Day after day: --init-from"). The model's shape must be the
  // checkpoint's (check_init_settings), checked before anything is written. The optimizers go on
  // counting their steps from the checkpoint's (Adam's bias correction, the tables' last-seen
  // steps). Not with `resume`.
  std::string init_from = {};
  std::ostream* log = nullptr;  // progress and messages (rank 0's only); nullptr: std::cerr
  ProgressMode progress = ProgressMode::kLines;
  // The ranks training together, each calling run_training with the same config (collective:
  // see the top of this file). Null: this process alone, as a group of one.
  std::shared_ptr<Communicator> communicator = nullptr;
  // When it becomes non-zero (the number of a signal that asked the run to stop, as `recemb
  // train` sets it on SIGINT and SIGTERM), the run stops before its next step: it saves a
  // checkpoint, evaluates, writes its outputs and returns with TrainSummary::stop_signal set.
  // With several ranks, every rank stops at the same step, the first at which any rank's flag is
  // set. Null: never.
  const std::atomic<int>* stop_signal = nullptr;
};

// Trains as `config` says. Throws InvalidArgument for bad configs or data (too many malformed
// lines, an unreadable file, no example left to train on), for a train.batch_size whose buffers
// would exceed the memory (estimated before the data is read), and for a --resume whose
// settings differ from the checkpoint's in a way that changes the training
// (check_resume_settings) or an init_from whose model differs (check_init_settings), naming the
// cause; files written before an error stay. A directory it writes (output.dir, checkpoint.dir,
// serving.publish_dir) that cannot be written throws std::system_error before the first step, and
// so does any failing write later (a full disk), naming the file; damaged gzip data throws
// DataLoss. With several
// ranks, also InvalidArgument when train.batch_size is smaller than the number of ranks or the
// ranks read different data, and every rank throws every error (see the top of this file).
TrainSummary run_training(const TrainConfig& config, const RunOptions& options = {});

}  // namespace recemb::train

#endif  // RECEMB_TRAIN_RUN_TRAINER_H_
