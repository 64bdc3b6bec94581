// The trainer's own state in a checkpoint, beside recemb's tables and slots: the dense model's
// parameters (and its shape: model_file.h), the dense optimizer's slots and step, the data
// position, the examples trained on, the loss window not yet recorded, and the run's settings.
// A run resumed from it continues exactly as an uninterrupted one (docs/training.md,
// "Checkpoints and --resume").
#ifndef RECEMB_TRAIN_RUN_TRAINER_CHECKPOINT_H_
#define RECEMB_TRAIN_RUN_TRAINER_CHECKPOINT_H_

#include <cstdint>
#include <string>

#include "recemb/checkpoint.h"

#include "dlrm/dense_optimizer.h"
#include "dlrm/dlrm_dense_model.h"
#include "train/config/train_config.h"

namespace recemb::train {

// The run's progress a checkpoint records beside the dense model and its optimizer.
struct TrainerProgress {
  std::string data_position = {};  // ExampleSource::position after the last batch trained on
  int64_t examples = 0;            // trained on over all runs
  double loss_window_sum = 0;      // the training losses of the steps not yet recorded
  int64_t loss_window_count = 0;
  // The tables' step (Embedding::step) at this run's step 0: the step of the checkpoint a run
  // initialised with --init-from started from; 0 for a run started from scratch.
  int64_t first_step = 0;
};

// The SaveOptions of a trainer checkpoint: `model`'s parameters and `optimizer`'s slots as extra
// arrays (borrowed: they must outlive the save), and its step, `progress`, `config` (to_toml)
// and the dense model's shape (dense_config_metadata) as metadata.
SaveOptions trainer_save_options(const TrainConfig& config, const dlrm::DlrmDenseModel& model,
                                 const dlrm::DenseOptimizer& optimizer,
                                 const TrainerProgress& progress, int keep_last);

// Restores into `model` and `optimizer` the state restore_checkpoint returned from `checkpoint`
// (named in messages) and returns the progress. Throws InvalidArgument naming the checkpoint,
// before changing anything, when a part is missing or malformed, an array's size is not this
// model's, or `config` changes a setting the saved run must keep (check_resume_settings; a
// checkpoint without settings, of an older version, resumes unchecked).
TrainerProgress restore_trainer_state(const RestoredState& state, const TrainConfig& config,
                                      const std::string& checkpoint, dlrm::DlrmDenseModel& model,
                                      dlrm::DenseOptimizer& optimizer);

// The dense half of restore_trainer_state, for a run initialised from another run's checkpoint
// (--init-from): restores `model`'s parameters and `optimizer`'s slots and step from `state`.
// Throws InvalidArgument naming `checkpoint`, before changing anything, when one is missing,
// malformed or of another size than this model's.
void restore_dense_state(const RestoredState& state, const std::string& checkpoint,
                         dlrm::DlrmDenseModel& model, dlrm::DenseOptimizer& optimizer);

}  // namespace recemb::train

#endif  // RECEMB_TRAIN_RUN_TRAINER_CHECKPOINT_H_
