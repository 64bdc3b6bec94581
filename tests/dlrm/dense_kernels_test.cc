// The dense kernels of every instruction set this CPU runs, against float64 plain loops: the
// MLP's affine layer forward and backward, ReLU's backward, the sum of blocks and the finiteness
// check. (The interaction's and the optimizers' kernels are tested through DotInteraction and
// DenseOptimizer, per instruction set, in interaction_test.cc and dense_optimizer_test.cc.)
#include "dlrm/dense_kernels.h"

#include <cmath>
#include <cstdint>
#include <gtest/gtest.h>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "dlrm/dense_isa.h"
#include "dlrm/dense_reference.h"

namespace recemb::dlrm {
namespace {

using reference::random_floats;

// (rows, in, out): odd sizes leave partial vector registers; 70 x 40 spans Eigen's blocking; 300
// rows run in chunks of 256, 32, 8 and 4 on generated code, and 300 x 256 weights on Eigen
// (dense_kernels.cc: the products of layers of up to 2^16 weights run on generated code with AVX2
// and AVX-512).
struct AffineShape {
  int64_t rows, in, out;
};
constexpr AffineShape kShapes[] = {{1, 1, 1},    {3, 5, 7},     {17, 13, 9},
                                   {70, 40, 33}, {300, 40, 33}, {5, 300, 256}};

class DenseKernelsTest : public ::testing::TestWithParam<DenseIsa> {
 protected:
  const DenseKernels& kernels() const { return dense_kernels(GetParam()); }
};

// |actual - expected| within float rounding of sums of `terms` products of values in [-1, 1].
void expect_close(const std::vector<float>& actual, const std::vector<double>& expected,
                  int64_t terms, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(actual[i], expected[i], 1e-6 * static_cast<double>(terms + 1)) << what << " " << i;
  }
}

TEST_P(DenseKernelsTest, AffineForwardIsXWPlusBiasThenRelu) {
  std::mt19937_64 random(71);
  for (const AffineShape s : kShapes) {
    for (const bool relu : {false, true}) {
      SCOPED_TRACE(std::to_string(s.rows) + "x" + std::to_string(s.in) + "x" +
                   std::to_string(s.out) + (relu ? " relu" : ""));
      const std::vector<float> x = random_floats(random, s.rows * s.in, -1, 1);
      const std::vector<float> w = random_floats(random, s.in * s.out, -1, 1);
      const std::vector<float> b = random_floats(random, s.out, -1, 1);
      std::vector<float> y(s.rows * s.out, 9.0f);
      kernels().affine_forward(x.data(), w.data(), b.data(), s.rows, s.in, s.out, relu, y.data());
      std::vector<double> expected(y.size());
      for (int64_t r = 0; r < s.rows; ++r) {
        for (int64_t o = 0; o < s.out; ++o) {
          double a = b[o];
          for (int64_t i = 0; i < s.in; ++i) a += double{x[r * s.in + i]} * w[i * s.out + o];
          expected[r * s.out + o] = relu && a < 0.0 ? 0.0 : a;
        }
      }
      expect_close(y, expected, s.in, "y");
    }
  }
}

TEST_P(DenseKernelsTest, AffineBackwardAddsParameterGradientsAndGivesInputGradient) {
  std::mt19937_64 random(72);
  for (const AffineShape s : kShapes) {
    SCOPED_TRACE(std::to_string(s.rows) + "x" + std::to_string(s.in) + "x" + std::to_string(s.out));
    const std::vector<float> x = random_floats(random, s.rows * s.in, -1, 1);
    const std::vector<float> w = random_floats(random, s.in * s.out, -1, 1);
    const std::vector<float> delta = random_floats(random, s.rows * s.out, -1, 1);
    // The gradients are added to what the arrays hold.
    std::vector<float> weight_gradient = random_floats(random, s.in * s.out, -1, 1);
    std::vector<float> bias_gradient = random_floats(random, s.out, -1, 1);
    std::vector<double> expected_weights(weight_gradient.begin(), weight_gradient.end());
    std::vector<double> expected_bias(bias_gradient.begin(), bias_gradient.end());
    std::vector<double> expected_input(s.rows * s.in, 0.0);
    for (int64_t r = 0; r < s.rows; ++r) {
      for (int64_t o = 0; o < s.out; ++o) {
        const double d = delta[r * s.out + o];
        expected_bias[o] += d;
        for (int64_t i = 0; i < s.in; ++i) {
          expected_weights[i * s.out + o] += double{x[r * s.in + i]} * d;
          expected_input[r * s.in + i] += d * w[i * s.out + o];
        }
      }
    }
    kernels().affine_parameter_gradients(x.data(), delta.data(), s.rows, s.in, s.out,
                                         weight_gradient.data(), bias_gradient.data());
    std::vector<float> input_gradient(s.rows * s.in, 9.0f);
    std::vector<float> w_transposed(w.size(), 9.0f);
    kernels().transpose(w.data(), s.in, s.out, w_transposed.data());
    for (int64_t i = 0; i < s.in; ++i) {
      for (int64_t o = 0; o < s.out; ++o) {
        ASSERT_EQ(w_transposed[o * s.in + i], w[i * s.out + o]) << i << ", " << o;
      }
    }
    kernels().affine_input_gradient(delta.data(), w_transposed.data(), s.rows, s.in, s.out,
                                    input_gradient.data());
    expect_close(weight_gradient, expected_weights, s.rows, "weight gradient");
    expect_close(bias_gradient, expected_bias, s.rows, "bias gradient");
    expect_close(input_gradient, expected_input, s.out, "input gradient");
  }
}

TEST_P(DenseKernelsTest, ReluGradientPassesWherePositiveAndAddSums) {
  std::mt19937_64 random(73);
  const std::vector<float> values = random_floats(random, 37, -1, 1);
  const std::vector<float> gradient = random_floats(random, 37, -1, 1);
  std::vector<float> out(37, 9.0f);
  kernels().relu_gradient(values.data(), gradient.data(), 37, out.data());
  std::vector<float> in_place = gradient;
  kernels().relu_gradient(values.data(), in_place.data(), 37, in_place.data());
  std::vector<float> sum = values;
  kernels().add(gradient.data(), 37, sum.data());
  for (size_t i = 0; i < 37; ++i) {
    EXPECT_EQ(out[i], values[i] > 0.0f ? gradient[i] : 0.0f) << i;
    EXPECT_EQ(in_place[i], out[i]) << i;
    EXPECT_EQ(sum[i], values[i] + gradient[i]) << i;
  }
}

TEST_P(DenseKernelsTest, AllFiniteFindsAnInfinityOrNanAnywhere) {
  std::mt19937_64 random(74);
  std::vector<float> values = random_floats(random, 37, -1e30f, 1e30f);
  values[5] = std::numeric_limits<float>::max();
  values[6] = std::numeric_limits<float>::denorm_min();
  EXPECT_TRUE(kernels().all_finite(values.data(), 37));
  EXPECT_TRUE(kernels().all_finite(values.data(), 0));
  for (const float bad :
       {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
        std::numeric_limits<float>::quiet_NaN()}) {
    for (size_t i = 0; i < values.size(); ++i) {
      std::vector<float> with_bad = values;
      with_bad[i] = bad;
      EXPECT_FALSE(kernels().all_finite(with_bad.data(), 37)) << bad << " at " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(InstructionSets, DenseKernelsTest,
                         ::testing::ValuesIn(supported_dense_isas()),
                         [](const ::testing::TestParamInfo<DenseIsa>& test_info) {
                           return std::string(dense_isa_name(test_info.param));
                         });

}  // namespace
}  // namespace recemb::dlrm
