// FtrlUpdate against the equations of docs/semantics.md §5, p = -lr_power:
//   n' = n + g^2;  z <- z + g - (n'^p - n^p) / lr * w
//   w <- |z| <= l1 ? 0 : (sign(z) * l1 - z) / ((n'^p + beta) / lr + 2 * l2);  n <- n'
// and, with multiply_linear_by_learning_rate (linears hold lr * z):
//   n' = n + g^2;  z~ <- z~ + lr * g - (n'^p - n^p) * w
//   w <- |z~| <= lr * l1 ? 0 : (sign(z~) * lr * l1 - z~) / (n'^p + 2 * lr * l2 + beta)
#include "optimizers/ftrl.h"

#include <algorithm>
#include <cmath>
#include <gtest/gtest.h>
#include <limits>
#include <random>
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

double sign(double x) { return x < 0.0 ? -1.0 : 1.0; }

optimizer_testing::ReferenceStep ftrl_reference(const Ftrl& h) {
  const double p = -static_cast<double>(h.learning_rate_power);
  const double l1 = h.l1_regularization_strength;
  const double l2 = h.l2_regularization_strength;
  const double beta = h.beta;
  const bool multiply = h.multiply_linear_by_learning_rate;
  return [=](ReferenceRow& row, const std::vector<double>& g, double lr, int64_t) {
    // ftrl.h: the standard form divides by lr, so lr == 0 leaves the row unchanged.
    if (!multiply && lr == 0.0) return;
    std::vector<double>& n = row.slots[0];
    std::vector<double>& z = row.slots[1];
    // The magnitude of the terms z and w are computed from (ReferenceRow): z can cancel to ~0
    // from its terms, n'^p - n^p from n'^p and n^p, and w = (sign(z) l1 - z) / denominator from
    // z's and l1's.
    row.w_terms.assign(g.size(), 0.0);
    row.slot_terms.assign(2, std::vector<double>(g.size(), 0.0));
    for (size_t d = 0; d < g.size(); ++d) {
      const double n_new = n[d] + g[d] * g[d];
      const double power_change = std::pow(n_new, p) - std::pow(n[d], p);
      const double power_terms = std::pow(n_new, p) + std::pow(n[d], p);
      if (multiply) {
        const double z_terms =
            std::max({std::abs(z[d]), std::abs(lr * g[d]), power_terms * std::abs(row.w[d])});
        const double denominator = std::pow(n_new, p) + 2.0 * lr * l2 + beta;
        z[d] = z[d] + lr * g[d] - power_change * row.w[d];
        row.w[d] = std::abs(z[d]) <= lr * l1 ? 0.0 : (sign(z[d]) * lr * l1 - z[d]) / denominator;
        row.slot_terms[1][d] = z_terms;
        row.w_terms[d] = (z_terms + lr * l1) / denominator;
      } else {
        const double z_terms =
            std::max({std::abs(z[d]), std::abs(g[d]), power_terms / lr * std::abs(row.w[d])});
        const double denominator = (std::pow(n_new, p) + beta) / lr + 2.0 * l2;
        z[d] = z[d] + g[d] - power_change / lr * row.w[d];
        row.w[d] = std::abs(z[d]) <= l1 ? 0.0 : (sign(z[d]) * l1 - z[d]) / denominator;
        row.slot_terms[1][d] = z_terms;
        row.w_terms[d] = (z_terms + l1) / denominator;
      }
      n[d] = n_new;
    }
  };
}

// (multiply_linear_by_learning_rate, learning_rate_power, regularized)
using FtrlVariant = std::tuple<bool, float, bool>;

Ftrl ftrl_of(const FtrlVariant& variant) {
  const auto [multiply, learning_rate_power, regularized] = variant;
  return Ftrl{.learning_rate_power = learning_rate_power,
              .l1_regularization_strength = regularized ? 0.5f : 0.0f,
              .l2_regularization_strength = regularized ? 0.25f : 0.0f,
              .beta = regularized ? 0.2f : 0.0f,
              .multiply_linear_by_learning_rate = multiply,
              .common = {}};
}

