// Software prefetch of table rows. A random row gather is bound by memory latency; asking for
// rows well ahead of their use keeps enough loads in flight (docs/performance.md, "Decisions").
#ifndef RECEMB_KERNELS_PREFETCH_H_
#define RECEMB_KERNELS_PREFETCH_H_

#include <algorithm>
#include <cstdint>

namespace recemb::internal {

// Rows ahead for the update kernels (kernels/sparse_update.h). 16 was best among 2..32 on an AMD
// Zen 3; on the Xeon of docs/performance.md, 32 and 64 were no better; with the rows prefetched
// into the L2, 16 was best among 16, 32, 48 and 64 on an AMD Zen 4.
inline constexpr int64_t kPrefetchDistance = 16;

// The forward kernel (kernels/pool.h) asks for the row kForwardPrefetchBytes of rows ahead of the
// one it sums, so that about the same number of cache lines is in flight whatever the row width
// (dim 64: 64 rows), within [kMinForwardPrefetchRows, kMaxForwardPrefetchRows] rows. On the
// first engine's Zen 5 the 1 GiB gather was flat from 16 to 128 rows ahead at dims 16 and 64 and
// slightly better at 64 than 16 at dim 128 (docs/performance-history.md). It prefetches into the
// L2 only (prefetch_bytes_to_l2): on the Xeon of docs/performance.md that raised a uniform 1 GiB
// lookup by a third and cost a Zipf one 1-5% ("Decisions").
inline constexpr int64_t kForwardPrefetchBytes = 16384;
inline constexpr int64_t kMinForwardPrefetchRows = 16;
inline constexpr int64_t kMaxForwardPrefetchRows = 128;

inline int64_t forward_prefetch_rows(int64_t row_bytes) {
  return std::clamp(kForwardPrefetchBytes / std::max<int64_t>(row_bytes, 1),
                    kMinForwardPrefetchRows, kMaxForwardPrefetchRows);
}

// Prefetches the 64-byte line holding `address`. On x86 an asm statement: GCC 12 deletes a loop
// whose body is only __builtin_prefetch when it is inlined into the update kernels (found with
// objdump; docs/performance.md, "Decisions"), and the asm cannot be deleted.
inline void prefetch_line(const void* address) {
#if defined(__x86_64__) || defined(__i386__)
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(address)));
#else
  __builtin_prefetch(address, 0, 3);
#endif
}

// Prefetches the line holding `address` into the L2 cache only (prefetcht1): on x86 such requests
// wait in the L2's queue rather than the L1's few fill buffers, so that more of them are in
// flight at once.
inline void prefetch_line_to_l2(const void* address) {
#if defined(__x86_64__) || defined(__i386__)
  asm volatile("prefetcht1 %0" : : "m"(*static_cast<const char*>(address)));
#else
  __builtin_prefetch(address, 0, 2);
#endif
}

// Asks for the line in a state it can be written in (prefetchw: the later store needs no second
// request for ownership). CPUs without it run it as a no-op.
inline void prefetch_line_for_write(const void* address) {
#if defined(__x86_64__) || defined(__i386__)
  asm volatile("prefetchw %0" : : "m"(*static_cast<const char*>(address)));
#else
  __builtin_prefetch(address, 1, 3);
#endif
}

// Prefetches every 64-byte line of a row of `dim` floats.
inline void prefetch_row(const float* row, int64_t dim) {
  for (int64_t d = 0; d < dim; d += 16) prefetch_line(row + d);
}

inline void prefetch_row_for_write(const float* row, int64_t dim) {
  for (int64_t d = 0; d < dim; d += 16) prefetch_line_for_write(row + d);
}

// Prefetches for writing every 64-byte line holding one of the `bytes` bytes at `first`.
inline void prefetch_bytes_for_write(const void* first, int64_t bytes) {
  const auto begin = reinterpret_cast<uintptr_t>(first);
  const uintptr_t end = begin + static_cast<uintptr_t>(bytes);
  for (uintptr_t line = begin & ~uintptr_t{63}; line < end; line += 64) {
    prefetch_line_for_write(reinterpret_cast<const void*>(line));
  }
}

// Prefetches into the L2 cache every 64-byte line holding one of the `bytes` bytes at `first`
// (rows that are not line-aligned: float16 and int8 rows, float32 rows of odd widths).
inline void prefetch_bytes_to_l2(const void* first, int64_t bytes) {
  const auto begin = reinterpret_cast<uintptr_t>(first);
  const uintptr_t end = begin + static_cast<uintptr_t>(bytes);
  for (uintptr_t line = begin & ~uintptr_t{63}; line < end; line += 64) {
    prefetch_line_to_l2(reinterpret_cast<const void*>(line));
  }
}

}  // namespace recemb::internal

#endif  // RECEMB_KERNELS_PREFETCH_H_
