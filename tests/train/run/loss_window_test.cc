// LossWindow (train/run/loss_window.h): the mean of the steps' losses since the last record,
// against a sum kept beside it; a restored window continues as the saved one would have.
#include "train/run/loss_window.h"

#include <cmath>
#include <gtest/gtest.h>
#include <random>

namespace recemb::train {
namespace {

TEST(LossWindowTest, RecordsTheMeanOfItsStepsAndRestoresWhereItWasSaved) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> loss(0.1, 1.0);
  LossWindow window;
  EXPECT_TRUE(std::isnan(window.recent()));
  for (int record = 0; record < 10; ++record) {
    double sum = 0;
    const int steps = 1 + record % 4;
    for (int step = 0; step < steps; ++step) {
      const double value = loss(rng);
      sum += value;
      window.add(value);
      // A checkpoint in the middle of the window: a window restored from it goes on alike.
      LossWindow restored;
      restored.restore(window.sum(), window.count());
      EXPECT_EQ(restored.recent(), window.recent());
    }
    EXPECT_FALSE(window.empty());
    const double mean = window.take();
    EXPECT_DOUBLE_EQ(mean, sum / steps);
    EXPECT_TRUE(window.empty());
    EXPECT_EQ(window.recent(), mean);  // shown until the next step
  }
}

}  // namespace
}  // namespace recemb::train
