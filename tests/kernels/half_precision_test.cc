#include "kernels/half_precision.h"

#include <cmath>
#include <cstdint>
#include <gtest/gtest.h>
#include <limits>
#include <random>
#include <vector>

#include "kernels/simd_target.h"
#include "reference/half_grid.h"

namespace recemb::internal {
namespace {

using reference::Neighbours;
using reference::neighbours;
using reference::rounding_bits;

double decoded(DType dtype, uint16_t value) {
  return dtype == DType::kBFloat16 ? bfloat16_to_float(value) : float16_to_float(value);
}

uint16_t nearest(DType dtype, float x) {
  uint16_t code = 0;
  encode_half_values_nearest(dtype, &x, 1, &code);
  return code;
}

uint16_t stochastic(DType dtype, float x, uint16_t random) {
  uint16_t code = 0;
  round_half_values_stochastic(dtype, &x, &random, 1, &code);
  return code;
}

// Random finite floats spread over `dtype`'s range (exponents uniform), both signs.
std::vector<float> random_values(DType dtype, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  const int max_exponent = dtype == DType::kBFloat16 ? 120 : 15;
  const int min_exponent = dtype == DType::kBFloat16 ? -130 : -26;
  std::uniform_int_distribution<int> exponent(min_exponent, max_exponent);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::vector<float> values;
  for (int i = 0; i < n; ++i) {
    const float sign = (rng() & 1) != 0 ? -1.0f : 1.0f;
    values.push_back(sign * std::ldexp(mantissa(rng), exponent(rng)));
  }
  return values;
}

class HalfPrecision : public ::testing::TestWithParam<DType> {};

TEST_P(HalfPrecision, NearestMatchesTheGridsNearestValueTiesToEven) {
  const DType dtype = GetParam();
  int ties = 0;
  for (const float x : random_values(dtype, 20000, 1)) {
    if (dtype == DType::kFloat16 && std::fabs(x) >= 65504.0f) continue;
    EXPECT_EQ(decoded(dtype, nearest(dtype, x)), reference::round_to_nearest(dtype, x))
        << "x = " << x;
    // The midpoint of x's neighbours (a float32 value): a tie, to the even one.
    const Neighbours n = neighbours(dtype, x);
    const auto tie = static_cast<float>((n.lo + n.hi) / 2);
    if (std::isinf(static_cast<float>(n.hi))) continue;
    ASSERT_EQ(double{tie}, (n.lo + n.hi) / 2);
    EXPECT_EQ(decoded(dtype, nearest(dtype, tie)), reference::round_to_nearest(dtype, tie))
        << "tie " << tie;
    ++ties;
  }
  EXPECT_GT(ties, 10000);
}

TEST_P(HalfPrecision, StochasticGivesOneOfTheTwoNeighbours) {
  const DType dtype = GetParam();
  std::mt19937 rng(2);
  for (const float x : random_values(dtype, 20000, 3)) {
    if (dtype == DType::kFloat16 && std::fabs(x) >= 65504.0f) continue;
    const Neighbours n = neighbours(dtype, x);
    const double result = decoded(dtype, stochastic(dtype, x, static_cast<uint16_t>(rng())));
    EXPECT_TRUE(result == n.lo || result == n.hi) << "x = " << x << " gave " << result;
  }
}

TEST_P(HalfPrecision, StochasticKeepsRepresentableValuesForAnyBits) {
  const DType dtype = GetParam();
  std::mt19937 rng(4);
  for (const float x : random_values(dtype, 5000, 5)) {
    const uint16_t code = nearest(dtype, x);
    const auto value = static_cast<float>(decoded(dtype, code));
    if (!std::isfinite(value)) continue;
    for (const uint32_t random :
         {0u, 1u, 0x7fffu, 0xffffu, static_cast<uint32_t>(rng() & 0xffff)}) {
      EXPECT_EQ(stochastic(dtype, value, static_cast<uint16_t>(random)), code) << "value " << value;
    }
  }
  EXPECT_EQ(stochastic(dtype, 0.0f, 0xffff), 0);
  EXPECT_EQ(stochastic(dtype, -0.0f, 0xffff), 0x8000);
}

// The probability of rounding up is exactly p (within 2^-16 for float16's subnormals): over every
// value of the 16 random bits, the count of ups is p * 2^16.
TEST_P(HalfPrecision, StochasticRoundsUpWithProbabilityP) {
  const DType dtype = GetParam();
  int subnormals = 0;
  for (const float x : random_values(dtype, 60, 6)) {
    if (dtype == DType::kFloat16 && std::fabs(x) >= 65504.0f) continue;
    const Neighbours n = neighbours(dtype, x);
    const double p = (std::fabs(x) - std::fabs(n.lo)) / (std::fabs(n.hi) - std::fabs(n.lo));
    int64_t ups = 0;
    for (uint32_t random = 0; random < (1u << 16); ++random) {
      ups += decoded(dtype, stochastic(dtype, x, static_cast<uint16_t>(random))) == n.hi ? 1 : 0;
    }
    const bool subnormal = dtype == DType::kFloat16 && std::fabs(x) < 0x1p-14f;
    subnormals += subnormal ? 1 : 0;
    if (subnormal) {
      EXPECT_NEAR(static_cast<double>(ups), p * 0x1p16, 1.0) << "x = " << x;
    } else {
      EXPECT_EQ(static_cast<double>(ups), p * 0x1p16) << "x = " << x;
    }
  }
  if (dtype == DType::kFloat16) {
    EXPECT_GT(subnormals, 3);
  }
}

// Over many draws of the counter-based generator the mean is x within statistical bounds (4
// standard deviations of the mean); round to nearest fails the same check.
TEST_P(HalfPrecision, StochasticIsUnbiasedOverTheGeneratorsDraws) {
  const DType dtype = GetParam();
  constexpr int kDraws = 20000;
  int nearest_failures = 0;
  int tested = 0;
  for (const float x : random_values(dtype, 50, 7)) {
    if (dtype == DType::kFloat16 && std::fabs(x) >= 65504.0f) continue;
    const Neighbours n = neighbours(dtype, x);
    const double gap = std::fabs(n.hi - n.lo);
    const double p = std::fabs(x - n.lo) / gap;
    const double bound = 4.0 * gap * std::sqrt(std::max(p * (1.0 - p), 1e-4) / kDraws);
    const std::vector<float> values(kDraws, x);
    std::vector<uint16_t> codes(kDraws);
    const uint64_t stream = rounding_stream(11, 3, static_cast<int64_t>(tested));
    encode_half_values_stochastic(dtype, values.data(), kDraws, stream, 0, codes.data());
    double sum = 0.0;
    for (const uint16_t code : codes) sum += decoded(dtype, code);
    EXPECT_NEAR(sum / kDraws, x, bound) << "x = " << x << ", p = " << p;
    if (std::fabs(decoded(dtype, nearest(dtype, x)) - x) > bound) ++nearest_failures;
    ++tested;
  }
  EXPECT_GT(nearest_failures, tested / 2);
}

TEST_P(HalfPrecision, NonFiniteValuesRoundAsToNearest) {
  const DType dtype = GetParam();
  const float inf = std::numeric_limits<float>::infinity();
  for (const float x : {inf, -inf}) {
    EXPECT_EQ(stochastic(dtype, x, 0xffff), nearest(dtype, x));
    EXPECT_EQ(decoded(dtype, nearest(dtype, x)), x);
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(decoded(dtype, stochastic(dtype, nan, 12345))));
  EXPECT_TRUE(std::isnan(decoded(dtype, nearest(dtype, nan))));
}

TEST_P(HalfPrecision, RowsEncodeAndDecodeAsTheirValues) {
  const DType dtype = GetParam();
  const std::vector<float> values = random_values(dtype, 37, 8);
  std::vector<uint16_t> codes(values.size());
  std::vector<float> back(values.size());
  const auto n = static_cast<int64_t>(values.size());
  encode_half_values_nearest(dtype, values.data(), n, codes.data());
  decode_half_values(dtype, codes.data(), n, back.data());
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(codes[static_cast<size_t>(i)], nearest(dtype, values[static_cast<size_t>(i)]));
    EXPECT_EQ(back[static_cast<size_t>(i)], decoded(dtype, codes[static_cast<size_t>(i)]));
  }
  // Stochastic rows: column i uses rounding_bits(stream, first_column + i), so a row split into
  // column ranges rounds as the whole row does.
  const uint64_t stream = rounding_stream(5, 9, 123);
  std::vector<uint16_t> whole(values.size());
  std::vector<uint16_t> split(values.size());
  encode_half_values_stochastic(dtype, values.data(), n, stream, 0, whole.data());
  encode_half_values_stochastic(dtype, values.data(), 11, stream, 0, split.data());
  encode_half_values_stochastic(dtype, values.data() + 11, n - 11, stream, 11, split.data() + 11);
  EXPECT_EQ(whole, split);
  // Rows of many groups of 32 columns, from an odd column.
  const std::vector<float> wide = random_values(dtype, 1001, 10);
  std::vector<uint16_t> wide_codes(wide.size());
  encode_half_values_stochastic(dtype, wide.data(), static_cast<int64_t>(wide.size()), stream, 3,
                                wide_codes.data());
  for (size_t i = 0; i < wide.size(); ++i) {
    ASSERT_EQ(wide_codes[i],
              stochastic(dtype, wide[i], rounding_bits(stream, 3 + static_cast<int64_t>(i))));
  }
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(whole[static_cast<size_t>(i)],
              stochastic(dtype, values[static_cast<size_t>(i)], rounding_bits(stream, i)));
  }
}

