#include "kernels/pool.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <random>
#include <string>
#include <vector>

#include "kernels/simd_target.h"

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

// ---------------------------------------------------------------------------------------------
// The float32 kernel on every SIMD target: bitwise equal to a plain float32 loop in the kernel's
// order, and within 1e-5 of float64.

// Not inlined, so that no build of this file (say with -march=native, where GCC contracts by
// default) fuses the reference's multiply and add into an FMA: the kernel never does.
[[gnu::noinline]] float multiply(float a, float b) { return a * b; }

struct Bags {
  int64_t dim = 0;
  std::vector<float> table;  // exactly [vocabulary, dim]: ASan sees any read past the last row
  std::vector<int64_t> offsets{0};
  std::vector<int64_t> ids;
  std::vector<float> weights;  // empty: unweighted
  std::vector<float> scales;

  int64_t num_bags() const { return static_cast<int64_t>(scales.size()); }
  PoolInput input() const {
    return {.table = table.data(),
            .dim = dim,
            .offsets = offsets.data(),
            .ids = ids.data(),
            .weights = weights.empty() ? nullptr : weights.data(),
            .bag_scales = scales.data()};
  }
};

// Values of magnitudes 2^-8 .. 2^8 (so that the order of a sum shows in its bits), some exactly
// -0.0 (0.0f + -0.0f is +0.0f: the sum must start from zero); bags of 0..25 ids, empty ones
// included, over a vocabulary small enough for duplicates, its last row used; scales of 1 (not
// applied) and others.
Bags random_bags(int64_t dim, bool weighted, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::uniform_real_distribution<float> mantissa(-1.5f, 1.5f);
  std::uniform_int_distribution<int> exponent(-8, 8);
  const auto value = [&] { return std::ldexp(mantissa(random), exponent(random)); };
  Bags bags;
  bags.dim = dim;
  const int64_t vocabulary = 37;
  bags.table.resize(static_cast<size_t>(vocabulary * dim));
  for (size_t i = 0; i < bags.table.size(); ++i) bags.table[i] = i % 11 == 5 ? -0.0f : value();
  std::uniform_int_distribution<int64_t> length(0, 25), id(0, vocabulary - 1);
  for (int b = 0; b < 40; ++b) {
    const int64_t n = b % 13 == 4 ? 0 : length(random);
    for (int64_t j = 0; j < n; ++j) {
      bags.ids.push_back(b == 0 && j == 0 ? vocabulary - 1 : id(random));
      if (weighted) bags.weights.push_back(value());
    }
    bags.offsets.push_back(static_cast<int64_t>(bags.ids.size()));
    bags.scales.push_back(b % 3 == 0 ? 1.0f : value());
  }
  return bags;
}

enum class Order { kForward, kReverse };
enum class Rounding { kSeparate, kFused };

// Plain float32 loop: out = scale * sum_j weight_j * row_j, summed in `order`, each product
// rounded before the add (kSeparate) or fused with it (kFused, what an FMA would do).
std::vector<float> float32_reference(const Bags& bags, Order order, Rounding rounding) {
  const size_t dim = static_cast<size_t>(bags.dim);
  std::vector<float> out(static_cast<size_t>(bags.num_bags()) * dim);
  for (size_t b = 0; b < static_cast<size_t>(bags.num_bags()); ++b) {
    for (size_t d = 0; d < dim; ++d) {
      float sum = 0.0f;
      const int64_t begin = bags.offsets[b], end = bags.offsets[b + 1];
      for (int64_t k = 0; k < end - begin; ++k) {
        const auto j = static_cast<size_t>(order == Order::kForward ? begin + k : end - 1 - k);
        const float x = bags.table[static_cast<size_t>(bags.ids[j]) * dim + d];
        const float weight = bags.weights.empty() ? 1.0f : bags.weights[j];
        sum = rounding == Rounding::kFused ? std::fma(weight, x, sum)
              : bags.weights.empty()       ? sum + x
                                           : sum + multiply(weight, x);
      }
      if (bags.scales[b] != 1.0f) sum = multiply(sum, bags.scales[b]);
      out[b * dim + d] = sum;
    }
  }
  return out;
}

std::vector<double> float64_reference(const Bags& bags, std::vector<double>* magnitudes) {
  const size_t dim = static_cast<size_t>(bags.dim);
  std::vector<double> out(static_cast<size_t>(bags.num_bags()) * dim, 0.0);
  magnitudes->assign(out.size(), 0.0);
  for (size_t b = 0; b < static_cast<size_t>(bags.num_bags()); ++b) {
    for (auto j = static_cast<size_t>(bags.offsets[b]);
         j < static_cast<size_t>(bags.offsets[b + 1]); ++j) {
      const double weight = bags.weights.empty() ? 1.0 : bags.weights[j];
      for (size_t d = 0; d < dim; ++d) {
        const double term = weight * bags.table[static_cast<size_t>(bags.ids[j]) * dim + d];
        out[b * dim + d] += term;
        (*magnitudes)[b * dim + d] += std::abs(term);
      }
    }
    for (size_t d = 0; d < dim; ++d) {
      out[b * dim + d] *= bags.scales[b];
      (*magnitudes)[b * dim + d] *= std::abs(bags.scales[b]);
    }
  }
  return out;
}

