#include "train/run/checkpoint_schedule.h"

#include <utility>

#include "recemb/checkpoint.h"

namespace recemb::train {

CheckpointSchedule::CheckpointSchedule(const TrainConfig& config, std::filesystem::path dir,
                                       Embedding& embedding, const dlrm::DlrmDenseModel& model,
                                       const dlrm::DenseOptimizer& optimizer,
                                       ProgressDisplay& progress, TrainSummary& summary)
    : config_(config),
      dir_(std::move(dir)),
      embedding_(embedding),
      model_(model),
      optimizer_(optimizer),
      progress_(progress),
      summary_(summary) {}

bool CheckpointSchedule::due(int64_t step) const {
  return config_.checkpoint.every > 0 && step % config_.checkpoint.every == 0 &&
         step < config_.train.steps;
}

void CheckpointSchedule::save(int64_t step, const TrainerProgress& run) {
  if (step == last_saved_step_) return;
  last_saved_step_ = step;
  const Clock::time_point t = Clock::now();
  const std::filesystem::path path = save_checkpoint(
      embedding_, dir_,
      trainer_save_options(config_, model_, optimizer_, run, config_.checkpoint.keep));
  summary_.checkpoint_seconds += seconds_since(t);
  ++summary_.checkpoints;
  progress_.message("checkpoint " + path.string());
}

}  // namespace recemb::train
