#include "train/data/zipf_sampler.h"

#include <algorithm>
#include <cmath>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <limits>
#include <vector>

#include "recemb/error.h"

namespace recemb::train {
namespace {

// The exact Zipf pmf in float64: p[k - 1] = k^-s / sum_j j^-s.
std::vector<double> zipf_pmf(int64_t n, double s) {
  std::vector<double> p(static_cast<size_t>(n));
  double sum = 0.0;
  for (int64_t k = n; k >= 1; --k) {  // smallest terms first
    p[static_cast<size_t>(k - 1)] = std::pow(static_cast<double>(k), -s);
    sum += p[static_cast<size_t>(k - 1)];
  }
  for (double& x : p) x /= sum;
  return p;
}

// Upper 0.1% quantile of chi-square with `df` degrees of freedom (Wilson-Hilferty).
double chi_square_critical(int64_t df) {
  const double d = static_cast<double>(df);
  const double z = 3.09;
  const double a = 2.0 / (9.0 * d);
  return d * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

struct Case {
  int64_t n;
  double s;
};

class ZipfChiSquareTest : public ::testing::TestWithParam<Case> {};

// Pearson's chi-square of the sample counts against the exact pmf, cells with fewer than 5
// expected draws pooled into one tail cell.
TEST_P(ZipfChiSquareTest, MatchesTheExactPmf) {
  const auto [n, s] = GetParam();
  const uint64_t seed = 99 + static_cast<uint64_t>(n);
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " n " << n << " s " << s);
  const ZipfSampler sampler(n, s);
  dlrm::SplitMix64 random(seed);
  const int64_t draws = 200'000;
  std::vector<int64_t> counts(static_cast<size_t>(n));
  for (int64_t i = 0; i < draws; ++i) {
    const int64_t k = sampler.sample(random);
    ASSERT_GE(k, 1);
    ASSERT_LE(k, n);
    ++counts[static_cast<size_t>(k - 1)];
  }
  const std::vector<double> p = zipf_pmf(n, s);
  double chi_square = 0.0, tail_expected = 0.0, tail_observed = 0.0;
  int64_t cells = 0;
  for (size_t k = 0; k < p.size(); ++k) {
    const double expected = p[k] * static_cast<double>(draws);
    if (expected < 5.0) {
      tail_expected += expected;
      tail_observed += static_cast<double>(counts[k]);
      continue;
    }
    const double difference = static_cast<double>(counts[k]) - expected;
    chi_square += difference * difference / expected;
    ++cells;
  }
  if (tail_expected > 0.0) {
    chi_square += (tail_observed - tail_expected) * (tail_observed - tail_expected) / tail_expected;
    ++cells;
  }
  if (cells < 2) {  // n = 1: every draw is rank 1
    EXPECT_EQ(counts[0], draws);
    return;
  }
  EXPECT_LT(chi_square, chi_square_critical(cells - 1)) << cells << " cells";
}

INSTANTIATE_TEST_SUITE_P(Exponents, ZipfChiSquareTest,
                         ::testing::Values(Case{1, 1.05}, Case{2, 1.05}, Case{3, 1.05},
                                           Case{50, 1.05}, Case{1000, 1.05}, Case{1000, 1.0},
                                           Case{300, 1.0 + 1e-10}, Case{100, 0.5}, Case{100, 2.0},
                                           Case{20, 3.5}, Case{5000, 0.1}));

// Kolmogorov-Smirnov distance between the empirical and the exact CDF for a vocabulary far too
// large for a table (the sampler needs none): sup |F_n - F| over the sample points.
TEST(ZipfSamplerTest, KolmogorovSmirnovOnTenMillionElements) {
  const int64_t n = 10'000'000;
  const double s = 1.05;
  const uint64_t seed = 7;
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const ZipfSampler sampler(n, s);
  dlrm::SplitMix64 random(seed);
  const int64_t draws = 200'000;
  std::vector<int64_t> sample(static_cast<size_t>(draws));
  for (int64_t& k : sample) k = sampler.sample(random);
  std::sort(sample.begin(), sample.end());
  ASSERT_GE(sample.front(), 1);
  ASSERT_LE(sample.back(), n);

  double normalizer = 0.0;
  for (int64_t k = n; k >= 1; --k) normalizer += std::pow(static_cast<double>(k), -s);
  // Walk the distinct sample values in order, accumulating the exact CDF up to each.
  double cdf_before = 0.0;  // F(k - 1)
  int64_t k = 1;
  double distance = 0.0;
  for (size_t i = 0; i < sample.size();) {
    const int64_t value = sample[i];
    for (; k < value; ++k) cdf_before += std::pow(static_cast<double>(k), -s) / normalizer;
    const double cdf = cdf_before + std::pow(static_cast<double>(value), -s) / normalizer;
    size_t j = i;
    while (j < sample.size() && sample[j] == value) ++j;
    const double below = static_cast<double>(i) / static_cast<double>(draws);
    const double through = static_cast<double>(j) / static_cast<double>(draws);
    distance = std::max({distance, std::abs(below - cdf_before), std::abs(through - cdf)});
    i = j;
  }
  // 1.95 / sqrt(N): the 0.1% critical value of the continuous case (conservative for discrete).
  EXPECT_LT(distance, 1.95 / std::sqrt(static_cast<double>(draws)));
  // The head and the tail are both reached.
  EXPECT_GT(std::count(sample.begin(), sample.end(), 1), draws / 20);
  EXPECT_GT(sample.back(), n / 10);
}

// The number of uniforms per rank, found by locating the stream's next value after the draws in
// a fresh copy of the stream.
TEST(ZipfSamplerTest, UsesFewUniformsPerRank) {
  for (const double s : {0.1, 0.5, 1.0, 1.05, 2.0, 3.5}) {
    SCOPED_TRACE(::testing::Message() << "s " << s);
    const ZipfSampler sampler(1'000'000, s);
    const uint64_t seed = 5;
    dlrm::SplitMix64 random(seed);
    const int64_t draws = 100'000;
    for (int64_t i = 0; i < draws; ++i) sampler.sample(random);
    const uint64_t following = random.next();
    dlrm::SplitMix64 replay(seed);
    int64_t uniforms = 0;
    while (replay.next() != following) ++uniforms;
    EXPECT_GE(uniforms, draws);
    EXPECT_LT(static_cast<double>(uniforms) / static_cast<double>(draws), 1.02);
  }
}

TEST(ZipfSamplerTest, SameStreamSameRanks) {
  const ZipfSampler sampler(12345, 1.05);
  dlrm::SplitMix64 a(3), b(3);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(sampler.sample(a), sampler.sample(b));
}

TEST(ZipfSamplerTest, RejectsInvalidParameters) {
  const auto expect_error = [](int64_t n, double s, const std::string& message) {
    try {
      ZipfSampler sampler(n, s);
      FAIL() << "no exception for n " << n << " s " << s;
    } catch (const InvalidArgument& error) {
      EXPECT_THAT(error.what(), ::testing::HasSubstr(message));
    }
  };
  expect_error(0, 1.0, "num_elements is 0, must be >= 1");
  expect_error(-3, 1.0, "num_elements is -3");
  expect_error(10, 0.0, "exponent is 0.0");
  expect_error(10, -1.0, "exponent is -1.0");
  expect_error(10, std::numeric_limits<double>::infinity(), "exponent is inf");
  expect_error(10, std::numeric_limits<double>::quiet_NaN(), "must be finite and > 0");
}

}  // namespace
}  // namespace recemb::train
