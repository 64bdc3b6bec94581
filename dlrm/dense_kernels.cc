// The dense kernels of one instruction set (dense_kernels.h): this file is compiled once per
// instruction set, with that set's -m flags, -DEigen=Eigen_<set> and -DRECEMB_DENSE_KERNELS=<the
// table's name> (train/CMakeLists.txt). Everything but the table has internal linkage or lives
// in the renamed Eigen, and the build makes the remaining symbols (the standard library's inline
// functions) local to the copy.
#include "dlrm/dense_kernels.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <optional>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "dlrm/eigen.h"
#include "dlrm/jit_product.h"

#ifndef RECEMB_DENSE_KERNELS
#error "compile dense_kernels.cc through train/CMakeLists.txt, which names the table"
#endif

namespace recemb::dlrm {
namespace {

// Examples per block of the interaction: a vector register of floats (the kernels' sums of one
// example stay in one lane, so results do not depend on it).
#ifdef __AVX512F__
constexpr int64_t kLanes = 16;
#else
constexpr int64_t kLanes = 8;
#endif

// The MLPs' products run through libxsmm's generated kernels (jit_product.h) where this
// instruction set has them and they were measured faster than Eigen's (docs/training.md, "The
// matrix-product library"): for layers of at most kMaxJitWeights weights (a kernel reads the whole
// weight matrix for every few rows, without blocking it for the caches as Eigen does, so it must
// stay in the L2 cache). Elsewhere, and for a chunk libxsmm makes no kernel for, Eigen. (The
// kernels are 3-5x slower than Eigen into a single output column, as in DLRM's last layer, but
// those products are some 0.5 % of a step; Eigen's small products, done coefficient by
// coefficient, would make results depend on alignment: fused multiply-adds in whole vector
// registers, separate ones in the elements before the first aligned one.)
#if defined(__AVX512F__)
constexpr std::optional<JitIsa> kJitIsa = JitIsa::kAvx512;
#elif defined(__AVX2__)
constexpr std::optional<JitIsa> kJitIsa = JitIsa::kAvx2;
#else
constexpr std::optional<JitIsa> kJitIsa = std::nullopt;
#endif
constexpr int64_t kMaxJitWeights = int64_t{1} << 16;
// The kernels take a batch's rows in chunks of kMaxChunkRows, then of the powers of two below
// it, the largest first: a layer needs kernels for 9 row counts whatever the batch size, all
// made when the layer is built (prepare_products).
constexpr int64_t kMaxChunkRows = 256;

bool runs_jit(int64_t in, int64_t out) { return kJitIsa.has_value() && in * out <= kMaxJitWeights; }

template <typename Chunk>
void for_each_chunk(int64_t rows, Chunk&& chunk) {
  int64_t first = 0;
  for (; rows - first >= kMaxChunkRows; first += kMaxChunkRows) chunk(first, kMaxChunkRows);
  for (int64_t count = kMaxChunkRows / 2; count > 0; count /= 2) {
    if (rows - first >= count) {
      chunk(first, count);
      first += count;
    }
  }
}

// The products of a chunk of `count` rows of a layer of `in` inputs and `out` outputs.
ProductShape forward_shape(int64_t count, int64_t in, int64_t out) {  // y += x W
  return {.rows = count, .columns = out, .depth = in, .accumulate = true};
}
ProductShape weight_gradient_shape(int64_t count, int64_t in, int64_t out) {  // dW += x^T delta
  return {.rows = in, .columns = out, .depth = count, .transpose_left = true, .accumulate = true};
}
ProductShape input_gradient_shape(int64_t count, int64_t in, int64_t out) {  // dx = delta W^T
  return {.rows = count, .columns = in, .depth = out};
}

ProductKernel jit_kernel(const ProductShape& shape) {
  return kJitIsa.has_value() ? product_kernel(*kJitIsa, shape) : ProductKernel();
}

void prepare_products(int64_t in, int64_t out) {
  if (!runs_jit(in, out)) return;
  for (int64_t count = kMaxChunkRows; count > 0; count /= 2) {
    jit_kernel(forward_shape(count, in, out));
    jit_kernel(weight_gradient_shape(count, in, out));
    jit_kernel(input_gradient_shape(count, in, out));
  }
}

// Runs one of a layer's products over `rows` rows: chunk by chunk on the generated kernels where
// runs_jit (jit_chunk(kernel, first), with the kernel of shape(count, in, out)), else, and
// for a chunk libxsmm made no kernel for, on Eigen (eigen_chunk(first, count)).
template <typename EigenChunk, typename JitChunk>
void run_product(int64_t rows, int64_t in, int64_t out,
                 ProductShape (*shape)(int64_t, int64_t, int64_t), EigenChunk&& eigen_chunk,
                 JitChunk&& jit_chunk) {
  if (!runs_jit(in, out)) {
    eigen_chunk(0, rows);
    return;
  }
  for_each_chunk(rows, [&](int64_t first, int64_t count) {
    if (const ProductKernel kernel = jit_kernel(shape(count, in, out))) {
      jit_chunk(kernel, first);
    } else {
      eigen_chunk(first, count);
    }
  });
}

void affine_forward(const float* x, const float* weights, const float* bias, int64_t rows,
                    int64_t in, int64_t out, bool relu, float* y) {
  // The bias first, then += the product: a product assigned with = would first zero y.
  MatrixMap y_block(y, rows, out);
  y_block.rowwise() = ConstRowVectorMap(bias, out);
  const auto eigen_chunk = [&](int64_t first, int64_t count) {
    MatrixMap(y + first * out, count, out).noalias() +=
        ConstMatrixMap(x + first * in, count, in) * ConstMatrixMap(weights, in, out);
  };
  run_product(rows, in, out, forward_shape, eigen_chunk, [&](ProductKernel kernel, int64_t first) {
    kernel(x + first * in, weights, y + first * out);
  });
  if (relu) y_block = y_block.cwiseMax(0.0f);
}

void affine_parameter_gradients(const float* x, const float* delta, int64_t rows, int64_t in,
                                int64_t out, float* weight_gradient, float* bias_gradient) {
  const auto eigen_chunk = [&](int64_t first, int64_t count) {
    MatrixMap(weight_gradient, in, out).noalias() +=
        ConstMatrixMap(x + first * in, count, in).transpose() *
        ConstMatrixMap(delta + first * out, count, out);
  };
  run_product(rows, in, out, weight_gradient_shape, eigen_chunk,
              [&](ProductKernel kernel, int64_t first) {
                kernel(x + first * in, delta + first * out, weight_gradient);
              });
  // Row by row rather than colwise().sum(), whose result depends on the alignment of the
  // destination (Eigen sums aligned columns pairwise, the others in sequence).
  const ConstMatrixMap delta_block(delta, rows, out);
  RowVectorMap bias_sum(bias_gradient, out);
  for (int64_t r = 0; r < rows; ++r) bias_sum += delta_block.row(r);
}

void affine_input_gradient(const float* delta, const float* weights_transposed, int64_t rows,
                           int64_t in, int64_t out, float* input_gradient) {
  const auto eigen_chunk = [&](int64_t first, int64_t count) {
    MatrixMap(input_gradient + first * in, count, in).noalias() =
        ConstMatrixMap(delta + first * out, count, out) *
        ConstMatrixMap(weights_transposed, out, in);
  };
  run_product(rows, in, out, input_gradient_shape, eigen_chunk,
              [&](ProductKernel kernel, int64_t first) {
                kernel(delta + first * out, weights_transposed, input_gradient + first * in);
              });
}

void relu_gradient(const float* values, const float* gradient, int64_t count, float* out) {
  ArrayMap(out, count) =
      (ConstArrayMap(values, count) > 0.0f).select(ConstArrayMap(gradient, count), 0.0f);
}

void add(const float* values, int64_t count, float* sum) {
  ArrayMap(sum, count) += ConstArrayMap(values, count);
}

// A loop the compiler vectorises (a float is finite unless its exponent bits are all ones): 4x
// faster than Eigen's allFinite().
bool all_finite(const float* values, int64_t count) {
  uint32_t non_finite = 0;
  for (int64_t i = 0; i < count; ++i) {
    non_finite |=
        static_cast<uint32_t>((std::bit_cast<uint32_t>(values[i]) & 0x7f800000u) == 0x7f800000u);
  }
  return non_finite == 0;
}

// The interaction works on blocks of kLanes examples laid side by side ("lanes"), so that every
// innermost loop runs over the examples of a block: contiguous, vectorised by the compiler, with
// no horizontal sums. (Per example, a dot product of dim = 16 floats ends in a horizontal sum and
// the 351 small products cost more in call and reduction overhead than in arithmetic: Eigen's
// per-example matrix-vector products took 2x as long forward and 1.3x backward, for DLRM's shapes
// with AVX2.) A block's buffers (InteractionBlock), F = num_embeddings + 1:
//   vectors[(f * dim + k) * kLanes + lane]           T_f[k] of example first + lane
//   vector_gradients[(f * dim + k) * kLanes + lane]  d(loss)/d(T_f[k])
//   pairs[p * kLanes + lane]                         pair p = i (i - 1) / 2 + j (i > j): its dot
//                                                    product (forward) or P_ij (backward)
//   pair_gradients[(i * F + j) * kLanes + lane]      S_ij = P_ij (i > j), P_ji (i < j), 0 (i == j),
//                                                    with 8 lanes only (kFullPairMatrix)
// The backward pass is dT_i = sum_{j != i} P_ij T_j per example (P symmetric, read from the pairs),
// one sum per output element in registers. In the last
// block of a batch, lanes beyond the batch hold stale values whose results are never stored.

// GCC 12's AVX-512 intrinsics start some results from _mm512_undefined_ps(), which its
// -W(maybe-)uninitialized then reports wherever they are inlined (a false positive): off for the
// transposes and the interaction kernels that inline them.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// Transposes kLanes rows of kLanes floats in registers: rows[r] holds row r's floats on entry
// and column r's on return. Within each 128-bit lane, the rows are interleaved by floats, then by
// pairs of floats (the same two stages for both sets, `interleave_in_lanes`); then the 128-bit
// lanes are exchanged between rows, in two stages with AVX-512 and one with AVX2.
#if defined(__AVX512F__)
using LaneVector = __m512;
inline LaneVector load_lanes(const float* p) { return _mm512_loadu_ps(p); }
inline void store_lanes(float* p, LaneVector v) { _mm512_storeu_ps(p, v); }
inline LaneVector unpack_low(LaneVector a, LaneVector b) { return _mm512_unpacklo_ps(a, b); }
inline LaneVector unpack_high(LaneVector a, LaneVector b) { return _mm512_unpackhi_ps(a, b); }
template <int kControl>
inline LaneVector shuffle(LaneVector a, LaneVector b) {
  return _mm512_shuffle_ps(a, b, kControl);
}
#elif defined(__AVX2__)
using LaneVector = __m256;
inline LaneVector load_lanes(const float* p) { return _mm256_loadu_ps(p); }
inline void store_lanes(float* p, LaneVector v) { _mm256_storeu_ps(p, v); }
inline LaneVector unpack_low(LaneVector a, LaneVector b) { return _mm256_unpacklo_ps(a, b); }
inline LaneVector unpack_high(LaneVector a, LaneVector b) { return _mm256_unpackhi_ps(a, b); }
template <int kControl>
inline LaneVector shuffle(LaneVector a, LaneVector b) {
  return _mm256_shuffle_ps(a, b, kControl);
}
#endif

#if defined(__AVX512F__) || defined(__AVX2__)
[[gnu::always_inline]] inline void interleave_in_lanes(const LaneVector* rows, LaneVector* out) {
  LaneVector t[kLanes];
  for (int64_t i = 0; i < kLanes; i += 2) {
    t[i] = unpack_low(rows[i], rows[i + 1]);
    t[i + 1] = unpack_high(rows[i], rows[i + 1]);
  }
  for (int64_t i = 0; i < kLanes; i += 4) {
    out[i] = shuffle<0x44>(t[i], t[i + 2]);
    out[i + 1] = shuffle<0xEE>(t[i], t[i + 2]);
    out[i + 2] = shuffle<0x44>(t[i + 1], t[i + 3]);
    out[i + 3] = shuffle<0xEE>(t[i + 1], t[i + 3]);
  }
}
#endif

#if defined(__AVX512F__)
[[gnu::always_inline]] inline void transpose_tile(LaneVector* rows) {
  LaneVector u[16];
  interleave_in_lanes(rows, u);
  LaneVector t[16];
  for (int h = 0; h < 16; h += 8) {
    for (int i = 0; i < 4; ++i) {
      t[h + i] = _mm512_shuffle_f32x4(u[h + i], u[h + i + 4], 0x88);
      t[h + i + 4] = _mm512_shuffle_f32x4(u[h + i], u[h + i + 4], 0xDD);
    }
  }
  for (int i = 0; i < 8; ++i) {
    rows[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    rows[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
  }
}
#elif defined(__AVX2__)
[[gnu::always_inline]] inline void transpose_tile(LaneVector* rows) {
  LaneVector u[8];
  interleave_in_lanes(rows, u);
  for (int i = 0; i < 4; ++i) {
    rows[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    rows[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}
#endif

// dst[c * dst_stride + r] = src[r * src_stride + c] for r < rows and c < columns: whole tiles of
// kLanes x kLanes through registers where the instruction set has a tile transpose, the rest
// element by element. Data movement only, so the results do not depend on the path. Moves a
// block's examples (rows of `dim` floats, kLanes of them) into the lane layout and back, and
// transposes an MLP's weights for its input gradients.
void transpose(const float* src, int64_t src_stride, int64_t rows, int64_t columns, float* dst,
               int64_t dst_stride) {
  int64_t tiled_rows = 0;
  int64_t tiled_columns = 0;
#if defined(__AVX512F__) || defined(__AVX2__)
  tiled_rows = rows - rows % kLanes;
  tiled_columns = columns - columns % kLanes;
  LaneVector tile[kLanes];
  for (int64_t r0 = 0; r0 < tiled_rows; r0 += kLanes) {
    for (int64_t c0 = 0; c0 < tiled_columns; c0 += kLanes) {
#pragma GCC unroll 16
      for (int64_t i = 0; i < kLanes; ++i) tile[i] = load_lanes(src + (r0 + i) * src_stride + c0);
      transpose_tile(tile);
#pragma GCC unroll 16
      for (int64_t i = 0; i < kLanes; ++i) store_lanes(dst + (c0 + i) * dst_stride + r0, tile[i]);
    }
  }
#endif
  // The rows below the tiles, then the columns to their right.
  for (int64_t r = tiled_rows; r < rows; ++r) {
    for (int64_t c = 0; c < columns; ++c) dst[c * dst_stride + r] = src[r * src_stride + c];
  }
  for (int64_t r = 0; r < tiled_rows; ++r) {
    for (int64_t c = tiled_columns; c < columns; ++c) {
      dst[c * dst_stride + r] = src[r * src_stride + c];
    }
  }
}

// count (<= kLanes) examples' `columns` floats, rows `stride` apart, into the lane layout:
// lanes[c * kLanes + example].
void to_lanes(const float* rows, int64_t stride, int64_t count, int64_t columns, float* lanes) {
  transpose(rows, stride, count, columns, lanes, kLanes);
}

// The inverse: rows[example * stride + c] = lanes[c * kLanes + example].
void from_lanes(const float* lanes, int64_t count, int64_t columns, float* rows, int64_t stride) {
  // NOLINTNEXTLINE(readability-suspicious-call-argument): the inverse swaps rows and columns
  transpose(lanes, kLanes, columns, count, rows, stride);
}

// transposed [columns, rows] = matrix [rows, columns]^T.
void transpose_matrix(const float* matrix, int64_t rows, int64_t columns, float* transposed) {
  transpose(matrix, columns, rows, columns, transposed, rows);
}

// Copies the block's examples into block.vectors.
void gather(const InteractionBlock& block) {
  const int64_t dim = block.dim;
  const int64_t stride = dim * kLanes;
  const auto num_embeddings = static_cast<int64_t>(block.embeddings.size());
  for (int64_t f = 0; f <= num_embeddings; ++f) {
    const std::span<const float> source =
        f == 0 ? block.bottom : block.embeddings[static_cast<size_t>(f - 1)];
    to_lanes(&source[static_cast<size_t>(block.first * dim)], dim, block.count, dim,
             block.vectors + f * stride);
  }
}

// The dot products of vector i with vectors j .. j + kCount - 1 (`vectors_j`, `stride` floats
// apart) for the examples of a block, into kCount consecutive pairs. The kCount independent sums
// hide the latency of the multiply-adds and share the loads of vector i; each pair's sum runs
// over k in order, whatever kCount.
template <int kCount>
void dot_products(const float* vector_i, const float* vectors_j, int64_t stride, int64_t dim,
                  float* pairs) {
  float dots[kCount][kLanes] = {};
  for (int64_t k = 0; k < dim; ++k) {
    for (int q = 0; q < kCount; ++q) {
      for (int64_t lane = 0; lane < kLanes; ++lane) {
        dots[q][lane] += vector_i[k * kLanes + lane] * vectors_j[q * stride + k * kLanes + lane];
      }
    }
  }
  for (int q = 0; q < kCount; ++q) {
    for (int64_t lane = 0; lane < kLanes; ++lane) pairs[q * kLanes + lane] = dots[q][lane];
  }
}

void interaction_forward(const InteractionBlock& block, float* output) {
  gather(block);
  const int64_t dim = block.dim;
  const int64_t stride = dim * kLanes;  // floats between two vectors in block.vectors
  const auto num_vectors = static_cast<int64_t>(block.embeddings.size()) + 1;
  const int64_t width = dim + num_vectors * (num_vectors - 1) / 2;
  float* block_output = output + block.first * width;
  for (int64_t lane = 0; lane < block.count; ++lane) {
    std::memcpy(block_output + lane * width,
                &block.bottom[static_cast<size_t>((block.first + lane) * dim)],
                sizeof(float) * static_cast<size_t>(dim));
  }
  const float* vectors = block.vectors;
  float* pairs = block.pairs;
  for (int64_t i = 1; i < num_vectors; ++i) {
    const float* vector_i = vectors + i * stride;
    int64_t j = 0;
    for (; j + 8 <= i; j += 8, pairs += 8 * kLanes) {
      dot_products<8>(vector_i, vectors + j * stride, stride, dim, pairs);
    }
    for (; j < i; ++j, pairs += kLanes) {
      dot_products<1>(vector_i, vectors + j * stride, stride, dim, pairs);
    }
  }
  from_lanes(block.pairs, block.count, width - dim, block_output + dim, width);
}

// With 8 lanes a pair's gradients fill half a cache line, and reading row i's pairs (j, i), j > i,
// a row apart each would touch twice the lines: the backward first lays P out as the full
// symmetric matrix S (S_ij = P_ij, S_ji = P_ij, S_ii = 0) in block.pair_gradients, whose rows are
// contiguous (6-8 % of a step faster with AVX2 and the baseline). With 16 lanes a pair fills a
// line, and S would only add its 46 KB a block (3 % of a step slower with AVX-512).
constexpr bool kFullPairMatrix = kLanes == 8;

// d(loss)/d(T_i)[k] = sum_{j != i} P_ij T_j[k] for k = k0 .. k0 + kCount - 1 and the examples
// of a block, into `gradient_i`, where P_ij = P_ji is the gradient of pair (max(i, j),
// min(i, j)): row i of S in `pairs` (kFullPairMatrix), else the pairs themselves (row i's pairs
// j < i are consecutive, the pairs (j, i), j > i, a row apart). The kCount independent sums hide
// the latency of the multiply-adds and share the loads of P; each runs over j in order (S_ii = 0
// leaves a sum unchanged). Written element by element, not by memcpy, so that the sums stay in
// registers.
template <int kCount>
void vector_gradient(const float* pairs, const float* vectors, int64_t num_vectors, int64_t stride,
                     int64_t i, int64_t k0, float* gradient_i) {
  float sums[kCount][kLanes] = {};
  const auto add = [&](const float* pair, int64_t j) {
    for (int q = 0; q < kCount; ++q) {
      for (int64_t lane = 0; lane < kLanes; ++lane) {
        sums[q][lane] += pair[lane] * vectors[j * stride + (k0 + q) * kLanes + lane];
      }
    }
  };
  if constexpr (kFullPairMatrix) {
    const float* row_i = pairs + i * num_vectors * kLanes;
    for (int64_t j = 0; j < num_vectors; ++j) add(row_i + j * kLanes, j);
  } else {
    const float* row_i = pairs + i * (i - 1) / 2 * kLanes;  // pairs (i, 0 .. i - 1)
    for (int64_t j = 0; j < i; ++j) add(row_i + j * kLanes, j);
    for (int64_t j = i + 1; j < num_vectors; ++j) add(pairs + (j * (j - 1) / 2 + i) * kLanes, j);
  }
  for (int q = 0; q < kCount; ++q) {
    for (int64_t lane = 0; lane < kLanes; ++lane) {
      gradient_i[(k0 + q) * kLanes + lane] = sums[q][lane];
    }
  }
}

void interaction_backward(const InteractionBlock& block, const float* output_gradient,
                          float* bottom_gradient,
                          std::span<const std::span<float>> embedding_gradients) {
  gather(block);
  const int64_t dim = block.dim;
  const int64_t stride = dim * kLanes;
  const auto num_vectors = static_cast<int64_t>(block.embeddings.size()) + 1;
  const int64_t width = dim + num_vectors * (num_vectors - 1) / 2;
  // The pairs' gradients into the lane layout, then (kFullPairMatrix) each pair's lane vector to
  // its two places in S.
  to_lanes(output_gradient + block.first * width + dim, width, block.count, width - dim,
           block.pairs);
  const float* pairs = block.pairs;
  if constexpr (kFullPairMatrix) {
    const float* pair = block.pairs;
    for (int64_t i = 1; i < num_vectors; ++i) {
      for (int64_t j = 0; j < i; ++j, pair += kLanes) {
        std::memcpy(block.pair_gradients + (i * num_vectors + j) * kLanes, pair,
                    sizeof(float) * kLanes);
        std::memcpy(block.pair_gradients + (j * num_vectors + i) * kLanes, pair,
                    sizeof(float) * kLanes);
      }
    }
    pairs = block.pair_gradients;
  }
  constexpr int kCount = kLanes == 16 ? 8 : 4;  // sums in registers: 8 of 32, 4 of 16
  for (int64_t i = 0; i < num_vectors; ++i) {
    float* gradient_i = block.vector_gradients + i * stride;
    int64_t k = 0;
    for (; k + kCount <= dim; k += kCount) {
      vector_gradient<kCount>(pairs, block.vectors, num_vectors, stride, i, k, gradient_i);
    }
    for (; k < dim; ++k) {
      vector_gradient<1>(pairs, block.vectors, num_vectors, stride, i, k, gradient_i);
    }
  }
  from_lanes(block.vector_gradients, block.count, dim, bottom_gradient + block.first * dim, dim);
  for (int64_t lane = 0; lane < block.count; ++lane) {
    const int64_t example = block.first + lane;
    for (int64_t k = 0; k < dim; ++k) {
      bottom_gradient[example * dim + k] += output_gradient[example * width + k];
    }
  }
  for (size_t f = 0; f < embedding_gradients.size(); ++f) {
    from_lanes(block.vector_gradients + (static_cast<int64_t>(f) + 1) * stride, block.count, dim,
               embedding_gradients[f].data() + block.first * dim, dim);
  }
}

#pragma GCC diagnostic pop

void adam_update(const AdamStep& step, int64_t count, const float* gradients, float* parameters,
                 float* momenta, float* velocities) {
  const ConstArrayMap g(gradients, count);
  ArrayMap w(parameters, count);
  ArrayMap m(momenta, count);
  ArrayMap v(velocities, count);
  m = step.beta_1 * m + (1.0f - step.beta_1) * g;
  v = step.beta_2 * v + (1.0f - step.beta_2) * g.square();
  w -= step.step_size * m / (v.sqrt() * step.velocity_scale + step.epsilon);
}

void adagrad_update(float learning_rate, int64_t count, const float* gradients, float* parameters,
                    float* accumulators) {
  const ConstArrayMap g(gradients, count);
  ArrayMap a(accumulators, count);
  a += g.square();
  ArrayMap(parameters, count) -= learning_rate * g / a.sqrt();
}

void allow_heap([[maybe_unused]] bool allowed) {
#ifndef NDEBUG
  Eigen::internal::set_is_malloc_allowed(allowed);
#endif
}

}  // namespace
}  // namespace recemb::dlrm

extern "C" const recemb::dlrm::DenseKernels RECEMB_DENSE_KERNELS = {
    .affine_forward = recemb::dlrm::affine_forward,
    .affine_parameter_gradients = recemb::dlrm::affine_parameter_gradients,
    .affine_input_gradient = recemb::dlrm::affine_input_gradient,
    .prepare_products = recemb::dlrm::prepare_products,
    .transpose = recemb::dlrm::transpose_matrix,
    .relu_gradient = recemb::dlrm::relu_gradient,
    .add = recemb::dlrm::add,
    .all_finite = recemb::dlrm::all_finite,
    .interaction_lanes = recemb::dlrm::kLanes,
    .interaction_forward = recemb::dlrm::interaction_forward,
    .interaction_backward = recemb::dlrm::interaction_backward,
    .adam_update = recemb::dlrm::adam_update,
    .adagrad_update = recemb::dlrm::adagrad_update,
    .allow_heap = recemb::dlrm::allow_heap,
};
