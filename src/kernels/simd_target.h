// The instruction sets of the SIMD kernels, for tests and benchmarks. The kernels in src/kernels
// are written once with Highway and compiled for several targets (on x86-64: AVX-512, AVX2,
// SSE4, SSSE3 and a portable fallback); each call runs the best one this CPU supports, unless a
// ScopedSimdTarget forces another (the tests force every dispatch path).
#ifndef RECEMB_KERNELS_SIMD_TARGET_H_
#define RECEMB_KERNELS_SIMD_TARGET_H_

#include <cstdint>
#include <string>
#include <vector>

namespace recemb::internal {

// Highway's bit for one target (HWY_AVX3, HWY_AVX2, ..., HWY_EMU128).
using SimdTarget = int64_t;

// The targets the kernels were compiled for that this CPU can run, best first. Never empty.
std::vector<SimdTarget> supported_simd_targets();

// The target's name as Highway spells it ("AVX3", "AVX2", "SSE4", "SSSE3", "EMU128", ...).
std::string simd_target_name(SimdTarget target);

// The target the kernels run on now.
SimdTarget dispatched_simd_target();

// While it lives, every kernel runs `target` (one of supported_simd_targets()); the destructor
// restores the best target. For tests: not thread-safe with kernels running on other threads,
// and scopes must not overlap.
class ScopedSimdTarget {
 public:
  explicit ScopedSimdTarget(SimdTarget target);
  ~ScopedSimdTarget();
  ScopedSimdTarget(const ScopedSimdTarget&) = delete;
  ScopedSimdTarget& operator=(const ScopedSimdTarget&) = delete;
};

}  // namespace recemb::internal

#endif  // RECEMB_KERNELS_SIMD_TARGET_H_
