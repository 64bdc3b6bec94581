// DotInteraction: DLRM's "dot" feature interaction without self pairs, forward and backward.
//
// Per example b, with the bottom MLP's output z_b and the embeddings e_{1,b} .. e_{n,b} (all of
// width dim), let T = [z_b, e_{1,b}, ..., e_{n,b}] be the F = n + 1 vectors. The output row is
//   [z_b, <T_1, T_0>, <T_2, T_0>, <T_2, T_1>, <T_3, T_0>, ..., <T_n, T_{n-1}>]
// i.e. z_b, then the dot products of every pair i > j in row-major order of the strictly lower
// triangle of the Gram matrix T T^T (pair (i, j) at column dim + i (i - 1) / 2 + j):
// output_width() = dim + F (F - 1) / 2 floats (16 + 351 = 367 for DLRM's 26 features of dim 16).
//
// Backward, for d = d(loss)/d(output) and P_ij = d at pair (i, j):
//   d(loss)/d(T_i) = sum_{j < i} P_ij T_j + sum_{j > i} P_ji T_j,  plus d[0, dim) for T_0 = z.
//
// forward and backward run on the threads of a ThreadPool (support/) when given one (else on the
// caller's), each example's results computed alone: they are bitwise the same for the same inputs
// whatever the thread count and wherever the arrays lie in memory, for each instruction set
// (dense_isa.h; sets differ by rounding). Thread safety: the object holds scratch buffers; one
// object serves one caller at a time.
#ifndef RECEMB_DLRM_INTERACTION_H_
#define RECEMB_DLRM_INTERACTION_H_

#include <cstdint>
#include <span>
#include <vector>

#include "dlrm/dense_isa.h"
#include "support/thread_pool.h"

namespace recemb::dlrm {

class DotInteraction {
 public:
  // Throws InvalidArgument when num_embeddings < 0 or dim < 1, and (dense_kernels) when the CPU
  // lacks `isa`.
  DotInteraction(int64_t num_embeddings, int64_t dim, DenseIsa isa);

  int64_t num_embeddings() const { return num_embeddings_; }
  int64_t dim() const { return dim_; }
  int64_t output_width() const { return output_width(num_embeddings_, dim_); }
  // dim + (num_embeddings + 1) num_embeddings / 2: the output width of an interaction of this
  // shape, without building one.
  static int64_t output_width(int64_t num_embeddings, int64_t dim);

  // output [B, output_width()] from bottom [B, dim] (B = bottom.size() / dim >= 1) and
  // `embeddings`: num_embeddings() spans of [B, dim] each, row-major. Throws InvalidArgument on a
  // size that does not fit, writing nothing.
  void forward(std::span<const float> bottom, std::span<const std::span<const float>> embeddings,
               std::span<float> output, support::ThreadPool* pool = nullptr);

  // Given output_gradient = d(loss)/d(output) [B, output_width()] for the same bottom and
  // embeddings, overwrites bottom_gradient [B, dim] and embedding_gradients (num_embeddings()
  // spans of [B, dim]) with d(loss)/d(bottom) and d(loss)/d(embeddings). Throws InvalidArgument
  // on a size that does not fit, writing nothing.
  void backward(std::span<const float> bottom, std::span<const std::span<const float>> embeddings,
                std::span<const float> output_gradient, std::span<float> bottom_gradient,
                std::span<const std::span<float>> embedding_gradients,
                support::ThreadPool* pool = nullptr);

  // forward and backward over examples [first, first + count) of the batch alone, on worker
  // `worker`'s scratch buffers: for a model that runs the interaction's rows in its own tasks
  // (DlrmDenseModel). The caller checks the sizes as forward and backward do (these check
  // nothing), calls reserve_workers first and gives each thread its own worker index below it.
  void reserve_workers(int num_workers);
  void forward_rows(std::span<const float> bottom,
                    std::span<const std::span<const float>> embeddings, int64_t first,
                    int64_t count, std::span<float> output, int worker);
  void backward_rows(std::span<const float> bottom,
                     std::span<const std::span<const float>> embeddings,
                     std::span<const float> output_gradient, std::span<float> bottom_gradient,
                     std::span<const std::span<float>> embedding_gradients, int64_t first,
                     int64_t count, int worker);

 private:
  // Validates bottom and embeddings (throwing InvalidArgument) and returns the batch size.
  int64_t check_sizes(std::span<const float> bottom,
                      std::span<const std::span<const float>> embeddings) const;
  // One worker thread's buffers for a block of examples (InteractionBlock, dense_kernels.cc).
  struct Scratch {
    std::vector<float> vectors;
    std::vector<float> vector_gradients;
    std::vector<float> pair_gradients;
    std::vector<float> pairs;
  };
  // For each block of up to interaction_lanes examples in [first, first + count): calls
  // kernel(block) with the block and worker `worker`'s Scratch.
  template <class Kernel>
  void for_each_block(std::span<const float> bottom,
                      std::span<const std::span<const float>> embeddings, int64_t first,
                      int64_t count, int worker, Kernel kernel);

  int64_t num_embeddings_;
  int64_t dim_;
  const DenseKernels* kernels_;
  std::vector<Scratch> scratch_;
};

}  // namespace recemb::dlrm

#endif  // RECEMB_DLRM_INTERACTION_H_
