// The 16-bit grids of docs/semantics.md, "16-bit tables", computed in double from the formats'
// definitions (bfloat16: 8 significant bits, float32's exponents; float16: 11 significant bits,
// exponents down to -14, then subnormal steps of 2^-24): an independent reference for the
// conversions of kernels/half_precision.h, and the values of 16-bit bit patterns; and the random
// bits of its stochastic rounding, written from their definition.
#ifndef RECEMB_TESTS_REFERENCE_HALF_GRID_H_
#define RECEMB_TESTS_REFERENCE_HALF_GRID_H_

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "recemb/config.h"

namespace recemb::reference {

// A finite 16-bit value's value by the formats' definitions: bfloat16 is the upper half of a
// float32; float16 is sign, 5 exponent bits (bias 15) and 10 fraction bits.
inline double value_of(DType dtype, uint16_t bits) {
  if (dtype == DType::kBFloat16) {
    return static_cast<double>(std::bit_cast<float>(static_cast<uint32_t>(bits) << 16));
  }
  const double sign = (bits & 0x8000u) != 0 ? -1.0 : 1.0;
  const int exponent = (bits >> 10) & 31;
  const int fraction = bits & 1023;
  return sign *
         (exponent == 0 ? std::ldexp(fraction, -24) : std::ldexp(1024 + fraction, exponent - 25));
}

// The representable values next to x toward zero (lo) and away from zero (hi).
struct Neighbours {
  double lo;
  double hi;
};

inline Neighbours neighbours(DType dtype, double x) {
  const double magnitude = std::fabs(x);
  int exponent = 0;
  std::frexp(magnitude, &exponent);  // magnitude in [2^(exponent-1), 2^exponent)
  const int bits = dtype == DType::kBFloat16 ? 8 : 11;
  const int min_exponent = dtype == DType::kBFloat16 ? -126 : -14;
  const double step = std::ldexp(1.0, std::max(exponent - 1, min_exponent) - (bits - 1));
  const double lo = std::floor(magnitude / step) * step;
  return {std::copysign(lo, x), std::copysign(lo + step, x)};
}

// x rounded to nearest, ties to the even neighbour (its last significant bit 0).
inline double round_to_nearest(DType dtype, double x) {
  const Neighbours n = neighbours(dtype, x);
  const double below = std::fabs(x - n.lo);
  const double above = std::fabs(n.hi - x);
  if (below != above) return below < above ? n.lo : n.hi;
  const double gap = std::fabs(n.hi) - std::fabs(n.lo);
  return std::fmod(std::fabs(n.lo) / gap, 2.0) == 0.0 ? n.lo : n.hi;
}

// The documented stochastic rounding of x with 16 random bits u: hi iff u < p * 2^16.
inline double round_stochastically(DType dtype, double x, uint16_t random) {
  const Neighbours n = neighbours(dtype, x);
  if (n.lo == x) return x;
  const double p = (std::fabs(x) - std::fabs(n.lo)) / (std::fabs(n.hi) - std::fabs(n.lo));
  return static_cast<double>(random) < p * 0x1p16 ? n.hi : n.lo;
}

// The 16 random bits of column `column` of a row's rounding stream, as docs/semantics.md and
// kernels/half_precision.h define them: word k is lowbias32 of (the stream's low 32 bits +
// k * 0x9e3779b9); column 32 g + l takes the low half of word 16 g + l, column 32 g + 16 + l its
// high half (l < 16).
inline uint16_t rounding_bits(uint64_t stream, int64_t column) {
  const auto word = static_cast<uint32_t>((column / 32) * 16 + column % 16);
  uint32_t x = static_cast<uint32_t>(stream) + word * 0x9e3779b9u;
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return static_cast<uint16_t>(column % 32 < 16 ? x & 0xffffu : x >> 16);
}

}  // namespace recemb::reference

#endif  // RECEMB_TESTS_REFERENCE_HALF_GRID_H_
