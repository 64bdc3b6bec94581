// DenseKernels: the arithmetic of the trainer's dense layers (the MLPs' products, the dot
// interaction, the dense optimizers' updates), one table of functions per instruction set. Mlp,
// DotInteraction, DenseOptimizer and DlrmDenseModel validate, lay out and schedule the work on
// their threads, and call these for the numbers; dense_isa.h picks the table for the CPU.
//
// dlrm/dense_kernels.cc is compiled once per instruction set (train/CMakeLists.txt), each copy
// with its own -m flags and Eigen renamed, its symbols made local but for its table (whose C name
// below says which it is): an AVX-512 copy's Eigen templates can never stand in for the baseline
// copy's (docs/training.md, "Instruction set"). So only plain types cross this interface: floats,
// sizes, pointers and spans, never Eigen's.
//
// Matrices are float32 and row-major, a batch of `rows` examples of `in` features being
// [rows, in], so that a layer is y = x W + b with W [in, out]. Every kernel computes each
// element's result in an order fixed by the sizes alone: results are bitwise the same wherever
// the arrays lie in memory (docs/training.md, "Determinism"); they differ between instruction
// sets by rounding (the width of the sums, fused multiply-adds).
#ifndef RECEMB_DLRM_DENSE_KERNELS_H_
#define RECEMB_DLRM_DENSE_KERNELS_H_

#include <cstdint>
#include <span>

namespace recemb::dlrm {

// One block of examples of a dot interaction (interaction.h), for interaction_forward and
// interaction_backward: examples [first, first + count) of the batch, count <= the table's
// interaction_lanes, and a worker's scratch buffers of the sizes the table's interaction_lanes
// gives (interaction.cc allocates them; dense_kernels.cc lays them out).
struct InteractionBlock {
  std::span<const float> bottom;                       // [B, dim]
  std::span<const std::span<const float>> embeddings;  // num_embeddings spans of [B, dim]
  int64_t dim = 0;
  int64_t first = 0;
  int64_t count = 0;
  float* vectors = nullptr;           // (num_embeddings + 1) * dim * lanes floats
  float* vector_gradients = nullptr;  // as many
  // (num_embeddings + 1)^2 * lanes floats, diagonal 0: the 8-lane kernels' symmetric pair
  // gradients (dense_kernels.cc, kFullPairMatrix); the 16-lane kernels leave it unused.
  float* pair_gradients = nullptr;
  float* pairs = nullptr;  // the pairs (i > j), lanes floats each
};

// Adam's update with its bias corrections folded into two per-step constants (dense_optimizer.h):
//   m = beta_1 m + (1 - beta_1) g,  v = beta_2 v + (1 - beta_2) g^2,
//   w -= step_size m / (sqrt(v) velocity_scale + epsilon).
struct AdamStep {
  float beta_1 = 0.0f;
  float beta_2 = 0.0f;
  float epsilon = 0.0f;
  float step_size = 0.0f;       // lr / (1 - beta_1^t)
  float velocity_scale = 0.0f;  // 1 / sqrt(1 - beta_2^t)
};

struct DenseKernels {
  // y [rows, out] = x [rows, in] W [in, out] + bias [out], then ReLU when `relu`.
  void (*affine_forward)(const float* x, const float* weights, const float* bias, int64_t rows,
                         int64_t in, int64_t out, bool relu, float* y);
  // weight_gradient [in, out] += x^T delta, and bias_gradient [out] += delta's rows one by one in
  // row order, for x [rows, in] and delta [rows, out].
  void (*affine_parameter_gradients)(const float* x, const float* delta, int64_t rows, int64_t in,
                                     int64_t out, float* weight_gradient, float* bias_gradient);
  // input_gradient [rows, in] = delta [rows, out] W^T, given W^T [out, in] (`transpose`).
  void (*affine_input_gradient)(const float* delta, const float* weights_transposed, int64_t rows,
                                int64_t in, int64_t out, float* input_gradient);
  // Makes the three products above ready for a layer of `in` inputs and `out` outputs, for any
  // number of rows: those that run on code generated at run time (dense_kernels.cc) otherwise
  // generate it, allocating, on their first use. An MLP calls it when it is built.
  void (*prepare_products)(int64_t in, int64_t out);
  // transposed [columns, rows] = matrix [rows, columns]^T.
  void (*transpose)(const float* matrix, int64_t rows, int64_t columns, float* transposed);
  // out[i] = gradient[i] where values[i] > 0, else 0 (ReLU's backward; out may be gradient).
  void (*relu_gradient)(const float* values, const float* gradient, int64_t count, float* out);
  // sum[i] += values[i].
  void (*add)(const float* values, int64_t count, float* sum);
  // Whether no value is infinite or NaN.
  bool (*all_finite)(const float* values, int64_t count);

  // Examples laid side by side in a block of the interaction: a vector register of floats.
  int64_t interaction_lanes;
  // Writes the block's rows of output [B, dim + pairs] (interaction.h).
  void (*interaction_forward)(const InteractionBlock& block, float* output);
  // Writes the block's rows of bottom_gradient [B, dim] and of each embedding gradient [B, dim]
  // from output_gradient [B, dim + pairs] (interaction.h).
  void (*interaction_backward)(const InteractionBlock& block, const float* output_gradient,
                               float* bottom_gradient,
                               std::span<const std::span<float>> embedding_gradients);

  // One step of Adam (AdamStep) and of Adagrad (a += g^2, w -= learning_rate g / sqrt(a)) over
  // `count` parameters w, their slots and their gradients g; square roots exact.
  void (*adam_update)(const AdamStep& step, int64_t count, const float* g, float* w, float* m,
                      float* v);
  void (*adagrad_update)(float learning_rate, int64_t count, const float* g, float* w, float* a);

  // Debug builds: whether Eigen may allocate from the heap (it aborts when not; eigen.h), so a
  // test can check that products take their buffers from the stack. Release builds: no effect.
  void (*allow_heap)(bool allowed);
};

}  // namespace recemb::dlrm

// One table per instruction set, each defined in its copy of dense_kernels.cc; only those of the
// target's instruction sets are built (dense_isa.cc).
extern "C" const recemb::dlrm::DenseKernels recemb_dense_kernels_baseline;
extern "C" const recemb::dlrm::DenseKernels recemb_dense_kernels_avx2;
extern "C" const recemb::dlrm::DenseKernels recemb_dense_kernels_avx512;

#endif  // RECEMB_DLRM_DENSE_KERNELS_H_
