// The row-wise Adagrad row update (FBGEMM's EXACT_ROWWISE_ADAGRAD).
#ifndef RECEMB_OPTIMIZERS_ROWWISE_ADAGRAD_H_
#define RECEMB_OPTIMIZERS_ROWWISE_ADAGRAD_H_

#include <cmath>
#include <cstdint>

#include "recemb/optimizer.h"

namespace recemb::internal {

// slots[0] = the row's one accumulator a (a single float, >= 0):
//   a += mean_d(g_d^2);  w -= lr / (sqrt(a) + epsilon) * g
class RowwiseAdagradUpdate {
 public:
  RowwiseAdagradUpdate(const RowwiseAdagrad& hyperparameters, float learning_rate, int64_t /*step*/)
      : learning_rate_(learning_rate), epsilon_(hyperparameters.epsilon) {}

  void operator()(float* __restrict w, float* const* slots, const float* __restrict g,
                  int64_t dim) const {
    float& a = *slots[0];
    a += sum_of_squares(g, dim) / static_cast<float>(dim);
    // One division per row, as FBGEMM; then the d loop is a plain multiply-add.
    const float multiplier = learning_rate_ / (std::sqrt(a) + epsilon_);
    for (int64_t d = 0; d < dim; ++d) w[d] -= multiplier * g[d];
  }

 private:
  // kLanes independent partial sums, added in a fixed order: without -ffast-math the compiler
  // may not reassociate a single float sum, so one accumulator would not vectorise. The order
  // depends only on dim, so the result is still deterministic.
  static float sum_of_squares(const float* g, int64_t dim) {
    constexpr int64_t kLanes = 8;
    float lanes[kLanes] = {};
    int64_t d = 0;
    for (; d + kLanes <= dim; d += kLanes) {
      for (int64_t lane = 0; lane < kLanes; ++lane) lanes[lane] += g[d + lane] * g[d + lane];
    }
    float sum = 0.0f;
    for (; d < dim; ++d) sum += g[d] * g[d];
    for (const float lane : lanes) sum += lane;
    return sum;
  }

  float learning_rate_;
  float epsilon_;
};

}  // namespace recemb::internal

#endif  // RECEMB_OPTIMIZERS_ROWWISE_ADAGRAD_H_
