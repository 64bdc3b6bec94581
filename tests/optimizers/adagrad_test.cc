// AdagradUpdate against the equations of docs/semantics.md §5:
//   a <- a + g^2;  w <- w - lr * g / sqrt(a)
#include "optimizers/adagrad.h"

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

void adagrad_reference(ReferenceRow& row, const std::vector<double>& g, double learning_rate,
                       int64_t /*step*/) {
  std::vector<double>& accumulator = row.slots[0];
  for (size_t d = 0; d < g.size(); ++d) {
    accumulator[d] = accumulator[d] + g[d] * g[d];
    row.w[d] = row.w[d] - learning_rate * g[d] / std::sqrt(accumulator[d]);
  }
}

TEST(AdagradUpdateTest, MatchesReferenceOverManySteps) {
  // Accumulators start anywhere in (0, 2]: initial_accumulator_value > 0 does not enter the
  // update itself.
  expect_steps_match_reference<AdagradUpdate>(Adagrad{}, 0.05f, {{.low = 1e-3, .high = 2.0}},
                                              adagrad_reference, 2001);
}

// TF's correctness check: a = 0.1 + (sum G)^2, w -= lr * sum(G) / sqrt(a), on video row 0 of TF's
// fixture (embedding_fixtures_test.cc) with one replica (w = [0, 1, 2, 3], g = [8, 13, 18, 23]; see
// sgd_test.cc) and lr = 0.1.
TEST(AdagradUpdateTest, TfCorrectnessOneStep) {
  std::vector<float> w = {0.0f, 1.0f, 2.0f, 3.0f};
  std::vector<float> accumulator(4, Adagrad{}.initial_accumulator_value);
  const std::vector<float> g = {8.0f, 13.0f, 18.0f, 23.0f};
  float* slots[] = {accumulator.data()};
  AdagradUpdate(Adagrad{}, 0.1f, 0)(w.data(), slots, g.data(), 4);
  expect_near_relative(accumulator, {64.1, 169.1, 324.1, 529.1}, {0.1, 0.1, 0.1, 0.1}, "a");
  expect_near_relative(
      w, {-0.09992196643368784, 0.9000295726754951, 1.9000154285274389, 2.9000094504560057},
      {0.0, 1.0, 2.0, 3.0}, "w");
}

}  // namespace
}  // namespace recemb::internal
