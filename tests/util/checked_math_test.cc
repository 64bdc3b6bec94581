#include "util/checked_math.h"

#include <cstdint>
#include <gtest/gtest.h>
#include <limits>
#include <optional>
#include <random>

namespace recemb::internal {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
__extension__ using Wide = __int128;  // the reference arithmetic: no int64 product overflows it

// Against 128-bit arithmetic on random operands of every magnitude.
TEST(CheckedMathTest, MatchesWideArithmeticOrSaysItOverflows) {
  std::mt19937_64 rng(41);
  for (int i = 0; i < 10000; ++i) {
    const int shift_a = std::uniform_int_distribution<int>(0, 63)(rng);
    const int shift_b = std::uniform_int_distribution<int>(0, 63)(rng);
    const auto a = static_cast<int64_t>(rng() >> shift_a) * (rng() % 2 == 0 ? 1 : -1);
    const auto b = static_cast<int64_t>(rng() >> shift_b) * (rng() % 2 == 0 ? 1 : -1);
    const Wide product = static_cast<Wide>(a) * b;
    const Wide sum = static_cast<Wide>(a) + b;
    const bool product_fits = product >= kMin && product <= kMax;
    const bool sum_fits = sum >= kMin && sum <= kMax;
    ASSERT_EQ(checked_multiply(a, b).has_value(), product_fits) << a << " * " << b;
    ASSERT_EQ(checked_add(a, b).has_value(), sum_fits) << a << " + " << b;
    if (product_fits) {
      ASSERT_EQ(*checked_multiply(a, b), static_cast<int64_t>(product));
    }
    if (sum_fits) {
      ASSERT_EQ(*checked_add(a, b), static_cast<int64_t>(sum));
    }
  }
}

TEST(CheckedMathTest, Boundaries) {
  EXPECT_EQ(checked_multiply(int64_t{1} << 62, 2), std::nullopt);
  EXPECT_EQ(checked_multiply(int64_t{1} << 62, -2), kMin);
  EXPECT_EQ(checked_multiply(kMax, 1), kMax);
  EXPECT_EQ(checked_multiply(kMin, -1), std::nullopt);
  EXPECT_EQ(checked_add(kMax, 1), std::nullopt);
  EXPECT_EQ(checked_add(kMax, -1), kMax - 1);
  EXPECT_EQ(checked_add(kMin, -1), std::nullopt);
}

// Against 128-bit arithmetic on random non-negative operands of every magnitude.
TEST(CheckedMathTest, SaturatingAddIsTheSumOrTheMaximum) {
  std::mt19937_64 rng(42);
  for (int i = 0; i < 10000; ++i) {
    const auto a = static_cast<int64_t>(rng() >> std::uniform_int_distribution<int>(1, 63)(rng));
    const auto b = static_cast<int64_t>(rng() >> std::uniform_int_distribution<int>(1, 63)(rng));
    const Wide sum = static_cast<Wide>(a) + b;
    ASSERT_EQ(saturating_add(a, b), sum > kMax ? kMax : static_cast<int64_t>(sum))
        << a << " + " << b;
  }
  EXPECT_EQ(saturating_add(kMax, 0), kMax);
  EXPECT_EQ(saturating_add(kMax - 1, 1), kMax);
  EXPECT_EQ(saturating_add(kMax - 1, 2), kMax);
  EXPECT_EQ(saturating_add(0, 0), 0);
}

}  // namespace
}  // namespace recemb::internal
