// DenseOptimizer against float64 plain loops of the equations in dense_optimizer.h, over several
// steps with random parameters and gradients (constant and scheduled learning rates, a restored
// step), the slot layout, and validation (type, message, state unchanged).
#include "dlrm/dense_optimizer.h"

#include <cmath>
#include <cstdint>
#include <gtest/gtest.h>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "recemb/error.h"
#include "recemb/learning_rate.h"

#include "dlrm/dense_reference.h"

namespace recemb::dlrm {
namespace {

using reference::random_floats;

constexpr int64_t kNumParameters = 37;

// The learning rate of the schedules used here, evaluated independently of recemb.
double reference_learning_rate(const LearningRate& learning_rate, int64_t step) {
  if (const float* constant = std::get_if<float>(&learning_rate)) return *constant;
  const ExponentialDecay& decay = std::get<ExponentialDecay>(learning_rate);
  return decay.initial_learning_rate *
         std::pow(static_cast<double>(decay.decay_rate),
                  static_cast<double>(step) / static_cast<double>(decay.decay_steps));
}

struct ReferenceState {
  std::vector<double> w;
  std::vector<std::vector<double>> slots;
  int64_t step = 0;
};

void reference_apply(const DenseAdam& adam, ReferenceState& state, const std::vector<float>& g) {
  const double lr = reference_learning_rate(adam.learning_rate, state.step);
  const double t = static_cast<double>(state.step + 1);
  const double beta_1 = adam.beta_1;
  const double beta_2 = adam.beta_2;
  for (size_t i = 0; i < g.size(); ++i) {
    double& m = state.slots[0][i];
    double& v = state.slots[1][i];
    m = beta_1 * m + (1.0 - beta_1) * g[i];
    v = beta_2 * v + (1.0 - beta_2) * g[i] * g[i];
    const double m_hat = m / (1.0 - std::pow(beta_1, t));
    const double v_hat = v / (1.0 - std::pow(beta_2, t));
    state.w[i] -= lr * m_hat / (std::sqrt(v_hat) + adam.epsilon);
  }
  ++state.step;
}

void reference_apply(const DenseAdagrad& adagrad, ReferenceState& state,
                     const std::vector<float>& g) {
  const double lr = reference_learning_rate(adagrad.learning_rate, state.step);
  for (size_t i = 0; i < g.size(); ++i) {
    double& a = state.slots[0][i];
    a += static_cast<double>(g[i]) * g[i];
    state.w[i] -= lr * g[i] / std::sqrt(a);
  }
  ++state.step;
}

struct OptimizerCase {
  std::string name;
  DenseOptimizerConfig config;
  int64_t first_step;  // set_step before the first apply (as after a restore)
};

// Each case on every instruction set this CPU runs (dense_isa.h).
class DenseOptimizerTest : public ::testing::TestWithParam<std::tuple<OptimizerCase, DenseIsa>> {};

TEST_P(DenseOptimizerTest, MatchesFloat64LoopsOverManySteps) {
  const auto& [c, isa] = GetParam();
  const uint64_t seed = 61;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 random(seed);
  DenseOptimizer optimizer(c.config, kNumParameters, isa);
  optimizer.set_step(c.first_step);
  std::vector<float> parameters = random_floats(random, kNumParameters, -1.0f, 1.0f);

  const std::vector<std::string> names = optimizer.slot_names();
  ReferenceState state{.w = reference::to_double(parameters), .slots = {}, .step = c.first_step};
  const std::span<const float> initial_slots = optimizer.slots();
  ASSERT_EQ(initial_slots.size(), names.size() * kNumParameters);
  for (size_t k = 0; k < names.size(); ++k) {
    state.slots.push_back(
        reference::to_double(initial_slots.subspan(k * kNumParameters, kNumParameters)));
  }

  for (int step = 0; step < 25; ++step) {
    // Gradients of varied scale, some tiny (where epsilon matters) and some exactly zero.
    std::vector<float> gradients = random_floats(random, kNumParameters, -1.0f, 1.0f);
    for (size_t i = 0; i < gradients.size(); ++i) {
      if (i % 7 == 0) gradients[i] *= 1e-6f;
      if (i % 11 == 5) gradients[i] = 0.0f;
    }
    optimizer.apply(parameters, gradients);
    std::visit([&](const auto& config) { reference_apply(config, state, gradients); }, c.config);
    ASSERT_EQ(optimizer.step(), state.step);
    for (size_t i = 0; i < parameters.size(); ++i) {
      ASSERT_NEAR(parameters[i], state.w[i], 2e-6 * (1.0 + std::abs(state.w[i])))
          << "step " << step << " parameter " << i;
    }
  }
  for (size_t k = 0; k < names.size(); ++k) {
    for (int64_t i = 0; i < kNumParameters; ++i) {
      const double expected = state.slots[k][i];
      EXPECT_NEAR(optimizer.slots()[k * kNumParameters + i], expected,
                  1e-5 * (std::abs(expected) + 1e-6))
          << names[k] << " " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Optimizers, DenseOptimizerTest,
    ::testing::Combine(
        ::testing::Values(
            OptimizerCase{.name = "AdamDefaults", .config = DenseAdam{}, .first_step = 0},
            OptimizerCase{.name = "AdamTuned",
                          .config = DenseAdam{.learning_rate = 0.05f,
                                              .beta_1 = 0.5f,
                                              .beta_2 = 0.9f,
                                              .epsilon = 1e-3f},
                          .first_step = 0},
            OptimizerCase{.name = "AdamRestoredAtStep40",
                          .config = DenseAdam{.learning_rate = 0.01f},
                          .first_step = 40},
            OptimizerCase{.name = "AdamExponentialDecay",
                          .config = DenseAdam{.learning_rate =
                                                  ExponentialDecay{.initial_learning_rate = 0.02f,
                                                                   .decay_steps = 5,
                                                                   .decay_rate = 0.5f}},
                          .first_step = 0},
            OptimizerCase{.name = "AdagradDefaults", .config = DenseAdagrad{}, .first_step = 0},
            OptimizerCase{
                .name = "AdagradTuned",
                .config = DenseAdagrad{.learning_rate = 0.3f, .initial_accumulator_value = 1e-3f},
                .first_step = 0},
            OptimizerCase{.name = "AdagradExponentialDecay",
                          .config = DenseAdagrad{.learning_rate =
                                                     ExponentialDecay{.initial_learning_rate = 0.1f,
                                                                      .decay_steps = 3,
                                                                      .decay_rate = 0.8f}},
                          .first_step = 7}),
        ::testing::ValuesIn(supported_dense_isas())),
    [](const ::testing::TestParamInfo<std::tuple<OptimizerCase, DenseIsa>>& test_info) {
      return std::get<0>(test_info.param).name + "_" +
             std::string(dense_isa_name(std::get<1>(test_info.param)));
    });

// The same data at every alignment gives bitwise the same parameters (Eigen computes some
// elements in SIMD registers and others not, by alignment; both must round alike).
TEST_P(DenseOptimizerTest, ResultsDoNotDependOnArrayAlignment) {
  const auto& [c, isa] = GetParam();
  std::mt19937_64 random(64);
  const std::vector<float> initial = random_floats(random, kNumParameters, -1.0f, 1.0f);
  std::vector<std::vector<float>> gradients;
  for (int step = 0; step < 5; ++step) {
    gradients.push_back(random_floats(random, kNumParameters, -1.0f, 1.0f));
  }
  std::vector<float> first;
  for (int shift = 0; shift < reference::kNumShifts; ++shift) {
    SCOPED_TRACE("shift " + std::to_string(shift));
    DenseOptimizer optimizer(c.config, kNumParameters, isa);
    std::vector<float> parameter_storage;
    std::vector<float> gradient_storage;
    const std::span<float> parameters = reference::place(parameter_storage, initial, shift);
    for (const std::vector<float>& g : gradients) {
      optimizer.apply(parameters, reference::place(gradient_storage, g, (shift * 3) % 16));
    }
    if (shift == 0) {
      first.assign(parameters.begin(), parameters.end());
    } else {
      EXPECT_TRUE(std::equal(parameters.begin(), parameters.end(), first.begin(), first.end()));
    }
  }
}

TEST(DenseOptimizerSlotsTest, NamesAndInitialValues) {
  const DenseOptimizer adam(DenseAdam{}, 5, DenseIsa::kBaseline);
  EXPECT_EQ(adam.slot_names(), (std::vector<std::string>{"momenta", "velocities"}));
  EXPECT_EQ(std::vector<float>(adam.slots().begin(), adam.slots().end()),
            std::vector<float>(10, 0.0f));
  const DenseOptimizer adagrad(DenseAdagrad{.initial_accumulator_value = 0.25f}, 5,
                               DenseIsa::kBaseline);
  EXPECT_EQ(adagrad.slot_names(), (std::vector<std::string>{"accumulators"}));
  EXPECT_EQ(std::vector<float>(adagrad.slots().begin(), adagrad.slots().end()),
            std::vector<float>(5, 0.25f));
  EXPECT_EQ(adagrad.step(), 0);
  EXPECT_EQ(adagrad.num_parameters(), 5);
}

// Writing the slots and the step, as a checkpoint restore does, continues the same trajectory.
TEST(DenseOptimizerSlotsTest, RestoredSlotsAndStepContinueTheTrajectory) {
  std::mt19937_64 random(62);
  std::vector<float> parameters = random_floats(random, kNumParameters, -1.0f, 1.0f);
  DenseOptimizer original(DenseAdam{.learning_rate = 0.01f}, kNumParameters, widest_dense_isa());
  for (int step = 0; step < 3; ++step) {
    original.apply(parameters, random_floats(random, kNumParameters, -1.0f, 1.0f));
  }
  DenseOptimizer restored(DenseAdam{.learning_rate = 0.01f}, kNumParameters, widest_dense_isa());
  std::copy(original.slots().begin(), original.slots().end(), restored.slots().begin());
  restored.set_step(original.step());
  std::vector<float> restored_parameters = parameters;
  const std::vector<float> gradients = random_floats(random, kNumParameters, -1.0f, 1.0f);
  original.apply(parameters, gradients);
  restored.apply(restored_parameters, gradients);
  EXPECT_EQ(parameters, restored_parameters);
}

TEST(DenseOptimizerErrorTest, ConfigErrorsNameTheOptimizerFieldAndValue) {
  const auto expect_error = [](const DenseOptimizerConfig& config, int64_t num_parameters,
                               const std::string& fragment) {
    try {
      const DenseOptimizer optimizer(config, num_parameters, DenseIsa::kBaseline);
      ADD_FAILURE() << "no error; expected one mentioning '" << fragment << "'";
    } catch (const InvalidArgument& error) {
      EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
    }
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  expect_error(DenseAdam{.learning_rate = -0.1f}, 3, "DenseAdam: learning_rate");
  expect_error(DenseAdam{.beta_1 = 1.0f}, 3, "DenseAdam: beta_1 = 1 must be in [0, 1)");
  expect_error(DenseAdam{.beta_2 = -0.5f}, 3, "DenseAdam: beta_2 = -0.5 must be in [0, 1)");
  expect_error(DenseAdam{.beta_2 = nan}, 3, "DenseAdam: beta_2 = nan");
  expect_error(DenseAdam{.epsilon = 0.0f}, 3, "DenseAdam: epsilon = 0 must be > 0");
  expect_error(DenseAdagrad{.learning_rate = nan}, 3, "DenseAdagrad: learning_rate");
  expect_error(DenseAdagrad{.initial_accumulator_value = 0.0f}, 3,
               "DenseAdagrad: initial_accumulator_value = 0 must be > 0");
  expect_error(DenseAdagrad{.learning_rate = LearningRateCallback{}}, 3, "callback");
  expect_error(DenseAdagrad{}, 0, "DenseAdagrad: num_parameters = 0 must be >= 1");
}

class DenseOptimizerApplyErrorTest : public ::testing::Test {
 protected:
  DenseOptimizerApplyErrorTest() : random_(63) {
    parameters_ = random_floats(random_, 4, -1.0f, 1.0f);
    optimizer_.apply(parameters_, random_floats(random_, 4, -1.0f, 1.0f));
    parameters_before_ = parameters_;
    slots_before_.assign(optimizer_.slots().begin(), optimizer_.slots().end());
  }

  void expect_apply_error(const std::vector<float>& gradients, const std::string& fragment) {
    try {
      optimizer_.apply(parameters_, gradients);
      ADD_FAILURE() << "no error; expected one mentioning '" << fragment << "'";
    } catch (const InvalidArgument& error) {
      EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
    }
    EXPECT_EQ(parameters_, parameters_before_);
    EXPECT_EQ(std::vector<float>(optimizer_.slots().begin(), optimizer_.slots().end()),
              slots_before_);
    EXPECT_EQ(optimizer_.step(), 1);
  }

  std::mt19937_64 random_;
  DenseOptimizer optimizer_{DenseAdam{.learning_rate = LearningRateCallback([](int64_t step) {
                                        return step < 1 ? 0.01f : -1.0f;  // invalid from step 1 on
                                      })},
                            4, widest_dense_isa()};
  std::vector<float> parameters_;
  std::vector<float> parameters_before_;
  std::vector<float> slots_before_;
};

TEST_F(DenseOptimizerApplyErrorTest, WrongSizes) {
  expect_apply_error(std::vector<float>(3, 0.1f), "apply got 4 parameters and 3 gradients");
}

TEST_F(DenseOptimizerApplyErrorTest, NonFiniteGradient) {
  expect_apply_error({0.1f, 0.2f, std::numeric_limits<float>::infinity(), 0.3f},
                     "gradients[2] = inf is not finite");
}

TEST_F(DenseOptimizerApplyErrorTest, InvalidScheduledLearningRate) {
  expect_apply_error({0.1f, 0.2f, 0.3f, 0.4f}, "callback returned -1 at step 1");
}

TEST_F(DenseOptimizerApplyErrorTest, NegativeStep) {
  EXPECT_THROW(optimizer_.set_step(-1), InvalidArgument);
  EXPECT_EQ(optimizer_.step(), 1);
}

}  // namespace
}  // namespace recemb::dlrm
