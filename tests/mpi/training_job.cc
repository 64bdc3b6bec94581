// A small sharded training job for tests/mpi/rank_failure_test.cc, run under mpirun: every rank
// trains a row-wise sharded Embedding through MPI, and one rank fails on purpose.
//
//   training_job --steps N [--fail-rank R --fail-at S --failure F [--exit-status E]]
//                [--directory D] [--busy-rank B --busy-seconds T]
//
// F = kill: rank R sends itself SIGKILL before step S; throw: rank R throws an uncaught exception
// (std::terminate); exit: rank R calls std::exit(E) before step S (S = N: after the last step);
// bad-id: rank R passes an id out of range at step S, which every rank reports (the job then exits
// with status 3 on every rank). The checkpoint failures, at step S, report on every rank "rank Q:
// <error type> errno <E>: <message>" and exit with status 4: save-into-file: every rank saves
// into D/a_file (a file the caller made, not a directory); damaged-restore: every rank saves into
// D, rank R damages a data file, every rank restores. A step that throws FailedPrecondition (a
// rank left the job) prints "rank Q: <message>" and exits with status 5. Rank B, after its steps,
// computes for T seconds (sleeps) before it exits. Prints "step S" on rank 0 after each step.
//
//   training_job --dynamic-resume D
//
// instead trains a dynamic table split by keys over the ranks and checks that resuming from a
// checkpoint ends as the uninterrupted run does (dynamic_resume below).
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "recemb/recemb.h"

namespace {

struct Arguments {
  int steps = 20;
  int fail_rank = -1;
  int fail_at = 0;
  std::string failure = "kill";
  int exit_status = 0;
  std::filesystem::path directory;
  int busy_rank = -1;
  int busy_seconds = 0;
  std::filesystem::path dynamic_resume;
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
    } else if (flag == "--exit-status") {
      arguments.exit_status = std::stoi(value);
    } else if (flag == "--directory") {
      arguments.directory = value;
    } else if (flag == "--busy-rank") {
      arguments.busy_rank = std::stoi(value);
    } else if (flag == "--busy-seconds") {
      arguments.busy_seconds = std::stoi(value);
    } else if (flag == "--dynamic-resume") {
      arguments.dynamic_resume = value;
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

// Every rank trains a dynamic table split by keys (admission at 2 occurrences, a TTL, a capacity
// that fills) for 12 steps, saving at step 5 into D/first and at the end into D/straight; new
// Embeddings restore D/first and train steps 5 to 12 again, saving into D/resumed. Rank 0 prints
// "resumed: the same files" when every file of D/resumed's checkpoint equals D/straight's byte for
// byte; else it names the file, and the job exits with status 6.
int dynamic_resume(const std::filesystem::path& directory) {
  const std::shared_ptr<recemb::Communicator> communicator = recemb::mpi_communicator();
  const int ranks = communicator->size();
  const int rank = communicator->rank();
  constexpr int64_t kDim = 8;
  constexpr int64_t kBatch = 32;
  const auto make = [&] {
    return recemb::Embedding(
        {{.name = "items",
          .dim = kDim,
          .combiner = recemb::Combiner::kSum,
          .dynamic_vocabulary =
              recemb::DynamicVocabulary{.capacity = 50 * ranks, .min_count = 2, .ttl_steps = 4}}},
        {{.name = "clicked", .table = "items"}},
        {.optimizer = recemb::Adagrad{.learning_rate = 0.1f},
         .placement = recemb::PlacementOptions{.num_shards = ranks,
                                               .strategy = recemb::ShardingStrategy::kRowWise},
         .communicator = communicator});
  };
  const auto train = [&](recemb::Embedding& layer, int64_t first, int64_t last) {
    for (int64_t step = first; step < last; ++step) {
      std::mt19937_64 rng(static_cast<uint64_t>(1000 * step + rank));
      std::uniform_int_distribution<int64_t> offset(0, 79);
      std::vector<int64_t> keys(kBatch);
      for (int64_t& key : keys) {
        key = static_cast<int64_t>(static_cast<uint64_t>(step * 5 + offset(rng)) *
                                   0x9e3779b97f4a7c15ULL);
      }
      std::vector<float> activations(kBatch * kDim);
      const std::vector<recemb::FeatureInput> inputs = {
          recemb::DenseIds{.ids = keys, .shape = {kBatch}}};
      const std::vector<std::span<float>> outputs = {activations};
      recemb::LookupBatch batch;
      layer.lookup(inputs, outputs, batch);
      for (float& value : activations) value = value * 0.5f - 0.125f;
      const std::vector<std::span<const float>> gradients = {activations};
      layer.apply_gradients(batch, gradients);
    }
  };
  recemb::Embedding straight = make();
  train(straight, 0, 5);
  const std::filesystem::path first = recemb::save_checkpoint(straight, directory / "first");
  train(straight, 5, 12);
  const std::filesystem::path expected = recemb::save_checkpoint(straight, directory / "straight");
  recemb::Embedding resumed = make();
  recemb::restore_checkpoint(resumed, first);
  train(resumed, 5, 12);
  const std::filesystem::path actual = recemb::save_checkpoint(resumed, directory / "resumed");
  if (rank != 0) return 0;
  const auto read = [](const std::filesystem::path& path) {
    std::ifstream file(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(file), {});
  };
  for (const auto& entry : std::filesystem::directory_iterator(expected)) {
    if (read(entry.path()) != read(actual / entry.path().filename())) {
      std::printf("resumed: %s differs\n", entry.path().filename().c_str());
      return 6;
    }
  }
  std::printf("resumed: the same files\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Arguments arguments = parse(argc, argv);
  if (!arguments.dynamic_resume.empty()) return dynamic_resume(arguments.dynamic_resume);
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
  const auto exit_if_asked = [&](int step) {
    if (rank == arguments.fail_rank && step == arguments.fail_at && arguments.failure == "exit") {
      std::fprintf(stderr, "rank %d: exiting with status %d at step %d\n", rank,
                   arguments.exit_status, step);
      std::exit(arguments.exit_status);
    }
  };
  for (int step = 0; step < arguments.steps; ++step) {
    exit_if_asked(step);
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
    } catch (const recemb::FailedPrecondition& error) {
      std::fprintf(stderr, "rank %d: %s\n", rank, error.what());
      return 5;
    }
    const std::vector<std::span<const float>> gradient_spans = {gradients};
    layer.apply_gradients(batch, gradient_spans);
    if (rank == 0) std::printf("step %d\n", step);
  }
  exit_if_asked(arguments.steps);
  if (rank == arguments.busy_rank) {
    std::this_thread::sleep_for(std::chrono::seconds(arguments.busy_seconds));
    std::printf("rank %d: done after computing for %d s\n", rank, arguments.busy_seconds);
  }
  return 0;
}
