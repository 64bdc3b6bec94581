// optimizer_name, parse_optimizer, slot_names, validate_optimizer (recemb/optimizer.h) and
// slot_specs (optimizers/slot_spec.h).
#include "recemb/optimizer.h"

#include <cmath>
#include <functional>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <limits>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "recemb/error.h"

#include "optimizers/slot_spec.h"

namespace recemb {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInfinity = std::numeric_limits<float>::infinity();

const std::vector<std::string> kNames = {"sgd",  "adagrad", "adagrad_momentum",
                                         "adam", "ftrl",    "rowwise_adagrad"};

// The message of the InvalidArgument that validate_optimizer throws ("" if none).
std::string validation_error(const Optimizer& optimizer) {
  try {
    validate_optimizer(optimizer, "table 'video'");
  } catch (const InvalidArgument& error) {
    return error.what();
  }
  return "";
}

// A default T changed by `change`.
template <class T>
Optimizer changed(const std::function<void(T&)>& change) {
  T hyperparameters;
  change(hyperparameters);
  return hyperparameters;
}

TEST(OptimizerNameTest, NamesInVariantOrderRoundTrip) {
  ASSERT_EQ(kNames.size(), std::variant_size_v<Optimizer>);
  for (size_t i = 0; i < kNames.size(); ++i) {
    const Optimizer optimizer = parse_optimizer(kNames[i]);
    EXPECT_EQ(optimizer.index(), i) << kNames[i];
    EXPECT_EQ(optimizer_name(optimizer), kNames[i]);
  }
  EXPECT_EQ(optimizer_name(Adam{.beta_1 = 0.5f, .common = {}}), "adam");
}

// TF's defaults (docs/semantics.md §5, optimizer.h).
TEST(OptimizerNameTest, FromNameHasTfDefaults) {
  EXPECT_EQ(std::get<float>(std::get<Sgd>(parse_optimizer("sgd")).learning_rate), 0.01f);
  const auto adagrad = std::get<Adagrad>(parse_optimizer("adagrad"));
  EXPECT_EQ(std::get<float>(adagrad.learning_rate), 0.001f);
  EXPECT_EQ(adagrad.initial_accumulator_value, 0.1f);
  const auto adagrad_momentum = std::get<AdagradMomentum>(parse_optimizer("adagrad_momentum"));
  EXPECT_EQ(adagrad_momentum.momentum, 0.0f);
  EXPECT_FALSE(adagrad_momentum.use_nesterov);
  EXPECT_EQ(adagrad_momentum.exponent, 2.0f);
  EXPECT_EQ(adagrad_momentum.beta2, 1.0f);
  EXPECT_EQ(adagrad_momentum.epsilon, 1e-10f);
  const auto adam = std::get<Adam>(parse_optimizer("adam"));
  EXPECT_EQ(adam.beta_1, 0.9f);
  EXPECT_EQ(adam.beta_2, 0.999f);
  EXPECT_EQ(adam.epsilon, 1e-7f);
  EXPECT_TRUE(adam.lazy_adam);
  EXPECT_TRUE(adam.sum_inside_sqrt);
  EXPECT_FALSE(adam.bias_correction);
  const auto ftrl = std::get<Ftrl>(parse_optimizer("ftrl"));
  EXPECT_EQ(ftrl.learning_rate_power, -0.5f);
  EXPECT_EQ(ftrl.initial_accumulator_value, 0.1f);
  EXPECT_FALSE(ftrl.multiply_linear_by_learning_rate);
  const auto rowwise_adagrad = std::get<RowwiseAdagrad>(parse_optimizer("rowwise_adagrad"));
  EXPECT_EQ(rowwise_adagrad.initial_accumulator_value, 0.0f);
  EXPECT_EQ(rowwise_adagrad.epsilon, 1e-8f);
  const CommonHyperparameters common = std::get<Sgd>(parse_optimizer("sgd")).common;
  EXPECT_TRUE(common.use_gradient_accumulation);
  EXPECT_EQ(common.clip_weight_min, -kInfinity);
  EXPECT_EQ(common.clip_gradient_max, kInfinity);
  EXPECT_EQ(common.weight_decay_factor, 0.0f);
}

TEST(OptimizerNameTest, UnknownNameListsValidNames) {
  for (const char* name : {"adamw", "Adam", "", "sgd "}) {
    SCOPED_TRACE(name);
    try {
      parse_optimizer(name);
      FAIL() << "expected InvalidArgument";
    } catch (const InvalidArgument& error) {
      EXPECT_THAT(error.what(), HasSubstr("unknown optimizer name '" + std::string(name) + "'"));
      EXPECT_THAT(error.what(), HasSubstr("valid names are 'sgd', 'adagrad', 'adagrad_momentum', "
                                          "'adam', 'ftrl', 'rowwise_adagrad'"));
    }
  }
}

TEST(SlotNamesTest, TfOrder) {
  EXPECT_THAT(slot_names(Sgd{}), ElementsAre());
  EXPECT_THAT(slot_names(Adagrad{}), ElementsAre("accumulators"));
  EXPECT_THAT(slot_names(AdagradMomentum{}), ElementsAre("accumulators", "momenta"));
  EXPECT_THAT(slot_names(Adam{}), ElementsAre("momenta", "velocities"));
  EXPECT_THAT(slot_names(Ftrl{}), ElementsAre("accumulators", "linears"));
  EXPECT_THAT(slot_names(RowwiseAdagrad{}), ElementsAre("accumulators"));
}

MATCHER_P3(IsSlot, name, width, initial_value, "") {
  return arg.name == name && arg.width == width && arg.initial_value == initial_value;
}

TEST(SlotSpecsTest, WidthsAndInitialValues) {
  using internal::slot_specs;
  EXPECT_THAT(slot_specs(Sgd{}, 8), ElementsAre());
  EXPECT_THAT(slot_specs(Adagrad{.initial_accumulator_value = 0.5f, .common = {}}, 8),
              ElementsAre(IsSlot("accumulators", 8, 0.5f)));
  EXPECT_THAT(slot_specs(AdagradMomentum{}, 3),
              ElementsAre(IsSlot("accumulators", 3, 0.0f), IsSlot("momenta", 3, 0.0f)));
  EXPECT_THAT(slot_specs(Adam{}, 64),
              ElementsAre(IsSlot("momenta", 64, 0.0f), IsSlot("velocities", 64, 0.0f)));
  EXPECT_THAT(slot_specs(Ftrl{.initial_accumulator_value = 0.25f, .common = {}}, 17),
              ElementsAre(IsSlot("accumulators", 17, 0.25f), IsSlot("linears", 17, 0.0f)));
  EXPECT_THAT(slot_specs(RowwiseAdagrad{.initial_accumulator_value = 0.75f, .common = {}}, 64),
              ElementsAre(IsSlot("accumulators", 1, 0.75f)));
}

TEST(SlotSpecsTest, AccumulatorsAndSecondMomentsHoldNonNegativeValues) {
  using internal::in_range;
  using internal::slot_specs;
  using internal::SlotRange;
  auto ranges = [](const Optimizer& optimizer) {
    std::vector<SlotRange> result;
    for (const internal::SlotSpec& spec : slot_specs(optimizer, 4)) result.push_back(spec.range);
    return result;
  };
  // Divided by their root with no epsilon: > 0. With an epsilon: >= 0.
  EXPECT_THAT(ranges(Adagrad{}), ElementsAre(SlotRange::kAboveZero));
  EXPECT_THAT(ranges(Ftrl{}), ElementsAre(SlotRange::kAboveZero, SlotRange::kFinite));
  EXPECT_THAT(ranges(AdagradMomentum{}), ElementsAre(SlotRange::kAtLeastZero, SlotRange::kFinite));
  EXPECT_THAT(ranges(Adam{}), ElementsAre(SlotRange::kFinite, SlotRange::kAtLeastZero));
  EXPECT_THAT(ranges(RowwiseAdagrad{}), ElementsAre(SlotRange::kAtLeastZero));
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float tiny = std::numeric_limits<float>::denorm_min();
  for (const SlotRange range :
       {SlotRange::kFinite, SlotRange::kAtLeastZero, SlotRange::kAboveZero}) {
    EXPECT_FALSE(in_range(range, nan));
    EXPECT_FALSE(in_range(range, inf));
    EXPECT_FALSE(in_range(range, -inf));
    EXPECT_TRUE(in_range(range, tiny));
    EXPECT_EQ(in_range(range, -tiny), range == SlotRange::kFinite);
    EXPECT_EQ(in_range(range, 0.0f), range != SlotRange::kAboveZero);
    EXPECT_EQ(in_range(range, -0.0f), range != SlotRange::kAboveZero);
  }
  EXPECT_EQ(internal::range_text(SlotRange::kAtLeastZero), "finite and >= 0");
}

TEST(SlotSpecsTest, NamesMatchSlotNames) {
  for (const std::string& name : kNames) {
    const Optimizer optimizer = parse_optimizer(name);
    std::vector<std::string> spec_names;
    for (const internal::SlotSpec& spec : internal::slot_specs(optimizer, 4)) {
      spec_names.push_back(spec.name);
    }
    EXPECT_EQ(spec_names, slot_names(optimizer)) << name;
  }
}

TEST(ValidateOptimizerTest, AcceptsDefaultsAndBoundaryValues) {
  for (const std::string& name : kNames) {
    EXPECT_EQ(validation_error(parse_optimizer(name)), "") << name;
  }
  const std::vector<Optimizer> boundary = {
      Sgd{.learning_rate = 0.0f, .common = {}},
      changed<Sgd>([](Sgd& o) {
        o.common.clip_weight_min = 0.5f;
        o.common.clip_weight_max = 0.5f;
        o.common.clip_gradient_min = -1.0f;
        o.common.weight_decay_factor = 0.0f;
      }),
      changed<Sgd>([](Sgd& o) { o.common.use_gradient_accumulation = false; }),
      AdagradMomentum{.momentum = 0.0f, .beta2 = 0.0f, .common = {}},
      AdagradMomentum{.momentum = 0.999f, .beta2 = 1.0f, .common = {}},
      Adam{.beta_1 = 0.0f, .beta_2 = 0.0f, .common = {}},
      changed<Adam>([](Adam& o) { o.lazy_adam = false; }),
      Ftrl{.learning_rate_power = 0.0f, .common = {}},
      Ftrl{.learning_rate_power = -0.3f,
           .l1_regularization_strength = 0.1f,
           .l2_regularization_strength = 0.1f,
           .beta = 0.1f,
           .common = {}},
      RowwiseAdagrad{.initial_accumulator_value = 0.0f, .common = {}},
      Adam{.learning_rate = ExponentialDecay{}, .common = {}}};
  for (const Optimizer& optimizer : boundary) {
    EXPECT_EQ(validation_error(optimizer), "") << optimizer_name(optimizer);
  }
}

struct ErrorCase {
  Optimizer optimizer;
  std::string message;  // a substring of the error message
};

TEST(ValidateOptimizerTest, RejectsOutOfRangeFields) {
  const std::vector<ErrorCase> cases = {
      {Adam{.beta_1 = 1.5f, .common = {}}, "table 'video': Adam.beta_1 must be in [0, 1), got 1.5"},
      {Adam{.beta_1 = 1.0f, .common = {}}, "Adam.beta_1 must be in [0, 1), got 1"},
      {Adam{.beta_1 = -0.1f, .common = {}}, "Adam.beta_1 must be in [0, 1), got -0.1"},
      {Adam{.beta_2 = 1.0f, .common = {}}, "Adam.beta_2 must be in [0, 1), got 1"},
      {Adam{.epsilon = 0.0f, .common = {}}, "Adam.epsilon must be finite and > 0, got 0"},
      {changed<Adam>([](Adam& o) {
         o.lazy_adam = false;
         o.common.use_gradient_accumulation = false;
       }),
       "table 'video': Adam.lazy_adam = false: When disabling lazy Adam, gradient accumulation "
       "must be used"},
      {Adagrad{.initial_accumulator_value = 0.0f, .common = {}},
       "table 'video': Adagrad.initial_accumulator_value must be finite and > 0, got 0"},
      {Adagrad{.initial_accumulator_value = -1.0f, .common = {}},
       "Adagrad.initial_accumulator_value must be finite and > 0, got -1"},
      {AdagradMomentum{.exponent = 0.0f, .common = {}},
       "AdagradMomentum.exponent must be finite and > 0, got 0"},
      {AdagradMomentum{.epsilon = 0.0f, .common = {}},
       "AdagradMomentum.epsilon must be finite and > 0, got 0"},
      {AdagradMomentum{.beta2 = kInfinity, .common = {}},
       "AdagradMomentum.beta2 must be in [0, 1], got inf"},
      {AdagradMomentum{.beta2 = 1.5f, .common = {}},
       "table 'video': AdagradMomentum.beta2 must be in [0, 1], got 1.5"},
      {AdagradMomentum{.beta2 = -0.5f, .common = {}},
       "AdagradMomentum.beta2 must be in [0, 1], got -0.5"},
      {AdagradMomentum{.momentum = -1.0f, .common = {}},
       "table 'video': AdagradMomentum.momentum must be in [0, 1), got -1"},
      {AdagradMomentum{.momentum = 1.0f, .common = {}},
       "AdagradMomentum.momentum must be in [0, 1), got 1"},
      {AdagradMomentum{.momentum = -kInfinity, .common = {}},
       "AdagradMomentum.momentum must be in [0, 1), got -inf"},
      {Ftrl{.learning_rate_power = 0.5f, .common = {}},
       "Ftrl.learning_rate_power must be finite and <= 0, got 0.5"},
      {Ftrl{.l1_regularization_strength = -1.0f, .common = {}},
       "Ftrl.l1_regularization_strength must be finite and >= 0, got -1"},
      {Ftrl{.l2_regularization_strength = -1.0f, .common = {}},
       "Ftrl.l2_regularization_strength must be finite and >= 0, got -1"},
      {Ftrl{.beta = -1.0f, .common = {}}, "Ftrl.beta must be finite and >= 0, got -1"},
      {Ftrl{.initial_accumulator_value = 0.0f, .common = {}},
       "Ftrl.initial_accumulator_value must be finite and > 0, got 0"},
      {RowwiseAdagrad{.initial_accumulator_value = -0.5f, .common = {}},
       "RowwiseAdagrad.initial_accumulator_value must be finite and >= 0, got -0.5"},
      {RowwiseAdagrad{.epsilon = 0.0f, .common = {}},
       "RowwiseAdagrad.epsilon must be finite and > 0, got 0"},
      {Sgd{.learning_rate = -1.0f, .common = {}},
       "table 'video': learning_rate must be finite and >= 0, got -1"},
      {Adam{.learning_rate = LinearWarmup{.warmup_steps = 0}, .common = {}},
       "LinearWarmup.warmup_steps must be > 0, got 0"},
      {Ftrl{.learning_rate = LearningRateCallback(), .common = {}},
       "learning_rate callback must not be empty"},
  };
  for (const ErrorCase& error_case : cases) {
    EXPECT_THAT(validation_error(error_case.optimizer), HasSubstr(error_case.message));
  }
}

// The common checks run for every optimizer type.
TEST(ValidateOptimizerTest, RejectsBadCommonHyperparameters) {
  const std::vector<std::pair<std::function<void(CommonHyperparameters&)>, std::string>> cases = {
      {[](CommonHyperparameters& c) {
         c.clip_weight_min = 1.0f;
         c.clip_weight_max = 0.0f;
       },
       ".common.clip_weight_min must be <= common.clip_weight_max (0), got 1"},
      {[](CommonHyperparameters& c) {
         c.clip_gradient_min = 2.0f;
         c.clip_gradient_max = -2.0f;
       },
       ".common.clip_gradient_min must be <= common.clip_gradient_max (-2), got 2"},
      {[](CommonHyperparameters& c) { c.clip_weight_min = kInfinity; },
       ".common.clip_weight_min must be < +inf, got inf"},
      {[](CommonHyperparameters& c) { c.clip_gradient_max = -kInfinity; },
       ".common.clip_gradient_max must be > -inf, got -inf"},
      {[](CommonHyperparameters& c) { c.weight_decay_factor = -0.1f; },
       ".common.weight_decay_factor must be finite and >= 0, got -0.1"},
      {[](CommonHyperparameters& c) { c.weight_decay_factor = kInfinity; },
       ".common.weight_decay_factor must be finite and >= 0, got inf"},
      {[](CommonHyperparameters& c) {
         c.use_gradient_accumulation = false;
         c.clip_gradient_min = -1.0f;
       },
       ".common.clip_gradient_min/max = [-1, inf]: When use_gradient_accumulation is False, "
       "gradient clipping cannot be used"},
      {[](CommonHyperparameters& c) {
         c.use_gradient_accumulation = false;
         c.clip_gradient_max = 3.0f;
       },
       "When use_gradient_accumulation is False, gradient clipping cannot be used"},
  };
  for (const std::string& name : kNames) {
    for (const auto& [change, message] : cases) {
      Optimizer optimizer = parse_optimizer(name);
      std::visit([&change](auto& o) { change(o.common); }, optimizer);
      const std::string error = validation_error(optimizer);
      EXPECT_THAT(error, HasSubstr("table 'video': ")) << name;
      EXPECT_THAT(error, HasSubstr(message)) << name;
    }
  }
}

// Every float hyperparameter rejects NaN, naming the field.
TEST(ValidateOptimizerTest, RejectsNaNInEveryField) {
  const std::vector<std::pair<float CommonHyperparameters::*, std::string>> common_fields = {
      {&CommonHyperparameters::clip_weight_min, "common.clip_weight_min"},
      {&CommonHyperparameters::clip_weight_max, "common.clip_weight_max"},
      {&CommonHyperparameters::weight_decay_factor, "common.weight_decay_factor"},
      {&CommonHyperparameters::clip_gradient_min, "common.clip_gradient_min"},
      {&CommonHyperparameters::clip_gradient_max, "common.clip_gradient_max"}};
  std::vector<std::pair<Optimizer, std::string>> cases = {
      {Sgd{.learning_rate = kNaN, .common = {}}, "learning_rate"},
      {Adagrad{.initial_accumulator_value = kNaN, .common = {}},
       "Adagrad.initial_accumulator_value"},
      {AdagradMomentum{.momentum = kNaN, .common = {}}, "AdagradMomentum.momentum"},
      {AdagradMomentum{.exponent = kNaN, .common = {}}, "AdagradMomentum.exponent"},
      {AdagradMomentum{.beta2 = kNaN, .common = {}}, "AdagradMomentum.beta2"},
      {AdagradMomentum{.epsilon = kNaN, .common = {}}, "AdagradMomentum.epsilon"},
      {Adam{.beta_1 = kNaN, .common = {}}, "Adam.beta_1"},
      {Adam{.beta_2 = kNaN, .common = {}}, "Adam.beta_2"},
      {Adam{.epsilon = kNaN, .common = {}}, "Adam.epsilon"},
      {Ftrl{.learning_rate_power = kNaN, .common = {}}, "Ftrl.learning_rate_power"},
      {Ftrl{.l1_regularization_strength = kNaN, .common = {}}, "Ftrl.l1_regularization_strength"},
      {Ftrl{.l2_regularization_strength = kNaN, .common = {}}, "Ftrl.l2_regularization_strength"},
      {Ftrl{.beta = kNaN, .common = {}}, "Ftrl.beta"},
      {Ftrl{.initial_accumulator_value = kNaN, .common = {}}, "Ftrl.initial_accumulator_value"},
      {RowwiseAdagrad{.initial_accumulator_value = kNaN, .common = {}},
       "RowwiseAdagrad.initial_accumulator_value"},
      {RowwiseAdagrad{.epsilon = kNaN, .common = {}}, "RowwiseAdagrad.epsilon"}};
  for (const std::string& name : kNames) {
    for (const auto& [field, field_name] : common_fields) {
      Optimizer optimizer = parse_optimizer(name);
      std::visit([field = field](auto& o) { o.common.*field = kNaN; }, optimizer);
      cases.emplace_back(optimizer, field_name);
    }
  }
  for (const auto& [optimizer, field_name] : cases) {
    const std::string error = validation_error(optimizer);
    EXPECT_THAT(error, HasSubstr(field_name)) << optimizer_name(optimizer);
    EXPECT_THAT(error, HasSubstr("nan")) << optimizer_name(optimizer);
  }
}

}  // namespace
}  // namespace recemb
