#include "train/run/trainer_checkpoint.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <span>

#include "recemb/error.h"

#include "dlrm/model_file.h"
#include "support/number_text.h"
#include "train/config/resume_settings.h"

namespace recemb::train {
namespace {

// Checkpoint names of the trainer's own state (beside recemb's tables and slots, and the dense
// model's parameters and shape: model_file.h).
constexpr char kDenseOptimizerSlots[] = "dense/optimizer_slots";
constexpr char kDataPosition[] = "data_position";
constexpr char kDenseOptimizerStep[] = "dense_optimizer_step";
constexpr char kExamples[] = "examples";
constexpr char kLossWindow[] = "loss_window";  // "<sum> <count>" of the unrecorded steps
constexpr char kFirstStep[] = "first_step";    // TrainerProgress::first_step

// The checkpoint's metadata `name`, or InvalidArgument naming `checkpoint`.
const std::string& metadata_text(const RestoredState& state, const std::string& checkpoint,
                                 const char* name) {
  const auto found = state.metadata.find(name);
  if (found == state.metadata.end()) {
    throw InvalidArgument(checkpoint + ": metadata '" + name + "' is missing");
  }
  return found->second;
}

// The checkpoint's metadata `name` as an integer >= 0, or InvalidArgument naming `checkpoint`.
int64_t metadata_integer(const RestoredState& state, const std::string& checkpoint,
                         const char* name) {
  int64_t value = 0;
  const std::string& written = metadata_text(state, checkpoint, name);
  if (std::sscanf(written.c_str(), "%" SCNd64, &value) != 1 || value < 0) {
    throw InvalidArgument(checkpoint + ": malformed metadata '" + name + "'");
  }
  return value;
}

}  // namespace

SaveOptions trainer_save_options(const TrainConfig& config, const dlrm::DlrmDenseModel& model,
                                 const dlrm::DenseOptimizer& optimizer,
                                 const TrainerProgress& progress, int keep_last) {
  SaveOptions options{
      .keep_last = keep_last,
      .extra_arrays = {{.name = dlrm::kDenseParametersArray, .values = model.parameters()},
                       {.name = kDenseOptimizerSlots, .values = optimizer.slots()}},
      .metadata = dlrm::dense_config_metadata(model.config())};
  options.metadata.insert({{kDataPosition, progress.data_position},
                           {kSettingsMetadata, to_toml(config)},
                           {kDenseOptimizerStep, std::to_string(optimizer.step())},
                           {kExamples, std::to_string(progress.examples)},
                           {kFirstStep, std::to_string(progress.first_step)},
                           {kLossWindow, support::double_text(progress.loss_window_sum) + " " +
                                             std::to_string(progress.loss_window_count)}});
  return options;
}

TrainerProgress restore_trainer_state(const RestoredState& state, const TrainConfig& config,
                                      const std::string& checkpoint, dlrm::DlrmDenseModel& model,
                                      dlrm::DenseOptimizer& optimizer) {
  // Checkpoints of older versions hold no settings: they resume unchecked.
  if (const auto saved = state.metadata.find(kSettingsMetadata); saved != state.metadata.end()) {
    check_resume_settings(saved->second, config, checkpoint);
  }
  TrainerProgress progress{.data_position = metadata_text(state, checkpoint, kDataPosition),
                           .examples = metadata_integer(state, checkpoint, kExamples)};
  if (std::sscanf(metadata_text(state, checkpoint, kLossWindow).c_str(), "%lf %" SCNd64,
                  &progress.loss_window_sum, &progress.loss_window_count) != 2) {
    throw InvalidArgument(checkpoint + ": malformed metadata '" + kLossWindow + "'");
  }
  // Checkpoints of older versions, and of runs started from scratch, start at step 0.
  if (state.metadata.contains(kFirstStep)) {
    progress.first_step = metadata_integer(state, checkpoint, kFirstStep);
  }
  restore_dense_state(state, checkpoint, model, optimizer);
  return progress;
}

void restore_dense_state(const RestoredState& state, const std::string& checkpoint,
                         dlrm::DlrmDenseModel& model, dlrm::DenseOptimizer& optimizer) {
  const auto array = [&](const char* name, size_t size) -> const std::vector<float>& {
    const auto found = state.extra_arrays.find(name);
    if (found == state.extra_arrays.end() || found->second.size() != size) {
      throw InvalidArgument(checkpoint + ": '" + name + "' is missing or has " +
                            "another size than this configuration's model");
    }
    return found->second;
  };
  const std::vector<float>& parameters =
      array(dlrm::kDenseParametersArray, model.parameters().size());
  const std::vector<float>& slots = array(kDenseOptimizerSlots, optimizer.slots().size());
  const int64_t optimizer_step = metadata_integer(state, checkpoint, kDenseOptimizerStep);
  std::copy(parameters.begin(), parameters.end(), model.parameters().begin());
  std::copy(slots.begin(), slots.end(), optimizer.slots().begin());
  optimizer.set_step(optimizer_step);
}

}  // namespace recemb::train