// Accumulators start in [0.1, 2] (> 0, as validated); linears in [-3, 3], so that with l1 = 0.5
// some weights start at the l1 cut-off and others far from it.
const std::vector<optimizer_testing::SlotStart> kFtrlSlots = {{.low = 0.1, .high = 2.0},
                                                              {.low = -3.0, .high = 3.0}};

class FtrlUpdateTest : public ::testing::TestWithParam<FtrlVariant> {};

TEST_P(FtrlUpdateTest, MatchesReferenceOverManySteps) {
  const Ftrl hyperparameters = ftrl_of(GetParam());
  expect_steps_match_reference<FtrlUpdate>(hyperparameters, 0.05f, kFtrlSlots,
                                           ftrl_reference(hyperparameters), 5001);
}

// Standard form: the row and its slots stay as they are. Multiply form: the formula is finite.
TEST_P(FtrlUpdateTest, ZeroLearningRateMatchesReference) {
  const Ftrl hyperparameters = ftrl_of(GetParam());
  expect_steps_match_reference<FtrlUpdate>(hyperparameters, 0.0f, kFtrlSlots,
                                           ftrl_reference(hyperparameters), 5101,
                                           /*constant_learning_rate=*/true);
}

std::string variant_name(const ::testing::TestParamInfo<FtrlVariant>& info) {
  const auto [multiply, learning_rate_power, regularized] = info.param;
  return std::string(multiply ? "MultiplyLinear" : "Standard") + "_PowerTimes10_" +
         std::to_string(static_cast<int>(-learning_rate_power * 10.0f)) +
         (regularized ? "_L1L2Beta" : "_Unregularized");
}

INSTANTIATE_TEST_SUITE_P(Variants, FtrlUpdateTest,
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Values(-0.5f, -0.3f, 0.0f),
                                            ::testing::Bool()),
                         variant_name);

// The standard form divides by lr: for lr = 0, and a subnormal lr whose inverse overflows, the row
// is left as it is (ftrl.h).
TEST(FtrlZeroLearningRateTest, StandardFormLeavesRowUnchanged) {
  for (const float lr : {0.0f, std::numeric_limits<float>::denorm_min()}) {
    SCOPED_TRACE(lr);
    std::vector<float> w = {0.5f, -1.0f};
    std::vector<float> n = {0.1f, 2.0f};
    std::vector<float> z = {1.0f, -3.0f};
    const std::vector<float> g = {0.3f, -4.0f};
    float* slots[] = {n.data(), z.data()};
    FtrlUpdate(Ftrl{}, lr, 0)(w.data(), slots, g.data(), 2);
    EXPECT_EQ(w, (std::vector<float>{0.5f, -1.0f}));
    EXPECT_EQ(n, (std::vector<float>{0.1f, 2.0f}));
    EXPECT_EQ(z, (std::vector<float>{1.0f, -3.0f}));
  }
}

// |z| <= l1 gives w = 0 exactly. The weights start at 0, so z moves by g only:
// z = [0.11, -0.49, 0.51, -3.01] against l1 = 0.5 (lr * l1 = 0.05 in the multiply form).
TEST(FtrlL1Test, ZeroesWeightsWhoseLinearIsWithinL1) {
  for (const bool multiply : {false, true}) {
    SCOPED_TRACE(multiply ? "multiply_linear_by_learning_rate" : "standard");
    const float lr = 0.1f;
    const float scale = multiply ? lr : 1.0f;
    const Ftrl hyperparameters{.l1_regularization_strength = 0.5f,
                               .multiply_linear_by_learning_rate = multiply,
                               .common = {}};
    std::vector<float> w(4, 0.0f);
    std::vector<float> n(4, 1.0f);
    std::vector<float> z = {0.1f * scale, -0.5f * scale, 0.5f * scale, -3.0f * scale};
    const std::vector<float> g = {0.01f, 0.01f, 0.01f, -0.01f};
    float* slots[] = {n.data(), z.data()};
    FtrlUpdate(hyperparameters, lr, 0)(w.data(), slots, g.data(), 4);
    EXPECT_EQ(w[0], 0.0f);
    EXPECT_EQ(w[1], 0.0f);
    EXPECT_LT(w[2], 0.0f);
    EXPECT_GT(w[3], 0.0f);
  }
}

