#include "dlrm/dense_optimizer.h"

#include <cmath>
#include <string>
#include <utility>

#include "recemb/error.h"

#include "support/number_text.h"

namespace recemb::dlrm {
namespace {

template <class... Functions>
struct Overloaded : Functions... {
  using Functions::operator()...;
};
// C++20 deduces the template arguments of an aggregate; clang 14 (scripts/check-tidy) needs the
// guide.
template <class... Functions>
Overloaded(Functions...) -> Overloaded<Functions...>;

std::string name_of(const DenseOptimizerConfig& config) {
  return std::visit(Overloaded{[](const DenseAdam&) { return "DenseAdam"; },
                               [](const DenseAdagrad&) { return "DenseAdagrad"; }},
                    config);
}

void validate(const DenseOptimizerConfig& config) {
  const std::string owner = name_of(config);
  const auto require = [&owner](bool valid, const char* field, float value, const char* range) {
    if (!valid) {
      throw InvalidArgument(owner + ": " + field + " = " + support::float_text(value) +
                            " must be " + range);
    }
  };
  std::visit(Overloaded{[&](const DenseAdam& adam) {
                          validate_learning_rate(adam.learning_rate, owner);
                          require(adam.beta_1 >= 0.0f && adam.beta_1 < 1.0f, "beta_1", adam.beta_1,
                                  "in [0, 1)");
                          require(adam.beta_2 >= 0.0f && adam.beta_2 < 1.0f, "beta_2", adam.beta_2,
                                  "in [0, 1)");
                          require(adam.epsilon > 0.0f && std::isfinite(adam.epsilon), "epsilon",
                                  adam.epsilon, "> 0 and finite");
                        },
                        [&](const DenseAdagrad& adagrad) {
                          validate_learning_rate(adagrad.learning_rate, owner);
                          require(adagrad.initial_accumulator_value > 0.0f &&
                                      std::isfinite(adagrad.initial_accumulator_value),
                                  "initial_accumulator_value", adagrad.initial_accumulator_value,
                                  "> 0 and finite");
                        }},
             config);
}

// Adam's bias corrections folded into two per-step constants (computed in double): step_size =
// lr / (1 - beta_1^t) and velocity_scale = 1 / sqrt(1 - beta_2^t) (AdamStep, dense_kernels.h).
AdamStep adam_step(const DenseAdam& adam, float learning_rate, int64_t step) {
  const double t = static_cast<double>(step + 1);
  return {
      .beta_1 = adam.beta_1,
      .beta_2 = adam.beta_2,
      .epsilon = adam.epsilon,
      .step_size =
          static_cast<float>(learning_rate / (1.0 - std::pow(static_cast<double>(adam.beta_1), t))),
      .velocity_scale =
          static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(static_cast<double>(adam.beta_2), t)))};
}

}  // namespace

DenseOptimizer::DenseOptimizer(DenseOptimizerConfig config, int64_t num_parameters, DenseIsa isa)
    : config_(std::move(config)), kernels_(&dense_kernels(isa)), num_parameters_(num_parameters) {
  validate(config_);
  if (num_parameters < 1) {
    throw InvalidArgument(name_of(config_) +
                          ": num_parameters = " + std::to_string(num_parameters) + " must be >= 1");
  }
  const size_t n = static_cast<size_t>(num_parameters);
  std::visit(Overloaded{[&](const DenseAdam&) { slots_.assign(2 * n, 0.0f); },
                        [&](const DenseAdagrad& adagrad) {
                          slots_.assign(n, adagrad.initial_accumulator_value);
                        }},
             config_);
}

void DenseOptimizer::apply(std::span<float> parameters, std::span<const float> gradients) {
  const size_t n = static_cast<size_t>(num_parameters_);
  if (parameters.size() != n || gradients.size() != n) {
    throw InvalidArgument(name_of(config_) + ": apply got " + std::to_string(parameters.size()) +
                          " parameters and " + std::to_string(gradients.size()) +
                          " gradients; expected num_parameters = " + std::to_string(n) +
                          " of each");
  }
  if (!kernels_->all_finite(gradients.data(), num_parameters_)) {
    size_t i = 0;
    while (std::isfinite(gradients[i])) ++i;
    throw InvalidArgument(name_of(config_) + ": gradients[" + std::to_string(i) +
                          "] = " + support::float_text(gradients[i]) + " is not finite");
  }
  float* const slots = slots_.data();
  std::visit(Overloaded{[&](const DenseAdam& adam) {
                          kernels_->adam_update(
                              adam_step(adam, learning_rate_at(adam.learning_rate, step_), step_),
                              num_parameters_, gradients.data(), parameters.data(), slots,
                              slots + n);
                        },
                        [&](const DenseAdagrad& adagrad) {
                          kernels_->adagrad_update(learning_rate_at(adagrad.learning_rate, step_),
                                                   num_parameters_, gradients.data(),
                                                   parameters.data(), slots);
                        }},
             config_);
  ++step_;
}

void DenseOptimizer::set_step(int64_t step) {
  if (step < 0) {
    throw InvalidArgument(name_of(config_) + ": set_step(" + std::to_string(step) +
                          ") must be >= 0");
  }
  step_ = step;
}

std::vector<std::string> DenseOptimizer::slot_names() const {
  return std::visit(
      Overloaded{[](const DenseAdam&) -> std::vector<std::string> {
                   return {"momenta", "velocities"};
                 },
                 [](const DenseAdagrad&) -> std::vector<std::string> { return {"accumulators"}; }},
      config_);
}

}  // namespace recemb::dlrm
