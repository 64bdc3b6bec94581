// RowwiseAdagradUpdate against FBGEMM's EXACT_ROWWISE_ADAGRAD equations (optimizer.h):
//   a <- a + (1/D) * sum_d g_d^2   (one accumulator per row)
//   w_d <- w_d - lr * g_d / (sqrt(a) + epsilon)
#include "optimizers/rowwise_adagrad.h"

#include <cmath>
#include <gtest/gtest.h>
#include <vector>

#include "recemb/optimizer.h"

#include "optimizers/reference_check.h"

namespace recemb::internal {
namespace {

using optimizer_testing::expect_near_relative;
using optimizer_testing::expect_steps_match_reference;
using optimizer_testing::ReferenceRow;

optimizer_testing::ReferenceStep rowwise_adagrad_reference(const RowwiseAdagrad& h) {
  const double epsilon = h.epsilon;
  return [=](ReferenceRow& row, const std::vector<double>& g, double learning_rate, int64_t) {
    double sum_of_squares = 0.0;
    for (const double value : g) sum_of_squares += value * value;
    double& accumulator = row.slots[0][0];
    accumulator += sum_of_squares / static_cast<double>(g.size());
    for (size_t d = 0; d < g.size(); ++d) {
      row.w[d] = row.w[d] - learning_rate * g[d] / (std::sqrt(accumulator) + epsilon);
    }
  };
}

class RowwiseAdagradUpdateTest : public ::testing::TestWithParam<float> {};

TEST_P(RowwiseAdagradUpdateTest, MatchesReferenceOverManySteps) {
  const RowwiseAdagrad hyperparameters{.epsilon = GetParam(), .common = {}};
  // The accumulator starts anywhere in [0, 2]: initial_accumulator_value >= 0.
  expect_steps_match_reference<RowwiseAdagradUpdate>(
      hyperparameters, 0.05f, {{.low = 0.0, .high = 2.0, .one_per_row = true}},
      rowwise_adagrad_reference(hyperparameters), 6001);
}

INSTANTIATE_TEST_SUITE_P(Epsilons, RowwiseAdagradUpdateTest, ::testing::Values(1e-8f, 0.5f));

// The accumulator gains the mean of g^2 over the row, not the sum: g = [8, 13, 18, 23] adds
// (64 + 169 + 324 + 529) / 4 = 271.5, and every w_d moves by lr * g_d / (sqrt(271.5) + epsilon).
TEST(RowwiseAdagradTest, AccumulatesMeanSquaredGradient) {
  std::vector<float> w = {0.0f, 1.0f, 2.0f, 3.0f};
  float accumulator = 0.0f;
  const std::vector<float> g = {8.0f, 13.0f, 18.0f, 23.0f};
  float* slots[] = {&accumulator};
  RowwiseAdagradUpdate(RowwiseAdagrad{}, 0.1f, 0)(w.data(), slots, g.data(), 4);
  EXPECT_FLOAT_EQ(accumulator, 271.5f);
  expect_near_relative(
      w, {-0.04855177029328643, 0.9211033732734095, 1.8907585168401055, 2.8604136604068016},
      {0.0, 1.0, 2.0, 3.0}, "w");
}

// The first step from a zero accumulator: w moves by lr * g / (|g| + epsilon) for dim 1.
TEST(RowwiseAdagradTest, ZeroInitialAccumulatorIsFinite) {
  std::vector<float> w = {1.0f};
  float accumulator = 0.0f;
  const std::vector<float> g = {-0.5f};
  float* slots[] = {&accumulator};
  RowwiseAdagradUpdate(RowwiseAdagrad{.epsilon = 0.5f, .common = {}}, 0.1f, 0)(w.data(), slots,
                                                                               g.data(), 1);
  EXPECT_FLOAT_EQ(accumulator, 0.25f);
  EXPECT_FLOAT_EQ(w[0], 1.05f);
}

}  // namespace
}  // namespace recemb::internal
