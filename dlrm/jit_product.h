// Matrix products compiled at run time for one instruction set by libxsmm's code generator
// (libxsmm-dev's libxsmmgen: the generator alone, without libxsmm's BLAS or its kernel registry):
// the trainer's one door to libxsmm. dense_kernels.cc runs the MLPs' small products through
// them, where they are faster than Eigen's (docs/training.md, "The matrix-product library").
//
// A kernel of a ProductShape computes, on dense row-major float32 matrices,
//   out [rows, columns]  =  (or +=)  op(left) [rows, depth]  right [depth, columns],
// op(left) = left as stored [rows, depth], or, with transpose_left, left^T of left stored
// [depth, rows]. Its sums run in an order fixed by the shape and the instruction set, never by
// where the arrays lie (the code loads and stores unaligned), so results are bitwise the same
// for the same inputs; they differ from Eigen's, and between instruction sets, by rounding.
//
//   const ProductKernel kernel = product_kernel(JitIsa::kAvx512, {.rows = 256, .columns = 64,
//                                                                 .depth = 367, .accumulate =
//                                                                 true});
//   if (kernel) kernel(x, weights, y);   // y += x weights
#ifndef RECEMB_DLRM_JIT_PRODUCT_H_
#define RECEMB_DLRM_JIT_PRODUCT_H_

#include <cstdint>

namespace recemb::dlrm {

// The instruction set a kernel's code uses; the CPU must run it (dense_isa.h checks).
enum class JitIsa { kAvx2, kAvx512 };

struct ProductShape {
  int64_t rows = 0;     // >= 1
  int64_t columns = 0;  // >= 1
  int64_t depth = 0;    // >= 1
  bool transpose_left = false;
  bool accumulate = false;  // out += op(left) right; else out = op(left) right

  bool operator==(const ProductShape&) const = default;
};

// A generated product: calls cost a function call, no lookup. Empty (false) when libxsmm made no
// code for the shape.
class ProductKernel {
 public:
  using Function = void (*)(const float* a, const float* b, float* c);

  ProductKernel() = default;
  explicit ProductKernel(Function function) : function_(function) {}

  explicit operator bool() const { return function_ != nullptr; }
  bool operator==(const ProductKernel&) const = default;
  void operator()(const float* left, const float* right, float* out) const {
    // libxsmm's matrices are column-major: out^T = right^T op(left)^T, with right^T stored as
    // right is, and so on.
    function_(right, left, out);
  }

 private:
  Function function_ = nullptr;
};

// The kernel of `shape` for `isa`: generated on the first request for the pair, then the same
// one for the life of the process (a thread-safe cache that only grows, with one entry per
// distinct pair; its callers keep the pairs few). Empty when libxsmm generates no code for the
// shape (sizes beyond its limits); aborts, naming the shape, when the system refuses memory for
// the code.
ProductKernel product_kernel(JitIsa isa, const ProductShape& shape);

}  // namespace recemb::dlrm

#endif  // RECEMB_DLRM_JIT_PRODUCT_H_
