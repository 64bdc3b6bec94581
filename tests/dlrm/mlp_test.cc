// Mlp against the float64 plain-loop reference (dense_reference.h): forward values, and backward
// against central differences of the reference for every parameter and every input, over a cross
// product of shapes, output activations and batch sizes.
#include "dlrm/mlp.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <gtest/gtest.h>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "recemb/error.h"

#include "dlrm/dense_reference.h"

namespace recemb::dlrm {
namespace {

using reference::central_difference;
using reference::random_floats;
using reference::to_double;

struct Shape {
  int64_t input_width;
  std::vector<int64_t> layer_widths;
};

// (shape, output activation, batch size, instruction set)
using MlpCase = std::tuple<Shape, OutputActivation, int64_t, DenseIsa>;

std::string case_name(const ::testing::TestParamInfo<MlpCase>& test_info) {
  const auto& [shape, activation, batch_size, isa] = test_info.param;
  std::string name = "in" + std::to_string(shape.input_width);
  for (const int64_t width : shape.layer_widths) name += "_" + std::to_string(width);
  name += activation == OutputActivation::kRelu ? "_relu" : "_identity";
  return name + "_batch" + std::to_string(batch_size) + "_" + std::string(dense_isa_name(isa));
}

class MlpTest : public ::testing::TestWithParam<MlpCase> {
 protected:
  MlpConfig config() const {
    const auto& [shape, activation, batch_size, isa] = GetParam();
    return {.name = "test_mlp",
            .input_width = shape.input_width,
            .layer_widths = shape.layer_widths,
            .output_activation = activation};
  }
  int64_t batch_size() const { return std::get<2>(GetParam()); }
  DenseIsa isa() const { return std::get<3>(GetParam()); }
  bool relu_output() const { return std::get<1>(GetParam()) == OutputActivation::kRelu; }

