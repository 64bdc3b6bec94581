// learning_rate_at and validate_learning_rate (recemb/learning_rate.h), against hand-computed
// values of each schedule.
#include "recemb/learning_rate.h"

#include <cmath>
#include <cstdint>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <limits>
#include <vector>

#include "recemb/error.h"

namespace recemb {
namespace {

using ::testing::HasSubstr;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInfinity = std::numeric_limits<float>::infinity();

// The message of the InvalidArgument that `validate_learning_rate` throws ("" if none).
std::string validation_error(const LearningRate& learning_rate) {
  try {
    validate_learning_rate(learning_rate, "table 'video'");
  } catch (const InvalidArgument& error) {
    return error.what();
  }
  return "";
}

TEST(LearningRateAtTest, Constant) {
  EXPECT_EQ(learning_rate_at(0.5f, 0), 0.5f);
  EXPECT_EQ(learning_rate_at(0.5f, 123456789), 0.5f);
  EXPECT_EQ(learning_rate_at(0.0f, 3), 0.0f);
}

// 0.1 * 0.5^(step / 100): 0.1 * 0.5^0.5 = 0.070710678..., 0.1 * 0.5^2.5 = 0.017677669...
TEST(LearningRateAtTest, ExponentialDecay) {
  const ExponentialDecay schedule{
      .initial_learning_rate = 0.1f, .decay_steps = 100, .decay_rate = 0.5f, .staircase = false};
  EXPECT_FLOAT_EQ(learning_rate_at(schedule, 0), 0.1f);
  EXPECT_FLOAT_EQ(learning_rate_at(schedule, 50), 0.0707106781f);
  EXPECT_FLOAT_EQ(learning_rate_at(schedule, 100), 0.05f);
  EXPECT_FLOAT_EQ(learning_rate_at(schedule, 250), 0.0176776695f);
  EXPECT_EQ(learning_rate_at(schedule, 1'000'000), 0.0f);  // underflows to 0
}

// Staircase: 0.1 * 0.5^floor(step / 100).
TEST(LearningRateAtTest, ExponentialDecayStaircase) {
  const ExponentialDecay schedule{
      .initial_learning_rate = 0.1f, .decay_steps = 100, .decay_rate = 0.5f, .staircase = true};
  EXPECT_FLOAT_EQ(learning_rate_at(schedule, 0), 0.1f);
  EXPECT_FLOAT_EQ(learning_rate_at(schedule, 99), 0.1f);
  EXPECT_FLOAT_EQ(learning_rate_at(schedule, 100), 0.05f);
  EXPECT_FLOAT_EQ(learning_rate_at(schedule, 250), 0.025f);
}

// A growing rate (decay_rate > 1) that leaves the float range throws instead of returning inf.
TEST(LearningRateAtTest, ExponentialGrowthBeyondFloatRangeThrows) {
  const ExponentialDecay schedule{
      .initial_learning_rate = 1.0f, .decay_steps = 1, .decay_rate = 2.0f, .staircase = false};
  EXPECT_FLOAT_EQ(learning_rate_at(schedule, 10), 1024.0f);
  EXPECT_FLOAT_EQ(learning_rate_at(schedule, 127), 1.70141183e38f);
  try {
    learning_rate_at(schedule, 128);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), HasSubstr("at step 128 exceeds the float range"));
  }
}

// values[i] for the first i with step <= boundaries[i], values.back() after the last boundary.
TEST(LearningRateAtTest, PiecewiseConstant) {
  const PiecewiseConstant schedule{.boundaries = {10, 20}, .values = {1.0f, 0.5f, 0.1f}};
  EXPECT_EQ(learning_rate_at(schedule, 0), 1.0f);
  EXPECT_EQ(learning_rate_at(schedule, 10), 1.0f);
  EXPECT_EQ(learning_rate_at(schedule, 11), 0.5f);
  EXPECT_EQ(learning_rate_at(schedule, 20), 0.5f);
  EXPECT_EQ(learning_rate_at(schedule, 21), 0.1f);
  EXPECT_EQ(learning_rate_at(schedule, 1'000'000), 0.1f);
  EXPECT_EQ(learning_rate_at(PiecewiseConstant{.boundaries = {}, .values = {0.3f}}, 5), 0.3f);
}

TEST(LearningRateAtTest, LinearWarmup) {
  const LinearWarmup from_zero{
      .target_learning_rate = 0.01f, .warmup_steps = 100, .initial_learning_rate = 0.0f};
  EXPECT_EQ(learning_rate_at(from_zero, 0), 0.0f);
  EXPECT_FLOAT_EQ(learning_rate_at(from_zero, 25), 0.0025f);
  EXPECT_FLOAT_EQ(learning_rate_at(from_zero, 99), 0.0099f);
  EXPECT_EQ(learning_rate_at(from_zero, 100), 0.01f);
  EXPECT_EQ(learning_rate_at(from_zero, 5000), 0.01f);
  // 0.002 + (0.01 - 0.002) * 50 / 100 = 0.006
  const LinearWarmup from_nonzero{
      .target_learning_rate = 0.01f, .warmup_steps = 100, .initial_learning_rate = 0.002f};
  EXPECT_FLOAT_EQ(learning_rate_at(from_nonzero, 0), 0.002f);
  EXPECT_FLOAT_EQ(learning_rate_at(from_nonzero, 50), 0.006f);
}

