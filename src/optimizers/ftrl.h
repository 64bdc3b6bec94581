// The FTRL-proximal row update (docs/semantics.md §5).
#ifndef RECEMB_OPTIMIZERS_FTRL_H_
#define RECEMB_OPTIMIZERS_FTRL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "recemb/optimizer.h"

namespace recemb::internal {

// slots[0] = accumulators n (> 0), slots[1] = linears (dim floats each); p = -learning_rate_power.
// Standard form (linears hold z):
//   n' = n + g^2;  z += g - (n'^p - n^p) / lr * w
//   w = (clip(z, -l1, l1) - z) / ((n'^p + beta) / lr + 2 * l2);  n = n'
// It divides by lr: with lr == 0 (or a subnormal lr, whose inverse overflows) the row and its
// slots are left unchanged.
// multiply_linear_by_learning_rate (linears hold lr * z; the same weights for a constant lr, and
// well defined for lr == 0):
//   n' = n + g^2;  lr_z += lr * g - (n'^p - n^p) * w
//   w = (clip(lr_z, -lr * l1, lr * l1) - lr_z) / (n'^p + 2 * lr * l2 + beta);  n = n'
// In both forms w = 0 exactly when |z| <= l1.
class FtrlUpdate {
 public:
  FtrlUpdate(const Ftrl& hyperparameters, float learning_rate, int64_t /*step*/)
      : learning_rate_(learning_rate),
        inverse_learning_rate_(std::isnormal(learning_rate) ? 1.0f / learning_rate : 0.0f),
        power_(-hyperparameters.learning_rate_power),
        l1_(hyperparameters.l1_regularization_strength),
        two_l2_(2.0f * hyperparameters.l2_regularization_strength),
        beta_(hyperparameters.beta),
        scaled_l1_(learning_rate * hyperparameters.l1_regularization_strength),
        scaled_denominator_offset_(2.0f * learning_rate *
                                       hyperparameters.l2_regularization_strength +
                                   hyperparameters.beta),
        power_is_half_(power_ == 0.5f),
        multiply_linear_by_learning_rate_(hyperparameters.multiply_linear_by_learning_rate) {}

  void operator()(float* w, float* const* slots, const float* g, int64_t dim) const {
    // n^0.5 as sqrt(n) (the default power) vectorises, std::pow does not.
    if (power_is_half_) {
      update(w, slots, g, dim, [](float n) { return std::sqrt(n); });
    } else {
      const float power = power_;
      update(w, slots, g, dim, [power](float n) { return std::pow(n, power); });
    }
  }

 private:
  template <class Power>
  void update(float* __restrict w, float* const* slots, const float* __restrict g, int64_t dim,
              Power power) const {
    float* __restrict n = slots[0];
    float* __restrict linear = slots[1];
    if (multiply_linear_by_learning_rate_) {
      for (int64_t d = 0; d < dim; ++d) {
        const float n_new = n[d] + g[d] * g[d];
        const float n_new_power = power(n_new);
        linear[d] += learning_rate_ * g[d] - (n_new_power - power(n[d])) * w[d];
        w[d] = (std::clamp(linear[d], -scaled_l1_, scaled_l1_) - linear[d]) /
               (n_new_power + scaled_denominator_offset_);
        n[d] = n_new;
      }
    } else if (inverse_learning_rate_ != 0.0f) {
      for (int64_t d = 0; d < dim; ++d) {
        const float n_new = n[d] + g[d] * g[d];
        const float n_new_power = power(n_new);
        linear[d] += g[d] - (n_new_power - power(n[d])) * inverse_learning_rate_ * w[d];
        w[d] = (std::clamp(linear[d], -l1_, l1_) - linear[d]) /
               ((n_new_power + beta_) * inverse_learning_rate_ + two_l2_);
        n[d] = n_new;
      }
    }
  }

  float learning_rate_;
  float inverse_learning_rate_;  // 0 when 1 / lr is not a float: the standard form is skipped
  float power_;
  float l1_;
  float two_l2_;
  float beta_;
  float scaled_l1_;                  // lr * l1
  float scaled_denominator_offset_;  // 2 * lr * l2 + beta
  bool power_is_half_;
  bool multiply_linear_by_learning_rate_;
};

}  // namespace recemb::internal

#endif  // RECEMB_OPTIMIZERS_FTRL_H_
