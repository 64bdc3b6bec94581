// The figures of a `recemb train` run's summary (TrainSummary, run_report.h) gathered from the
// run's parts, the time accounting they use, and the line a run starts with.
#ifndef RECEMB_TRAIN_REPORT_RUN_SUMMARY_H_
#define RECEMB_TRAIN_REPORT_RUN_SUMMARY_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "recemb/config.h"
#include "recemb/embedding.h"

#include "dlrm/dense_isa.h"
#include "train/config/train_config.h"
#include "train/data/training_data.h"
#include "train/report/run_report.h"

namespace recemb::train {

// The clock of a run's times (TrainSummary's *_seconds).
using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A run "did not learn" when its held-out AUC ends below this, or its log loss not below the one
// before its first step (docs/training.md, "What a run prints and writes").
inline constexpr double kLearnedAuc = 0.52;

// Whether a run learned (TrainSummary::learned): final_auc >= kLearnedAuc, and final_log_loss
// not at or above initial_log_loss (an unknown, NaN, initial log loss does not count against it).
bool learned(double final_auc, double final_log_loss, double initial_log_loss);

// The line a run of `config` starts with: its `tables`' rows (or, dynamic, their keys at most),
// their dimension and bytes with optimizer slots (`embedding_bytes`), the dense model's
// parameters and the data (TrainingData::description).
std::string run_description(const TrainConfig& config, const std::vector<TableConfig>& tables,
                            int64_t embedding_bytes, size_t dense_parameters,
                            dlrm::DenseIsa dense_isa, const std::string& data_description);

// Adds the lines that `data`'s readers (Criteo files) skipped as malformed or read as short, and
// the messages of the first malformed ones, to `summary`. The readers must be paused
// (PrefetchingSource::pause).
void add_malformed_lines(const TrainingData& data, TrainSummary& summary);

// Collective (vocabulary_stats gathers every rank's parts): the vocabularies of `embedding`'s
// dynamic tables, in table order; empty when it has none.
std::vector<TableVocabulary> table_vocabularies(const Embedding& embedding);

}  // namespace recemb::train

#endif  // RECEMB_TRAIN_REPORT_RUN_SUMMARY_H_
