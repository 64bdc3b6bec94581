#include "kernels/pool.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/prefetch.h"

namespace recemb::internal {
namespace {

float quantize(float x, const QuantizationConfig& q) {
  const float step = (q.upper - q.lower) / static_cast<float>(q.num_buckets - 1);
  x = std::clamp(x, q.lower, q.upper);
  return std::floor((x - q.lower) / step + 0.5f) * step + q.lower;
}

// Prefetches every cache line holding one of the `bytes` bytes at `first` (rows of float16 and
// int8 tables, and float32 rows of odd widths, are not line-aligned).
void prefetch_bytes(const void* first, int64_t bytes) {
  const auto begin = reinterpret_cast<uintptr_t>(first);
  const uintptr_t end = begin + static_cast<uintptr_t>(bytes);
  for (uintptr_t line = begin & ~uintptr_t{63}; line < end; line += 64) {
    prefetch_line(reinterpret_cast<const void*>(line));
  }
}

// The kernel is one template over the row format. A format supplies row(id), whose operator[]
// decodes one value, and the row's bytes to prefetch; everything else (order of the sums,
// weights, scales, simulated quantization) is shared, so a float32 serving table pools bitwise as
// a training one.

struct Float32Format {
  const float* table;
  int64_t dim;

  const float* row(int64_t id) const { return table + id * dim; }
  void prefetch(int64_t id) const { prefetch_bytes(row(id), dim * 4); }
};

struct Float16Row {
  const uint16_t* __restrict values;
  float operator[](int64_t d) const { return float16_to_float(values[d]); }
};

struct Float16Format {
  const uint16_t* table;
  int64_t dim;

  Float16Row row(int64_t id) const { return {table + id * dim}; }
  void prefetch(int64_t id) const { prefetch_bytes(table + id * dim, dim * 2); }
};

struct Int8Row {
  const uint8_t* __restrict codes;
  Int8RowParameters parameters;
  float operator[](int64_t d) const {
    return static_cast<float>(codes[d]) * parameters.scale + parameters.bias;
  }
};

struct Int8Format {
  const uint8_t* table;
  int64_t dim;

  Int8Row row(int64_t id) const {
    const uint8_t* codes = table + id * int8_row_bytes(dim);
    return {codes, int8_row_parameters(codes, dim)};
  }
  void prefetch(int64_t id) const {
    prefetch_bytes(table + id * int8_row_bytes(dim), int8_row_bytes(dim));
  }
};

template <typename Format, bool kWeighted, bool kQuantized>
void pool_bags_impl(const Format& rows, const PoolInput& in, int64_t first_bag, int64_t last_bag,
                    float* out) {
  const int64_t dim = in.dim;
  const int64_t end_id = in.offsets[last_bag];
  for (int64_t b = first_bag; b < last_bag; ++b) {
    float* __restrict acc = out + b * dim;
    std::fill_n(acc, dim, 0.0f);
    for (int64_t j = in.offsets[b]; j < in.offsets[b + 1]; ++j) {
      if (j + kPrefetchDistance < end_id) rows.prefetch(in.ids[j + kPrefetchDistance]);
      const auto row = rows.row(in.ids[j]);
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

template <typename Format>
void pool_bags_as(const Format& rows, const PoolInput& input, int64_t first_bag, int64_t last_bag,
                  float* out) {
  const bool weighted = input.weights != nullptr;
  const bool quantized = input.quantization != nullptr;
  if (weighted) {
    quantized ? pool_bags_impl<Format, true, true>(rows, input, first_bag, last_bag, out)
              : pool_bags_impl<Format, true, false>(rows, input, first_bag, last_bag, out);
  } else {
    quantized ? pool_bags_impl<Format, false, true>(rows, input, first_bag, last_bag, out)
              : pool_bags_impl<Format, false, false>(rows, input, first_bag, last_bag, out);
  }
}

struct FormatOf {
  int64_t dim;
  Float32Format operator()(const float* table) const { return {table, dim}; }
  Float16Format operator()(Float16Rows table) const { return {table.data, dim}; }
  Int8Format operator()(Int8Rows table) const { return {table.data, dim}; }
};

}  // namespace

void pool_bags(const PoolInput& input, int64_t first_bag, int64_t last_bag, float* out) {
  std::visit(
      [&](const auto& table) {
        pool_bags_as(FormatOf{input.dim}(table), input, first_bag, last_bag, out);
      },
      input.table);
}

}  // namespace recemb::internal
