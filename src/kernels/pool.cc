#include "kernels/pool.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "kernels/half_precision.h"
#include "kernels/prefetch.h"

// Rows of every format (float32, bfloat16, float16, int8) are pooled by a Highway kernel compiled
// once per target (foreach_target.h includes this file again for each) and dispatched at run time;
// it reads a row through its format's decoder (below). Simulated quantization uses the scalar
// template at the end of the file.
//
// Bitwise identical results on every target, and to the scalar template: each output lane is the
// same sequence of float32 operations, acc = 0, then acc = acc + row[d] (or acc + weight * row[d],
// a multiply then an add: this file is built with -ffp-contract=off so that no FMA contracts
// them), then acc * scale unless the scale is 1; row[d] is decoded as kernels/quantized_rows.h
// decodes it (float16 exactly, by the same bit method; int8 as code * scale + bias, a multiply
// then an add).
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

// The row formats, as the vector kernel reads them: a row's address and bytes (to prefetch), and
// row(d, id), whose load(d, column) decodes N = Lanes(d) values from `column` on.
struct Float32Table {
  const float* values;
  int64_t dim;

  const void* address(int64_t id) const { return values + id * dim; }
  int64_t row_bytes() const { return dim * 4; }
  template <class D>
  struct Row {
    const float* HWY_RESTRICT values;
    HWY_INLINE hn::Vec<D> load(D d, int64_t column) const { return hn::LoadU(d, values + column); }
  };
  template <class D>
  HWY_INLINE Row<D> row(D, int64_t id) const {
    return {values + id * dim};
  }
};

struct Float16Table {
  const uint16_t* halves;
  int64_t dim;

  const void* address(int64_t id) const { return halves + id * dim; }
  int64_t row_bytes() const { return dim * 2; }
  template <class D>
  struct Row {
    const uint16_t* HWY_RESTRICT halves;
    // The conversion instruction where the target has one (F16C with AVX2, AVX-512), Highway's
    // exact emulation elsewhere: a float16 value is exact in float32, so both give the bits of
    // float16_to_float (kernels/quantized_rows.h) for every finite half, on every target.
    HWY_INLINE hn::Vec<D> load(D d, int64_t column) const {
      const hn::Rebind<hwy::float16_t, D> d16;
      return hn::PromoteTo(
          d, hn::LoadU(d16, reinterpret_cast<const hwy::float16_t*>(halves) + column));
    }
  };
  template <class D>
  HWY_INLINE Row<D> row(D, int64_t id) const {
    return {halves + id * dim};
  }
};

struct BFloat16Table {
  const uint16_t* values;
  int64_t dim;

  const void* address(int64_t id) const { return values + id * dim; }
  int64_t row_bytes() const { return dim * 2; }
  template <class D>
  struct Row {
    const uint16_t* HWY_RESTRICT values;
    // A bfloat16 value is the top half of its float32: widened and shifted, exact on every target.
    HWY_INLINE hn::Vec<D> load(D d, int64_t column) const {
      const hn::RebindToUnsigned<D> du;
      const hn::Rebind<uint16_t, D> d16;
      return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, values + column))));
    }
  };
  template <class D>
  HWY_INLINE Row<D> row(D, int64_t id) const {
    return {values + id * dim};
  }
};

struct Int8Table {
  const uint8_t* bytes;
  int64_t dim;

  const void* address(int64_t id) const { return bytes + id * row_bytes(); }
  int64_t row_bytes() const { return int8_row_bytes(dim); }
  template <class D>
  struct Row {
    const uint8_t* HWY_RESTRICT codes;
    hn::Vec<D> scale;
    hn::Vec<D> bias;
    HWY_INLINE hn::Vec<D> load(D d, int64_t column) const {
      const hn::RebindToSigned<D> di;
      const hn::Rebind<uint8_t, D> d8;
      const auto codes32 = hn::PromoteTo(di, hn::LoadU(d8, codes + column));
      return hn::Add(hn::Mul(hn::ConvertTo(d, codes32), scale), bias);
    }
  };
  template <class D>
  HWY_INLINE Row<D> row(D d, int64_t id) const {
    const uint8_t* codes = bytes + id * row_bytes();
    const Int8RowParameters parameters = int8_row_parameters(codes, dim);
    return {codes, hn::Set(d, parameters.scale), hn::Set(d, parameters.bias)};
  }
};

