// The 16-bit row types of training tables (docs/semantics.md, "16-bit tables"): bfloat16 (the top
// half of a float32) and float16 (IEEE 754 binary16, kernels/quantized_rows.h's). Both decode to
// float32 exactly; float32 values encode by rounding to nearest (ties to even) or stochastically.
//
// Stochastic rounding of a finite x: with lo the 16-bit value next to x toward zero and hi the
// next one away from zero (infinity past the largest finite value), x becomes hi with probability
// p = (|x| - |lo|) / (|hi| - |lo|), decided by 16 random bits u: hi iff u < p * 2^16. For
// bfloat16 and normal float16 values p has at most 16 bits, so the probability is exactly p; for
// float16's subnormals (|x| < 2^-14) it is p to within 2^-16. Hence the expected result is x, a
// value representable in 16 bits is kept as it is, and the result is one of x's two neighbours. A
// non-finite x rounds as to nearest (infinity stays, NaN stays a quiet NaN).
//
// The random bits: rounding_bits(rounding_stream(table seed, step, row or key), column), a
// counter-based generator (a hash of the counters, no state), so a row's rounding is the same for
// any thread count, placement and number of ranks.
#ifndef RECEMB_KERNELS_HALF_PRECISION_H_
#define RECEMB_KERNELS_HALF_PRECISION_H_

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "recemb/config.h"

#include "kernels/quantized_rows.h"
#include "util/key_hash.h"

namespace recemb::internal {

// Whether float16 holds `value` finite: rounding to nearest gives infinity from 65520 on (the
// float16 table's rule for values written into it, docs/semantics.md, "16-bit tables").
inline bool fits_float16(float value) { return std::fabs(value) < 65520.0f; }

inline float bfloat16_to_float(uint16_t value) {
  return std::bit_cast<float>(static_cast<uint32_t>(value) << 16);
}

// Round to nearest, ties to even; NaN becomes a quiet NaN of the same sign, infinity stays.
inline uint16_t float_to_bfloat16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// The stream of a table's rounding bits in one step, and of one row's in it:
// rounding_stream(seed, step, row) = rounding_row_stream(rounding_step_stream(seed, step), row)
// (the update computes the step's once).
inline uint64_t rounding_step_stream(uint64_t table_seed, int64_t step) {
  const uint64_t stream = mix_key(static_cast<int64_t>(table_seed ^ 0x243f6a8885a308d3ull));
  return mix_key(static_cast<int64_t>(stream ^ static_cast<uint64_t>(step)));
}
inline uint64_t rounding_row_stream(uint64_t step_stream, int64_t row) {
  return mix_key(static_cast<int64_t>(step_stream ^ static_cast<uint64_t>(row)));
}
inline uint64_t rounding_stream(uint64_t table_seed, int64_t step, int64_t row) {
  return rounding_row_stream(rounding_step_stream(table_seed, step), row);
}

// A 32-bit integer hash (Wellons' lowbias32).
inline uint32_t hash32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

// The 32 random bits of the columns 2k and 2k + 1 of a row's stream: the hash of the stream's low
// half plus k times the golden ratio.
inline uint32_t rounding_pair_bits(uint64_t stream, int64_t pair) {
  return hash32(static_cast<uint32_t>(stream) + static_cast<uint32_t>(pair) * 0x9e3779b9u);
}

// The 16 random bits of `column`: the low half of its pair's bits for an even column, the high
// half for an odd one (so a row's bits are its pairs' bits laid out in memory order).
inline uint16_t rounding_bits(uint64_t stream, int64_t column) {
  return static_cast<uint16_t>(rounding_pair_bits(stream, column >> 1) >> (16 * (column & 1)));
}

// Stochastic rounding (above) with the random bits `random`. Both are written without branches,
// every case computed and the right one selected, so that a row's loop runs in SIMD lanes.
inline uint16_t float_to_bfloat16_stochastic(float value, uint16_t random) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  // lo is the top half (toward zero, as the sign is apart); p * 2^16 = the low half, and u < it
  // exactly when adding 0xffff - u to the bits carries into the top half.
  const uint32_t rounded = (bits + (0xffffu - random)) >> 16;
  // Infinity stays; NaN becomes a quiet NaN of its sign (float_to_bfloat16).
  const bool finite = (bits & 0x7f800000u) != 0x7f800000u;
  const uint32_t special = (bits >> 16) | ((bits & 0x007fffffu) != 0 ? 0x0040u : 0u);
  return static_cast<uint16_t>(finite ? rounded : special);
}

