// The products libxsmm generates (jit_product.h), for each instruction set this CPU runs: against
// float64 plain loops on random inputs, plain and transposed left operands, = and +=; bitwise the
// same results wherever the arrays lie; one kernel per shape however many threads ask at once.
#include "dlrm/jit_product.h"

#include <climits>
#include <cstdint>
#include <gtest/gtest.h>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dlrm/dense_isa.h"
#include "dlrm/dense_reference.h"

namespace recemb::dlrm {
namespace {

using reference::random_floats;

// The generated instruction sets this CPU runs.
std::vector<JitIsa> jit_isas() {
  std::vector<JitIsa> isas;
  for (const DenseIsa isa : supported_dense_isas()) {
    if (isa == DenseIsa::kAvx2) isas.push_back(JitIsa::kAvx2);
    if (isa == DenseIsa::kAvx512) isas.push_back(JitIsa::kAvx512);
  }
  return isas;
}

std::string jit_isa_name(const ::testing::TestParamInfo<JitIsa>& info) {
  return info.param == JitIsa::kAvx512 ? "avx512" : "avx2";
}

class JitProductTest : public ::testing::TestWithParam<JitIsa> {};
INSTANTIATE_TEST_SUITE_P(InstructionSets, JitProductTest, ::testing::ValuesIn(jit_isas()),
                         jit_isa_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(JitProductTest);

// (rows, columns, depth): a single element, sizes that leave partial vector registers, and the
// trainer's shapes (a block of 256 rows of DLRM's top layer, 367 -> 64).
constexpr int64_t kShapes[][3] = {{1, 1, 1},   {3, 8, 5},      {37, 17, 13},
                                  {2, 33, 70}, {256, 64, 367}, {64, 367, 256}};

// out (= or +=) op(left) right in float64, op(left)[r, d] = left[d * rows + r] when transposed.
std::vector<double> reference_product(const ProductShape& s, const std::vector<float>& left,
                                      const std::vector<float>& right,
                                      const std::vector<float>& out) {
  std::vector<double> expected(out.size());
  for (int64_t r = 0; r < s.rows; ++r) {
    for (int64_t c = 0; c < s.columns; ++c) {
      double sum = s.accumulate ? double{out[r * s.columns + c]} : 0.0;
      for (int64_t d = 0; d < s.depth; ++d) {
        const double l = s.transpose_left ? left[d * s.rows + r] : left[r * s.depth + d];
        sum += l * right[d * s.columns + c];
      }
      expected[r * s.columns + c] = sum;
    }
  }
  return expected;
}

TEST_P(JitProductTest, MatchesFloat64ProductsOfRandomMatrices) {
  std::mt19937_64 random(91);
  for (const auto& [rows, columns, depth] : kShapes) {
    for (const bool transpose_left : {false, true}) {
      for (const bool accumulate : {false, true}) {
        const ProductShape shape = {.rows = rows,
                                    .columns = columns,
                                    .depth = depth,
                                    .transpose_left = transpose_left,
                                    .accumulate = accumulate};
        SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(columns) + "x" +
                     std::to_string(depth) + (transpose_left ? " transposed" : "") +
                     (accumulate ? " +=" : " ="));
        const ProductKernel kernel = product_kernel(GetParam(), shape);
        ASSERT_TRUE(kernel);
        const std::vector<float> left = random_floats(random, rows * depth, -1, 1);
        const std::vector<float> right = random_floats(random, depth * columns, -1, 1);
        std::vector<float> out = random_floats(random, rows * columns, -1, 1);
        const std::vector<double> expected = reference_product(shape, left, right, out);
        kernel(left.data(), right.data(), out.data());
        for (size_t i = 0; i < out.size(); ++i) {
          ASSERT_NEAR(out[i], expected[i], 1e-6 * static_cast<double>(depth + 1)) << i;
        }
      }
    }
  }
}

TEST_P(JitProductTest, ResultsAreBitwiseTheSameWhereverTheArraysLie) {
  std::mt19937_64 random(92);
  const ProductShape shape = {
      .rows = 37, .columns = 40, .depth = 29, .transpose_left = true, .accumulate = true};
  const ProductKernel kernel = product_kernel(GetParam(), shape);
  ASSERT_TRUE(kernel);
  const std::vector<float> left = random_floats(random, 37 * 29, -1, 1);
  const std::vector<float> right = random_floats(random, 29 * 40, -1, 1);
  const std::vector<float> out = random_floats(random, 37 * 40, -1, 1);
  std::vector<float> first(out);
  kernel(left.data(), right.data(), first.data());
  std::vector<float> left_storage, right_storage, out_storage;
  for (int shift = 1; shift < reference::kNumShifts; ++shift) {
    const std::span<float> placed_left = reference::place(left_storage, left, shift);
    const std::span<float> placed_right =
        reference::place(right_storage, right, (shift * 7) % reference::kNumShifts);
    const std::span<float> placed_out =
        reference::place(out_storage, out, (shift * 3) % reference::kNumShifts);
    kernel(placed_left.data(), placed_right.data(), placed_out.data());
    ASSERT_TRUE(std::equal(first.begin(), first.end(), placed_out.begin())) << "shift " << shift;
  }
}

TEST_P(JitProductTest, EachShapeHasOneKernelWhateverTheThreadsAskingAtOnce) {
  const ProductShape shape = {.rows = 19, .columns = 23, .depth = 31};
  constexpr int kThreads = 4;
  std::vector<std::vector<float>> outputs(kThreads, std::vector<float>(19 * 23, 0.0f));
  std::vector<ProductKernel> kernels(kThreads);
  std::mt19937_64 random(93);
  const std::vector<float> left = random_floats(random, 19 * 31, -1, 1);
  const std::vector<float> right = random_floats(random, 31 * 23, -1, 1);
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        kernels[t] = product_kernel(GetParam(), shape);
        if (kernels[t]) kernels[t](left.data(), right.data(), outputs[t].data());
      });
    }
  }
  const std::vector<double> expected =
      reference_product(shape, left, right, std::vector<float>(19 * 23, 0.0f));
  ASSERT_TRUE(kernels[0]);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(kernels[t], kernels[0]);
    EXPECT_EQ(kernels[t], product_kernel(GetParam(), shape));
    for (size_t i = 0; i < expected.size(); ++i) ASSERT_NEAR(outputs[t][i], expected[i], 3.2e-5);
    EXPECT_EQ(outputs[t], outputs[0]);
  }
}

TEST(JitProductShapes, SizesBeyondTheGeneratorsAreRefusedAsEmptyKernels) {
  for (const JitIsa isa : jit_isas()) {
    EXPECT_FALSE(product_kernel(isa, {.rows = 0, .columns = 4, .depth = 4}));
    EXPECT_FALSE(product_kernel(isa, {.rows = 4, .columns = -1, .depth = 4}));
    EXPECT_FALSE(product_kernel(isa, {.rows = 4, .columns = 4, .depth = int64_t{INT_MAX} + 1}));
  }
}

}  // namespace
}  // namespace recemb::dlrm