// For a constant learning rate both forms give the same weights, and the multiply form's linears
// are lr times the standard form's.
TEST(FtrlFormsTest, MultiplyLinearByLearningRateMatchesStandardForConstantLearningRate) {
  constexpr float kLearningRate = 0.05f;
  constexpr int64_t kDim = 17;
  Ftrl standard{.learning_rate_power = -0.3f,
                .l1_regularization_strength = 0.5f,
                .l2_regularization_strength = 0.25f,
                .beta = 0.2f,
                .common = {}};
  Ftrl multiply = standard;
  multiply.multiply_linear_by_learning_rate = true;
  std::mt19937_64 rng(5201);
  SCOPED_TRACE("seed 5201");
  std::vector<float> w_standard(kDim, 0.25f), w_multiply(kDim, 0.25f);
  std::vector<float> n_standard(kDim, 0.1f), n_multiply(kDim, 0.1f);
  std::vector<float> z_standard(kDim, 0.0f), z_multiply(kDim, 0.0f);
  float* slots_standard[] = {n_standard.data(), z_standard.data()};
  float* slots_multiply[] = {n_multiply.data(), z_multiply.data()};
  for (int64_t step = 0; step < optimizer_testing::kSteps; ++step) {
    std::vector<float> g(kDim);
    for (float& value : g) value = optimizer_testing::random_gradient(rng);
    FtrlUpdate(standard, kLearningRate, step)(w_standard.data(), slots_standard, g.data(), kDim);
    FtrlUpdate(multiply, kLearningRate, step)(w_multiply.data(), slots_multiply, g.data(), kDim);
  }
  // The forms round differently, and z sums 100 steps of partly cancelling terms, so values that
  // end near 0 differ by more than 1e-5 of themselves: compare to 1e-5 of the row's largest
  // value instead (a difference in the formulas would show at order 1).
  double w_scale = 0.0;
  double z_scale = 0.0;
  for (int64_t d = 0; d < kDim; ++d) {
    w_scale = std::max(w_scale, std::abs(static_cast<double>(w_standard[d])));
    z_scale = std::max(z_scale, std::abs(kLearningRate * static_cast<double>(z_standard[d])));
  }
  for (int64_t d = 0; d < kDim; ++d) {
    EXPECT_NEAR(w_multiply[d], w_standard[d], 1e-5 * w_scale) << "w[" << d << "]";
    EXPECT_NEAR(z_multiply[d], kLearningRate * static_cast<double>(z_standard[d]), 1e-5 * z_scale)
        << "linears[" << d << "]";
  }
  EXPECT_EQ(n_multiply, n_standard);
}

// TF's correctness check of FTRL (l1 = l2 = beta = 0: w = -z / (n'^p / lr)), one step from TF's
// initial slots (n = 0.1, z = 0) with lr = 0.1, on video row 0 of TF's fixture
// (embedding_fixtures_test.cc) with one replica
// (w = [0, 1, 2, 3], g = [8, 13, 18, 23]; see sgd_test.cc).
TEST(FtrlTfTest, TfCorrectnessOneStep) {
  std::vector<float> w = {0.0f, 1.0f, 2.0f, 3.0f};
  std::vector<float> n(4, Ftrl{}.initial_accumulator_value);
  std::vector<float> z(4, 0.0f);
  const std::vector<float> g = {8.0f, 13.0f, 18.0f, 23.0f};
  float* slots[] = {n.data(), z.data()};
  FtrlUpdate(Ftrl{}, 0.1f, 0)(w.data(), slots, g.data(), 4);
  const std::vector<double> zeros(4, 0.0);
  expect_near_relative(n, {64.1, 169.1, 324.1, 529.1}, {0.1, 0.1, 0.1, 0.1}, "n");
  expect_near_relative(z, {8.0, -113.87617819039916, -335.73099594918614, -657.5783813289831},
                       zeros, "z");
  expect_near_relative(
      w, {-0.09992196643368785, 0.8757115535212053, 1.8648844311130848, 2.8587662485797973},
      {0.0, 1.0, 2.0, 3.0}, "w");
}

}  // namespace
}  // namespace recemb::internal
