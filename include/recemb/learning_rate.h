// The learning rate of an optimizer: a constant, a schedule of the step counter, or a callback.
#ifndef RECEMB_LEARNING_RATE_H_
#define RECEMB_LEARNING_RATE_H_

#include <cstdint>
#include <functional>
#include <string_view>
#include <variant>
#include <vector>

#include "recemb/export.h"

namespace recemb {

// lr(step) = initial_learning_rate * decay_rate ^ (step / decay_steps), where the exponent is
// floor(step / decay_steps) when staircase is set (Keras ExponentialDecay).
struct ExponentialDecay {
  float initial_learning_rate = 0.01f;  // > 0
  int64_t decay_steps = 1000;           // > 0
  float decay_rate = 0.96f;             // > 0
  bool staircase = false;
};

// lr(step) = values[i] for the first i with step <= boundaries[i]; values.back() past the last
// boundary (Keras PiecewiseConstantDecay). boundaries strictly increasing;
// values.size() == boundaries.size() + 1.
struct PiecewiseConstant {
  std::vector<int64_t> boundaries = {};
  std::vector<float> values = {};
};

// Linear ramp from initial_learning_rate at step 0 to target_learning_rate at step warmup_steps,
// then constant target_learning_rate.
struct LinearWarmup {
  float target_learning_rate = 0.01f;  // > 0
  int64_t warmup_steps = 1000;         // > 0
  float initial_learning_rate = 0.0f;  // >= 0
};

// Called once per apply_gradients with the step counter (number of earlier apply_gradients calls);
// must return a finite value >= 0 (else that apply_gradients throws InvalidArgument, changing
// nothing). Called on the thread that calls apply_gradients.
using LearningRateCallback = std::function<float(int64_t step)>;

using LearningRate =
    std::variant<float, ExponentialDecay, PiecewiseConstant, LinearWarmup, LearningRateCallback>;

// Throws InvalidArgument naming `owner` and the bad field when a schedule's parameters are invalid
// (a constant must be finite and >= 0; a callback must be non-empty).
RECEMB_EXPORT void validate_learning_rate(const LearningRate& learning_rate,
                                          std::string_view owner);

// The learning rate at `step`. Throws InvalidArgument if the result is negative or not a finite
// float (a callback's bad return value, or a growing ExponentialDecay past the float range).
RECEMB_EXPORT float learning_rate_at(const LearningRate& learning_rate, int64_t step);

}  // namespace recemb

#endif  // RECEMB_LEARNING_RATE_H_
