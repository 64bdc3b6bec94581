// A run's checkpoints (docs/training.md, "Checkpoints and resuming"): every checkpoint.every steps
// before the last, and at the end, into checkpoint.dir, each holding the tables, their slots, the
// dense model, its optimizer and the run's progress (train/run/trainer_checkpoint.h); the
// checkpoint.keep newest are kept.
#ifndef RECEMB_TRAIN_RUN_CHECKPOINT_SCHEDULE_H_
#define RECEMB_TRAIN_RUN_CHECKPOINT_SCHEDULE_H_

#include <cstdint>
#include <filesystem>

#include "recemb/embedding.h"

#include "dlrm/dense_optimizer.h"
#include "dlrm/dlrm_dense_model.h"
#include "train/config/train_config.h"
#include "train/report/progress.h"
#include "train/report/run_summary.h"
#include "train/run/trainer_checkpoint.h"

namespace recemb::train {

class CheckpointSchedule {
 public:
  // Saves `embedding`, `model` and `optimizer` into `dir` as `config.checkpoint` says, naming each
  // checkpoint on `progress` and counting them and their time in `summary`. All outlive the
  // schedule.
  CheckpointSchedule(const TrainConfig& config, std::filesystem::path dir, Embedding& embedding,
                     const dlrm::DlrmDenseModel& model, const dlrm::DenseOptimizer& optimizer,
                     ProgressDisplay& progress, TrainSummary& summary);

  const std::filesystem::path& dir() const { return dir_; }
  // Whether the run saves after its step `step` (a multiple of checkpoint.every before the last;
  // the last is saved by the run's end).
  bool due(int64_t step) const;
  // Saves the state after the run's step `step` (the tables at rest: no lookup in flight), with
  // `run` (the data position, examples, loss window, first step); nothing if that step is saved
  // already (a run resumed at its final step).
  void save(int64_t step, const TrainerProgress& run);
  // A resumed run's step, saved already.
  void resumed_at(int64_t step) { last_saved_step_ = step; }

 private:
  const TrainConfig& config_;
  std::filesystem::path dir_;
  Embedding& embedding_;
  const dlrm::DlrmDenseModel& model_;
  const dlrm::DenseOptimizer& optimizer_;
  ProgressDisplay& progress_;
  TrainSummary& summary_;
  int64_t last_saved_step_ = -1;
};

}  // namespace recemb::train

#endif  // RECEMB_TRAIN_RUN_CHECKPOINT_SCHEDULE_H_