// Every SIMD target's row encoders give the documented results: rows of every length around the
// groups of 32 columns, from every kind of first column, against the reference grids and the
// reference random bits, value by value.
TEST_P(HalfPrecision, EveryTargetEncodesRowsAsTheReference) {
  const DType dtype = GetParam();
  std::vector<float> values = random_values(dtype, 200, 12);
  for (float& x : values) {
    if (dtype == DType::kFloat16 && std::fabs(x) >= 65504.0f) x = 1.5f;
  }
  const uint64_t stream = rounding_stream(3, 4, 5);
  for (const SimdTarget target : supported_simd_targets()) {
    const ScopedSimdTarget scope(target);
    for (const int64_t n : {1, 5, 16, 31, 32, 33, 64, 100, 128, 200}) {
      std::vector<uint16_t> codes(static_cast<size_t>(n));
      encode_half_values_nearest(dtype, values.data(), n, codes.data());
      for (int64_t i = 0; i < n; ++i) {
        const auto u = static_cast<size_t>(i);
        ASSERT_EQ(decoded(dtype, codes[u]), reference::round_to_nearest(dtype, values[u]))
            << simd_target_name(target) << " n " << n << " i " << i;
      }
      for (const int64_t first_column : {0, 3, 16, 31, 32, 40}) {
        encode_half_values_stochastic(dtype, values.data(), n, stream, first_column, codes.data());
        for (int64_t i = 0; i < n; ++i) {
          const auto u = static_cast<size_t>(i);
          ASSERT_EQ(decoded(dtype, codes[u]),
                    reference::round_stochastically(dtype, values[u],
                                                    rounding_bits(stream, first_column + i)))
              << simd_target_name(target) << " n " << n << " first column " << first_column << " i "
              << i;
        }
      }
    }
  }
}

