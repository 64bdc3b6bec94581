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
// Results are bitwise the same for the same inputs, wherever the arrays lie in memory.
// Thread safety: the object holds scratch buffers; one object serves one thread.
#ifndef RECEMB_TRAIN_INTERACTION_H_
#define RECEMB_TRAIN_INTERACTION_H_

#include <cstdint>
#include <span>
#include <vector>

namespace recemb::train {

class DotInteraction {
 public:
  // Throws InvalidArgument when num_embeddings < 0 or dim < 1.
  DotInteraction(int64_t num_embeddings, int64_t dim);

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
               std::span<float> output);

  // Given output_gradient = d(loss)/d(output) [B, output_width()] for the same bottom and
  // embeddings, overwrites bottom_gradient [B, dim] and embedding_gradients (num_embeddings()
  // spans of [B, dim]) with d(loss)/d(bottom) and d(loss)/d(embeddings). Throws InvalidArgument
  // on a size that does not fit, writing nothing.
  void backward(std::span<const float> bottom, std::span<const std::span<const float>> embeddings,
                std::span<const float> output_gradient, std::span<float> bottom_gradient,
                std::span<const std::span<float>> embedding_gradients);

 private:
  // Validates bottom and embeddings (throwing InvalidArgument) and returns the batch size.
  int64_t check_sizes(std::span<const float> bottom,
                      std::span<const std::span<const float>> embeddings) const;
  // Copies examples [first, first + lanes) of the batch into vectors_ (interaction.cc).
  void gather(std::span<const float> bottom, std::span<const std::span<const float>> embeddings,
              int64_t first, int64_t lanes);

  int64_t num_embeddings_;
  int64_t dim_;
  // Per-block buffers (layouts in interaction.cc).
  std::vector<float> vectors_;
  std::vector<float> vector_gradients_;
  std::vector<float> pair_gradients_;
};

}  // namespace recemb::train

#endif  // RECEMB_TRAIN_INTERACTION_H_
