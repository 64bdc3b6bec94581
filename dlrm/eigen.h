// The trainer's one door to Eigen, included by dense_kernels.cc alone (the dense layers'
// arithmetic, compiled once per instruction set with Eigen's namespace renamed in each copy:
// dense_kernels.h), never <Eigen/...> itself, so the settings Eigen is compiled with live in one
// place.
//
// Layout: matrices are float32, row-major, a batch of B examples of F features being [B, F], so
// that a dense layer is Y = X * W with W [in, out]. The trainer keeps its arrays in std::vector
// and std::span (one flat parameter vector, reusable workspaces) and views them with the Map
// aliases below; Eigen never owns the trainer's memory.
//
// Results are bitwise independent of where arrays lie in memory (their alignment decides which
// elements Eigen computes in SIMD registers): the trainer avoids Eigen's approximate functions
// (below) and reductions whose order depends on alignment (dense_kernels.cc); tests shift every
// array.
#ifndef RECEMB_DLRM_EIGEN_H_
#define RECEMB_DLRM_EIGEN_H_

#include <cstdint>
#include <span>

// Eigen's matrix products pack their operands into buffers taken from the stack up to this many
// bytes and from the heap beyond (Eigen's default: 128 KiB). The MLPs multiply blocks of 256 rows
// (mlp.cc), so a product's buffers hold at most 4 * max(256 * in, 256 * out, in * out) bytes for
// a layer of `in` inputs and `out` outputs: with 1 MiB, no product allocates for layers of up to
// 1024 inputs and outputs and 2^18 weights (DLRM's default top layer needs 376 KiB), whatever
// the batch size. Threads that train need stacks of a few MiB, as Linux gives by default.
#define EIGEN_STACK_ALLOCATION_LIMIT (1 << 20)
// Exact square roots: Eigen's fast version (an rsqrt approximation and one Newton step, 1-2 bits
// short) differs from std::sqrt, so an array's result would depend on which elements Eigen
// computes in SIMD registers, i.e. on the array's alignment.
#define EIGEN_FAST_MATH 0
// Eigen never splits a product over OpenMP threads (should a program built with -fopenmp include
// this header): how a product is split would change its sums; the trainer spreads whole blocks of
// rows over its own threads instead (mlp.h).
#define EIGEN_DONT_PARALLELIZE
// Debug builds let tests forbid Eigen's heap allocations (Eigen::internal::set_is_malloc_allowed,
// through DenseKernels::allow_heap) to check that products take no heap memory.
#ifndef NDEBUG
#define EIGEN_RUNTIME_NO_MALLOC
#endif
// GCC 12 warns, wrongly, that AVX-512 intrinsics Eigen calls (immintrin.h, first included here)
// read an uninitialised value: their "undefined" vector operands are deliberately so.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <Eigen/Core>
#pragma GCC diagnostic pop

namespace recemb::dlrm {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowVector = Eigen::Matrix<float, 1, Eigen::Dynamic>;
using MatrixMap = Eigen::Map<RowMatrix>;
using ConstMatrixMap = Eigen::Map<const RowMatrix>;
using RowVectorMap = Eigen::Map<RowVector>;
using ConstRowVectorMap = Eigen::Map<const RowVector>;
using ArrayMap = Eigen::Map<Eigen::ArrayXf>;
using ConstArrayMap = Eigen::Map<const Eigen::ArrayXf>;

// `values` viewed as a one-dimensional array, for element-wise arithmetic.
inline ArrayMap as_array(std::span<float> values) {
  return ArrayMap(values.data(), static_cast<Eigen::Index>(values.size()));
}
inline ConstArrayMap as_array(std::span<const float> values) {
  return ConstArrayMap(values.data(), static_cast<Eigen::Index>(values.size()));
}

}  // namespace recemb::dlrm

#endif  // RECEMB_DLRM_EIGEN_H_