// Rows decode every 16-bit pattern to its value (the formats' definitions), a NaN to a NaN and
// infinities to infinities.
TEST_P(HalfPrecision, RowsDecodeEveryPattern) {
  const DType dtype = GetParam();
  std::vector<uint16_t> patterns(1u << 16);
  for (size_t i = 0; i < patterns.size(); ++i) patterns[i] = static_cast<uint16_t>(i);
  std::vector<float> values(patterns.size());
  decode_half_values(dtype, patterns.data(), static_cast<int64_t>(patterns.size()), values.data());
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t bits = patterns[i];
    const bool special =
        dtype == DType::kBFloat16 ? (bits & 0x7f80u) == 0x7f80u : (bits & 0x7c00u) == 0x7c00u;
    const bool nan = special && (bits & (dtype == DType::kBFloat16 ? 0x7fu : 0x3ffu)) != 0;
    if (nan) {
      ASSERT_TRUE(std::isnan(values[i])) << "pattern " << bits;
    } else if (special) {
      ASSERT_EQ(values[i], (bits & 0x8000u) != 0 ? -INFINITY : INFINITY) << "pattern " << bits;
    } else {
      ASSERT_EQ(double{values[i]}, reference::value_of(dtype, bits)) << "pattern " << bits;
      ASSERT_EQ(std::signbit(values[i]), (bits & 0x8000u) != 0) << "pattern " << bits;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, HalfPrecision, ::testing::Values(DType::kBFloat16, DType::kFloat16),
                         [](const auto& type) { return std::string(dtype_name(type.param)); });

TEST(RoundingBits, DependOnEveryCounter) {
  const uint64_t stream = rounding_stream(1, 2, 3);
  EXPECT_EQ(stream, rounding_stream(1, 2, 3));
  EXPECT_EQ(stream, rounding_row_stream(rounding_step_stream(1, 2), 3));
  EXPECT_NE(stream, rounding_stream(2, 2, 3));
  EXPECT_NE(stream, rounding_stream(1, 3, 3));
  EXPECT_NE(stream, rounding_stream(1, 2, 4));
  EXPECT_NE(rounding_bits(stream, 0), rounding_bits(stream, 1));
  // Roughly uniform: each of the 16 bits is 1 in about half of many draws.
  constexpr int kDraws = 100000;
  std::vector<int64_t> ones(16, 0);
  for (int i = 0; i < kDraws; ++i) {
    const uint16_t bits = rounding_bits(rounding_stream(7, 1, i / 64), i % 64);
    for (int b = 0; b < 16; ++b) ones[static_cast<size_t>(b)] += (bits >> b) & 1;
  }
  for (int b = 0; b < 16; ++b) {
    EXPECT_NEAR(static_cast<double>(ones[static_cast<size_t>(b)]) / kDraws, 0.5, 0.01)
        << "bit " << b;
  }
}

}  // namespace
}  // namespace recemb::internal
