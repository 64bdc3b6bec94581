// AdamUpdate against the equations of docs/semantics.md §5:
//   m <- beta_1 * m + (1 - beta_1) * g;  v <- beta_2 * v + (1 - beta_2) * g^2
//   w <- w - lr_t * m / sqrt(v + epsilon^2)   (sum_inside_sqrt)
//   w <- w - lr_t * m / (sqrt(v) + epsilon)   (otherwise)
// lr_t = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t) with t = step + 1 under bias_correction
// (optimizer.h; jax-tpu-embedding's alpha_t), else lr_t = lr.
#include "optimizers/adam.h"

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
using optimizer_testing::to_double;

optimizer_testing::ReferenceStep adam_reference(const Adam& h) {
  const double beta_1 = h.beta_1;
  const double beta_2 = h.beta_2;
  const double epsilon = h.epsilon;
  const bool sum_inside_sqrt = h.sum_inside_sqrt;
  const bool bias_correction = h.bias_correction;
  return [=](ReferenceRow& row, const std::vector<double>& g, double learning_rate, int64_t step) {
    double step_size = learning_rate;
    if (bias_correction) {
      const double t = static_cast<double>(step + 1);
      step_size =
          learning_rate * std::sqrt(1.0 - std::pow(beta_2, t)) / (1.0 - std::pow(beta_1, t));
    }
    std::vector<double>& m = row.slots[0];
    std::vector<double>& v = row.slots[1];
    for (size_t d = 0; d < g.size(); ++d) {
      m[d] = beta_1 * m[d] + (1.0 - beta_1) * g[d];
      v[d] = beta_2 * v[d] + (1.0 - beta_2) * g[d] * g[d];
      if (sum_inside_sqrt) {
        row.w[d] = row.w[d] - step_size * m[d] / std::sqrt(v[d] + epsilon * epsilon);
      } else {
        row.w[d] = row.w[d] - step_size * m[d] / (std::sqrt(v[d]) + epsilon);
      }
    }
  };
}

// (sum_inside_sqrt, bias_correction, beta_1, beta_2, epsilon)
using AdamVariant = std::tuple<bool, bool, float, float, float>;

Adam adam_of(const AdamVariant& variant) {
  const auto [sum_inside_sqrt, bias_correction, beta_1, beta_2, epsilon] = variant;
  return Adam{.beta_1 = beta_1,
              .beta_2 = beta_2,
              .epsilon = epsilon,
              .sum_inside_sqrt = sum_inside_sqrt,
              .bias_correction = bias_correction,
              .common = {}};
}

class AdamUpdateTest : public ::testing::TestWithParam<AdamVariant> {};

TEST_P(AdamUpdateTest, MatchesReferenceOverManySteps) {
  const Adam hyperparameters = adam_of(GetParam());
  // Velocities are >= 0 by construction; some start tiny, where epsilon matters.
  expect_steps_match_reference<AdamUpdate>(hyperparameters, 0.05f,
                                           {{.low = -1.0, .high = 1.0}, {.low = 0.0, .high = 1e-3}},
                                           adam_reference(hyperparameters), 4001);
}

// Non-lazy Adam calls the update with g = 0 on rows absent from the batch: m and v decay and the
// weights still move.
TEST_P(AdamUpdateTest, ZeroGradientDecaysSlotsAndMovesWeights) {
  const Adam hyperparameters = adam_of(GetParam());
  std::vector<float> w = {0.5f, -0.25f, 2.0f};
  std::vector<float> m = {0.3f, -0.6f, 0.0f};
  std::vector<float> v = {0.04f, 0.5f, 0.0f};
  ReferenceRow before;
  before.w = to_double(w);
  before.slots = {to_double(m), to_double(v)};
  ReferenceRow expected = before;
  const std::vector<float> g(3, 0.0f);
  float* slots[] = {m.data(), v.data()};
  for (int64_t step = 0; step < 3; ++step) {
    AdamUpdate(hyperparameters, 0.1f, step)(w.data(), slots, g.data(), 3);
    adam_reference(hyperparameters)(expected, {0.0, 0.0, 0.0}, 0.1f, step);
  }
  expect_near_relative(w, expected.w, before.w, "w");
  expect_near_relative(m, expected.slots[0], before.slots[0], "m");
  expect_near_relative(v, expected.slots[1], before.slots[1], "v");
  EXPECT_NE(w[0], 0.5f);
  EXPECT_EQ(w[2], 2.0f);  // m = v = 0 stays 0: no step, and no NaN from 0 / 0
}

