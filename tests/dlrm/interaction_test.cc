// DotInteraction against the float64 plain-loop reference (dense_reference.h): the output layout
// on a hand-computed example, forward values, and backward against central differences of the
// reference, over numbers of embeddings, dims and batch sizes.
#include "dlrm/interaction.h"

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

struct Inputs {
  std::vector<float> bottom;
  std::vector<std::vector<float>> embeddings;

  std::vector<std::span<const float>> views() const {
    return {embeddings.begin(), embeddings.end()};
  }
  std::vector<std::vector<double>> embeddings_double() const {
    std::vector<std::vector<double>> result;
    for (const std::vector<float>& e : embeddings) result.push_back(to_double(e));
    return result;
  }
};

Inputs random_inputs(std::mt19937_64& random, int64_t num_embeddings, int64_t dim,
                     int64_t batch_size) {
  Inputs inputs;
  const size_t size = static_cast<size_t>(batch_size * dim);
  inputs.bottom = random_floats(random, size, -1.0f, 1.0f);
  for (int64_t f = 0; f < num_embeddings; ++f) {
    inputs.embeddings.push_back(random_floats(random, size, -1.0f, 1.0f));
  }
  return inputs;
}

TEST(DotInteractionTest, OutputIsBottomThenLowerTrianglePairsInRowMajorOrder) {
  // T0 = (1, 2), T1 = (3, 4), T2 = (5, 6): <T1,T0> = 11, <T2,T0> = 17, <T2,T1> = 39.
  for (const DenseIsa isa : supported_dense_isas()) {
    SCOPED_TRACE(dense_isa_name(isa));
    DotInteraction interaction(2, 2, isa);
    EXPECT_EQ(interaction.output_width(), 2 + 3);
    const std::vector<float> bottom = {1, 2};
    const std::vector<float> e1 = {3, 4};
    const std::vector<float> e2 = {5, 6};
    const std::vector<std::span<const float>> embeddings = {e1, e2};
    std::vector<float> output(5);
    interaction.forward(bottom, embeddings, output);
    EXPECT_EQ(output, (std::vector<float>{1, 2, 11, 17, 39}));
  }
}

TEST(DotInteractionTest, OutputWidthIsDimPlusPairs) {
  EXPECT_EQ(DotInteraction(26, 16, DenseIsa::kBaseline).output_width(), 16 + 351);
  EXPECT_EQ(DotInteraction(0, 8, DenseIsa::kBaseline).output_width(), 8);
  EXPECT_EQ(DotInteraction::output_width(1, 3), 3 + 1);
}

// (num_embeddings, dim, batch_size, instruction set)
using ShapeCase = std::tuple<int64_t, int64_t, int64_t, DenseIsa>;

std::string shape_name(const ::testing::TestParamInfo<ShapeCase>& test_info) {
  const auto [num_embeddings, dim, batch_size, isa] = test_info.param;
  return "embeddings" + std::to_string(num_embeddings) + "_dim" + std::to_string(dim) + "_batch" +
         std::to_string(batch_size) + "_" + std::string(dense_isa_name(isa));
}

class DotInteractionShapeTest : public ::testing::TestWithParam<ShapeCase> {};

TEST_P(DotInteractionShapeTest, ForwardMatchesReference) {
  const auto [num_embeddings, dim, batch_size, isa] = GetParam();
  const uint64_t seed = 31;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 random(seed);
  const Inputs inputs = random_inputs(random, num_embeddings, dim, batch_size);
  DotInteraction interaction(num_embeddings, dim, isa);
  std::vector<float> output(static_cast<size_t>(batch_size * interaction.output_width()), -7.0f);
  interaction.forward(inputs.bottom, inputs.views(), output);

  const std::vector<double> expected =
      reference::interaction_forward(to_double(inputs.bottom), inputs.embeddings_double(), dim);
  ASSERT_EQ(output.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(output[i], expected[i], 1e-5 * (1.0 + std::abs(expected[i]))) << "output " << i;
  }
}

