#include "train/run/publish_schedule.h"

#include <string>

#include "dlrm/model_file.h"
#include "train/report/run_report.h"

namespace recemb::train {

PublishSchedule::PublishSchedule(const TrainConfig& config, Embedding& embedding,
                                 const dlrm::DlrmDenseModel& model, ProgressDisplay& progress,
                                 TrainSummary& summary)
    : config_(config),
      embedding_(embedding),
      model_(model),
      progress_(progress),
      summary_(summary) {}

bool PublishSchedule::due() const {
  return last_publish_ && seconds_since(*last_publish_) >= config_.serving.publish_every_seconds;
}

void PublishSchedule::publish(int64_t step) {
  const Clock::time_point t = Clock::now();
  finish();
  const std::optional<dlrm::DenseModelPart> dense =
      dlrm::DenseModelPart{.config = model_.config(),
                           .parameters = {model_.parameters().begin(), model_.parameters().end()}};
  const ExportOptions options = dlrm::model_file_options(
      embedding_, dense, parse_serving_dtype(config_.serving.publish_dtype),
      "serving.publish_dir '" + config_.serving.publish_dir + "': ");
  const bool first = !last_publish_;
  writing_ = std::async(std::launch::async,
                        begin_publish(embedding_, config_.serving.publish_dir,
                                      {.dtype = options.dtype,
                                       .extra_arrays = options.extra_arrays,
                                       .metadata = options.metadata,
                                       .base_every_deltas = config_.serving.base_every_deltas,
                                       .base_every_bytes = config_.serving.base_every_bytes,
                                       .keep_versions = config_.serving.keep_versions}));
  published_step_ = step;
  summary_.publish_seconds += seconds_since(t);
  ++summary_.publishes;
  last_publish_ = Clock::now();
  if (first) finish();  // the base, written already: said at once where it went
}

void PublishSchedule::finish() {
  if (!writing_.valid()) return;
  const Clock::time_point t = Clock::now();
  const PublishResult result = writing_.get();
  summary_.publish_seconds += seconds_since(t);
  if (result.sequence > 0) {
    ++deltas_;
    delta_bytes_ += result.bytes;
    last_delta_ = result.file;
    return;
  }
  progress_.message(published_base_line(result));
}

void PublishSchedule::report_deltas() {
  if (deltas_ == 0) return;
  progress_.message(published_deltas_line(deltas_, delta_bytes_, last_delta_));
}

}  // namespace recemb::train
