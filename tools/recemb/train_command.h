// `recemb train`: the trainer (train/run/trainer.h) driven by a config file, --set overrides and
// shortcut options.
#ifndef RECEMB_TOOLS_RECEMB_TRAIN_COMMAND_H_
#define RECEMB_TOOLS_RECEMB_TRAIN_COMMAND_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "train/report/progress.h"

namespace recemb::tools {

struct TrainArguments {
  std::string config_path = {};             // TOML file; empty: defaults only
  std::vector<std::string> overrides = {};  // "section.key=value", applied after the shortcuts
  // Shortcuts for common settings; empty / not given leave the setting alone (a value given is
  // checked as the setting is: --steps 0 is an error).
  std::vector<std::string> data = {};  // data.path: files or globs, in order
  std::string eval_data = {}, preset = {}, output = {};
  std::optional<int64_t> steps = {}, batch_size = {};
  std::optional<int> threads = {};
  bool resume = false;
  // A checkpoint (a ckpt-* directory, or a checkpoint directory: its newest) a new run starts
  // from: RunOptions::init_from. Empty: from scratch (or --resume).
  std::string init_from = {};
  bool print_config = false;          // print the effective configuration instead of training
  bool print_default_config = false;  // print the documented defaults instead of training
};

// The overrides the arguments stand for: shortcuts first, then --set ones (which win).
std::vector<std::string> train_overrides(const TrainArguments& args);

// Runs the command: progress on `log`, the summary on `out`. Returns the exit status: 0, or
// 128 + the signal's number when SIGINT (130) or SIGTERM (143) stopped the run; bad settings or
// data throw InvalidArgument, as run_training does. While it trains, the first SIGINT or SIGTERM
// asks the run to stop after the current step (a checkpoint, the summary and the outputs are
// written: RunOptions::stop_signal) and the next one ends the process at once. Started by an MPI
// launcher
// (`mpirun -np K recemb train ...`), the K processes train together through
// recemb::mpi_communicator() (train/run/trainer.h) and only rank 0 prints; otherwise MPI is not
// initialised. Settings are checked before any exchange, so a bad one fails on every rank alike.
int run_train_command(const TrainArguments& args, std::ostream& out, std::ostream& log,
                      train::ProgressMode progress);

}  // namespace recemb::tools

#endif  // RECEMB_TOOLS_RECEMB_TRAIN_COMMAND_H_
