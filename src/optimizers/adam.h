// The Adam row update (docs/semantics.md §5).
#ifndef RECEMB_OPTIMIZERS_ADAM_H_
#define RECEMB_OPTIMIZERS_ADAM_H_

#include <cmath>
#include <cstdint>

#include "recemb/optimizer.h"

namespace recemb::internal {

// slots[0] = momenta m, slots[1] = velocities v (dim floats each):
//   m = beta_1 * m + (1 - beta_1) * g;  v = beta_2 * v + (1 - beta_2) * g^2
//   w -= lr_t * m / sqrt(v + epsilon^2)   if sum_inside_sqrt,  else  lr_t * m / (sqrt(v) + epsilon)
// lr_t = lr, or with bias_correction lr * sqrt(1 - beta_2^t) / (1 - beta_1^t), t = step + 1
// (epsilon is not rescaled, unlike jax-tpu-embedding's eps_hat = eps * sqrt(1 - beta_2^t)).
// lazy_adam does not enter the row update: for non-lazy Adam the engine also calls it with g = 0
// on the rows absent from the batch.
class AdamUpdate {
 public:
  AdamUpdate(const Adam& hyperparameters, float learning_rate, int64_t step)
      : step_size_(hyperparameters.bias_correction
                       ? bias_corrected(learning_rate, hyperparameters.beta_1,
                                        hyperparameters.beta_2, step)
                       : learning_rate),
        beta_1_(hyperparameters.beta_1),
        one_minus_beta_1_(1.0f - hyperparameters.beta_1),
        beta_2_(hyperparameters.beta_2),
        one_minus_beta_2_(1.0f - hyperparameters.beta_2),
        epsilon_(hyperparameters.epsilon),
        epsilon_squared_(hyperparameters.epsilon * hyperparameters.epsilon),
        sum_inside_sqrt_(hyperparameters.sum_inside_sqrt) {}

  void operator()(float* w, float* const* slots, const float* g, int64_t dim) const {
    if (sum_inside_sqrt_) {
      const float epsilon_squared = epsilon_squared_;
      update(w, slots, g, dim,
             [epsilon_squared](float v) { return std::sqrt(v + epsilon_squared); });
    } else {
      const float epsilon = epsilon_;
      update(w, slots, g, dim, [epsilon](float v) { return std::sqrt(v) + epsilon; });
    }
  }

 private:
  // In double: beta^t underflows gracefully to 0 for large t, and the factor is rounded once.
  static float bias_corrected(float learning_rate, float beta_1, float beta_2, int64_t step) {
    const double t = static_cast<double>(step) + 1.0;
    return static_cast<float>(learning_rate * std::sqrt(1.0 - std::pow(beta_2, t)) /
                              (1.0 - std::pow(beta_1, t)));
  }

  template <class Denominator>
  void update(float* __restrict w, float* const* slots, const float* __restrict g, int64_t dim,
              Denominator denominator) const {
    float* __restrict m = slots[0];
    float* __restrict v = slots[1];
    for (int64_t d = 0; d < dim; ++d) {
      m[d] = beta_1_ * m[d] + one_minus_beta_1_ * g[d];
      v[d] = beta_2_ * v[d] + one_minus_beta_2_ * g[d] * g[d];
      w[d] -= step_size_ * m[d] / denominator(v[d]);
    }
  }

  float step_size_;
  float beta_1_;
  float one_minus_beta_1_;
  float beta_2_;
  float one_minus_beta_2_;
  float epsilon_;
  float epsilon_squared_;
  bool sum_inside_sqrt_;
};

}  // namespace recemb::internal

#endif  // RECEMB_OPTIMIZERS_ADAM_H_
