// Timing across the ranks of an mpirun job, for the plain-program benchmarks (sharded_bench,
// mpi_exchange_bench): a barrier, and the slowest rank's time of a section.
#ifndef RECEMB_BENCH_MPI_TIMING_H_
#define RECEMB_BENCH_MPI_TIMING_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "recemb/communicator.h"

namespace recemb_bench {

// Returns when every rank has called it (an all-gather of nothing is enough).
inline void synchronize(recemb::Communicator& communicator) {
  std::vector<std::byte> recv;
  std::vector<int64_t> counts(static_cast<size_t>(communicator.size()));
  communicator.all_gather({}, recv, counts);
}

// The largest of every rank's `seconds`.
inline double slowest(recemb::Communicator& communicator, double seconds) {
  std::vector<std::byte> recv;
  std::vector<int64_t> counts(static_cast<size_t>(communicator.size()));
  communicator.all_gather(std::as_bytes(std::span(&seconds, 1)), recv, counts);
  double result = 0;
  for (size_t q = 0; q < counts.size(); ++q) {
    double value = 0;
    std::memcpy(&value, recv.data() + q * sizeof(double), sizeof(double));
    result = std::max(result, value);
  }
  return result;
}

}  // namespace recemb_bench

#endif  // RECEMB_BENCH_MPI_TIMING_H_
