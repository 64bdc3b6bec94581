// Software prefetch of table rows. A random row gather is bound by memory latency; asking for the
// row kPrefetchDistance ids ahead keeps enough loads in flight (6-7x on this machine's 4 GiB tables,
// reference/baseline-measurements.md: distance 16 was best among 2..32).
#ifndef RECEMB_KERNELS_PREFETCH_H_
#define RECEMB_KERNELS_PREFETCH_H_

#include <cstdint>

namespace recemb::internal {

inline constexpr int64_t kPrefetchDistance = 16;

// Prefetches every 64-byte line of a row of `dim` floats for reading.
inline void prefetch_row(const float* row, int64_t dim) {
  for (int64_t d = 0; d < dim; d += 16) __builtin_prefetch(row + d, 0, 3);
}

// The same, for a row about to be read and written.
inline void prefetch_row_for_write(const float* row, int64_t dim) {
  for (int64_t d = 0; d < dim; d += 16) __builtin_prefetch(row + d, 1, 3);
}

}  // namespace recemb::internal

#endif  // RECEMB_KERNELS_PREFETCH_H_
