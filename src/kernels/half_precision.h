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
// The random bits of a row come from its stream, rounding_stream(table seed, step, row or key), a
// counter-based generator (a hash of the counters, no state), so a row's rounding is the same for
// any thread count, placement and number of ranks. The stream's words: word k is lowbias32 (C.
// Wellons' 32-bit integer hash) of the stream's low 32 bits plus k * 0x9e3779b9, modulo 2^32.
// Columns are grouped by 32: word 16 g + l (l < 16) gives its low 16 bits to column 32 g + l and
// its high 16 bits to column 32 g + 16 + l, so one vector of words serves two vectors of columns.
//
// The rows' encoders are compiled for every SIMD target (kernels/simd_target.h) and give the same
// bits on each.
#ifndef RECEMB_KERNELS_HALF_PRECISION_H_
#define RECEMB_KERNELS_HALF_PRECISION_H_

#include <bit>
#include <cmath>
#include <cstdint>

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

// out[i] = the float32 value of in[i] (n values of `dtype`, bfloat16 or float16).
inline void decode_half_values(DType dtype, const uint16_t* in, int64_t n, float* out) {
  if (dtype == DType::kBFloat16) {
    for (int64_t i = 0; i < n; ++i) out[i] = bfloat16_to_float(in[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = float16_to_float(in[i]);
  }
}

// out[i] = in[i] rounded to nearest, ties to even, in `dtype`: infinity past the largest finite
// value (for float16 from 65520 on), NaN becomes a quiet NaN of its sign.
void encode_half_values_nearest(DType dtype, const float* in, int64_t n, uint16_t* out);

// out[i] = in[i] in `dtype`, rounded stochastically (above) with the random bits random[i].
void round_half_values_stochastic(DType dtype, const float* in, const uint16_t* random, int64_t n,
                                  uint16_t* out);

// out[i] = in[i] in `dtype`, rounded stochastically (above) with the bits of column
// first_column + i of the row's `stream`.
void encode_half_values_stochastic(DType dtype, const float* in, int64_t n, uint64_t stream,
                                   int64_t first_column, uint16_t* out);

}  // namespace recemb::internal

#endif  // RECEMB_KERNELS_HALF_PRECISION_H_
