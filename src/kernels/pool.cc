#include "kernels/pool.h"

#include <algorithm>
#include <cmath>

#include "kernels/prefetch.h"

namespace recemb::internal {
namespace {

float quantize(float x, const QuantizationConfig& q) {
  const float step = (q.upper - q.lower) / static_cast<float>(q.num_buckets - 1);
  x = std::clamp(x, q.lower, q.upper);
  return std::floor((x - q.lower) / step + 0.5f) * step + q.lower;
}

template <bool kWeighted, bool kQuantized>
void pool_bags_impl(const PoolInput& in, int64_t first_bag, int64_t last_bag, float* out) {
  const int64_t dim = in.dim;
  const int64_t end_id = in.offsets[last_bag];
  for (int64_t b = first_bag; b < last_bag; ++b) {
    float* __restrict acc = out + b * dim;
    std::fill_n(acc, dim, 0.0f);
    for (int64_t j = in.offsets[b]; j < in.offsets[b + 1]; ++j) {
      if (j + kPrefetchDistance < end_id) {
        prefetch_row(in.table + in.ids[j + kPrefetchDistance] * dim, dim);
      }
      const float* __restrict row = in.table + in.ids[j] * dim;
      const float weight = kWeighted ? in.weights[j] : 1.0f;
      for (int64_t d = 0; d < dim; ++d) {
        const float value = kQuantized ? quantize(row[d], *in.quantization) : row[d];
        acc[d] += kWeighted ? weight * value : value;
      }
    }
    const float scale = in.bag_scales[b];
    if (scale != 1.0f) {
      for (int64_t d = 0; d < dim; ++d) acc[d] *= scale;
    }
  }
}

}  // namespace

void pool_bags(const PoolInput& input, int64_t first_bag, int64_t last_bag, float* out) {
  const bool weighted = input.weights != nullptr;
  const bool quantized = input.quantization != nullptr;
  if (weighted) {
    quantized ? pool_bags_impl<true, true>(input, first_bag, last_bag, out)
              : pool_bags_impl<true, false>(input, first_bag, last_bag, out);
  } else {
    quantized ? pool_bags_impl<false, true>(input, first_bag, last_bag, out)
              : pool_bags_impl<false, false>(input, first_bag, last_bag, out);
  }
}

}  // namespace recemb::internal
