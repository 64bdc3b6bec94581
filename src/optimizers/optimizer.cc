// Optimizer names, slots and validation (recemb/optimizer.h, optimizers/slot_spec.h).
//
// Each fact about an optimizer type is one overload per alternative of Optimizer, so adding an
// optimizer to the variant fails to compile here until it has a name, slots and validation.
#include "recemb/optimizer.h"

#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "recemb/error.h"
#include "recemb/learning_rate.h"

#include "optimizers/slot_spec.h"
#include "support/number_text.h"
#include "util/enum_names.h"

namespace recemb {
namespace {

using internal::SlotSpec;

constexpr float kInfinity = std::numeric_limits<float>::infinity();

std::string_view name_of(const Sgd&) { return "sgd"; }
std::string_view name_of(const Adagrad&) { return "adagrad"; }
std::string_view name_of(const AdagradMomentum&) { return "adagrad_momentum"; }
std::string_view name_of(const Adam&) { return "adam"; }
std::string_view name_of(const Ftrl&) { return "ftrl"; }
std::string_view name_of(const RowwiseAdagrad&) { return "rowwise_adagrad"; }

// The C++ type, as messages name fields: "Adam.beta_1".
std::string_view type_name_of(const Sgd&) { return "Sgd"; }
std::string_view type_name_of(const Adagrad&) { return "Adagrad"; }
std::string_view type_name_of(const AdagradMomentum&) { return "AdagradMomentum"; }
std::string_view type_name_of(const Adam&) { return "Adam"; }
std::string_view type_name_of(const Ftrl&) { return "Ftrl"; }
std::string_view type_name_of(const RowwiseAdagrad&) { return "RowwiseAdagrad"; }

using internal::SlotRange;

std::vector<SlotSpec> slots_of(const Sgd&, int64_t /*dim*/) { return {}; }
std::vector<SlotSpec> slots_of(const Adagrad& adagrad, int64_t dim) {
  return {{"accumulators", dim, adagrad.initial_accumulator_value, SlotRange::kAboveZero}};
}
std::vector<SlotSpec> slots_of(const AdagradMomentum&, int64_t dim) {
  return {{"accumulators", dim, 0.0f, SlotRange::kAtLeastZero},
          {"momenta", dim, 0.0f, SlotRange::kFinite}};
}
std::vector<SlotSpec> slots_of(const Adam&, int64_t dim) {
  return {{"momenta", dim, 0.0f, SlotRange::kFinite},
          {"velocities", dim, 0.0f, SlotRange::kAtLeastZero}};
}
std::vector<SlotSpec> slots_of(const Ftrl& ftrl, int64_t dim) {
  return {{"accumulators", dim, ftrl.initial_accumulator_value, SlotRange::kAboveZero},
          {"linears", dim, 0.0f, SlotRange::kFinite}};
}
std::vector<SlotSpec> slots_of(const RowwiseAdagrad& rowwise_adagrad, int64_t /*dim*/) {
  return {{"accumulators", 1, rowwise_adagrad.initial_accumulator_value, SlotRange::kAtLeastZero}};
}

// Every alternative of Optimizer with its default hyperparameters, in variant order.
template <size_t... kIndex>
std::vector<Optimizer> default_optimizers(std::index_sequence<kIndex...>) {
  return {std::variant_alternative_t<kIndex, Optimizer>{}...};
}
std::vector<Optimizer> default_optimizers() {
  return default_optimizers(std::make_index_sequence<std::variant_size_v<Optimizer>>());
}

// Checks the fields of one hyperparameter struct; messages read
// "<owner>: <type>.<field> must be <requirement>, got <value>". Comparisons are written so that
// NaN fails them.
class FieldChecker {
 public:
  FieldChecker(std::string_view owner, std::string_view type) : owner_(owner), type_(type) {}

  void at_least_zero(std::string_view field, float value) const {
    if (!(std::isfinite(value) && value >= 0.0f)) fail(field, "must be finite and >= 0", value);
  }
  void above_zero(std::string_view field, float value) const {
    if (!(std::isfinite(value) && value > 0.0f)) fail(field, "must be finite and > 0", value);
  }
  void at_most_zero(std::string_view field, float value) const {
    if (!(std::isfinite(value) && value <= 0.0f)) fail(field, "must be finite and <= 0", value);
  }
  void finite(std::string_view field, float value) const {
    if (!std::isfinite(value)) fail(field, "must be finite", value);
  }
  void in_unit_interval(std::string_view field, float value) const {
    if (!(value >= 0.0f && value < 1.0f)) fail(field, "must be in [0, 1)", value);
  }
  void in_closed_unit_interval(std::string_view field, float value) const {
    if (!(value >= 0.0f && value <= 1.0f)) fail(field, "must be in [0, 1]", value);
  }

  // [min, max] with -inf / +inf meaning unbounded; an empty or all-infinite range is an error.
  void clip_range(std::string_view min_field, float min, std::string_view max_field,
                  float max) const {
    if (std::isnan(min)) fail(min_field, "must not be NaN", min);
    if (std::isnan(max)) fail(max_field, "must not be NaN", max);
    if (min == kInfinity) fail(min_field, "must be < +inf", min);
    if (max == -kInfinity) fail(max_field, "must be > -inf", max);
    if (min > max) {
      fail(min_field,
           "must be <= " + std::string(max_field) + " (" + support::float_text(max) + ")", min);
    }
  }

