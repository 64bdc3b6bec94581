// A small sharded training job for tests/mpi/rank_failure_test.cc, run under mpirun: every rank
// trains a row-wise sharded Embedding through MPI, and one rank fails on purpose.
//
//   training_job --steps N [--fail-rank R --fail-at S --failure F] [--directory D]
//
// F = kill: rank R sends itself SIGKILL before step S; throw: rank R throws an uncaught exception
// (std::terminate); bad-id: rank R passes an id out of range at step S, which every rank reports
// (the job then exits with status 3 on every rank). The checkpoint failures, at step S, report on
// every rank "rank Q: <error type> errno <E>: <message>" and exit with status 4:
// save-into-file: every rank saves into D/a_file (a file the caller made, not a directory);
// damaged-restore: every rank saves into D, rank R damages a data file, every rank restores.
// Prints "step S" on rank 0 after each step.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "recemb/recemb.h"

namespace {

struct Arguments {
  int steps = 20;
  int fail_rank = -1;
  int fail_at = 0;
  std::string failure = "kill";
  std::filesystem::path directory;
};

Arguments parse(int argc, char** argv) {
  Arguments arguments;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--steps") {
      arguments.steps = std::stoi(value);
    } else if (flag == "--fail-rank") {
      arguments.fail_rank = std::stoi(value);
    } else if (flag == "--fail-at") {
      arguments.fail_at = std::stoi(value);
    } else if (flag == "--failure") {
      arguments.failure = value;
    } else if (flag == "--directory") {
      arguments.directory = value;
    } else {
      throw std::invalid_argument("unknown flag " + flag);
    }
  }
  return arguments;
}

// "<type> errno <E>: <message>" of the exception in flight.
std::string describe_current_exception() {
  try {
    throw;
  } catch (const recemb::InvalidArgument& error) {
    return std::string("InvalidArgument errno 0: ") + error.what();
  } catch (const recemb::FailedPrecondition& error) {
    return std::string("FailedPrecondition errno 0: ") + error.what();
  } catch (const recemb::DataLoss& error) {
    return std::string("DataLoss errno 0: ") + error.what();
  } catch (const std::system_error& error) {
    return "system_error errno " + std::to_string(error.code().value()) + ": " + error.what();
  } catch (const std::exception& error) {
    return std::string("other errno 0: ") + error.what();
  }
}

// The checkpoint failures (see the top of the file).
void fail_in_checkpoint(recemb::Embedding& layer, const Arguments& arguments) {
  if (arguments.failure == "save-into-file") {
    recemb::save_checkpoint(layer, arguments.directory / "a_file");
    return;
  }
  const std::filesystem::path checkpoint = recemb::save_checkpoint(layer, arguments.directory);
  if (layer.rank() == arguments.fail_rank) {
    std::fstream file(checkpoint / "t0.accumulators.f32",
                      std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(100);
    file.put('\x7f');
  }
  recemb::restore_checkpoint(layer, checkpoint);
}

}  // namespace

int main(int argc, char** argv) {
  const Arguments arguments = parse(argc, argv);
  constexpr int64_t kRows = 10000;
  constexpr int64_t kBatch = 256;
  recemb::Embedding layer(
      {{.name = "items", .vocabulary_size = kRows, .dim = 16}},
      {{.name = "clicked", .table = "items"}},
      {.optimizer = recemb::Adagrad{.learning_rate = 0.1f},
       .placement = recemb::PlacementOptions{.num_shards = recemb::mpi_communicator()->size(),
                                             .strategy = recemb::ShardingStrategy::kRowWise},
       .communicator = recemb::mpi_communicator()});
  const int rank = layer.rank();
  std::mt19937_64 rng(static_cast<uint64_t>(rank));
  std::uniform_int_distribution<int64_t> id(0, kRows - 1);
  std::vector<int64_t> ids(kBatch);
  std::vector<float> activations(kBatch * 16);
  std::vector<float> gradients(kBatch * 16, 0.01f);
  recemb::LookupBatch batch;
  for (int step = 0; step < arguments.steps; ++step) {
    if (step == arguments.fail_at &&
        (arguments.failure == "save-into-file" || arguments.failure == "damaged-restore")) {
      try {
        fail_in_checkpoint(layer, arguments);
      } catch (...) {
        std::fprintf(stderr, "rank %d: %s\n", rank, describe_current_exception().c_str());
        return 4;
      }
    }
    for (int64_t& value : ids) value = id(rng);
    if (rank == arguments.fail_rank && step == arguments.fail_at) {
      if (arguments.failure == "kill") {
        std::fprintf(stderr, "rank %d: killing itself at step %d\n", rank, step);
        std::raise(SIGKILL);
      } else if (arguments.failure == "throw") {
        throw std::runtime_error("rank " + std::to_string(rank) + " fails at step " +
                                 std::to_string(step));
      } else {
        ids[5] = kRows + 1;
      }
    }
    const std::vector<recemb::FeatureInput> inputs = {
        recemb::DenseIds{.ids = ids, .shape = {kBatch}}};
    const std::vector<std::span<float>> outputs = {activations};
    try {
      layer.lookup(inputs, outputs, batch);
    } catch (const recemb::InvalidArgument& error) {
      std::fprintf(stderr, "rank %d: %s\n", rank, error.what());
      return 3;
    }
    const std::vector<std::span<const float>> gradient_spans = {gradients};
    layer.apply_gradients(batch, gradient_spans);
    if (rank == 0) std::printf("step %d\n", step);
  }
  return 0;
}
