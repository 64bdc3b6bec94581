// Throughput of recemb's MPI communicator: Communicator::all_to_all (the exchange of a sharded
// Embedding's ids, activations and gradients) between the ranks of an mpirun job, through the
// public API only.
//
//   mpirun -np 2 mpi_exchange_bench          (and -np 4)
//   mpi_exchange_bench --smoke               seconds; a group of one without mpirun
//
// For each message size M from 64 KiB to 64 MiB (x4 each time), every rank sends M bytes to every
// other rank in one all_to_all call (its part for itself is empty: a local copy is not the
// transport). A repetition is `calls` calls in a row (as many as move about 256 MiB per rank, at
// least 4; --smoke: 64 KiB and 256 KiB, 4 MiB per repetition, one repetition); the ranks
// synchronize before each one, and its time is the slowest rank's. Figures are from the median of
// --repetitions repetitions (default 5):
//   us/call    wall time of one all_to_all
//   GB/s sent  bytes each rank sends to the others per second, (size - 1) x M / (time per call)
//              (1e9 bytes); each rank receives as much at the same time
// Rank 0 prints. bench/README.md explains how to run it; docs/performance.md ("Sharding") has the
// figures.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "recemb/communicator.h"
#include "recemb/error.h"

#include "mpi_timing.h"

namespace {

using recemb_bench::slowest;
using recemb_bench::synchronize;

constexpr int64_t kKiB = int64_t{1} << 10;
constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int kMinCallsPerRepetition = 4;
constexpr int kWarmupCalls = 2;

using Clock = std::chrono::steady_clock;

struct Flags {
  int64_t min_bytes = 64 * kKiB;
  int64_t max_bytes = 64 * kMiB;
  int repetitions = 5;
  int64_t bytes_per_repetition = 256 * kMiB;  // sent per rank, roughly
  bool smoke = false;
};

[[noreturn]] void usage_error(const std::string& message) {
  throw recemb::InvalidArgument(message +
                                "\nusage: mpi_exchange_bench [--repetitions N] [--smoke]");
}

Flags parse_flags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "--repetitions" && i + 1 < argc) {
      char* end = nullptr;
      const long value = std::strtol(argv[++i], &end, 10);
      if (*end != '\0' || value < 1 || value > 1000) {
        usage_error("--repetitions: '" + std::string(argv[i]) + "' is not in [1, 1000]");
      }
      flags.repetitions = static_cast<int>(value);
    } else if (flag == "--smoke" || flag.starts_with("--benchmark_min_time")) {
      // --benchmark_min_time=...: what `make bench-smoke` passes to every benchmark program.
      flags.smoke = true;
    } else {
      usage_error("unknown flag or missing value: '" + std::string(flag) + "'");
    }
  }
  if (flags.smoke) {
    flags.max_bytes = 256 * kKiB;
    flags.repetitions = 1;
    flags.bytes_per_repetition = 4 * kMiB;
  }
  return flags;
}

// The value of every byte `from` sends `to` in the exchange of parts of `bytes` bytes.
std::byte pattern(int from, int to, int64_t bytes) {
  return static_cast<std::byte>((from * 31 + to * 7 + bytes / kKiB) & 0xff);
}

int run_main(int argc, char** argv) {
  const Flags flags = parse_flags(argc, argv);
  const std::shared_ptr<recemb::Communicator> communicator = recemb::mpi_communicator();
  const int rank = communicator->rank();
  const int ranks = communicator->size();
  const auto parts = static_cast<size_t>(ranks);
  if (rank == 0) {
    std::printf("# Communicator::all_to_all over %s, %d ranks; median of %d repetitions\n",
                std::string(communicator->name()).c_str(), ranks, flags.repetitions);
    if (ranks == 1) {
      std::printf("# one rank: nothing to send (run it under mpirun -np 2 or more)\n");
    }
    std::printf("%8s %12s %6s %10s %10s\n", "ranks", "bytes/pair", "calls", "us/call", "GB/s sent");
  }
  std::vector<std::byte> send;
  std::vector<std::byte> recv;
  std::vector<int64_t> send_counts(parts);
  std::vector<int64_t> recv_counts(parts);
  for (int64_t bytes = flags.min_bytes; bytes <= flags.max_bytes; bytes *= 4) {
    send.clear();
    for (int q = 0; q < ranks; ++q) {
      send_counts[static_cast<size_t>(q)] = q == rank ? 0 : bytes;
      if (q != rank) send.insert(send.end(), static_cast<size_t>(bytes), pattern(rank, q, bytes));
    }
    // Every rank derives the same count from the same numbers.
    const int64_t sent_per_call = std::max<int64_t>(1, bytes * (ranks - 1));
    const int calls = static_cast<int>(std::clamp<int64_t>(
        flags.bytes_per_repetition / sent_per_call, kMinCallsPerRepetition, 4096));
    auto exchange = [&] { communicator->all_to_all(send, send_counts, recv, recv_counts); };
    for (int c = 0; c < kWarmupCalls; ++c) exchange();
    std::vector<double> times;
    for (int r = 0; r < flags.repetitions; ++r) {
      synchronize(*communicator);
      const Clock::time_point start = Clock::now();
      for (int c = 0; c < calls; ++c) exchange();
      times.push_back(
          slowest(*communicator, std::chrono::duration<double>(Clock::now() - start).count()));
    }
    std::sort(times.begin(), times.end());
    const double seconds_per_call = times[times.size() / 2] / calls;
    // What arrived is what was sent: the part from each other rank, `bytes` of its pattern. A
    // wrong byte is a bug in the communicator; abort, which makes mpirun end the job.
    bool received = recv.size() == send.size();
    auto from = recv.begin();
    for (int q = 0; q < ranks && received; ++q) {
      const int64_t expected = q == rank ? 0 : bytes;
      received = recv_counts[static_cast<size_t>(q)] == expected &&
                 std::all_of(from, from + expected,
                             [&](std::byte b) { return b == pattern(q, rank, bytes); });
      from += expected;
    }
    if (!received) {
      std::fprintf(stderr, "mpi_exchange_bench: rank %d received wrong data at %lld bytes\n", rank,
                   static_cast<long long>(bytes));
      std::abort();
    }
    if (rank == 0) {
      std::printf("%8d %12lld %6d %10.1f %10.3f\n", ranks, static_cast<long long>(bytes), calls,
                  1e6 * seconds_per_call,
                  static_cast<double>(bytes * (ranks - 1)) / seconds_per_call / 1e9);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run_main(argc, argv);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "mpi_exchange_bench: %s\n", error.what());
    return 1;
  }
}
