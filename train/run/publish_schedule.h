// Publishing during a run (serving.publish_dir; docs/training.md, "Publishing to a server"): the
// tables and the dense model at step boundaries into a model directory, a base the first time and
// then deltas (recemb/publish.h), with what `recemb export` writes beside the tables
// (dlrm::model_file_options), so that a base is `recemb export`'s file of its step. A delta's rows
// are copied at the step boundary and its file written on another thread while training goes on;
// the previous one is waited for first (its error, if any, ends the run).
#ifndef RECEMB_TRAIN_RUN_PUBLISH_SCHEDULE_H_
#define RECEMB_TRAIN_RUN_PUBLISH_SCHEDULE_H_

#include <cstdint>
#include <filesystem>
#include <future>
#include <optional>

#include "recemb/embedding.h"
#include "recemb/publish.h"

#include "dlrm/dlrm_dense_model.h"
#include "train/config/train_config.h"
#include "train/report/progress.h"
#include "train/report/run_summary.h"

namespace recemb::train {

class PublishSchedule {
 public:
  // Publishes `embedding` and `model` as `config.serving` says, saying where the bases go on
  // `progress` and counting the time and publishes in `summary`. All outlive the schedule.
  PublishSchedule(const TrainConfig& config, Embedding& embedding,
                  const dlrm::DlrmDenseModel& model, ProgressDisplay& progress,
                  TrainSummary& summary);

  // Whether the run publishes (serving.publish_dir is set).
  bool enabled() const { return !config_.serving.publish_dir.empty(); }
  // Whether the next publish is due: serving.publish_every_seconds since the last (never before
  // the first, which the run makes at its start).
  bool due() const;
  // Publishes at `step` (the tables must be at rest: no lookup in flight). The first publish
  // writes a base at once and says where it went; later ones write their delta on another thread.
  void publish(int64_t step);
  // The step of the last publish (-1: none).
  int64_t published_step() const { return published_step_; }
  // Waits for the delta being written, if any, and rethrows its error; says where a base went.
  void finish();
  // Says how many deltas the run published, and their bytes (nothing if none).
  void report_deltas();

 private:
  const TrainConfig& config_;
  Embedding& embedding_;
  const dlrm::DlrmDenseModel& model_;
  ProgressDisplay& progress_;
  TrainSummary& summary_;
  std::optional<Clock::time_point> last_publish_;  // none: not published yet
  int64_t published_step_ = -1;
  std::future<PublishResult> writing_;  // the delta being written
  int64_t deltas_ = 0;                  // published by this run, and their bytes
  int64_t delta_bytes_ = 0;
  std::filesystem::path last_delta_;
};

}  // namespace recemb::train

#endif  // RECEMB_TRAIN_RUN_PUBLISH_SCHEDULE_H_
