// The Adagrad-with-momentum row update (docs/semantics.md §5; arXiv 2002.11803).
#ifndef RECEMB_OPTIMIZERS_ADAGRAD_MOMENTUM_H_
#define RECEMB_OPTIMIZERS_ADAGRAD_MOMENTUM_H_

#include <cmath>
#include <cstdint>

#include "recemb/optimizer.h"

namespace recemb::internal {

// slots[0] = accumulators a, slots[1] = momenta m (dim floats each):
//   a = (beta2 == 1) ? a + g^2 : beta2 * a + (1 - beta2) * g^2
//   s = (a + epsilon)^(-1/exponent) * g
//   m = momentum * m + s
//   w -= lr * (use_nesterov ? momentum * m + s : m)
// The momentum accumulates the scaled gradient s, as TF's SparseCore kernel and correctness test
// (the proto comment's variant, over the unscaled preconditioner, differs unless momentum = 0).
class AdagradMomentumUpdate {
 public:
  AdagradMomentumUpdate(const AdagradMomentum& hyperparameters, float learning_rate,
                        int64_t /*step*/)
      : learning_rate_(learning_rate),
        momentum_(hyperparameters.momentum),
        // With beta2 == 1 these are 1 and 1, and 1 * a + 1 * g * g is exactly a + g^2.
        accumulator_decay_(hyperparameters.beta2 == 1.0f ? 1.0f : hyperparameters.beta2),
        gradient_weight_(hyperparameters.beta2 == 1.0f ? 1.0f : 1.0f - hyperparameters.beta2),
        epsilon_(hyperparameters.epsilon),
        negative_inverse_exponent_(-1.0f / hyperparameters.exponent),
        exponent_is_two_(hyperparameters.exponent == 2.0f),
        use_nesterov_(hyperparameters.use_nesterov) {}

  void operator()(float* w, float* const* slots, const float* g, int64_t dim) const {
    // x^(-1/2) as 1/sqrt(x) vectorises (std::pow does not) and differs by float rounding only.
    if (exponent_is_two_) {
      update(w, slots, g, dim, [](float x) { return 1.0f / std::sqrt(x); });
    } else {
      const float power = negative_inverse_exponent_;
      update(w, slots, g, dim, [power](float x) { return std::pow(x, power); });
    }
  }

 private:
  template <class Preconditioner>
  void update(float* __restrict w, float* const* slots, const float* __restrict g, int64_t dim,
              Preconditioner preconditioner) const {
    float* __restrict a = slots[0];
    float* __restrict m = slots[1];
    for (int64_t d = 0; d < dim; ++d) {
      a[d] = accumulator_decay_ * a[d] + gradient_weight_ * g[d] * g[d];
      const float s = preconditioner(a[d] + epsilon_) * g[d];
      m[d] = momentum_ * m[d] + s;
      const float u = use_nesterov_ ? momentum_ * m[d] + s : m[d];
      w[d] -= learning_rate_ * u;
    }
  }

  float learning_rate_;
  float momentum_;
  float accumulator_decay_;
  float gradient_weight_;
  float epsilon_;
  float negative_inverse_exponent_;
  bool exponent_is_two_;
  bool use_nesterov_;
};

}  // namespace recemb::internal

#endif  // RECEMB_OPTIMIZERS_ADAGRAD_MOMENTUM_H_
