// The reduced-precision row formats of serving models, their conversion from float32 rows, and
// the per-element decoders the pooling kernel (kernels/pool.h) reads them with.
//
//   float16: a row is dim IEEE 754 binary16 values, 2 * dim bytes. Encoding rounds to nearest,
//            ties to even; |x| >= 65520 would round to infinity and is rejected.
//   int8:    FBGEMM's fused 8-bit row-wise format: a row is dim uint8 codes followed by two
//            float32, scale and bias (dim + 8 bytes, the floats unaligned in general). Decoding is
//              value[d] = code[d] * scale + bias
//            and encoding uses bias = min(row), scale = (max(row) - min(row)) / 255,
//              code[d] = clamp(round_to_nearest_even((x[d] - bias) / scale), 0, 255)
//            (all codes 0 for a constant row, whose scale is 0).
// Error bounds (derived in docs/serving.md, checked by tests/kernels/quantized_rows_test.cc):
//   float16: |decode(encode(x)) - x| <= max(2^-11 |x|, 2^-25)
//   int8:    |decode(encode(x)) - x| <= scale / 2 + 2^-20 * max(|min(row)|, |max(row)|)
#ifndef RECEMB_KERNELS_QUANTIZED_ROWS_H_
#define RECEMB_KERNELS_QUANTIZED_ROWS_H_

#include <bit>
#include <cstdint>
#include <cstring>
#include <optional>

namespace recemb::internal {

// A float16 table: [num_rows, dim] binary16 bit patterns.
struct Float16Rows {
  const uint16_t* data = nullptr;
};

// An int8 table: num_rows rows of int8_row_bytes(dim) bytes each.
struct Int8Rows {
  const uint8_t* data = nullptr;
};

inline constexpr int64_t int8_row_bytes(int64_t dim) {
  return dim + 2 * static_cast<int64_t>(sizeof(float));
}

// Exact for every binary16 value (subnormals, infinities and NaN included), without branches so
// that the pooling loop vectorises (even for baseline x86-64, without F16C). The method of
// Maratyszcza's FP16 library: normal values, infinities and NaN by moving the exponent and
// mantissa into place and scaling by 2^-112 (exact), subnormals m * 2^-24 as the float
// (0.5 + m * 2^-24) - 0.5. No operand or result is a float32 subnormal, so the values do not
// depend on the thread's denormals-are-zero or flush-to-zero modes.
inline float float16_to_float(uint16_t half) {
  const uint32_t shifted = static_cast<uint32_t>(half) << 17;  // exponent and mantissa on top
  const float normal = std::bit_cast<float>((shifted >> 4) + (0xe0u << 23)) * 0x1p-112f;
  const float subnormal = std::bit_cast<float>((shifted >> 17) | (126u << 23)) - 0.5f;
  // A select by masks: as a conditional, GCC moves a float operation into a branch (it may trap)
  // and the loop no longer vectorises.
  const uint32_t is_subnormal = 0u - static_cast<uint32_t>(shifted < (1u << 27));
  const uint32_t bits = (std::bit_cast<uint32_t>(subnormal) & is_subnormal) |
                        (std::bit_cast<uint32_t>(normal) & ~is_subnormal);
  return std::bit_cast<float>(bits | (static_cast<uint32_t>(half) & 0x8000u) << 16);
}

// The scale and bias stored at the end of an int8 row of `dim` codes.
struct Int8RowParameters {
  float scale;
  float bias;
};

inline Int8RowParameters int8_row_parameters(const uint8_t* row, int64_t dim) {
  Int8RowParameters parameters;
  std::memcpy(&parameters.scale, row + dim, sizeof(float));
  std::memcpy(&parameters.bias, row + dim + sizeof(float), sizeof(float));
  return parameters;
}

// Encode rows [0, num_rows) of the row-major float32 table `rows` ([num_rows, dim]) into `out`
// (float16: num_rows * dim values; int8: num_rows * int8_row_bytes(dim) bytes). Never throw, never
// allocate. They return the flat index (row * dim + column) of the first value that cannot be
// encoded, or nullopt when all could: float16 rejects non-finite values and |x| >= 65520; int8
// rejects non-finite values and, at the row's first column, rows whose max - min overflows float.
// `out` is fully written either way (with unspecified values where encoding failed).
std::optional<int64_t> encode_float16_rows(const float* rows, int64_t num_rows, int64_t dim,
                                           uint16_t* out);
std::optional<int64_t> encode_int8_rows(const float* rows, int64_t num_rows, int64_t dim,
                                        uint8_t* out);

}  // namespace recemb::internal

#endif  // RECEMB_KERNELS_QUANTIZED_ROWS_H_