// loss = sum(R * output) for a random R, so d(loss)/d(output) = R.
TEST_P(DotInteractionShapeTest, BackwardMatchesFiniteDifferencesOfReference) {
  const auto [num_embeddings, dim, batch_size, isa] = GetParam();
  const uint64_t seed = 32;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 random(seed);
  const Inputs inputs = random_inputs(random, num_embeddings, dim, batch_size);
  DotInteraction interaction(num_embeddings, dim, isa);
  const std::vector<float> output_gradient = random_floats(
      random, static_cast<size_t>(batch_size * interaction.output_width()), -1.0f, 1.0f);
  std::vector<float> bottom_gradient(inputs.bottom.size(), -7.0f);
  std::vector<std::vector<float>> embedding_gradients(
      static_cast<size_t>(num_embeddings), std::vector<float>(inputs.bottom.size(), -7.0f));
  const std::vector<std::span<float>> gradient_views(embedding_gradients.begin(),
                                                     embedding_gradients.end());
  interaction.backward(inputs.bottom, inputs.views(), output_gradient, bottom_gradient,
                       gradient_views);

  std::vector<double> z = to_double(inputs.bottom);
  std::vector<std::vector<double>> e = inputs.embeddings_double();
  const auto loss = [&](std::vector<bool>&) {
    const std::vector<double> y = reference::interaction_forward(z, e, dim);
    double sum = 0.0;
    for (size_t i = 0; i < y.size(); ++i) sum += output_gradient[i] * y[i];
    return sum;
  };
  bool kink = false;  // the interaction has no kinks
  for (size_t i = 0; i < z.size(); ++i) {
    EXPECT_NEAR(bottom_gradient[i], central_difference(loss, z[i], 1e-4, kink), 1e-4)
        << "bottom " << i;
  }
  for (size_t f = 0; f < e.size(); ++f) {
    for (size_t i = 0; i < e[f].size(); ++i) {
      EXPECT_NEAR(embedding_gradients[f][i], central_difference(loss, e[f][i], 1e-4, kink), 1e-4)
          << "embedding " << f << " value " << i;
    }
  }
}

TEST_P(DotInteractionShapeTest, ResultsDoNotDependOnArrayAlignment) {
  const auto [num_embeddings, dim, batch_size, isa] = GetParam();
  std::mt19937_64 random(34);
  const Inputs inputs = random_inputs(random, num_embeddings, dim, batch_size);
  DotInteraction interaction(num_embeddings, dim, isa);
  const size_t width = static_cast<size_t>(interaction.output_width());
  const std::vector<float> output_gradient =
      random_floats(random, static_cast<size_t>(batch_size) * width, -1.0f, 1.0f);
  std::vector<float> first;  // output, bottom gradient, embedding gradients, concatenated
  for (int shift = 0; shift < reference::kNumShifts; ++shift) {
    SCOPED_TRACE("shift " + std::to_string(shift));
    std::vector<std::vector<float>> storage(3 + 2 * inputs.embeddings.size());
    const std::span<float> bottom = reference::place(storage[0], inputs.bottom, shift);
    const std::span<float> d_output =
        reference::place(storage[1], output_gradient, (shift * 3) % 16);
    std::vector<std::span<const float>> embeddings;
    std::vector<std::span<float>> embedding_gradients;
    for (size_t f = 0; f < inputs.embeddings.size(); ++f) {
      embeddings.push_back(reference::place(storage[3 + 2 * f], inputs.embeddings[f],
                                            (shift + static_cast<int>(f)) % 16));
      embedding_gradients.push_back(reference::place(storage[4 + 2 * f], inputs.bottom,
                                                     (shift * 5 + static_cast<int>(f)) % 16));
    }
    const std::vector<float> zeros(output_gradient.size());
    const std::span<float> output = reference::place(storage[2], zeros, (shift * 7) % 16);
    std::vector<float> bottom_gradient(inputs.bottom.size());
    interaction.forward(bottom, embeddings, output);
    interaction.backward(bottom, embeddings, d_output, bottom_gradient, embedding_gradients);

    std::vector<float> results(output.begin(), output.end());
    results.insert(results.end(), bottom_gradient.begin(), bottom_gradient.end());
    for (const std::span<float> g : embedding_gradients)
      results.insert(results.end(), g.begin(), g.end());
    if (shift == 0) {
      first = results;
    } else {
      EXPECT_EQ(results, first);
    }
  }
}