template <class Table>
struct Bags {
  Table table;
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
template <int kVectors, bool kTail, bool kWeighted, class D, class Table>
HWY_INLINE void pool_bag(D d, const Bags<Table>& bags, int64_t bag, int64_t column, bool prefetch,
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
      prefetch_bytes_to_l2(bags.table.address(bags.ids[ahead]), bags.table.row_bytes());
    }
    const auto row = bags.table.row(d, bags.ids[j]);
    if constexpr (kWeighted) {
      const V weight = hn::Set(d, bags.weights[j]);
      for (int k = 0; k < kVectors; ++k) {
        acc[k] = hn::Add(acc[k], hn::Mul(weight, row.load(d, column + k * lanes)));
      }
      if constexpr (kTail) tail = hn::Add(tail, hn::Mul(weight, row.load(d, tail_column)));
    } else {
      for (int k = 0; k < kVectors; ++k) acc[k] = hn::Add(acc[k], row.load(d, column + k * lanes));
      if constexpr (kTail) tail = hn::Add(tail, row.load(d, tail_column));
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
template <class Table>
void prefetch_first_rows(const Bags<Table>& bags, int64_t first_bag) {
  const int64_t begin = bags.offsets[first_bag];
  const int64_t end = std::min(begin + bags.prefetch_rows, bags.prefetch_end);
  for (int64_t j = begin; j < end; ++j) {
    prefetch_bytes_to_l2(bags.table.address(bags.ids[j]), bags.table.row_bytes());
  }
}

template <class D, class Table>
using PoolBagsFunction = void (*)(D, const Bags<Table>&, int64_t, int64_t, float*);
template <class D, class Table>
using PoolBagFunction = void (*)(D, const Bags<Table>&, int64_t, int64_t, bool, float*);

// Rows of at most kVectors * N + (kTail ? N : 0) floats: the whole accumulator in registers.
template <int kVectors, bool kTail, bool kWeighted, class D, class Table>
void pool_narrow_bags(D d, const Bags<Table>& bags, int64_t first_bag, int64_t last_bag,
                      float* out) {
  prefetch_first_rows(bags, first_bag);
  for (int64_t b = first_bag; b < last_bag; ++b) {
    pool_bag<kVectors, kTail, kWeighted>(d, bags, b, 0, true, out);
  }
}

template <int kVectors, bool kTail, bool kWeighted, class D, class Table>
void pool_bag_chunk(D d, const Bags<Table>& bags, int64_t bag, int64_t column, bool prefetch,
                    float* out) {
  pool_bag<kVectors, kTail, kWeighted>(d, bags, bag, column, prefetch, out);
}

// Wider rows: per bag, chunks of kMaxVectors vectors, then the rest and the tail. The first chunk
// prefetches whole rows; the others find the bag's rows in cache.
template <bool kWeighted, class D, class Table>
void pool_wide_bags(D d, const Bags<Table>& bags, PoolBagFunction<D, Table> last_chunk,
                    int64_t first_bag, int64_t last_bag, float* out) {
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

template <bool kTail, bool kWeighted, class D, class Table, int... kVectors>
PoolBagsFunction<D, Table> narrow_kernel(int vectors, std::integer_sequence<int, kVectors...>) {
  PoolBagsFunction<D, Table> kernel = nullptr;
  ((kernel =
        vectors == kVectors ? &pool_narrow_bags<kVectors, kTail, kWeighted, D, Table> : kernel),
   ...);
  return kernel;
}

template <bool kTail, bool kWeighted, class D, class Table, int... kVectors>
PoolBagFunction<D, Table> chunk_kernel(int vectors, std::integer_sequence<int, kVectors...>) {
  PoolBagFunction<D, Table> kernel = nullptr;
  ((kernel = vectors == kVectors ? &pool_bag_chunk<kVectors, kTail, kWeighted, D, Table> : kernel),
   ...);
  return kernel;
}

template <bool kWeighted, class D, class Table>
void pool_bags_with(D d, const Bags<Table>& bags, int64_t first_bag, int64_t last_bag, float* out) {
  const auto lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto vectors = static_cast<int>(bags.dim / lanes);
  const bool tail = bags.dim % lanes != 0;
  if (vectors <= kMaxVectors) {
    constexpr auto kCounts = std::make_integer_sequence<int, kMaxVectors + 1>();
    const PoolBagsFunction<D, Table> kernel =
        tail ? narrow_kernel<true, kWeighted, D, Table>(vectors, kCounts)
             : narrow_kernel<false, kWeighted, D, Table>(vectors, kCounts);
    kernel(d, bags, first_bag, last_bag, out);
    return;
  }
  const int rest = vectors % kMaxVectors;
  constexpr auto kCounts = std::make_integer_sequence<int, kMaxVectors>();
  const PoolBagFunction<D, Table> last_chunk =
      tail ? chunk_kernel<true, kWeighted, D, Table>(rest, kCounts)
           : (rest == 0 ? nullptr : chunk_kernel<false, kWeighted, D, Table>(rest, kCounts));
  pool_wide_bags<kWeighted>(d, bags, last_chunk, first_bag, last_bag, out);
}

// Rows narrower than one full vector (dim < N <= 16): one vector of the widest power of two of
// lanes not above dim, and the overlapping tail.
template <bool kWeighted, size_t kLanes, class Table>
void pool_short_bags(const Bags<Table>& bags, int64_t first_bag, int64_t last_bag, float* out) {
  const hn::CappedTag<float, kLanes> d;
  if (bags.dim == static_cast<int64_t>(hn::Lanes(d))) {
    pool_narrow_bags<1, false, kWeighted>(d, bags, first_bag, last_bag, out);
  } else {
    pool_narrow_bags<1, true, kWeighted>(d, bags, first_bag, last_bag, out);
  }
}

template <bool kWeighted, class Table>
void pool_bags_weighted(const Bags<Table>& bags, int64_t first_bag, int64_t last_bag, float* out) {
  const hn::ScalableTag<float> d;
  const int64_t dim = bags.dim;
  if (dim >= static_cast<int64_t>(hn::Lanes(d))) {
    pool_bags_with<kWeighted>(d, bags, first_bag, last_bag, out);
  } else if (dim >= 8) {
    pool_short_bags<kWeighted, 8, Table>(bags, first_bag, last_bag, out);
  } else if (dim >= 4) {
    pool_short_bags<kWeighted, 4, Table>(bags, first_bag, last_bag, out);
  } else if (dim >= 2) {
    pool_short_bags<kWeighted, 2, Table>(bags, first_bag, last_bag, out);
  } else {
    pool_short_bags<kWeighted, 1, Table>(bags, first_bag, last_bag, out);
  }
}

template <class Table>
void pool_table_bags(const PoolInput& input, Table table, int64_t first_bag, int64_t last_bag,
                     float* out) {
  const Bags<Table> bags{.table = table,
                         .dim = input.dim,
                         .offsets = input.offsets,
                         .ids = input.ids,
                         .weights = input.weights,
                         .bag_scales = input.bag_scales,
                         .prefetch_rows = forward_prefetch_rows(table.row_bytes()),
                         .prefetch_end = input.offsets[last_bag]};
  if (input.weights != nullptr) {
    pool_bags_weighted<true>(bags, first_bag, last_bag, out);
  } else {
    pool_bags_weighted<false>(bags, first_bag, last_bag, out);
  }
}

void pool_float32_bags(const PoolInput& input, const float* table, int64_t first_bag,
                       int64_t last_bag, float* out) {
  pool_table_bags(input, Float32Table{table, input.dim}, first_bag, last_bag, out);
}

void pool_float16_bags(const PoolInput& input, Float16Rows table, int64_t first_bag,
                       int64_t last_bag, float* out) {
  pool_table_bags(input, Float16Table{table.data, input.dim}, first_bag, last_bag, out);
}

void pool_bfloat16_bags(const PoolInput& input, BFloat16Rows table, int64_t first_bag,
                        int64_t last_bag, float* out) {
  pool_table_bags(input, BFloat16Table{table.data, input.dim}, first_bag, last_bag, out);
}

void pool_int8_bags(const PoolInput& input, Int8Rows table, int64_t first_bag, int64_t last_bag,
                    float* out) {
  pool_table_bags(input, Int8Table{table.data, input.dim}, first_bag, last_bag, out);
}

}  // namespace recemb::internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace recemb::internal {

HWY_EXPORT(pool_float32_bags);
HWY_EXPORT(pool_float16_bags);
HWY_EXPORT(pool_bfloat16_bags);
HWY_EXPORT(pool_int8_bags);

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
  void prefetch(int64_t id) const { prefetch_bytes_to_l2(row(id), row_bytes()); }
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
  void prefetch(int64_t id) const { prefetch_bytes_to_l2(table + id * dim, row_bytes()); }
};

struct BFloat16Row {
  const uint16_t* __restrict values;
  float operator[](int64_t d) const { return bfloat16_to_float(values[d]); }
};

struct BFloat16Format {
  const uint16_t* table;
  int64_t dim;

