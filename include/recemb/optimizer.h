// The optimizers fused into apply_gradients, with TF's hyperparameters, defaults and slot names.
//
// For every row touched in a step (every row, for Adam with lazy_adam = false), apply_gradients
// runs
//   g  = sum of the row's gradient contributions, in a fixed order        (gradient accumulation)
//   g  = clip(g, clip_gradient_min, clip_gradient_max)
//   w0 = w
//   w, slots = <optimizer update>(w, slots, g, lr)
//   w  = w - weight_decay * w0      weight_decay = weight_decay_factor, times lr when
//                                   multiply_weight_decay_factor_by_learning_rate (decoupled)
//   w  = clip(w, clip_weight_min, clip_weight_max)
// With use_gradient_accumulation = false the last five lines run once per contribution instead, in
// the same fixed order (TF's "less accurate but faster" mode; it cannot be combined with gradient
// clipping or non-lazy Adam). The per-optimizer updates and their sources are in docs/semantics.md.
#ifndef RECEMB_OPTIMIZER_H_
#define RECEMB_OPTIMIZER_H_

#include <limits>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "recemb/export.h"
#include "recemb/learning_rate.h"

namespace recemb {

// Hyperparameters every optimizer has (TF's _Optimizer base).
struct CommonHyperparameters {
  bool use_gradient_accumulation = true;
  float clip_weight_min = -std::numeric_limits<float>::infinity();  // <= clip_weight_max
  float clip_weight_max = std::numeric_limits<float>::infinity();
  float weight_decay_factor = 0.0f;  // >= 0; 0 disables weight decay
  bool multiply_weight_decay_factor_by_learning_rate = false;
  // TF's clipvalue: the accumulated gradient is clipped to [clip_gradient_min, clip_gradient_max].
  // Needs use_gradient_accumulation.
  float clip_gradient_min = -std::numeric_limits<float>::infinity();  // <= clip_gradient_max
  float clip_gradient_max = std::numeric_limits<float>::infinity();
};

// w -= lr * g. No slots.
struct Sgd {
  LearningRate learning_rate = 0.01f;
  CommonHyperparameters common = {};
};

// a += g^2; w -= lr * g / sqrt(a). Slot "accumulators" [V, D].
struct Adagrad {
  LearningRate learning_rate = 0.001f;
  float initial_accumulator_value = 0.1f;  // > 0
  CommonHyperparameters common = {};
};

// a = (beta2 == 1) ? a + g^2 : beta2 * a + (1 - beta2) * g^2
// s = (a + epsilon)^(-1/exponent) * g;  m = momentum * m + s
// w -= lr * (use_nesterov ? momentum * m + s : m)
// Slots "accumulators" and "momenta" [V, D], both starting at 0. momentum and beta2 are moving-
// average parameters (TF's docstring; TF does not check them): momentum in [0, 1), as a momentum
// >= 1 never forgets and a negative one flips the sign of past steps; beta2 in [0, 1], as
// outside it the accumulator can turn negative (a NaN preconditioner).
struct AdagradMomentum {
  LearningRate learning_rate = 0.001f;
  float momentum = 0.0f;  // in [0, 1)
  bool use_nesterov = false;
  float exponent = 2.0f;   // > 0
  float beta2 = 1.0f;      // in [0, 1]
  float epsilon = 1e-10f;  // > 0
  CommonHyperparameters common = {};
};

// m = beta_1 * m + (1 - beta_1) * g;  v = beta_2 * v + (1 - beta_2) * g^2
// w -= lr * m / sqrt(v + epsilon^2)   (sum_inside_sqrt)   or   lr * m / (sqrt(v) + epsilon)
// No bias correction, as TF; bias_correction = true multiplies lr by sqrt(1 - beta_2^t) / (1 -
// beta_1^t) with t = step + 1 (as jax-tpu-embedding does). lazy_adam = false updates every row of
// the table each step, with g = 0 for rows absent from the batch. Slots "momenta", "velocities".
struct Adam {
  LearningRate learning_rate = 0.001f;
  float beta_1 = 0.9f;    // in [0, 1)
  float beta_2 = 0.999f;  // in [0, 1)
  float epsilon = 1e-7f;  // > 0
  bool lazy_adam = true;
  bool sum_inside_sqrt = true;
  bool bias_correction = false;
  CommonHyperparameters common = {};
};

// FTRL-proximal as TF's TPU embedding FTRL (p = -learning_rate_power, n = accumulator, z = linear):
//   n' = n + g^2;  z += g - (n'^p - n^p) / lr * w
//   w = |z| <= l1 ? 0 : (sign(z) * l1 - z) / ((n'^p + beta) / lr + 2 * l2);  n = n'
// multiply_linear_by_learning_rate stores lr * z in "linears" (same weights for a constant lr).
// Slots "accumulators" (initial_accumulator_value) and "linears" (0), [V, D].
struct Ftrl {
  LearningRate learning_rate = 0.001f;
  float learning_rate_power = -0.5f;        // <= 0
  float l1_regularization_strength = 0.0f;  // >= 0
  float l2_regularization_strength = 0.0f;  // >= 0
  float beta = 0.0f;                        // >= 0
  float initial_accumulator_value = 0.1f;   // > 0
  bool multiply_linear_by_learning_rate = false;
  // Accepted for TF compatibility; deprecated and ignored by TF.
  bool allow_zero_accumulator = false;
  CommonHyperparameters common = {};
};

// Row-wise Adagrad, as FBGEMM's EXACT_ROWWISE_ADAGRAD: one accumulator per row.
//   a += mean_d(g_d^2);  w -= lr * g / (sqrt(a) + epsilon)
// Slot "accumulators" [V] (one float per row: 1/D of Adagrad's optimizer memory).
struct RowwiseAdagrad {
  LearningRate learning_rate = 0.001f;
  float initial_accumulator_value = 0.0f;  // >= 0
  float epsilon = 1e-8f;                   // > 0
  CommonHyperparameters common = {};
};

using Optimizer = std::variant<Sgd, Adagrad, AdagradMomentum, Adam, Ftrl, RowwiseAdagrad>;

// TF's name of the optimizer: "sgd", "adagrad", "adagrad_momentum", "adam", "ftrl",
// "rowwise_adagrad".
RECEMB_EXPORT std::string_view optimizer_name(const Optimizer& optimizer);

// The inverse of optimizer_name: the optimizer with TF's defaults of one of the names above;
// anything else throws InvalidArgument listing the valid names.
RECEMB_EXPORT Optimizer parse_optimizer(std::string_view name);

// Slot names in TF's order: Sgd {}, Adagrad {"accumulators"}, AdagradMomentum {"accumulators",
// "momenta"}, Adam {"momenta", "velocities"}, Ftrl {"accumulators", "linears"}, RowwiseAdagrad
// {"accumulators"}.
RECEMB_EXPORT std::vector<std::string> slot_names(const Optimizer& optimizer);

// Throws InvalidArgument naming `owner` (for example "table 'video'") and the bad field when a
// hyperparameter is out of its documented range or an incompatible combination is set.
RECEMB_EXPORT void validate_optimizer(const Optimizer& optimizer, std::string_view owner);

}  // namespace recemb

#endif  // RECEMB_OPTIMIZER_H_