inline uint16_t float_to_float16_stochastic(float value, uint16_t random) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t magnitude = bits & 0x7fffffffu;
  // Normal (2^-14 <= |x| < 65536): rebias the exponent; the 13 dropped mantissa bits are
  // p * 2^13, so u < p * 2^16 is u / 8 < them (a carry out of the mantissa correctly bumps the
  // exponent, up to infinity's code from 65504).
  const uint32_t rebased = magnitude - ((127u - 15u) << 23);
  const uint32_t normal =
      (rebased >> 13) +
      static_cast<uint32_t>(static_cast<uint32_t>(random >> 3u) < (rebased & 0x1fffu));
  // Subnormal (|x| < 2^-14): steps of 2^-24. scaled = |x| 2^24 < 1024 is exact, and so are its
  // whole part, its fraction p (an exact float subtraction) and p * 2^16; a larger magnitude (not
  // selected) is clamped, as bits, so that its conversion stays defined.
  const float scaled = std::bit_cast<float>(std::min(magnitude, 0x38800000u)) * 0x1p24f;
  const auto whole = static_cast<uint32_t>(static_cast<int32_t>(scaled));
  const float fraction = scaled - static_cast<float>(whole);
  const uint32_t subnormal =
      whole + static_cast<uint32_t>(static_cast<float>(random) < fraction * 0x1p16f);
  // From 65536 on, and for infinity: infinity; NaN: a quiet NaN (as float_to_float16).
  const uint32_t special = 0x7c00u | (static_cast<uint32_t>(magnitude > 0x7f800000u) << 9);
  // The case selected by masks, not conditionals: GCC turns those into branches here, which
  // mispredict and keep the row's loop out of SIMD lanes.
  const uint32_t is_special = 0u - static_cast<uint32_t>(magnitude >= 0x47800000u);
  const uint32_t is_subnormal = 0u - static_cast<uint32_t>(magnitude < 0x38800000u);
  const uint32_t code = (special & is_special) | (subnormal & is_subnormal & ~is_special) |
                        (normal & ~is_subnormal & ~is_special);
  return static_cast<uint16_t>(sign | code);
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

// out[i] = in[i] in `dtype`, rounded stochastically (docs/semantics.md, "16-bit tables") with the
// bits rounding_bits(stream, first_column + i): one hash per pair of columns, computed in SIMD
// lanes a block of columns at a time.
inline void encode_half_values_stochastic(DType dtype, const float* in, int64_t n, uint64_t stream,
                                          int64_t first_column, uint16_t* out) {
  constexpr int64_t kBlock = 256;  // values a block (even, so blocks after the first pair up)
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t count = std::min(kBlock, n - begin);
    const int64_t column = first_column + begin;
    // The pairs' bits in memory order are the columns' bits (rounding_bits). (count + 2) / 2
    // pairs cover the block from an odd column too; a count known at compile time (a row of a
    // constant width) makes every loop here one of constant length.
    uint32_t pair_bits[kBlock / 2 + 1];
    const int64_t first_pair = column >> 1;
    const int64_t pairs = (count + 2) >> 1;
    for (int64_t k = 0; k < pairs; ++k) pair_bits[k] = rounding_pair_bits(stream, first_pair + k);
    uint16_t bits[kBlock + 2];
    std::memcpy(bits, pair_bits, static_cast<size_t>(pairs) * sizeof(uint32_t));
    const uint16_t* random = bits + (column & 1);
    if (dtype == DType::kBFloat16) {
      for (int64_t i = 0; i < count; ++i) {
        out[begin + i] = float_to_bfloat16_stochastic(in[begin + i], random[i]);
      }
    } else {
      for (int64_t i = 0; i < count; ++i) {
        out[begin + i] = float_to_float16_stochastic(in[begin + i], random[i]);
      }
    }
  }
}

}  // namespace recemb::internal

#endif  // RECEMB_KERNELS_HALF_PRECISION_H_