// A NaN no kernel computes: marks what must stay unwritten.
constexpr uint32_t kUnwritten = 0x7fc0'0badu;

int count_bit_differences(const std::vector<float>& a, const std::vector<float>& b) {
  int count = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    count += std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i]) ? 1 : 0;
  }
  return count;
}

// Every width class of every target: 1..33 (shorter than a vector, one vector with and without
// a tail, several), 64, 100, 128, 256, and wider than AVX-512's 256 registered floats (300 with
// a tail, 512 in two whole chunks, 527 with a partial chunk and a tail).
std::vector<int64_t> test_dims() {
  std::vector<int64_t> dims;
  for (int64_t dim = 1; dim <= 33; ++dim) dims.push_back(dim);
  for (const int64_t dim : {64, 100, 128, 256, 300, 512, 527}) dims.push_back(dim);
  return dims;
}

class PoolTargetTest : public ::testing::TestWithParam<SimdTarget> {};

TEST_P(PoolTargetTest, BitwiseAsPlainFloat32Loop) {
  const ScopedSimdTarget target(GetParam());
  ASSERT_EQ(dispatched_simd_target(), GetParam());
  for (const int64_t dim : test_dims()) {
    for (const bool weighted : {false, true}) {
      const uint64_t seed = 7000 + 2 * static_cast<uint64_t>(dim) + (weighted ? 1 : 0);
      SCOPED_TRACE(::testing::Message()
                   << "dim " << dim << (weighted ? " weighted" : "") << ", seed " << seed);
      const Bags bags = random_bags(dim, weighted, seed);
      const std::vector<float> expected =
          float32_reference(bags, Order::kForward, Rounding::kSeparate);
      std::vector<double> magnitudes;
      const std::vector<double> exact = float64_reference(bags, &magnitudes);

      // In three pieces at random points, as the lookup splits bags into tasks.
      std::mt19937_64 random(seed);
      std::uniform_int_distribution<int64_t> split(0, bags.num_bags());
      int64_t first = split(random), second = split(random);
      if (first > second) std::swap(first, second);
      std::vector<float> out(expected.size(), std::bit_cast<float>(kUnwritten));
      pool_bags(bags.input(), 0, first, out.data());
      pool_bags(bags.input(), first, second, out.data());
      pool_bags(bags.input(), second, bags.num_bags(), out.data());
      ASSERT_EQ(count_bit_differences(out, expected), 0);
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_NEAR(out[i], exact[i], 1e-5 * (1.0 + magnitudes[i])) << "index " << i;
      }

      // Bags [first, second) alone: nothing else is written.
      std::vector<float> part(expected.size(), std::bit_cast<float>(kUnwritten));
      pool_bags(bags.input(), first, second, part.data());
      const auto begin = static_cast<size_t>(first * dim), end = static_cast<size_t>(second * dim);
      for (size_t i = 0; i < part.size(); ++i) {
        const uint32_t want =
            i >= begin && i < end ? std::bit_cast<uint32_t>(expected[i]) : kUnwritten;
        ASSERT_EQ(std::bit_cast<uint32_t>(part[i]), want) << "index " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, PoolTargetTest, ::testing::ValuesIn(supported_simd_targets()),
                         [](const ::testing::TestParamInfo<SimdTarget>& target) {
                           return simd_target_name(target.param);
                         });

// The bitwise comparison above can fail: on these inputs a kernel that summed in another order,
// or fused the weight's multiply into an FMA, would give other bits.
TEST(PoolReferenceTest, OrderAndFusionShowInTheBits) {
  int reordered = 0, fused = 0;
  for (const int64_t dim : {16, 64}) {
    const Bags bags = random_bags(dim, true, 7000 + 2 * static_cast<uint64_t>(dim) + 1);
    const std::vector<float> expected =
        float32_reference(bags, Order::kForward, Rounding::kSeparate);
    reordered += count_bit_differences(
        expected, float32_reference(bags, Order::kReverse, Rounding::kSeparate));
    fused +=
        count_bit_differences(expected, float32_reference(bags, Order::kForward, Rounding::kFused));
  }
  EXPECT_GT(reordered, 100);
  EXPECT_GT(fused, 100);
}

// An empty call writes nothing and reads no bag past its range.
TEST(PoolTest, EmptyRangeWritesNothing) {
  const Bags bags = random_bags(5, false, 11);
  std::vector<float> out(static_cast<size_t>(bags.num_bags() * 5),
                         std::bit_cast<float>(kUnwritten));
  pool_bags(bags.input(), 7, 7, out.data());
  pool_bags(bags.input(), bags.num_bags(), bags.num_bags(), out.data());
  for (const float x : out) EXPECT_EQ(std::bit_cast<uint32_t>(x), kUnwritten);
}

}  // namespace
}  // namespace recemb::internal
