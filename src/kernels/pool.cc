#include "kernels/pool.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "kernels/prefetch.h"

// Float32 rows, the training tables' and float32 serving models' path, are pooled by a Highway
// kernel compiled once per target (foreach_target.h includes this file again for each) and
// dispatched at run time. Float16 and int8 rows, and simulated quantization, use the scalar
// template at the end of the file.
//
// Bitwise identical results on every target, and to the scalar template: each output lane is the
// same sequence of float32 operations, acc = 0, then acc = acc + row[d] (or acc + weight * row[d],
// a multiply then an add: this file is built with -ffp-contract=off so that no FMA contracts
// them), then acc * scale unless the scale is 1.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/pool.cc"
#include <hwy/foreach_target.h>  // before highway.h
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace recemb::internal::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The widest bag accumulator kept in registers, in vectors: 16 of AVX-512's 32 registers (256
// floats), 8 of the 16 of AVX2 and SSE (64 and 32 floats), leaving room for the weight, the tail
// and loads. Wider rows are pooled in column chunks of this many vectors.
#if HWY_ARCH_X86 && (HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL)
constexpr int kMaxVectors = 16;
#else
constexpr int kMaxVectors = 8;
#endif

struct Float32Bags {
  const float* table;
  int64_t dim;
  const int64_t* offsets;
  const int64_t* ids;
  const float* weights;
  const float* bag_scales;
  int64_t prefetch_rows;  // distance ahead
  int64_t prefetch_end;   // the first id not to prefetch (the end of this call's bags)
};

// Pools columns [column, column + kVectors * N) of bag `bag` into out (N = Lanes(d)), and with
// kTail the last N columns [dim - N, dim) too. The tail vector overlaps the others when N does
// not divide dim; its overlapping lanes compute the same values in the same order, so storing
// both is harmless, and no load or store reaches past the row. With `prefetch`, also asks for the
// row prefetch_rows ids ahead (whole, for all chunks).
template <int kVectors, bool kTail, bool kWeighted, class D>
HWY_INLINE void pool_bag(D d, const Float32Bags& bags, int64_t bag, int64_t column, bool prefetch,
                         float* HWY_RESTRICT out) {
  using V = hn::Vec<D>;
  const auto lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t dim = bags.dim;
  const int64_t tail_column = dim - lanes;
  V acc[kVectors > 0 ? kVectors : 1];
  for (int k = 0; k < kVectors; ++k) acc[k] = hn::Zero(d);
  V tail = hn::Zero(d);
  const int64_t end = bags.offsets[bag + 1];
  for (int64_t j = bags.offsets[bag]; j < end; ++j) {
    const int64_t ahead = j + bags.prefetch_rows;
    if (prefetch && ahead < bags.prefetch_end) {
      prefetch_bytes(bags.table + bags.ids[ahead] * dim, dim * 4);
    }
    const float* HWY_RESTRICT row = bags.table + bags.ids[j] * dim;
    if constexpr (kWeighted) {
      const V weight = hn::Set(d, bags.weights[j]);
      for (int k = 0; k < kVectors; ++k) {
        acc[k] = hn::Add(acc[k], hn::Mul(weight, hn::LoadU(d, row + column + k * lanes)));
      }
      if constexpr (kTail) tail = hn::Add(tail, hn::Mul(weight, hn::LoadU(d, row + tail_column)));
    } else {
      for (int k = 0; k < kVectors; ++k) {
        acc[k] = hn::Add(acc[k], hn::LoadU(d, row + column + k * lanes));
      }
      if constexpr (kTail) tail = hn::Add(tail, hn::LoadU(d, row + tail_column));
    }
  }
  const float scale = bags.bag_scales[bag];
  if (scale != 1.0f) {
    const V scale_vector = hn::Set(d, scale);
    for (int k = 0; k < kVectors; ++k) acc[k] = hn::Mul(acc[k], scale_vector);
    if constexpr (kTail) tail = hn::Mul(tail, scale_vector);
  }
  float* HWY_RESTRICT out_row = out + bag * dim;
  for (int k = 0; k < kVectors; ++k) hn::StoreU(acc[k], d, out_row + column + k * lanes);
  if constexpr (kTail) hn::StoreU(tail, d, out_row + tail_column);
}

// The first prefetch_rows rows of a call are asked for up front, as the rows before them would
// have asked for them.
inline void prefetch_first_rows(const Float32Bags& bags, int64_t first_bag) {
  const int64_t begin = bags.offsets[first_bag];
  const int64_t end = std::min(begin + bags.prefetch_rows, bags.prefetch_end);
  for (int64_t j = begin; j < end; ++j) {
    prefetch_bytes(bags.table + bags.ids[j] * bags.dim, bags.dim * 4);
  }
}

