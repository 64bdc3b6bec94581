// Learning-rate validation and schedules (recemb/learning_rate.h).
//
// Schedules are evaluated in double and rounded to float once, at the end.
#include "recemb/learning_rate.h"

#include <cmath>
#include <limits>
#include <string>
#include <variant>

#include "recemb/error.h"

#include "support/number_text.h"

namespace recemb {
namespace {

[[noreturn]] void fail(std::string_view owner, const std::string& problem) {
  throw InvalidArgument(std::string(owner) + ": " + problem);
}

bool is_finite_and_at_least_zero(float value) { return std::isfinite(value) && value >= 0.0f; }
bool is_finite_and_above_zero(float value) { return std::isfinite(value) && value > 0.0f; }

void validate(float constant, std::string_view owner) {
  if (!is_finite_and_at_least_zero(constant)) {
    fail(owner, "learning_rate must be finite and >= 0, got " + support::float_text(constant));
  }
}

void validate(const ExponentialDecay& schedule, std::string_view owner) {
  if (!is_finite_and_above_zero(schedule.initial_learning_rate)) {
    fail(owner, "ExponentialDecay.initial_learning_rate must be finite and > 0, got " +
                    support::float_text(schedule.initial_learning_rate));
  }
  if (schedule.decay_steps <= 0) {
    fail(owner,
         "ExponentialDecay.decay_steps must be > 0, got " + std::to_string(schedule.decay_steps));
  }
  if (!is_finite_and_above_zero(schedule.decay_rate)) {
    fail(owner, "ExponentialDecay.decay_rate must be finite and > 0, got " +
                    support::float_text(schedule.decay_rate));
  }
}

void validate(const PiecewiseConstant& schedule, std::string_view owner) {
  if (schedule.values.size() != schedule.boundaries.size() + 1) {
    fail(owner, "PiecewiseConstant.values must have boundaries.size() + 1 = " +
                    std::to_string(schedule.boundaries.size() + 1) + " entries, got " +
                    std::to_string(schedule.values.size()));
  }
  for (size_t i = 1; i < schedule.boundaries.size(); ++i) {
    if (schedule.boundaries[i] <= schedule.boundaries[i - 1]) {
      fail(owner, "PiecewiseConstant.boundaries must be strictly increasing, got boundaries[" +
                      std::to_string(i) + "] = " + std::to_string(schedule.boundaries[i]) +
                      " after " + std::to_string(schedule.boundaries[i - 1]));
    }
  }
  for (size_t i = 0; i < schedule.values.size(); ++i) {
    if (!is_finite_and_at_least_zero(schedule.values[i])) {
      fail(owner, "PiecewiseConstant.values[" + std::to_string(i) +
                      "] must be finite and >= 0, got " + support::float_text(schedule.values[i]));
    }
  }
}

void validate(const LinearWarmup& schedule, std::string_view owner) {
  if (!is_finite_and_above_zero(schedule.target_learning_rate)) {
    fail(owner, "LinearWarmup.target_learning_rate must be finite and > 0, got " +
                    support::float_text(schedule.target_learning_rate));
  }
  if (schedule.warmup_steps <= 0) {
    fail(owner,
         "LinearWarmup.warmup_steps must be > 0, got " + std::to_string(schedule.warmup_steps));
  }
  if (!is_finite_and_at_least_zero(schedule.initial_learning_rate)) {
    fail(owner, "LinearWarmup.initial_learning_rate must be finite and >= 0, got " +
                    support::float_text(schedule.initial_learning_rate));
  }
}

void validate(const LearningRateCallback& callback, std::string_view owner) {
  if (!callback) fail(owner, "learning_rate callback must not be empty");
}

double evaluate(float constant, int64_t /*step*/) { return constant; }

double evaluate(const ExponentialDecay& schedule, int64_t step) {
  // Integer division for the staircase: a double quotient can round up to the next integer.
  const double exponent =
      // NOLINTNEXTLINE(bugprone-integer-division): whole periods, as intended
      schedule.staircase ? static_cast<double>(step / schedule.decay_steps)
                         : static_cast<double>(step) / static_cast<double>(schedule.decay_steps);
  const double value =
      schedule.initial_learning_rate * std::pow(static_cast<double>(schedule.decay_rate), exponent);
  // A decay_rate > 1 grows without bound; converting a double beyond the float range to float
  // would be undefined behaviour.
  if (!(value <= std::numeric_limits<float>::max())) {
    throw InvalidArgument("ExponentialDecay: the learning rate at step " + std::to_string(step) +
                          " exceeds the float range");
  }
  return value;
}

double evaluate(const PiecewiseConstant& schedule, int64_t step) {
  for (size_t i = 0; i < schedule.boundaries.size(); ++i) {
    if (step <= schedule.boundaries[i]) return schedule.values[i];
  }
  return schedule.values.back();
}

double evaluate(const LinearWarmup& schedule, int64_t step) {
  if (step >= schedule.warmup_steps) return schedule.target_learning_rate;
  const double fraction = static_cast<double>(step) / static_cast<double>(schedule.warmup_steps);
  return schedule.initial_learning_rate +
         (static_cast<double>(schedule.target_learning_rate) - schedule.initial_learning_rate) *
             fraction;
}

double evaluate(const LearningRateCallback& callback, int64_t step) {
  const float value = callback(step);
  if (!is_finite_and_at_least_zero(value)) {
    throw InvalidArgument("the learning_rate callback returned " + support::float_text(value) +
                          " at step " + std::to_string(step) +
                          "; it must return a finite value >= 0");
  }
  return value;
}

}  // namespace

void validate_learning_rate(const LearningRate& learning_rate, std::string_view owner) {
  std::visit([owner](const auto& schedule) { validate(schedule, owner); }, learning_rate);
}

float learning_rate_at(const LearningRate& learning_rate, int64_t step) {
  return static_cast<float>(
      std::visit([step](const auto& schedule) { return evaluate(schedule, step); }, learning_rate));
}

}  // namespace recemb
