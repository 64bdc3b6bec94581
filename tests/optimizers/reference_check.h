// The driver of the optimizer tests: runs an update class (optimizers/*.h) for many consecutive
// steps on random rows and compares every step with a float64 reference written in the test.
#ifndef RECEMB_TESTS_OPTIMIZERS_REFERENCE_CHECK_H_
#define RECEMB_TESTS_OPTIMIZERS_REFERENCE_CHECK_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <gtest/gtest.h>
#include <random>
#include <string>
#include <vector>

namespace recemb::optimizer_testing {

inline constexpr int64_t kDims[] = {1, 3, 8, 17, 64};
inline constexpr int kRows = 4;
inline constexpr int kSteps = 100;

// A row and its slot rows in float64, as the references compute them.
struct ReferenceRow {
  std::vector<double> w;
  std::vector<std::vector<double>> slots;
  // Filled only by references whose results can cancel to near 0 from terms larger than the
  // values before and after the step (FTRL's z += g - sigma * w): per value, the magnitude of
  // those terms, which sets the size of float32's rounding error.
  std::vector<double> w_terms;
  std::vector<std::vector<double>> slot_terms;
};

// (row, g, lr, step) -> row after one step of the optimizer's equations.
using ReferenceStep = std::function<void(ReferenceRow& row, const std::vector<double>& g,
                                         double learning_rate, int64_t step)>;

// The starting values of one slot: uniform in [low, high]; one value per row (row-wise slots) or
// one per dimension.
struct SlotStart {
  double low;
  double high;
  bool one_per_row = false;
};

// A nonzero value whose magnitude is log-uniform in [0.01, 10], with a random sign, so that the
// updates see small and large gradients in the same row.
inline float random_gradient(std::mt19937_64& rng) {
  const double magnitude = std::pow(10.0, std::uniform_real_distribution<double>(-2.0, 1.0)(rng));
  return static_cast<float>(std::bernoulli_distribution(0.5)(rng) ? magnitude : -magnitude);
}

// Passes when every value is within 1e-5 of `expected` relative to the value's scale:
//   |actual - expected| <= 1e-5 * max(|expected|, |before|, terms)
// `before` is the value before the step: an update x' = x + t that cancels to x' ~ 0 keeps the
// absolute rounding error of its terms, and max(|x|, |x'|) >= |t| / 2 bounds them. `terms`
// (ReferenceRow::w_terms / slot_terms; empty: none) bounds the terms of other updates.
inline void expect_near_relative(const std::vector<float>& actual,
                                 const std::vector<double>& expected,
                                 const std::vector<double>& before, const std::string& what,
                                 const std::vector<double>& terms = {}) {
  constexpr double kRelativeTolerance = 1e-5;
  for (size_t d = 0; d < actual.size(); ++d) {
    const double scale =
        std::max({std::abs(expected[d]), std::abs(before[d]), terms.empty() ? 0.0 : terms[d]});
    EXPECT_LE(std::abs(actual[d] - expected[d]), kRelativeTolerance * scale)
        << what << "[" << d << "] = " << actual[d] << ", reference " << expected[d];
  }
}

inline std::vector<double> to_double(const std::vector<float>& values) {
  return std::vector<double>(values.begin(), values.end());
}

// For each dim in kDims: kRows rows with weights uniform in [-1, 1] and slots drawn from
// `slot_starts`, then kSteps consecutive steps (step = 0, 1, ...) with random nonzero gradients
// and a learning rate drawn per step from [0.5, 1.5] * learning_rate (exactly learning_rate with
// `constant_learning_rate`). Each step, every row's weights and slots must match `reference`
// applied to the same starting state. Restarting the reference from the float32 state each step
// keeps float32 rounding, which compounds differently from float64 over many steps, out of the
// comparison; the steps still see the states the update itself produced. Stops at the first
// step with a failure.
template <class Update, class Hyperparameters>
void expect_steps_match_reference(const Hyperparameters& hyperparameters, float learning_rate,
                                  const std::vector<SlotStart>& slot_starts,
                                  const ReferenceStep& reference, uint64_t seed,
                                  bool constant_learning_rate = false) {
  for (const int64_t dim : kDims) {
    const uint64_t dim_seed = seed + static_cast<uint64_t>(dim);
    SCOPED_TRACE("seed " + std::to_string(dim_seed) + ", dim " + std::to_string(dim));
    std::mt19937_64 rng(dim_seed);
    std::uniform_real_distribution<double> unit(-1.0, 1.0);
    std::vector<std::vector<float>> weights(kRows, std::vector<float>(dim));
    std::vector<std::vector<std::vector<float>>> slots(kRows);
    for (int row = 0; row < kRows; ++row) {
      for (float& w : weights[row]) w = static_cast<float>(unit(rng));
      for (const SlotStart& start : slot_starts) {
        std::uniform_real_distribution<double> slot_value(start.low, start.high);
        slots[row].emplace_back(start.one_per_row ? 1 : dim);
        for (float& value : slots[row].back()) value = static_cast<float>(slot_value(rng));
      }
    }
    for (int64_t step = 0; step < kSteps; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      const float step_learning_rate =
          constant_learning_rate
              ? learning_rate
              : learning_rate *
                    static_cast<float>(std::uniform_real_distribution<double>(0.5, 1.5)(rng));
      const Update update(hyperparameters, step_learning_rate, step);
      for (int row = 0; row < kRows; ++row) {
        SCOPED_TRACE("row " + std::to_string(row));
        std::vector<float> g(dim);
        for (float& value : g) value = random_gradient(rng);
        ReferenceRow before;
        before.w = to_double(weights[row]);
        std::vector<float*> slot_pointers;
        for (std::vector<float>& slot : slots[row]) {
          before.slots.push_back(to_double(slot));
          slot_pointers.push_back(slot.data());
        }
        ReferenceRow expected = before;
        update(weights[row].data(), slot_pointers.data(), g.data(), dim);
        reference(expected, to_double(g), step_learning_rate, step);
        expect_near_relative(weights[row], expected.w, before.w, "w", expected.w_terms);
        for (size_t i = 0; i < slots[row].size(); ++i) {
          expect_near_relative(
              slots[row][i], expected.slots[i], before.slots[i], "slot " + std::to_string(i),
              expected.slot_terms.empty() ? std::vector<double>() : expected.slot_terms[i]);
        }
      }
      if (::testing::Test::HasFailure()) return;
    }
  }
}

}  // namespace recemb::optimizer_testing

#endif  // RECEMB_TESTS_OPTIMIZERS_REFERENCE_CHECK_H_
