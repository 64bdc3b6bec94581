#include "kernels/quantized_rows.h"

#include <algorithm>
#include <cmath>

namespace recemb::internal {

uint16_t float_to_float16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {  // infinity stays infinity, NaN stays a (quiet) NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (magnitude > 0x7f800000u ? 0x0200u : 0u));
  }
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520
  if (magnitude < 0x38800000u) {
    // Below 2^-14 the result is subnormal (or zero): adding 0.5, whose ulp is 2^-24 (the
    // binary16 subnormal step), lets the FPU round to nearest even, and the code is left in the
    // low mantissa bits.
    const float shifted = std::bit_cast<float>(magnitude) + 0.5f;
    return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(shifted) - 0x3f000000u));
  }
  // Normal: rebias the exponent and round the 23-bit mantissa to 10 bits, ties to even (adding
  // 0xfff plus the lowest kept bit carries into it exactly when the dropped bits exceed half, or
  // equal half with an odd kept bit; a carry out of the mantissa correctly bumps the exponent).
  const uint32_t odd = (magnitude >> 13) & 1u;
  magnitude += 0xc8000fffu + odd;  // (15 - 127) << 23, modulo 2^32, plus 0xfff
  return static_cast<uint16_t>(sign | (magnitude >> 13));
}

std::optional<int64_t> encode_float16_rows(const float* rows, int64_t num_rows, int64_t dim,
                                           uint16_t* out) {
  const int64_t size = num_rows * dim;
  std::optional<int64_t> first_bad;
  for (int64_t i = 0; i < size; ++i) {
    out[i] = float_to_float16(rows[i]);
    if ((out[i] & 0x7c00u) == 0x7c00u && !first_bad) first_bad = i;
  }
  return first_bad;
}

std::optional<int64_t> encode_int8_rows(const float* rows, int64_t num_rows, int64_t dim,
                                        uint8_t* out) {
  const int64_t row_bytes = int8_row_bytes(dim);
  std::optional<int64_t> first_bad;
  for (int64_t r = 0; r < num_rows; ++r) {
    const float* row = rows + r * dim;
    uint8_t* codes = out + r * row_bytes;
    const auto [low, high] = std::minmax_element(row, row + dim);
    const float bias = *low;
    const float range = *high - *low;
    if (!first_bad) {
      const float* non_finite =
          std::find_if(row, row + dim, [](float x) { return !std::isfinite(x); });
      if (non_finite != row + dim) {
        first_bad = r * dim + (non_finite - row);
      } else if (!std::isfinite(range)) {
        first_bad = r * dim;
      }
    }
    const float scale = range / 255.0f;
    // A division rather than FBGEMM's multiplication by 255 / (range + 1e-8): one rounding less,
    // and exact codes for constant rows (scale 0 -> all codes 0).
    for (int64_t d = 0; d < dim; ++d) {
      const float code = scale == 0.0f ? 0.0f : std::nearbyint((row[d] - bias) / scale);
      // Written so that a NaN (from a row that failed) becomes 0 rather than an undefined cast.
      codes[d] = static_cast<uint8_t>(code >= 0.0f ? std::min(code, 255.0f) : 0.0f);
    }
    std::memcpy(codes + dim, &scale, sizeof(float));
    std::memcpy(codes + dim + sizeof(float), &bias, sizeof(float));
  }
  return first_bad;
}

}  // namespace recemb::internal
