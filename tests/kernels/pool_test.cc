#include "kernels/pool.h"

#include <cmath>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <random>
#include <vector>

namespace recemb::internal {
namespace {

struct Case {
  int64_t dim;
  bool weighted;
  bool quantized;
};

// Plain float64 reference: every bag summed in order, quantization per the TF formula.
std::vector<double> reference_pool(const std::vector<float>& table, int64_t dim,
                                   const std::vector<int64_t>& offsets,
                                   const std::vector<int64_t>& ids,
                                   const std::vector<float>& weights,
                                   const std::vector<float>& scales,
                                   const QuantizationConfig* quantization) {
  const size_t num_bags = offsets.size() - 1;
  std::vector<double> out(num_bags * static_cast<size_t>(dim), 0.0);
  for (size_t b = 0; b < num_bags; ++b) {
    for (int64_t j = offsets[b]; j < offsets[b + 1]; ++j) {
      const double weight = weights.empty() ? 1.0 : weights[static_cast<size_t>(j)];
      for (int64_t d = 0; d < dim; ++d) {
        double x = table[static_cast<size_t>(ids[static_cast<size_t>(j)] * dim + d)];
        if (quantization != nullptr) {
          const double lower = quantization->lower, upper = quantization->upper;
          const double step = (upper - lower) / static_cast<double>(quantization->num_buckets - 1);
          x = std::min(std::max(x, lower), upper);
          x = std::floor((x - lower) / step + 0.5) * step + lower;
        }
        out[b * static_cast<size_t>(dim) + static_cast<size_t>(d)] += weight * x;
      }
    }
    for (int64_t d = 0; d < dim; ++d)
      out[b * static_cast<size_t>(dim) + static_cast<size_t>(d)] *= scales[b];
  }
  return out;
}

class PoolTest : public ::testing::TestWithParam<Case> {};

TEST_P(PoolTest, MatchesFloat64Reference) {
  const Case c = GetParam();
  const uint64_t seed = 1234 + static_cast<uint64_t>(c.dim);
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 random(seed);
  const int64_t vocabulary = 50;
  std::vector<float> table(static_cast<size_t>(vocabulary * c.dim));
  std::uniform_real_distribution<float> value(-1.5f, 1.5f);
  for (float& x : table) x = value(random);
  // Bags of 0..40 ids (longer than the prefetch distance), duplicates likely.
  std::vector<int64_t> offsets{0}, ids;
  std::vector<float> weights, scales;
  std::uniform_int_distribution<int64_t> length(0, 40), id(0, vocabulary - 1);
  for (int b = 0; b < 30; ++b) {
    const int64_t n = b == 3 ? 0 : length(random);
    for (int64_t j = 0; j < n; ++j) {
      ids.push_back(id(random));
      if (c.weighted) weights.push_back(value(random));
    }
    offsets.push_back(static_cast<int64_t>(ids.size()));
    scales.push_back(b % 3 == 0 ? 1.0f : value(random));
  }
  const QuantizationConfig quantization{.num_buckets = 7, .lower = -1.0f, .upper = 1.0f};
  const PoolInput input{.table = table.data(),
                        .dim = c.dim,
                        .offsets = offsets.data(),
                        .ids = ids.data(),
                        .weights = c.weighted ? weights.data() : nullptr,
                        .bag_scales = scales.data(),
                        .quantization = c.quantized ? &quantization : nullptr};
  const std::vector<double> expected = reference_pool(table, c.dim, offsets, ids, weights, scales,
                                                      c.quantized ? &quantization : nullptr);
  std::vector<float> out(expected.size(), 99.0f);
  // In two pieces, as the parallel lookup splits bags.
  pool_bags(input, 0, 11, out.data());
  pool_bags(input, 11, 30, out.data());
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_NEAR(out[i], expected[i], 1e-5 * (1.0 + std::abs(expected[i]))) << "index " << i;
  }
  for (int64_t d = 0; d < c.dim; ++d) EXPECT_EQ(out[static_cast<size_t>(3 * c.dim + d)], 0.0f);
}

INSTANTIATE_TEST_SUITE_P(Shapes, PoolTest,
                         ::testing::Values(Case{1, false, false}, Case{3, true, false},
                                           Case{16, false, false}, Case{17, true, false},
                                           Case{64, true, false}, Case{130, false, false},
                                           Case{8, false, true}, Case{33, true, true}));

TEST(PoolTest, QuantizationSnapsToBuckets) {
  // Buckets of [0, 1] with 3 buckets: {0, 0.5, 1}; values outside are clipped first.
  const std::vector<float> table{-3.0f, 0.2f, 0.3f, 0.74f, 0.76f, 9.0f};
  const std::vector<int64_t> offsets{0, 1, 2, 3, 4, 5, 6}, ids{0, 1, 2, 3, 4, 5};
  const std::vector<float> scales(6, 1.0f);
  const QuantizationConfig q{.num_buckets = 3, .lower = 0.0f, .upper = 1.0f};
  std::vector<float> out(6);
  pool_bags({.table = table.data(),
             .dim = 1,
             .offsets = offsets.data(),
             .ids = ids.data(),
             .bag_scales = scales.data(),
             .quantization = &q},
            0, 6, out.data());
  EXPECT_THAT(out, ::testing::ElementsAre(0.0f, 0.0f, 0.5f, 0.5f, 1.0f, 1.0f));
}

}  // namespace
}  // namespace recemb::internal
