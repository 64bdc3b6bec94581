#include "tools/recemb/train_command.h"

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <memory>
#include <string>
#include <unistd.h>

#include "recemb/communicator.h"
#include "recemb/error.h"

#include "train/config/default_config.h"
#include "train/config/train_config.h"
#include "train/run/trainer.h"

namespace recemb::tools {
namespace {

// Whether an MPI launcher (mpirun or mpiexec of OpenMPI, MPICH or Intel MPI; srun with PMI or
// PMIx) started this process, from the environment it gives its processes.
bool started_by_mpi_launcher() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

// The ranks of this run. Under an MPI launcher, MPI's (recemb::mpi_communicator(); a group of
// one under `mpirun -np 1`). Otherwise this process alone, without initialising MPI: a plain
// `recemb train` stays the single-process program it was, with nothing of MPI loaded.
std::shared_ptr<Communicator> run_communicator() {
  if (!started_by_mpi_launcher()) return nullptr;
  if (!mpi_available()) {
    const int processes = launched_processes();
    if (processes <= 1) return nullptr;
    throw FailedPrecondition(
        "started as one of " + std::to_string(processes) +
        " processes, but this recemb was built without MPI (RECEMB_WITH_MPI=OFF): each would "
        "train alone and write the same files; rebuild with MPI (libopenmpi-dev) or run one "
        "process");
  }
  return mpi_communicator();
}

// A TOML basic string holding `text`.
std::string toml_string(const std::string& text) {
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  quoted += '"';
  return quoted;
}

// The signal that asked the run to stop (0: none yet).
std::atomic<int> stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);  // set from a signal handler

void request_stop(int signal) {
  stop_signal.store(signal);
  constexpr char kMessage[] = "\nrecemb: stopping after the current step (again to stop at once)\n";
  [[maybe_unused]] const ssize_t written = write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
}

// While alive: the first SIGINT or SIGTERM sets stop_signal, and resets its handler to the
// default, so that a second one ends the process at once. The earlier handlers come back after.
class StopOnSignals {
 public:
  StopOnSignals() {
    stop_signal.store(0);
    struct sigaction action {};
    action.sa_handler = request_stop;
    action.sa_flags = SA_RESTART | SA_RESETHAND;  // reads and writes carry on
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &previous_interrupt_);
    sigaction(SIGTERM, &action, &previous_terminate_);
  }
  ~StopOnSignals() {
    sigaction(SIGINT, &previous_interrupt_, nullptr);
    sigaction(SIGTERM, &previous_terminate_, nullptr);
  }
  StopOnSignals(const StopOnSignals&) = delete;
  StopOnSignals& operator=(const StopOnSignals&) = delete;

 private:
  struct sigaction previous_interrupt_ {};
  struct sigaction previous_terminate_ {};
};

}  // namespace

std::vector<std::string> train_overrides(const TrainArguments& args) {
  std::vector<std::string> overrides;
  if (args.data.size() == 1) overrides.push_back("data.path=" + toml_string(args.data.front()));
  if (args.data.size() > 1) {
    std::string list;
    for (const std::string& path : args.data)
      list += (list.empty() ? "" : ", ") + toml_string(path);
    overrides.push_back("data.path=[" + list + "]");
  }
  if (!args.eval_data.empty()) overrides.push_back("data.eval_path=" + toml_string(args.eval_data));
  if (!args.preset.empty()) overrides.push_back("data.preset=" + toml_string(args.preset));
  if (!args.output.empty()) overrides.push_back("output.dir=" + toml_string(args.output));
  if (args.steps) overrides.push_back("train.steps=" + std::to_string(*args.steps));
  if (args.batch_size) {
    overrides.push_back("train.batch_size=" + std::to_string(*args.batch_size));
  }
  if (args.threads) overrides.push_back("embedding.threads=" + std::to_string(*args.threads));
  overrides.insert(overrides.end(), args.overrides.begin(), args.overrides.end());
  return overrides;
}

int run_train_command(const TrainArguments& args, std::ostream& out, std::ostream& log,
                      train::ProgressMode progress) {
  if (args.print_default_config) {
    out << train::default_config_toml();
    return 0;
  }
  const train::TrainConfig config =
      train::load_train_config(args.config_path, train_overrides(args));
  if (args.print_config) {
    out << train::to_toml(config);
    return 0;
  }
  const StopOnSignals stop_on_signals;
  const train::TrainSummary summary =
      train::run_training(config, {.resume = args.resume,
                                   .init_from = args.init_from,
                                   .log = &log,
                                   .progress = progress,
                                   .communicator = run_communicator(),
                                   .stop_signal = &stop_signal});
  const int status = summary.stop_signal != 0 ? 128 + summary.stop_signal : 0;
  if (summary.rank != 0) return status;  // rank 0 reports for all
  out << train::format_summary(summary);
  out << "wrote " << config.output.dir
      << "/{config.toml,metrics.jsonl,summary.json,training.svg}\n";
  return status;
}

}  // namespace recemb::tools