std::string variant_name(const ::testing::TestParamInfo<AdamVariant>& info) {
  const auto [sum_inside_sqrt, bias_correction, beta_1, beta_2, epsilon] = info.param;
  return std::string(sum_inside_sqrt ? "SumInsideSqrt" : "EpsilonOutside") +
         (bias_correction ? "_BiasCorrection" : "_NoBiasCorrection") +
         (beta_1 == 0.9f ? "_DefaultBetas" : "_OtherBetas") +
         (epsilon == 1e-7f ? "_DefaultEpsilon" : "_LargeEpsilon");
}

INSTANTIATE_TEST_SUITE_P(Variants, AdamUpdateTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool(),
                                            ::testing::Values(0.9f, 0.5f),
                                            ::testing::Values(0.999f),
                                            ::testing::Values(1e-7f, 0.05f)),
                         variant_name);

// bias_correction with beta_1 = 0.5, beta_2 = 0.75 at step 0 (t = 1): lr_t = lr * sqrt(0.25) /
// 0.5 = lr; at step 1 (t = 2): lr * sqrt(1 - 0.5625) / 0.75 = lr * 0.8819171036881969; the
// factor tends to 1 for large steps.
TEST(AdamBiasCorrectionTest, ScalesLearningRateByStep) {
  const Adam hyperparameters{
      .beta_1 = 0.5f, .beta_2 = 0.75f, .bias_correction = true, .common = {}};
  for (const auto& [step, factor] :
       {std::pair<int64_t, double>{0, 1.0}, {1, 0.8819171036881969}, {1'000'000, 1.0}}) {
    SCOPED_TRACE("step " + std::to_string(step));
    std::vector<float> w = {0.0f};
    std::vector<float> m = {0.0f};
    std::vector<float> v = {0.0f};
    const std::vector<float> g = {2.0f};
    float* slots[] = {m.data(), v.data()};
    AdamUpdate(hyperparameters, 0.1f, step)(w.data(), slots, g.data(), 1);
    // m = 1, v = 1 (up to epsilon^2): w = -lr_t
    expect_near_relative(w, {-0.1 * factor}, {0.0}, "w");
  }
}

// TF's correctness check of Adam: one step from zero slots, m = (1 - beta_1) g, v = (1 - beta_2)
// g^2, w -= lr * m / (sqrt(v) + epsilon), no bias correction; TF defaults, lr = 0.1, video row 0 of
// TF's fixture (embedding_fixtures_test.cc) with one replica (w = [0, 1, 2, 3], g = [8, 13, 18,
// 23]; see sgd_test.cc). Expected values computed in float64 from the float32 hyperparameters (0.9f
// = 0.89999998, 0.999f = 0.99900001, ...), which is what the update is given.
TEST(AdamTfTest, TfCorrectnessOneStep) {
  const Adam hyperparameters{.sum_inside_sqrt = false, .common = {}};
  std::vector<float> w = {0.0f, 1.0f, 2.0f, 3.0f};
  std::vector<float> m(4, 0.0f);
  std::vector<float> v(4, 0.0f);
  const std::vector<float> g = {8.0f, 13.0f, 18.0f, 23.0f};
  float* slots[] = {m.data(), v.data()};
  AdamUpdate(hyperparameters, 0.1f, 0)(w.data(), slots, g.data(), 4);
  const std::vector<double> zeros(4, 0.0);
  expect_near_relative(
      m, {0.8000001907348633, 1.3000003099441528, 1.8000004291534424, 2.300000548362732}, zeros,
      "m");
  expect_near_relative(
      v, {0.06399917602539062, 0.16899782419204712, 0.32399582862854004, 0.5289931893348694}, zeros,
      "v");
  expect_near_relative(
      w, {-0.31622975679566906, 0.6837701951268068, 1.6837701737590136, 2.683770161681564},
      {0.0, 1.0, 2.0, 3.0}, "w");
}

}  // namespace
}  // namespace recemb::internal