// The output, the bottom gradient and the embedding gradients that compute(output,
// bottom_gradient, embedding_gradients) writes into fresh buffers for `inputs`, concatenated.
template <class Compute>
std::vector<float> interaction_results(const Inputs& inputs, size_t output_size, Compute compute) {
  std::vector<float> output(output_size);
  std::vector<float> bottom_gradient(inputs.bottom.size());
  std::vector<std::vector<float>> embedding_gradients(inputs.embeddings.size(),
                                                      std::vector<float>(inputs.bottom.size()));
  const std::vector<std::span<float>> gradient_views(embedding_gradients.begin(),
                                                     embedding_gradients.end());
  compute(std::span<float>(output), std::span<float>(bottom_gradient),
          std::span<const std::span<float>>(gradient_views));
  std::vector<float> results = output;
  results.insert(results.end(), bottom_gradient.begin(), bottom_gradient.end());
  for (const std::vector<float>& g : embedding_gradients) {
    results.insert(results.end(), g.begin(), g.end());
  }
  return results;
}

// Forward and backward on 1, 2 and 3 threads give bitwise the results of the caller's thread
// alone, for a batch of several tasks ending in a partial block of examples.
class DotInteractionThreadTest : public ::testing::TestWithParam<DenseIsa> {};

TEST_P(DotInteractionThreadTest, ResultsDoNotDependOnThreadCount) {
  const int64_t num_embeddings = 26;
  const int64_t dim = 16;
  const int64_t batch_size = 203;
  std::mt19937_64 random(35);
  const Inputs inputs = random_inputs(random, num_embeddings, dim, batch_size);
  const size_t width = static_cast<size_t>(DotInteraction::output_width(num_embeddings, dim));
  const std::vector<float> output_gradient =
      random_floats(random, static_cast<size_t>(batch_size) * width, -1.0f, 1.0f);
  const auto run = [&](support::ThreadPool* pool) {
    DotInteraction interaction(num_embeddings, dim, GetParam());
    return interaction_results(inputs, output_gradient.size(),
                               [&](std::span<float> output, std::span<float> bottom_gradient,
                                   std::span<const std::span<float>> embedding_gradients) {
                                 interaction.forward(inputs.bottom, inputs.views(), output, pool);
                                 interaction.backward(inputs.bottom, inputs.views(),
                                                      output_gradient, bottom_gradient,
                                                      embedding_gradients, pool);
                               });
  };
  const std::vector<float> serial = run(nullptr);
  for (const int num_threads : {1, 2, 3}) {
    support::ThreadPool pool(num_threads);
    EXPECT_EQ(run(&pool), serial) << num_threads << " threads";
  }
}

// forward_rows and backward_rows over ranges of any length, run in reverse order on two workers'
// scratch, give bitwise the results of forward and backward over the batch.
TEST_P(DotInteractionThreadTest, RowRangesGiveTheWholeBatchsResults) {
  const int64_t num_embeddings = 5;
  const int64_t dim = 20;
  const int64_t batch_size = 203;
  std::mt19937_64 random(36);
  const Inputs inputs = random_inputs(random, num_embeddings, dim, batch_size);
  const size_t width = static_cast<size_t>(DotInteraction::output_width(num_embeddings, dim));
  const std::vector<float> output_gradient =
      random_floats(random, static_cast<size_t>(batch_size) * width, -1.0f, 1.0f);
  const auto run = [&](bool by_ranges) {
    DotInteraction interaction(num_embeddings, dim, GetParam());
    return interaction_results(
        inputs, output_gradient.size(),
        [&](std::span<float> output, std::span<float> bottom_gradient,
            std::span<const std::span<float>> embedding_gradients) {
          if (!by_ranges) {
            interaction.forward(inputs.bottom, inputs.views(), output);
            interaction.backward(inputs.bottom, inputs.views(), output_gradient, bottom_gradient,
                                 embedding_gradients);
            return;
          }
          interaction.reserve_workers(2);
          // [0, 7), [7, 40), [40, 203): a partial block, blocks across range ends, a long range.
          const int64_t starts[] = {0, 7, 40, batch_size};
          for (int r = 2; r >= 0; --r) {
            interaction.forward_rows(inputs.bottom, inputs.views(), starts[r],
                                     starts[r + 1] - starts[r], output, r % 2);
          }
          for (int r = 2; r >= 0; --r) {
            interaction.backward_rows(inputs.bottom, inputs.views(), output_gradient,
                                      bottom_gradient, embedding_gradients, starts[r],
                                      starts[r + 1] - starts[r], r % 2);
          }
        });
  };
  EXPECT_EQ(run(true), run(false));
}

