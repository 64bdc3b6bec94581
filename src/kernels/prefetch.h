// Software prefetch of table rows. A random row gather is bound by memory latency; asking for the
// row kPrefetchDistance ids ahead keeps enough loads in flight (6-7x on this machine's 4 GiB
// tables, reference/baseline-measurements.md: distance 16 was best among 2..32).
#ifndef RECEMB_KERNELS_PREFETCH_H_
#define RECEMB_KERNELS_PREFETCH_H_

#include <cstdint>

namespace recemb::internal {

inline constexpr int64_t kPrefetchDistance = 16;

// Prefetches the 64-byte line holding `address`. On x86 an asm statement: GCC 12 deletes a loop
// whose body is only __builtin_prefetch when it is inlined into the update kernels
// (docs/performance.md), and the asm cannot be deleted.
inline void prefetch_line(const void* address) {
#if defined(__x86_64__) || defined(__i386__)
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(address)));
#else
  __builtin_prefetch(address, 0, 3);
#endif
}

// Prefetches every 64-byte line of a row of `dim` floats.
inline void prefetch_row(const float* row, int64_t dim) {
  for (int64_t d = 0; d < dim; d += 16) prefetch_line(row + d);
}

}  // namespace recemb::internal

#endif  // RECEMB_KERNELS_PREFETCH_H_
