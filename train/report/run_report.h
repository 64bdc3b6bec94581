// What a finished `recemb train` run reports: its figures (TrainSummary), the lines printed at the
// end (format_summary), and the files written beside metrics.jsonl: summary.json (every figure)
// and training.svg (training and held-out log loss, and held-out AUC, over the steps).
#ifndef RECEMB_TRAIN_REPORT_RUN_REPORT_H_
#define RECEMB_TRAIN_REPORT_RUN_REPORT_H_

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "recemb/embedding.h"
#include "recemb/publish.h"

#include "train/report/metrics_log.h"

namespace recemb::train {

// A dynamic table's vocabulary at the end of a run (embedding.vocabulary = "dynamic").
struct TableVocabulary {
  std::string table;  // C1..C26
  int64_t capacity = 0;
  VocabularyStats stats = {};  // keys held; admitted, evicted and not-admitted lookups in this run
};

// The figures are this rank's view of the run: the same on every rank, except the times and the
// memory (this process's) and, for a resumed run, initial_auc and initial_log_loss (read back
// from metrics.jsonl by rank 0 alone; 0 and NaN on the other ranks, hence also `learned`).
struct TrainSummary {
  int rank = 0;                 // this process's rank; rank 0 writes the outputs and prints
  int ranks = 1;                // processes that trained together
  std::string dense_isa = "";   // the dense layers' instruction set: avx512, avx2, baseline
  int64_t first_step = 0;       // 0, or the step resumed from
  int64_t steps = 0;            // step counter at the end
  int64_t requested_steps = 0;  // train.steps
  bool data_ended = false;      // the training data ended before train.steps
  int stop_signal = 0;          // the signal that stopped the run early (SIGINT, SIGTERM); 0: none
  int64_t examples = 0;         // training examples consumed by this run (all ranks together)
  double seconds = 0;           // wall time of this run's training loop (evaluations included)
  double examples_per_second = 0;
  double initial_auc = 0;  // of the model before this run's first step
  double initial_log_loss = std::nan("");
  double final_auc = 0;
  double final_log_loss = 0;
  // Whether the model learned: final_auc of at least 0.52 and final_log_loss below
  // initial_log_loss. When not, format_summary ends with a warning saying what to try.
  bool learned = true;
  // The held-out log loss rose from its lowest, lowest_log_loss at step overfitting_from_step (of
  // the evaluations in metrics.jsonl), by more than 1% to the last while the training loss fell
  // (note_overfitting): the model overfits, and a warning that it did not learn says so. -1: not
  // so (and on ranks other than 0, which do not read metrics.jsonl).
  int64_t overfitting_from_step = -1;
  double lowest_log_loss = std::nan("");
  // Synthetic data: AUC and log loss of the planted model on the held-out set (the Bayes-optimal
  // ceiling of any model); NaN for Criteo files.
  double best_auc = 0;
  double best_log_loss = 0;
  // Where the time went (seconds, this run).
  double data_seconds = 0, lookup_seconds = 0, dense_seconds = 0, update_seconds = 0;
  double eval_seconds = 0, checkpoint_seconds = 0;
  int64_t checkpoints = 0;       // checkpoints this run wrote
  double publish_seconds = 0;    // serving.publish_dir: writing bases and deltas
  int64_t publishes = 0;         // files published this run
  int64_t checkpoint_every = 0;  // checkpoint.every: steps between checkpoints (0: at the end)
  int64_t embedding_bytes = 0;   // tables + slots
  int64_t peak_resident_bytes = 0;
  std::vector<TableVocabulary> vocabularies = {};  // the dynamic tables, C1..C26; else empty
  int64_t malformed_lines = 0;                     // input lines skipped (Criteo data)
  int64_t short_lines = 0;  // lines read with missing trailing fields taken as empty (Criteo data)
  std::vector<std::string> malformed_messages = {};  // the first: "<file>:<line>: <reason>"
};

// Writes `text` as the file `path` atomically, through the file system in use
// (support/file_system.h): a temporary file, fsynced and renamed over `path`, which thus holds the
// whole text or its previous version, never a part. A failing call (ENOSPC, EIO, EROFS, ...)
// throws std::system_error naming the call, the file and the errno's text; nothing is left
// behind. Every file of output.dir but metrics.jsonl is written so.
void write_run_file(const std::filesystem::path& path, const std::string& text);

// Creates the directory `directory` (and its parents) if need be, and checks that files can be
// written in it, by writing one byte to a new file and removing it, through the file system in
// use: a read-only or full file system is found before the first step, not at the end of the run.
// Throws std::system_error naming `setting` (e.g. "checkpoint.dir"), the directory, the call and
// the errno's text.
void create_writable_directory(const std::filesystem::path& directory, const std::string& setting);

// The line printed for a base published into serving.publish_dir: "published a base: FILE (1.5
// MiB, 1000 rows; WHY); removed older version 1 2" (the removed versions only when there are).
std::string published_base_line(const PublishResult& base);

// The line printed at the end of a run that published `deltas` deltas (> 0) of `bytes` bytes in
// all, the last of them `last`: "published 10 deltas (4.7 MiB) beside the bases; the last: FILE".
std::string published_deltas_line(int64_t deltas, int64_t bytes, const std::filesystem::path& last);

// Sets summary.overfitting_from_step and lowest_log_loss from the records of `metrics` (see
// TrainSummary).
void note_overfitting(const MetricsLog& metrics, TrainSummary& summary);

// The summary as the lines printed at the end of a run.
std::string format_summary(const TrainSummary& summary);

// Writes every figure of `summary` but the malformed lines' messages as one JSON object to `path`
// (unknown values, NaN, as null), as write_run_file does.
void write_summary_json(const TrainSummary& summary, const std::filesystem::path& path);

// Writes (as write_run_file does) an SVG of two charts to `path`, against the step: the log loss,
// of training (the records of `metrics`, each the mean over `log_every` steps) and held-out (each
// evaluation marked), and the held-out AUC (each evaluation marked).
void write_training_svg(const MetricsLog& metrics, int64_t log_every,
                        const std::filesystem::path& path);

}  // namespace recemb::train

#endif  // RECEMB_TRAIN_REPORT_RUN_REPORT_H_
