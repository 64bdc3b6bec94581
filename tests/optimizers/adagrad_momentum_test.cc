// AdagradMomentumUpdate against the equations of docs/semantics.md §5:
//   a <- (beta2 == 1) ? a + g^2 : beta2 * a + (1 - beta2) * g^2
//   s <- (a + epsilon)^(-1/exponent) * g;  m <- momentum * m + s
//   w <- w - lr * (use_nesterov ? momentum * m + s : m)
#include "optimizers/adagrad_momentum.h"

#include <cmath>
#include <gtest/gtest.h>
#include <string>
#include <tuple>
#include <vector>

#include "recemb/optimizer.h"

#include "optimizers/reference_check.h"

namespace recemb::internal {
namespace {

using optimizer_testing::expect_near_relative;
using optimizer_testing::expect_steps_match_reference;
using optimizer_testing::ReferenceRow;

optimizer_testing::ReferenceStep adagrad_momentum_reference(const AdagradMomentum& h) {
  const double momentum = h.momentum;
  const double beta2 = h.beta2;
  const double exponent = h.exponent;
  const double epsilon = h.epsilon;
  const bool nesterov = h.use_nesterov;
  return [=](ReferenceRow& row, const std::vector<double>& g, double learning_rate, int64_t) {
    std::vector<double>& a = row.slots[0];
    std::vector<double>& m = row.slots[1];
    for (size_t d = 0; d < g.size(); ++d) {
      if (beta2 == 1.0) {
        a[d] = a[d] + g[d] * g[d];
      } else {
        a[d] = beta2 * a[d] + (1.0 - beta2) * g[d] * g[d];
      }
      const double scaled_gradient = std::pow(a[d] + epsilon, -1.0 / exponent) * g[d];
      m[d] = momentum * m[d] + scaled_gradient;
      const double direction = nesterov ? momentum * m[d] + scaled_gradient : m[d];
      row.w[d] = row.w[d] - learning_rate * direction;
    }
  };
}

// (use_nesterov, beta2, exponent, momentum)
class AdagradMomentumUpdateTest
    : public ::testing::TestWithParam<std::tuple<bool, float, float, float>> {};

TEST_P(AdagradMomentumUpdateTest, MatchesReferenceOverManySteps) {
  const auto [use_nesterov, beta2, exponent, momentum] = GetParam();
  const AdagradMomentum hyperparameters{.momentum = momentum,
                                        .use_nesterov = use_nesterov,
                                        .exponent = exponent,
                                        .beta2 = beta2,
                                        .common = {}};
  expect_steps_match_reference<AdagradMomentumUpdate>(
      hyperparameters, 0.05f, {{.low = 0.0, .high = 2.0}, {.low = -1.0, .high = 1.0}},
      adagrad_momentum_reference(hyperparameters), 3001);
}

std::string variant_name(
    const ::testing::TestParamInfo<std::tuple<bool, float, float, float>>& info) {
  const auto [use_nesterov, beta2, exponent, momentum] = info.param;
  return std::string(use_nesterov ? "Nesterov" : "Plain") +
         (beta2 == 1.0f ? "_Beta2One" : "_Beta2Below1") + "_ExponentTimes10_" +
         std::to_string(static_cast<int>(exponent * 10.0f)) +
         (momentum == 0.0f ? "_NoMomentum" : "_Momentum");
}

INSTANTIATE_TEST_SUITE_P(Variants, AdagradMomentumUpdateTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Values(1.0f, 0.9f),
                                            ::testing::Values(2.0f, 3.0f, 1.5f),
                                            ::testing::Values(0.0f, 0.9f)),
                         variant_name);

// TF's correctness check of AdagradMomentum (lr 0.1, momentum 0.9, nesterov, exponent 3, epsilon
// 0.1, beta2 0.9, slots starting at 0) on video row 0 of TF's fixture (embedding_fixtures_test.cc)
// with one replica (w = [0, 1, 2, 3],
// g = [8, 13, 18, 23]; see sgd_test.cc): a = 0.1 g^2, m = s = (a + 0.1)^(-1/3) g,
// w -= 0.1 * 1.9 * s.
TEST(AdagradMomentumUpdateTfTest, TfCorrectnessOneStep) {
  const AdagradMomentum hyperparameters{.momentum = 0.9f,
                                        .use_nesterov = true,
                                        .exponent = 3.0f,
                                        .beta2 = 0.9f,
                                        .epsilon = 0.1f,
                                        .common = {}};
  std::vector<float> w = {0.0f, 1.0f, 2.0f, 3.0f};
  std::vector<float> accumulator(4, 0.0f);
  std::vector<float> momentum(4, 0.0f);
  const std::vector<float> g = {8.0f, 13.0f, 18.0f, 23.0f};
  float* slots[] = {accumulator.data(), momentum.data()};
  AdagradMomentumUpdate(hyperparameters, 0.1f, 0)(w.data(), slots, g.data(), 4);
  const std::vector<double> zeros(4, 0.0);
  expect_near_relative(accumulator, {6.4, 16.9, 32.4, 52.9}, zeros, "a");
  expect_near_relative(momentum,
                       {4.286658318696995, 5.055844543526664, 5.640419232687489, 6.123069836780678},
                       zeros, "m");
  expect_near_relative(
      w, {-0.8144650805524292, 0.03938953672993373, 0.9283203457893769, 1.8366167310116712},
      {0.0, 1.0, 2.0, 3.0}, "w");
}

}  // namespace
}  // namespace recemb::internal