  BFloat16Row row(int64_t id) const { return {table + id * dim}; }
  int64_t row_bytes() const { return dim * 2; }
  void prefetch(int64_t id) const { prefetch_bytes_to_l2(table + id * dim, row_bytes()); }
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
  void prefetch(int64_t id) const { prefetch_bytes_to_l2(table + id * row_bytes(), row_bytes()); }
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
    if (input.quantization == nullptr) {
      HWY_DYNAMIC_DISPATCH(pool_float16_bags)(input, table, first_bag, last_bag, out);
    } else {
      pool_bags_as(Float16Format{table.data, input.dim}, input, first_bag, last_bag, out);
    }
  }
  void operator()(BFloat16Rows table) const {
    if (input.quantization == nullptr) {
      HWY_DYNAMIC_DISPATCH(pool_bfloat16_bags)(input, table, first_bag, last_bag, out);
    } else {
      pool_bags_as(BFloat16Format{table.data, input.dim}, input, first_bag, last_bag, out);
    }
  }
  void operator()(Int8Rows table) const {
    if (input.quantization == nullptr) {
      HWY_DYNAMIC_DISPATCH(pool_int8_bags)(input, table, first_bag, last_bag, out);
    } else {
      pool_bags_as(Int8Format{table.data, input.dim}, input, first_bag, last_bag, out);
    }
  }
};

}  // namespace

void pool_bags(const PoolInput& input, int64_t first_bag, int64_t last_bag, float* out) {
  std::visit(PoolRows{input, first_bag, last_bag, out}, input.table);
}

}  // namespace recemb::internal
#endif  // HWY_ONCE
