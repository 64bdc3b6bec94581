// DenseOptimizer: the optimizer of the dense layers, over one flat parameter vector (the model's
// parameters()) and its gradient vector of the same layout. Its slots are one flat vector as
// well, so a checkpoint saves the parameters, the slots and the step as three items.
//
//   DenseOptimizer optimizer(DenseAdam{.learning_rate = 1e-3f}, model.num_parameters(),
//                            model.dense_isa());
//   optimizer.apply(model.parameters(), model.gradients());   // once per training step
//
// Element-wise updates, g the gradient, w the parameter, lr = learning_rate_at(learning_rate,
// step()) (recemb/learning_rate.h: a constant or a schedule of the step), t = step() + 1:
//
//   DenseAdam (torch.optim.Adam without weight decay; DLRM's reference trains with it):
//     m = beta_1 m + (1 - beta_1) g
//     v = beta_2 v + (1 - beta_2) g^2
//     w -= lr (m / (1 - beta_1^t)) / (sqrt(v / (1 - beta_2^t)) + epsilon)
//   Slots "momenta" then "velocities", both starting at 0.
//
//   DenseAdagrad (TF's Adagrad, as recemb::Adagrad: no epsilon):
//     a += g^2
//     w -= lr g / sqrt(a)
//   Slot "accumulators", starting at initial_accumulator_value.
//
// Arithmetic is float32 (Adam's bias corrections are computed in double once per step) with
// exact square roots, in the kernels of an instruction set (dense_isa.h); results are bitwise the
// same wherever the arrays lie in memory.
#ifndef RECEMB_DLRM_DENSE_OPTIMIZER_H_
#define RECEMB_DLRM_DENSE_OPTIMIZER_H_

#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "recemb/learning_rate.h"

#include "dlrm/dense_isa.h"

namespace recemb::dlrm {

struct DenseAdam {
  LearningRate learning_rate = 0.001f;  // >= 0, or a schedule
  float beta_1 = 0.9f;                  // in [0, 1)
  float beta_2 = 0.999f;                // in [0, 1)
  float epsilon = 1e-8f;                // > 0
};

struct DenseAdagrad {
  LearningRate learning_rate = 0.01f;      // >= 0, or a schedule
  float initial_accumulator_value = 0.1f;  // > 0 (it is the first divisor)
};

using DenseOptimizerConfig = std::variant<DenseAdam, DenseAdagrad>;

class DenseOptimizer {
 public:
  // Validates the hyperparameters (InvalidArgument naming the optimizer, the field and the
  // value), num_parameters >= 1 and that the CPU runs `isa` (dense_kernels), then allocates and
  // initialises the slots; step() = 0.
  DenseOptimizer(DenseOptimizerConfig config, int64_t num_parameters, DenseIsa isa);

  const DenseOptimizerConfig& config() const { return config_; }
  int64_t num_parameters() const { return num_parameters_; }

  // One update of every parameter with its gradient (the equations above), then step() += 1.
  // Both spans have num_parameters() floats; `parameters` is updated in place. Throws
  // InvalidArgument on a wrong size, a non-finite gradient (naming its index and value) or an
  // invalid learning rate from a schedule; then parameters, slots and step() are unchanged.
  void apply(std::span<float> parameters, std::span<const float> gradients);

  // Number of apply calls so far: the step of learning-rate schedules and of Adam's bias
  // correction. set_step restores it from a checkpoint (InvalidArgument if step < 0).
  int64_t step() const { return step_; }
  void set_step(int64_t step);

  // The slot names in the order of slots(): {"momenta", "velocities"} for DenseAdam,
  // {"accumulators"} for DenseAdagrad.
  std::vector<std::string> slot_names() const;
  // All slots, one after the other: slot k is [k * num_parameters(), (k + 1) *
  // num_parameters()), element i belonging to parameter i. Writable, for a checkpoint restore;
  // values written are not validated. Valid as long as the optimizer (or the one it is moved
  // into).
  std::span<float> slots() { return slots_; }
  std::span<const float> slots() const { return slots_; }

 private:
  DenseOptimizerConfig config_;
  const DenseKernels* kernels_;
  int64_t num_parameters_;
  int64_t step_ = 0;
  std::vector<float> slots_;
};

}  // namespace recemb::dlrm

#endif  // RECEMB_DLRM_DENSE_OPTIMIZER_H_