INSTANTIATE_TEST_SUITE_P(Shapes, DotInteractionShapeTest,
                         ::testing::Combine(::testing::Values(int64_t{0}, int64_t{1}, int64_t{3},
                                                              int64_t{26}),
                                            // 5: a block of 4 columns and a single one.
                                            ::testing::Values(int64_t{1}, int64_t{5}, int64_t{16}),
                                            ::testing::Values(int64_t{1}, int64_t{5}),
                                            ::testing::ValuesIn(supported_dense_isas())),
                         shape_name);
// Whole blocks of examples and a partial one (37), moved into and out of the lane layout by
// register-transposed tiles of 16 (AVX-512) or 8 (AVX2) columns and the rest one by one: dims 16
// and 20, and the 21 pairs of 7 vectors.
INSTANTIATE_TEST_SUITE_P(Tiles, DotInteractionShapeTest,
                         ::testing::Combine(::testing::Values(int64_t{6}),
                                            ::testing::Values(int64_t{16}, int64_t{20}),
                                            ::testing::Values(int64_t{37}),
                                            ::testing::ValuesIn(supported_dense_isas())),
                         shape_name);
INSTANTIATE_TEST_SUITE_P(InstructionSets, DotInteractionThreadTest,
                         ::testing::ValuesIn(supported_dense_isas()),
                         [](const ::testing::TestParamInfo<DenseIsa>& test_info) {
                           return std::string(dense_isa_name(test_info.param));
                         });

TEST(DotInteractionErrorTest, BadConfigurationThrows) {
  EXPECT_THROW(DotInteraction(-1, 4, DenseIsa::kBaseline), InvalidArgument);
  try {
    DotInteraction(3, 0, DenseIsa::kBaseline);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("dim = 0"), std::string::npos) << error.what();
  }
}

TEST(DotInteractionErrorTest, WrongSizesThrowAndWriteNothing) {
  std::mt19937_64 random(33);
  const Inputs inputs = random_inputs(random, 2, 3, 4);
  DotInteraction interaction(2, 3, DenseIsa::kBaseline);
  const std::vector<std::span<const float>> embeddings = inputs.views();
  const auto expect_message = [](auto&& call, const std::string& fragment) {
    try {
      call();
      ADD_FAILURE() << "no error; expected one mentioning '" << fragment << "'";
    } catch (const InvalidArgument& error) {
      EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
    }
  };
  std::vector<float> output(static_cast<size_t>(4 * interaction.output_width()), -7.0f);
  const std::vector<float> untouched = output;
  expect_message(
      [&] { interaction.forward(std::span(inputs.bottom).first(10), embeddings, output); },
      "bottom has 10 floats");
  expect_message(
      [&] { interaction.forward(inputs.bottom, std::span(embeddings).first(1), output); },
      "embeddings (spans) has size 1; expected 2");
  const std::vector<std::span<const float>> short_embedding = {embeddings[0],
                                                               embeddings[1].first(9)};
  expect_message([&] { interaction.forward(inputs.bottom, short_embedding, output); },
                 "embeddings[1] has size 9; expected 12");
  expect_message(
      [&] { interaction.forward(inputs.bottom, embeddings, std::span(output).first(8)); },
      "output has size 8");
  EXPECT_EQ(output, untouched);

  std::vector<float> bottom_gradient(inputs.bottom.size(), -7.0f);
  std::vector<float> g0(12, -7.0f);
  std::vector<float> g1(12, -7.0f);
  const std::vector<std::span<float>> gradients = {g0, g1};
  const std::vector<std::span<float>> short_gradient = {g0, std::span(g1).first(11)};
  expect_message(
      [&] {
        interaction.backward(inputs.bottom, embeddings, output, bottom_gradient, short_gradient);
      },
      "embedding_gradients[1] has size 11");
  expect_message(
      [&] {
        interaction.backward(inputs.bottom, embeddings, std::span(output).first(3), bottom_gradient,
                             gradients);
      },
      "output_gradient has size 3");
  expect_message(
      [&] {
        interaction.backward(inputs.bottom, embeddings, output, std::span(bottom_gradient).first(2),
                             gradients);
      },
      "bottom_gradient has size 2");
  EXPECT_EQ(bottom_gradient, std::vector<float>(12, -7.0f));
  EXPECT_EQ(g0, std::vector<float>(12, -7.0f));
  EXPECT_EQ(g1, std::vector<float>(12, -7.0f));
}

}  // namespace
}  // namespace recemb::dlrm
