// Finding non-finite floats (NaN, +-inf) in large arrays, such as a step's gradients.
#ifndef RECEMB_UTIL_FINITE_H_
#define RECEMB_UTIL_FINITE_H_

#include <bit>
#include <cmath>
#include <cstdint>
#include <span>

namespace recemb::internal {

// The index of the first value of `values` that is NaN or infinite, or -1 if there is none. The
// common case, all finite, is one branch-free pass that vectorises: a float is NaN or infinite
// exactly when its exponent bits are all ones, and then (bits & exponent) + the exponent's lowest
// bit carries into the sign bit.
inline int64_t first_non_finite(std::span<const float> values) {
  constexpr uint32_t kExponent = 0x7f80'0000;
  constexpr uint32_t kExponentLowestBit = 0x0080'0000;
  uint32_t carries = 0;
  for (const float value : values) {
    carries |= (std::bit_cast<uint32_t>(value) & kExponent) + kExponentLowestBit;
  }
  if ((carries >> 31) == 0) return -1;
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) return static_cast<int64_t>(i);
  }
  return -1;
}

}  // namespace recemb::internal

#endif  // RECEMB_UTIL_FINITE_H_