template <class D>
using PoolBagsFunction = void (*)(D, const Float32Bags&, int64_t, int64_t, float*);
template <class D>
using PoolBagFunction = void (*)(D, const Float32Bags&, int64_t, int64_t, bool, float*);

// Rows of at most kVectors * N + (kTail ? N : 0) floats: the whole accumulator in registers.
template <int kVectors, bool kTail, bool kWeighted, class D>
void pool_narrow_bags(D d, const Float32Bags& bags, int64_t first_bag, int64_t last_bag,
                      float* out) {
  prefetch_first_rows(bags, first_bag);
  for (int64_t b = first_bag; b < last_bag; ++b) {
    pool_bag<kVectors, kTail, kWeighted>(d, bags, b, 0, true, out);
  }
}

template <int kVectors, bool kTail, bool kWeighted, class D>
void pool_bag_chunk(D d, const Float32Bags& bags, int64_t bag, int64_t column, bool prefetch,
                    float* out) {
  pool_bag<kVectors, kTail, kWeighted>(d, bags, bag, column, prefetch, out);
}

// Wider rows: per bag, chunks of kMaxVectors vectors, then the rest and the tail. The first chunk
// prefetches whole rows; the others find the bag's rows in cache.
template <bool kWeighted, class D>
void pool_wide_bags(D d, const Float32Bags& bags, PoolBagFunction<D> last_chunk, int64_t first_bag,
                    int64_t last_bag, float* out) {
  const int64_t chunk_columns = kMaxVectors * static_cast<int64_t>(hn::Lanes(d));
  const int64_t num_full_chunks = bags.dim / chunk_columns;
  prefetch_first_rows(bags, first_bag);
  for (int64_t b = first_bag; b < last_bag; ++b) {
    for (int64_t c = 0; c < num_full_chunks; ++c) {
      pool_bag<kMaxVectors, false, kWeighted>(d, bags, b, c * chunk_columns, c == 0, out);
    }
    if (last_chunk != nullptr) last_chunk(d, bags, b, num_full_chunks * chunk_columns, false, out);
  }
}

template <bool kTail, bool kWeighted, class D, int... kVectors>
PoolBagsFunction<D> narrow_kernel(int vectors, std::integer_sequence<int, kVectors...>) {
  PoolBagsFunction<D> kernel = nullptr;
  ((kernel = vectors == kVectors ? &pool_narrow_bags<kVectors, kTail, kWeighted, D> : kernel), ...);
  return kernel;
}

template <bool kTail, bool kWeighted, class D, int... kVectors>
PoolBagFunction<D> chunk_kernel(int vectors, std::integer_sequence<int, kVectors...>) {
  PoolBagFunction<D> kernel = nullptr;
  ((kernel = vectors == kVectors ? &pool_bag_chunk<kVectors, kTail, kWeighted, D> : kernel), ...);
  return kernel;
}

template <bool kWeighted, class D>
void pool_bags_with(D d, const Float32Bags& bags, int64_t first_bag, int64_t last_bag, float* out) {
  const auto lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto vectors = static_cast<int>(bags.dim / lanes);
  const bool tail = bags.dim % lanes != 0;
  if (vectors <= kMaxVectors) {
    constexpr auto kCounts = std::make_integer_sequence<int, kMaxVectors + 1>();
    const PoolBagsFunction<D> kernel = tail ? narrow_kernel<true, kWeighted, D>(vectors, kCounts)
                                            : narrow_kernel<false, kWeighted, D>(vectors, kCounts);
    kernel(d, bags, first_bag, last_bag, out);
    return;
  }
  const int rest = vectors % kMaxVectors;
  constexpr auto kCounts = std::make_integer_sequence<int, kMaxVectors>();
  const PoolBagFunction<D> last_chunk =
      tail ? chunk_kernel<true, kWeighted, D>(rest, kCounts)
           : (rest == 0 ? nullptr : chunk_kernel<false, kWeighted, D>(rest, kCounts));
  pool_wide_bags<kWeighted>(d, bags, last_chunk, first_bag, last_bag, out);
}

// Rows narrower than one full vector (dim < N <= 16): one vector of the widest power of two of
// lanes not above dim, and the overlapping tail.
template <bool kWeighted, size_t kLanes>
void pool_short_bags(const Float32Bags& bags, int64_t first_bag, int64_t last_bag, float* out) {
  const hn::CappedTag<float, kLanes> d;
  if (bags.dim == static_cast<int64_t>(hn::Lanes(d))) {
    pool_narrow_bags<1, false, kWeighted>(d, bags, first_bag, last_bag, out);
  } else {
    pool_narrow_bags<1, true, kWeighted>(d, bags, first_bag, last_bag, out);
  }
}