  [[noreturn]] void fail(std::string_view field, const std::string& problem) const {
    throw InvalidArgument(std::string(owner_) + ": " + std::string(type_) + "." +
                          std::string(field) + " " + problem);
  }

 private:
  [[noreturn]] void fail(std::string_view field, const std::string& requirement,
                         float value) const {
    fail(field, requirement + ", got " + support::float_text(value));
  }

  std::string_view owner_;
  std::string_view type_;
};

void validate_common(const CommonHyperparameters& common, const FieldChecker& check) {
  check.clip_range("common.clip_weight_min", common.clip_weight_min, "common.clip_weight_max",
                   common.clip_weight_max);
  check.clip_range("common.clip_gradient_min", common.clip_gradient_min, "common.clip_gradient_max",
                   common.clip_gradient_max);
  check.at_least_zero("common.weight_decay_factor", common.weight_decay_factor);
  // Clipping a single contribution would not clip the row's gradient (docs/semantics.md §4).
  const bool clips_gradient =
      common.clip_gradient_min != -kInfinity || common.clip_gradient_max != kInfinity;
  if (clips_gradient && !common.use_gradient_accumulation) {
    check.fail("common.clip_gradient_min/max",
               "= [" + support::float_text(common.clip_gradient_min) + ", " +
                   support::float_text(common.clip_gradient_max) +
                   "]: When use_gradient_accumulation is False, gradient clipping cannot be used "
                   "and clip_gradient_min/max should be left at -inf/+inf");
  }
}

void validate(const Sgd& sgd, const FieldChecker& check) { validate_common(sgd.common, check); }

void validate(const Adagrad& adagrad, const FieldChecker& check) {
  check.above_zero("initial_accumulator_value", adagrad.initial_accumulator_value);
  validate_common(adagrad.common, check);
}

void validate(const AdagradMomentum& adagrad_momentum, const FieldChecker& check) {
  // Moving-average parameters (include/recemb/optimizer.h): TF checks neither, but outside
  // these ranges the momenta or the accumulators diverge or turn negative.
  check.in_unit_interval("momentum", adagrad_momentum.momentum);
  check.above_zero("exponent", adagrad_momentum.exponent);
  check.in_closed_unit_interval("beta2", adagrad_momentum.beta2);
  check.above_zero("epsilon", adagrad_momentum.epsilon);
  validate_common(adagrad_momentum.common, check);
}

void validate(const Adam& adam, const FieldChecker& check) {
  check.in_unit_interval("beta_1", adam.beta_1);
  check.in_unit_interval("beta_2", adam.beta_2);
  check.above_zero("epsilon", adam.epsilon);
  // Non-lazy Adam decays every row once per step; per-contribution updates cannot express that.
  if (!adam.lazy_adam && !adam.common.use_gradient_accumulation) {
    check.fail("lazy_adam",
               "= false: When disabling lazy Adam, gradient accumulation must be used "
               "(common.use_gradient_accumulation is false)");
  }
  validate_common(adam.common, check);
}

void validate(const Ftrl& ftrl, const FieldChecker& check) {
  check.at_most_zero("learning_rate_power", ftrl.learning_rate_power);
  check.at_least_zero("l1_regularization_strength", ftrl.l1_regularization_strength);
  check.at_least_zero("l2_regularization_strength", ftrl.l2_regularization_strength);
  check.at_least_zero("beta", ftrl.beta);
  check.above_zero("initial_accumulator_value", ftrl.initial_accumulator_value);
  validate_common(ftrl.common, check);
}

void validate(const RowwiseAdagrad& rowwise_adagrad, const FieldChecker& check) {
  check.at_least_zero("initial_accumulator_value", rowwise_adagrad.initial_accumulator_value);
  check.above_zero("epsilon", rowwise_adagrad.epsilon);
  validate_common(rowwise_adagrad.common, check);
}

}  // namespace

std::string_view optimizer_name(const Optimizer& optimizer) {
  return std::visit([](const auto& o) { return name_of(o); }, optimizer);
}

Optimizer parse_optimizer(std::string_view name) {
  const std::vector<Optimizer> optimizers = default_optimizers();
  return internal::parse_by_name(name, std::span<const Optimizer>(optimizers), optimizer_name,
                                 "optimizer name");
}

std::vector<std::string> slot_names(const Optimizer& optimizer) {
  std::vector<std::string> names;
  for (SlotSpec& spec : internal::slot_specs(optimizer, 1)) names.push_back(std::move(spec.name));
  return names;
}

void validate_optimizer(const Optimizer& optimizer, std::string_view owner) {
  std::visit(
      [owner](const auto& o) {
        validate_learning_rate(o.learning_rate, owner);
        validate(o, FieldChecker(owner, type_name_of(o)));
      },
      optimizer);
}

namespace internal {

std::vector<SlotSpec> slot_specs(const Optimizer& optimizer, int64_t dim) {
  return std::visit([dim](const auto& o) { return slots_of(o, dim); }, optimizer);
}

}  // namespace internal
}  // namespace recemb
