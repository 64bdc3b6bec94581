// SgdUpdate against the equation of docs/semantics.md §5: w <- w - lr * g.
#include "optimizers/sgd.h"

#include <gtest/gtest.h>
#include <vector>

#include "recemb/optimizer.h"

#include "optimizers/reference_check.h"

namespace recemb::internal {
namespace {

using optimizer_testing::expect_near_relative;
using optimizer_testing::expect_steps_match_reference;
using optimizer_testing::ReferenceRow;

void sgd_reference(ReferenceRow& row, const std::vector<double>& g, double learning_rate,
                   int64_t /*step*/) {
  for (size_t d = 0; d < g.size(); ++d) row.w[d] -= learning_rate * g[d];
}

TEST(SgdUpdateTest, MatchesReferenceOverManySteps) {
  expect_steps_match_reference<SgdUpdate>(Sgd{}, 0.05f, {}, sgd_reference, 1001);
}

// TF's correctness check w -= lr * sum(G), on video row 0 of TF's fixture
// (embedding_fixtures_test.cc) with one replica: w = [0, 1, 2, 3] and the summed gradient g =
// [0,1,2,3] + [4,6,8,10] + [4,6,8,10] (watched b0, watched b1, favorited b0) = [8, 13, 18, 23].
TEST(SgdUpdateTest, TfCorrectnessOneStep) {
  std::vector<float> w = {0.0f, 1.0f, 2.0f, 3.0f};
  const std::vector<float> g = {8.0f, 13.0f, 18.0f, 23.0f};
  SgdUpdate(Sgd{}, 0.1f, 0)(w.data(), nullptr, g.data(), 4);
  expect_near_relative(w, {-0.8, -0.3, 0.2, 0.7}, {0.0, 1.0, 2.0, 3.0}, "w");
}

TEST(SgdUpdateTest, ZeroLearningRateLeavesRowUnchanged) {
  std::vector<float> w = {0.5f, -1.5f};
  const std::vector<float> g = {3.0f, -4.0f};
  SgdUpdate(Sgd{}, 0.0f, 7)(w.data(), nullptr, g.data(), 2);
  EXPECT_EQ(w, (std::vector<float>{0.5f, -1.5f}));
}

}  // namespace
}  // namespace recemb::internal