TEST(LearningRateAtTest, CallbackGetsStep) {
  std::vector<int64_t> steps;
  const LearningRateCallback callback = [&steps](int64_t step) {
    steps.push_back(step);
    return 0.001f * static_cast<float>(step);
  };
  EXPECT_FLOAT_EQ(learning_rate_at(callback, 7), 0.007f);
  EXPECT_FLOAT_EQ(learning_rate_at(callback, 0), 0.0f);
  EXPECT_EQ(steps, (std::vector<int64_t>{7, 0}));
}

TEST(LearningRateAtTest, CallbackReturningInvalidValueThrows) {
  for (const float bad : {-1.0f, kNaN, kInfinity}) {
    SCOPED_TRACE(bad);
    const LearningRateCallback callback = [bad](int64_t) { return bad; };
    try {
      learning_rate_at(callback, 3);
      FAIL() << "expected InvalidArgument";
    } catch (const InvalidArgument& error) {
      EXPECT_THAT(error.what(), HasSubstr("callback returned"));
      EXPECT_THAT(error.what(), HasSubstr("at step 3"));
      EXPECT_THAT(error.what(), HasSubstr("must return a finite value >= 0"));
    }
  }
}

TEST(ValidateLearningRateTest, AcceptsValidSchedules) {
  EXPECT_EQ(validation_error(0.0f), "");
  EXPECT_EQ(validation_error(0.01f), "");
  EXPECT_EQ(validation_error(ExponentialDecay{}), "");
  EXPECT_EQ(validation_error(PiecewiseConstant{.boundaries = {}, .values = {0.1f}}), "");
  EXPECT_EQ(validation_error(PiecewiseConstant{.boundaries = {5, 9}, .values = {1, 0, 0.5f}}), "");
  EXPECT_EQ(validation_error(LinearWarmup{}), "");
  EXPECT_EQ(validation_error(LearningRateCallback([](int64_t) { return 0.1f; })), "");
}

TEST(ValidateLearningRateTest, Constant) {
  EXPECT_EQ(validation_error(-1.0f),
            "table 'video': learning_rate must be finite and >= 0, got -1");
  EXPECT_THAT(validation_error(kNaN), HasSubstr("learning_rate must be finite and >= 0, got nan"));
  EXPECT_THAT(validation_error(kInfinity),
              HasSubstr("learning_rate must be finite and >= 0, got inf"));
}

TEST(ValidateLearningRateTest, ExponentialDecay) {
  EXPECT_EQ(validation_error(ExponentialDecay{.initial_learning_rate = 0.0f}),
            "table 'video': ExponentialDecay.initial_learning_rate must be finite and > 0, got 0");
  EXPECT_THAT(validation_error(ExponentialDecay{.decay_steps = 0}),
              HasSubstr("ExponentialDecay.decay_steps must be > 0, got 0"));
  EXPECT_THAT(validation_error(ExponentialDecay{.decay_steps = -5}),
              HasSubstr("ExponentialDecay.decay_steps must be > 0, got -5"));
  EXPECT_THAT(validation_error(ExponentialDecay{.decay_rate = 0.0f}),
              HasSubstr("ExponentialDecay.decay_rate must be finite and > 0, got 0"));
  EXPECT_THAT(validation_error(ExponentialDecay{.decay_rate = kNaN}),
              HasSubstr("ExponentialDecay.decay_rate must be finite and > 0, got nan"));
}

TEST(ValidateLearningRateTest, PiecewiseConstant) {
  EXPECT_EQ(validation_error(PiecewiseConstant{.boundaries = {10}, .values = {1.0f}}),
            "table 'video': PiecewiseConstant.values must have boundaries.size() + 1 = 2 "
            "entries, got 1");
  EXPECT_THAT(validation_error(PiecewiseConstant{.boundaries = {}, .values = {}}),
              HasSubstr("must have boundaries.size() + 1 = 1 entries, got 0"));
  EXPECT_THAT(
      validation_error(PiecewiseConstant{.boundaries = {10, 10}, .values = {1.0f, 0.5f, 0.1f}}),
      HasSubstr("PiecewiseConstant.boundaries must be strictly increasing, got boundaries[1] = "
                "10 after 10"));
  EXPECT_THAT(validation_error(PiecewiseConstant{.boundaries = {10}, .values = {1.0f, -0.5f}}),
              HasSubstr("PiecewiseConstant.values[1] must be finite and >= 0, got -0.5"));
  EXPECT_THAT(validation_error(PiecewiseConstant{.boundaries = {10}, .values = {kNaN, 0.5f}}),
              HasSubstr("PiecewiseConstant.values[0] must be finite and >= 0, got nan"));
}

TEST(ValidateLearningRateTest, LinearWarmup) {
  EXPECT_EQ(validation_error(LinearWarmup{.target_learning_rate = 0.0f}),
            "table 'video': LinearWarmup.target_learning_rate must be finite and > 0, got 0");
  EXPECT_THAT(validation_error(LinearWarmup{.warmup_steps = 0}),
              HasSubstr("LinearWarmup.warmup_steps must be > 0, got 0"));
  EXPECT_THAT(validation_error(LinearWarmup{.initial_learning_rate = -0.001f}),
              HasSubstr("LinearWarmup.initial_learning_rate must be finite and >= 0, got -0.001"));
  EXPECT_THAT(validation_error(LinearWarmup{.initial_learning_rate = kInfinity}),
              HasSubstr("LinearWarmup.initial_learning_rate must be finite and >= 0, got inf"));
}

TEST(ValidateLearningRateTest, EmptyCallback) {
  EXPECT_EQ(validation_error(LearningRateCallback()),
            "table 'video': learning_rate callback must not be empty");
}

}  // namespace
}  // namespace recemb
