// The 16-bit row types of training tables (docs/semantics.md, "16-bit tables"): bfloat16 (the top
// half of a float32) and float16 (IEEE 754 binary16, kernels/quantized_rows.h's). Both decode to
// float32 exactly; float32 values encode by rounding to nearest (ties to even) or stochastically.
//
// Stochastic rounding of a finite x: with lo the 16-bit value next to x toward zero and hi the
// next one away from zero (infinity past the largest finite value), x becomes hi with probability
// p = (|x| - |lo|) / (|hi| - |lo|), decided by 32 random bits u: hi iff u < p * 2^32 (p has at
// most 24 significant bits, so the comparison is exact). Hence the expected result is x (to 2^-32
// of the gap for the few float16 subnormal cases whose p has bits below 2^-32), a value
// representable in 16 bits is kept as it is, and the result is one of x's two neighbours. A
// non-finite x rounds as to nearest (infinity stays, NaN stays a quiet NaN).
//
// The random bits: rounding_bits(rounding_stream(table seed, step, row or key), column), a
// counter-based generator (a hash of the counters, no state), so a row's rounding is the same for
// any thread count, placement and number of ranks.
#ifndef RECEMB_KERNELS_HALF_PRECISION_H_
#define RECEMB_KERNELS_HALF_PRECISION_H_

#include <bit>
#include <cstdint>

#include "recemb/config.h"

#include "kernels/quantized_rows.h"
#include "util/key_hash.h"

namespace recemb::internal {

inline float bfloat16_to_float(uint16_t value) {
  return std::bit_cast<float>(static_cast<uint32_t>(value) << 16);
}

// Round to nearest, ties to even; NaN becomes a quiet NaN of the same sign, infinity stays.
inline uint16_t float_to_bfloat16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// The stream of one row's rounding bits in one step of a table.
inline uint64_t rounding_stream(uint64_t table_seed, int64_t step, int64_t row) {
  uint64_t stream = mix_key(static_cast<int64_t>(table_seed ^ 0x243f6a8885a308d3ull));
  stream = mix_key(static_cast<int64_t>(stream ^ static_cast<uint64_t>(step)));
  return mix_key(static_cast<int64_t>(stream ^ static_cast<uint64_t>(row)));
}

// 32 random bits for `column` of a row's stream.
inline uint32_t rounding_bits(uint64_t stream, int64_t column) {
  const uint64_t counter = stream + static_cast<uint64_t>(column + 1) * 0x9e3779b97f4a7c15ull;
  return static_cast<uint32_t>(mix_key(static_cast<int64_t>(counter)) >> 32);
}

// Stochastic rounding (above) with the random bits `random`.
inline uint16_t float_to_bfloat16_stochastic(float value, uint32_t random) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7f800000u) == 0x7f800000u) return float_to_bfloat16(value);
  // lo is the top half (toward zero, as the sign is apart); p * 2^32 = low half << 16.
  const uint32_t low = bits & 0xffffu;
  return static_cast<uint16_t>((bits >> 16) + ((random >> 16) < low ? 1u : 0u));
}

inline uint16_t float_to_float16_stochastic(float value, uint32_t random) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) return float_to_float16(value);  // infinity, NaN
  // From 65536 (2^16) on even lo is infinity's neighbour beyond the largest finite value (65504,
  // whose gap to the next is 32): the result is infinity.
  if (magnitude >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (magnitude < 0x38800000u) {
    // Below 2^-14 (float16's subnormals): steps of 2^-24. scaled = |x| 2^24 < 1024 is exact, and
    // so are its whole part n and fraction p (an exact float subtraction).
    const float scaled = std::bit_cast<float>(magnitude) * 0x1p24f;
    const auto whole = static_cast<uint32_t>(scaled);
    const double fraction = static_cast<double>(scaled) - static_cast<double>(whole);
    const bool up = static_cast<double>(random) < fraction * 0x1p32;
    return static_cast<uint16_t>(sign | (whole + (up ? 1u : 0u)));
  }
  // Normal: rebias the exponent; the 13 dropped mantissa bits are p * 2^13 (a carry out of the
  // mantissa correctly bumps the exponent, up to infinity's code from 65504).
  const uint32_t rebased = magnitude - ((127u - 15u) << 23);
  const uint32_t low = rebased & 0x1fffu;
  return static_cast<uint16_t>(sign | ((rebased >> 13) + ((random >> 19) < low ? 1u : 0u)));
}

// out[i] = the float32 value of in[i] (n values of `dtype`, bfloat16 or float16).
inline void decode_half_values(DType dtype, const uint16_t* in, int64_t n, float* out) {
  if (dtype == DType::kBFloat16) {
    for (int64_t i = 0; i < n; ++i) out[i] = bfloat16_to_float(in[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = float16_to_float(in[i]);
  }
}

// out[i] = in[i] rounded to nearest (ties to even) in `dtype`.
inline void encode_half_values_nearest(DType dtype, const float* in, int64_t n, uint16_t* out) {
  if (dtype == DType::kBFloat16) {
    for (int64_t i = 0; i < n; ++i) out[i] = float_to_bfloat16(in[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = float_to_float16(in[i]);
  }
}

// out[i] = in[i] rounded stochastically in `dtype` with rounding_bits(stream, first_column + i).
inline void encode_half_values_stochastic(DType dtype, const float* in, int64_t n, uint64_t stream,
                                          int64_t first_column, uint16_t* out) {
  if (dtype == DType::kBFloat16) {
    for (int64_t i = 0; i < n; ++i) {
      out[i] = float_to_bfloat16_stochastic(in[i], rounding_bits(stream, first_column + i));
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      out[i] = float_to_float16_stochastic(in[i], rounding_bits(stream, first_column + i));
    }
  }
}

}  // namespace recemb::internal

#endif  // RECEMB_KERNELS_HALF_PRECISION_H_