  // A network of config() with initialised parameters, a random input batch in [-2, 2] and a
  // random output gradient in [-1, 1], drawn in that order from `random`.
  struct Problem {
    Mlp mlp;
    std::vector<float> parameters, input, output_gradient;
  };
  Problem make_problem(std::mt19937_64& random) const {
    Problem problem{.mlp = Mlp(config(), isa())};
    Mlp& mlp = problem.mlp;
    problem.parameters.resize(static_cast<size_t>(mlp.num_parameters()));
    mlp.initialize(problem.parameters, random);
    problem.input =
        random_floats(random, static_cast<size_t>(batch_size() * mlp.input_width()), -2.0f, 2.0f);
    problem.output_gradient =
        random_floats(random, static_cast<size_t>(batch_size() * mlp.output_width()), -1.0f, 1.0f);
    return problem;
  }
};

TEST_P(MlpTest, ForwardMatchesReference) {
  const uint64_t seed = 11;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 random(seed);
  auto [mlp, parameters, input, output_gradient] = make_problem(random);

  const std::span<const float> output = mlp.forward(parameters, input);

  int64_t offset = 0;
  std::vector<bool> signs;
  const std::vector<double> expected =
      reference::mlp_forward(to_double(parameters), offset, to_double(input), mlp.input_width(),
                             mlp.config().layer_widths, relu_output(), signs);
  EXPECT_EQ(offset, mlp.num_parameters());
  ASSERT_EQ(output.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(output[i], expected[i], 1e-5 * (1.0 + std::abs(expected[i]))) << "output " << i;
  }
  EXPECT_EQ(mlp.output().data(), output.data());
  // Not all ReLUs dead or all alive: the mask is exercised (where there are enough of them).
  if (signs.size() >= 8) {
    EXPECT_NE(std::count(signs.begin(), signs.end(), true), 0);
    EXPECT_NE(std::count(signs.begin(), signs.end(), false), 0);
  }
}

// loss = sum(R * output) for a random R, so d(loss)/d(output) = R.
TEST_P(MlpTest, BackwardMatchesFiniteDifferencesOfReference) {
  const uint64_t seed = 12;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 random(seed);
  auto [mlp, parameters, input, output_gradient] = make_problem(random);

  mlp.forward(parameters, input);
  std::vector<float> parameter_gradients(parameters.size(), -7.0f);
  std::vector<float> input_gradient(input.size(), -7.0f);
  mlp.backward(parameters, input, output_gradient, parameter_gradients, input_gradient);

  std::vector<double> p = to_double(parameters);
  std::vector<double> x = to_double(input);
  const auto loss = [&](std::vector<bool>& signs) {
    int64_t offset = 0;
    const std::vector<double> y = reference::mlp_forward(
        p, offset, x, mlp.input_width(), mlp.config().layer_widths, relu_output(), signs);
    double sum = 0.0;
    for (size_t i = 0; i < y.size(); ++i) sum += output_gradient[i] * y[i];
    return sum;
  };
  int checked = 0;
  int kinks = 0;
  const auto expect_derivative = [&](double& variable, float analytic, const std::string& what) {
    bool kink = false;
    const double numeric = central_difference(loss, variable, 1e-6, kink);
    if (kink) {
      ++kinks;
      return;
    }
    ++checked;
    EXPECT_NEAR(analytic, numeric, 1e-4 * (1.0 + std::abs(numeric))) << what;
  };
  for (size_t i = 0; i < p.size(); ++i) {
    expect_derivative(p[i], parameter_gradients[i], "parameter " + std::to_string(i));
  }
  // Every input of small batches, 300 random ones of large batches.
  const bool sample = x.size() > 300;
  std::uniform_int_distribution<size_t> pick(0, x.size() - 1);
  for (size_t s = 0; s < (sample ? 300 : x.size()); ++s) {
    const size_t i = sample ? pick(random) : s;
    expect_derivative(x[i], input_gradient[i], "input " + std::to_string(i));
  }
  EXPECT_LE(kinks, checked / 20) << "too many finite differences across a ReLU kink";
}

TEST_P(MlpTest, BackwardWithoutInputGradientGivesTheSameParameterGradients) {
  std::mt19937_64 random(13);
  auto [mlp, parameters, input, output_gradient] = make_problem(random);
  mlp.forward(parameters, input);
  std::vector<float> with_input(parameters.size());
  std::vector<float> input_gradient(input.size());
  mlp.backward(parameters, input, output_gradient, with_input, input_gradient);
  std::vector<float> without_input(parameters.size());
  mlp.backward(parameters, input, output_gradient, without_input, {});
  EXPECT_EQ(with_input, without_input);
}

// A smaller batch after a larger one reuses the workspace; nothing of the larger batch leaks in.
TEST_P(MlpTest, ResultsDoNotDependOnEarlierBatches) {
  std::mt19937_64 random(14);
  const MlpConfig mlp_config = config();
  Mlp used(mlp_config, isa());
  std::vector<float> parameters(static_cast<size_t>(used.num_parameters()));
  used.initialize(parameters, random);
  const std::vector<float> large =
      random_floats(random, static_cast<size_t>(3 * batch_size() * used.input_width()), -2, 2);
  const std::vector<float> input =
      random_floats(random, static_cast<size_t>(batch_size() * used.input_width()), -2.0f, 2.0f);
  const std::vector<float> output_gradient =
      random_floats(random, static_cast<size_t>(batch_size() * used.output_width()), -1.0f, 1.0f);
  used.forward(parameters, large);
  std::vector<float> large_gradient(3 * output_gradient.size(), 0.5f);
  std::vector<float> scratch(parameters.size());
  used.backward(parameters, large, large_gradient, scratch, {});

  Mlp fresh(mlp_config, isa());
  const std::span<const float> fresh_forward = fresh.forward(parameters, input);
  const std::vector<float> fresh_output(fresh_forward.begin(), fresh_forward.end());
  const std::span<const float> used_output = used.forward(parameters, input);
  EXPECT_TRUE(
      std::equal(used_output.begin(), used_output.end(), fresh_output.begin(), fresh_output.end()));
  std::vector<float> fresh_gradients(parameters.size());
  std::vector<float> used_gradients(parameters.size());
  std::vector<float> fresh_input_gradient(input.size());
  std::vector<float> used_input_gradient(input.size());
  fresh.backward(parameters, input, output_gradient, fresh_gradients, fresh_input_gradient);
  used.backward(parameters, input, output_gradient, used_gradients, used_input_gradient);
  EXPECT_EQ(used_gradients, fresh_gradients);
  EXPECT_EQ(used_input_gradient, fresh_input_gradient);
}

// The same data at every alignment gives bitwise the same results (exact resume and data-parallel
// replicas rely on it; Eigen picks SIMD or scalar code per element by alignment).
TEST_P(MlpTest, ResultsDoNotDependOnArrayAlignment) {
  std::mt19937_64 random(15);
  auto [mlp, parameters, input, output_gradient] = make_problem(random);
  std::vector<float> first_output;
  std::vector<float> first_gradients;
  std::vector<float> first_input_gradient;
  std::vector<float> storage[5];
  for (int shift = 0; shift < reference::kNumShifts; ++shift) {
    SCOPED_TRACE("shift " + std::to_string(shift));
    const std::span<float> p = reference::place(storage[0], parameters, shift);
    const std::span<float> x = reference::place(storage[1], input, (shift * 7) % 16);
    const std::span<float> dy = reference::place(storage[2], output_gradient, (shift * 3) % 16);
    const std::vector<float> zeros(parameters.size());
    const std::span<float> gradients = reference::place(storage[3], zeros, (shift * 5) % 16);
    const std::vector<float> input_zeros(input.size());
    const std::span<float> input_gradient =
        reference::place(storage[4], input_zeros, (shift * 11) % 16);
    const std::span<const float> output = mlp.forward(p, x);
    mlp.backward(p, x, dy, gradients, input_gradient);
    if (shift == 0) {
      first_output.assign(output.begin(), output.end());
      first_gradients.assign(gradients.begin(), gradients.end());
      first_input_gradient.assign(input_gradient.begin(), input_gradient.end());
      continue;
    }
    EXPECT_TRUE(std::equal(output.begin(), output.end(), first_output.begin(), first_output.end()));
    EXPECT_TRUE(std::equal(gradients.begin(), gradients.end(), first_gradients.begin(),
                           first_gradients.end()));
    EXPECT_TRUE(std::equal(input_gradient.begin(), input_gradient.end(),
                           first_input_gradient.begin(), first_input_gradient.end()));
  }
}

// Any thread count gives bitwise the results of the caller's thread alone (the batch's blocks
// and the order of their sums do not depend on it).
TEST_P(MlpTest, ResultsDoNotDependOnThreadCount) {
  std::mt19937_64 random(16);
  auto [mlp, parameters, input, output_gradient] = make_problem(random);
  const std::span<const float> serial_forward = mlp.forward(parameters, input);
  const std::vector<float> serial_output(serial_forward.begin(), serial_forward.end());
  std::vector<float> serial_gradients(parameters.size());
  std::vector<float> serial_input_gradient(input.size());
  mlp.backward(parameters, input, output_gradient, serial_gradients, serial_input_gradient);
  for (const int num_threads : {1, 2, 3}) {
    SCOPED_TRACE(std::to_string(num_threads) + " threads");
    support::ThreadPool pool(num_threads);
    Mlp threaded(config(), isa());
    const std::span<const float> output = threaded.forward(parameters, input, &pool);
    EXPECT_TRUE(
        std::equal(output.begin(), output.end(), serial_output.begin(), serial_output.end()));
    std::vector<float> gradients(parameters.size());
    std::vector<float> input_gradient(input.size());
    threaded.backward(parameters, input, output_gradient, gradients, input_gradient, &pool);
    EXPECT_EQ(gradients, serial_gradients);
    EXPECT_EQ(input_gradient, serial_input_gradient);
  }
}

// The steps of forward and backward, blocks run in reverse order on two workers, give bitwise the
// results of forward and backward.
TEST_P(MlpTest, StepsByBlockGiveTheWholeBatchsResults) {
  std::mt19937_64 random(17);
  auto [mlp, parameters, input, output_gradient] = make_problem(random);
  const std::span<const float> whole_forward = mlp.forward(parameters, input);
  const std::vector<float> whole_output(whole_forward.begin(), whole_forward.end());
  std::vector<float> whole_gradients(parameters.size());
  std::vector<float> whole_input_gradient(input.size());
  mlp.backward(parameters, input, output_gradient, whole_gradients, whole_input_gradient);

  Mlp stepped(config(), isa());
  const int64_t num_blocks = Mlp::num_blocks(batch_size());
  stepped.start_forward(batch_size());
  for (int64_t block = num_blocks; block-- > 0;) stepped.forward_block(parameters, input, block);
  EXPECT_EQ(std::vector<float>(stepped.output().begin(), stepped.output().end()), whole_output);
  std::vector<float> gradients(parameters.size(), 9.0f);
  std::vector<float> input_gradient(input.size(), 9.0f);
  stepped.start_backward(parameters, true, 2);
  for (int64_t block = num_blocks; block-- > 0;) {
    stepped.backward_block(input, output_gradient, input_gradient, block,
                           static_cast<int>(block % 2));
  }
  stepped.finish_backward(gradients, nullptr);
  EXPECT_EQ(gradients, whole_gradients);
  EXPECT_EQ(input_gradient, whole_input_gradient);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MlpTest,
    ::testing::Combine(::testing::Values(Shape{1, {1}}, Shape{5, {3}}, Shape{4, {6, 3}},
                                         Shape{13, {8, 5, 4}}, Shape{7, {9, 1}}),
                       ::testing::Values(OutputActivation::kRelu, OutputActivation::kIdentity),
                       // 300 rows span two row blocks of the Mlp, the second partial.
                       ::testing::Values(int64_t{1}, int64_t{6}, int64_t{300}),
                       // Every instruction set this CPU runs (dense_isa.h).
                       ::testing::ValuesIn(supported_dense_isas())),
    case_name);

TEST(MlpLayoutTest, ParameterBlocksCoverTheLayoutInOrder) {
  const Mlp mlp({.name = "bottom_mlp", .input_width = 13, .layer_widths = {64, 16}},
                DenseIsa::kBaseline);
  EXPECT_EQ(mlp.num_parameters(), 13 * 64 + 64 + 64 * 16 + 16);
  EXPECT_EQ(mlp.output_width(), 16);
  const std::vector<ParameterBlock> blocks = mlp.parameter_blocks(100);
  ASSERT_EQ(blocks.size(), 4u);
  const std::vector<std::string> names = {"bottom_mlp/layer_0/weights", "bottom_mlp/layer_0/bias",
                                          "bottom_mlp/layer_1/weights", "bottom_mlp/layer_1/bias"};
  const std::vector<std::vector<int64_t>> shapes = {{13, 64}, {64}, {64, 16}, {16}};
  int64_t offset = 100;
  for (size_t i = 0; i < blocks.size(); ++i) {
    EXPECT_EQ(blocks[i].name, names[i]);
    EXPECT_EQ(blocks[i].shape, shapes[i]);
    EXPECT_EQ(blocks[i].offset, offset);
    int64_t size = 1;
    for (int64_t extent : blocks[i].shape) size *= extent;
    offset += size;
  }
  EXPECT_EQ(offset, 100 + mlp.num_parameters());
}

TEST(MlpInitializeTest, GlorotUniformWeightsAndUniformBiasesFromTheSeed) {
  const Mlp mlp({.name = "m", .input_width = 40, .layer_widths = {60, 20}}, DenseIsa::kBaseline);
  std::vector<float> parameters(static_cast<size_t>(mlp.num_parameters()));
  std::mt19937_64 random(5);
  mlp.initialize(parameters, random);

  for (const ParameterBlock& block : mlp.parameter_blocks(0)) {
    SCOPED_TRACE(block.name);
    const bool weights = block.shape.size() == 2;
    const double limit = weights
                             ? std::sqrt(6.0 / static_cast<double>(block.shape[0] + block.shape[1]))
                             : std::sqrt(3.0 / static_cast<double>(block.shape[0]));
    const int64_t size = weights ? block.shape[0] * block.shape[1] : block.shape[0];
    double sum_of_squares = 0.0;
    double largest = 0.0;
    for (int64_t i = 0; i < size; ++i) {
      const double v = parameters[block.offset + i];
      ASSERT_LE(std::abs(v), limit);
      sum_of_squares += v * v;
      largest = std::max(largest, std::abs(v));
    }
    // U(-limit, limit) has variance limit^2 / 3; the sample variance is within a few percent for
    // thousands of draws (looser for the 20 and 60 biases).
    const double variance = sum_of_squares / static_cast<double>(size);
    EXPECT_NEAR(variance, limit * limit / 3.0, (weights ? 0.06 : 0.4) * limit * limit / 3.0);
    EXPECT_GT(largest, 0.8 * limit);
  }

  std::vector<float> same(parameters.size());
  std::mt19937_64 same_random(5);
  mlp.initialize(same, same_random);
  EXPECT_EQ(same, parameters);
  std::vector<float> other(parameters.size());
  std::mt19937_64 other_random(6);
  mlp.initialize(other, other_random);
  EXPECT_NE(other, parameters);
}

TEST(MlpErrorTest, ConfigErrorsNameTheMlpFieldAndValue) {
  const auto expect_error = [](const MlpConfig& config, const std::string& fragment) {
    try {
      const Mlp mlp(config, DenseIsa::kBaseline);
      ADD_FAILURE() << "no error; expected one mentioning '" << fragment << "'";
    } catch (const InvalidArgument& error) {
      EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
      EXPECT_NE(std::string(error.what()).find("my_mlp"), std::string::npos) << error.what();
    }
  };
  expect_error({.name = "my_mlp", .input_width = 0, .layer_widths = {4}}, "input_width = 0");
  expect_error({.name = "my_mlp", .input_width = 3, .layer_widths = {}}, "layer_widths is empty");
  expect_error({.name = "my_mlp", .input_width = 3, .layer_widths = {4, 0, 2}},
               "layer_widths[1] = 0");
  expect_error({.name = "my_mlp", .input_width = 3, .layer_widths = {-2}}, "layer_widths[0] = -2");
}

TEST(MlpErrorTest, WrongSizesThrowAndWriteNothing) {
  Mlp mlp({.name = "my_mlp", .input_width = 3, .layer_widths = {4, 2}}, DenseIsa::kBaseline);
  std::mt19937_64 random(21);
  std::vector<float> parameters(static_cast<size_t>(mlp.num_parameters()));
  mlp.initialize(parameters, random);
  const std::vector<float> input = random_floats(random, 6, -1.0f, 1.0f);  // a batch of 2
  const std::vector<float> output_gradient = random_floats(random, 4, -1.0f, 1.0f);
  std::vector<float> gradients(parameters.size(), -7.0f);
  std::vector<float> input_gradient(input.size(), -7.0f);
  const std::vector<float> untouched(parameters.size(), -7.0f);

  const auto expect_message = [](auto&& call, const std::string& fragment) {
    try {
      call();
      ADD_FAILURE() << "no error; expected one mentioning '" << fragment << "'";
    } catch (const std::exception& error) {
      EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
    }
  };
  // A backward before any forward.
  EXPECT_THROW(mlp.backward(parameters, input, output_gradient, gradients, input_gradient),
               FailedPrecondition);
  EXPECT_EQ(gradients, untouched);

  EXPECT_THROW(mlp.forward(std::span(parameters).first(5), input), InvalidArgument);
  expect_message([&] { mlp.forward(parameters, std::span(input).first(5)); },
                 "input has 5 floats; expected a positive multiple of input_width 3");
  EXPECT_THROW(mlp.forward(parameters, {}), InvalidArgument);
  EXPECT_TRUE(mlp.output().empty());

  mlp.forward(parameters, input);
  expect_message(
      [&] {
        mlp.backward(parameters, input, std::span(output_gradient).first(3), gradients,
                     input_gradient);
      },
      "output_gradient has 3 floats; expected 4");
  expect_message(
      [&] {
        mlp.backward(parameters, input, output_gradient, std::span(gradients).first(4),
                     input_gradient);
      },
      "parameter_gradients has 4 floats");
  expect_message(
      [&] {
        mlp.backward(parameters, input, output_gradient, gradients,
                     std::span(input_gradient).first(2));
      },
      "input_gradient has 2 floats");
  // A batch of 1 after a forward over 2.
  EXPECT_THROW(mlp.backward(parameters, std::span(input).first(3),
                            std::span(output_gradient).first(2), gradients, {}),
               FailedPrecondition);
  EXPECT_EQ(gradients, untouched);
  EXPECT_EQ(input_gradient, std::vector<float>(input.size(), -7.0f));
}

}  // namespace
}  // namespace recemb::dlrm
