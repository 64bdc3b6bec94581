#include "kernels/quantized_rows.h"

#include <algorithm>
#include <cmath>

#include "kernels/half_precision.h"

namespace recemb::internal {

std::optional<int64_t> encode_float16_rows(const float* rows, int64_t num_rows, int64_t dim,
                                           uint16_t* out) {
  const int64_t size = num_rows * dim;
  encode_half_values_nearest(DType::kFloat16, rows, size, out);
  for (int64_t i = 0; i < size; ++i) {
    if ((out[i] & 0x7c00u) == 0x7c00u) return i;
  }
  return std::nullopt;
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