template <bool kWeighted>
void pool_bags_weighted(const Float32Bags& bags, int64_t first_bag, int64_t last_bag, float* out) {
  const hn::ScalableTag<float> d;
  const int64_t dim = bags.dim;
  if (dim >= static_cast<int64_t>(hn::Lanes(d))) {
    pool_bags_with<kWeighted>(d, bags, first_bag, last_bag, out);
  } else if (dim >= 8) {
    pool_short_bags<kWeighted, 8>(bags, first_bag, last_bag, out);
  } else if (dim >= 4) {
    pool_short_bags<kWeighted, 4>(bags, first_bag, last_bag, out);
  } else if (dim >= 2) {
    pool_short_bags<kWeighted, 2>(bags, first_bag, last_bag, out);
  } else {
    pool_short_bags<kWeighted, 1>(bags, first_bag, last_bag, out);
  }
}

void pool_float32_bags(const PoolInput& input, const float* table, int64_t first_bag,
                       int64_t last_bag, float* out) {
  const Float32Bags bags{.table = table,
                         .dim = input.dim,
                         .offsets = input.offsets,
                         .ids = input.ids,
                         .weights = input.weights,
                         .bag_scales = input.bag_scales,
                         .prefetch_rows = forward_prefetch_rows(input.dim * 4),
                         .prefetch_end = input.offsets[last_bag]};
  if (input.weights != nullptr) {
    pool_bags_weighted<true>(bags, first_bag, last_bag, out);
  } else {
    pool_bags_weighted<false>(bags, first_bag, last_bag, out);
  }
}

}  // namespace recemb::internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace recemb::internal {

HWY_EXPORT(pool_float32_bags);

namespace {

float quantize(float x, const QuantizationConfig& q) {
  const float step = (q.upper - q.lower) / static_cast<float>(q.num_buckets - 1);
  x = std::clamp(x, q.lower, q.upper);
  return std::floor((x - q.lower) / step + 0.5f) * step + q.lower;
}

// The scalar kernel is one template over the row format. A format supplies row(id), whose
// operator[] decodes one value, and the row's bytes to prefetch; everything else (order of the
// sums, weights, scales, simulated quantization) is shared, so a float32 serving table pools
// bitwise as a training one.

struct Float32Format {
  const float* table;
  int64_t dim;

  const float* row(int64_t id) const { return table + id * dim; }
  int64_t row_bytes() const { return dim * 4; }
  void prefetch(int64_t id) const { prefetch_bytes(row(id), row_bytes()); }
};

struct Float16Row {
  const uint16_t* __restrict values;
  float operator[](int64_t d) const { return float16_to_float(values[d]); }
};

struct Float16Format {
  const uint16_t* table;
  int64_t dim;

  Float16Row row(int64_t id) const { return {table + id * dim}; }
  int64_t row_bytes() const { return dim * 2; }
  void prefetch(int64_t id) const { prefetch_bytes(table + id * dim, row_bytes()); }
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
  int64_t row_bytes() const { return int8_row_bytes(dim); }
  void prefetch(int64_t id) const { prefetch_bytes(table + id * row_bytes(), row_bytes()); }
};

template <typename Format, bool kWeighted, bool kQuantized>
void pool_bags_impl(const Format& rows, const PoolInput& in, int64_t first_bag, int64_t last_bag,
                    float* out) {
  const int64_t dim = in.dim;
  const int64_t distance = forward_prefetch_rows(rows.row_bytes());
  const int64_t end_id = in.offsets[last_bag];
  for (int64_t j = in.offsets[first_bag]; j < std::min(in.offsets[first_bag] + distance, end_id);
       ++j) {
    rows.prefetch(in.ids[j]);
  }
  for (int64_t b = first_bag; b < last_bag; ++b) {
    float* __restrict acc = out + b * dim;
    std::fill_n(acc, dim, 0.0f);
    for (int64_t j = in.offsets[b]; j < in.offsets[b + 1]; ++j) {
      if (j + distance < end_id) rows.prefetch(in.ids[j + distance]);
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

struct PoolRows {
  const PoolInput& input;
  int64_t first_bag;
  int64_t last_bag;
  float* out;

  void operator()(const float* table) const {
    if (input.quantization == nullptr) {
      HWY_DYNAMIC_DISPATCH(pool_float32_bags)(input, table, first_bag, last_bag, out);
    } else {
      pool_bags_as(Float32Format{table, input.dim}, input, first_bag, last_bag, out);
    }
  }
  void operator()(Float16Rows table) const {
    pool_bags_as(Float16Format{table.data, input.dim}, input, first_bag, last_bag, out);
  }
  void operator()(Int8Rows table) const {
    pool_bags_as(Int8Format{table.data, input.dim}, input, first_bag, last_bag, out);
  }
};

}  // namespace

void pool_bags(const PoolInput& input, int64_t first_bag, int64_t last_bag, float* out) {
  std::visit(PoolRows{input, first_bag, last_bag, out}, input.table);
}

}  // namespace recemb::internal
#endif  // HWY_ONCE
