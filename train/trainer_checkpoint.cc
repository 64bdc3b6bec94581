#include "train/trainer_checkpoint.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <span>

#include "recemb/error.h"

#include "train/float_text.h"
#include "train/model_file.h"
#include "train/resume_settings.h"

namespace recemb::train {
namespace {

// Checkpoint names of the trainer's own state (beside recemb's tables and slots, and the dense
// model's parameters and shape: model_file.h).
constexpr char kDenseOptimizerSlots[] = "dense/optimizer_slots";
constexpr char kDataPosition[] = "data_position";
constexpr char kDenseOptimizerStep[] = "dense_optimizer_step";
constexpr char kExamples[] = "examples";
constexpr char kLossWindow[] = "loss_window";  // "<sum> <count>" of the unrecorded steps
constexpr char kSettings[] = "train_config";   // to_toml of the run's settings

}  // namespace

SaveOptions trainer_save_options(const TrainConfig& config, const DlrmDenseModel& model,
                                 const DenseOptimizer& optimizer, const TrainerProgress& progress,
                                 int keep_last) {
  SaveOptions options{
      .keep_last = keep_last,
      .extra_arrays = {{.name = kDenseParametersArray, .values = model.parameters()},
                       {.name = kDenseOptimizerSlots, .values = optimizer.slots()}},
      .metadata = dense_config_metadata(model.config())};
  options.metadata.insert({{kDataPosition, progress.data_position},
                           {kSettings, to_toml(config)},
                           {kDenseOptimizerStep, std::to_string(optimizer.step())},
                           {kExamples, std::to_string(progress.examples)},
                           {kLossWindow, double_text(progress.loss_window_sum) + " " +
                                             std::to_string(progress.loss_window_count)}});
  return options;
}

TrainerProgress restore_trainer_state(const RestoredState& state, const TrainConfig& config,
                                      const std::string& checkpoint, DlrmDenseModel& model,
                                      DenseOptimizer& optimizer) {
  const auto array = [&](const char* name, size_t size) -> const std::vector<float>& {
    const auto found = state.extra_arrays.find(name);
    if (found == state.extra_arrays.end() || found->second.size() != size) {
      throw InvalidArgument(checkpoint + ": '" + name + "' is missing or has " +
                            "another size than this configuration's model");
    }
    return found->second;
  };
  const auto text = [&](const char* name) -> const std::string& {
    const auto found = state.metadata.find(name);
    if (found == state.metadata.end()) {
      throw InvalidArgument(checkpoint + ": metadata '" + name + "' is missing");
    }
    return found->second;
  };
  const auto integer = [&](const char* name) {
    int64_t value = 0;
    const std::string& written = text(name);
    if (std::sscanf(written.c_str(), "%" SCNd64, &value) != 1 || value < 0) {
      throw InvalidArgument(checkpoint + ": malformed metadata '" + name + "'");
    }
    return value;
  };
  // Checkpoints of older versions hold no settings: they resume unchecked.
  if (const auto saved = state.metadata.find(kSettings); saved != state.metadata.end()) {
    check_resume_settings(saved->second, config, checkpoint);
  }
  const std::vector<float>& parameters = array(kDenseParametersArray, model.parameters().size());
  const std::vector<float>& slots = array(kDenseOptimizerSlots, optimizer.slots().size());
  const int64_t optimizer_step = integer(kDenseOptimizerStep);
  TrainerProgress progress{.data_position = text(kDataPosition), .examples = integer(kExamples)};
  if (std::sscanf(text(kLossWindow).c_str(), "%lf %" SCNd64, &progress.loss_window_sum,
                  &progress.loss_window_count) != 2) {
    throw InvalidArgument(checkpoint + ": malformed metadata '" + kLossWindow + "'");
  }
  std::copy(parameters.begin(), parameters.end(), model.parameters().begin());
  std::copy(slots.begin(), slots.end(), optimizer.slots().begin());
  optimizer.set_step(optimizer_step);
  return progress;
}

}  // namespace recemb::train
