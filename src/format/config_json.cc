#include "format/config_json.h"

#include <charconv>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "recemb/combiner.h"
#include "recemb/error.h"
#include "recemb/initializer.h"
#include "recemb/learning_rate.h"

#include "format/checksum.h"
#include "support/number_text.h"

namespace recemb::format {

using support::describe;
using support::Json;
using support::JsonReader;

namespace {

template <class T, class U>
concept Is = std::same_as<std::remove_const_t<T>, U>;

// The fields of each config struct, in declaration order: the one list that both the writer and
// the reader walk, so a field added to a struct and here is written and read alike.
void fields(Is<CommonHyperparameters> auto& common, auto& visit) {
  visit("use_gradient_accumulation", common.use_gradient_accumulation);
  visit("clip_weight_min", common.clip_weight_min);
  visit("clip_weight_max", common.clip_weight_max);
  visit("weight_decay_factor", common.weight_decay_factor);
  visit("multiply_weight_decay_factor_by_learning_rate",
        common.multiply_weight_decay_factor_by_learning_rate);
  visit("clip_gradient_min", common.clip_gradient_min);
  visit("clip_gradient_max", common.clip_gradient_max);
}
void fields(Is<Sgd> auto& sgd, auto& visit) {
  visit("learning_rate", sgd.learning_rate);
  visit("common", sgd.common);
}
void fields(Is<Adagrad> auto& adagrad, auto& visit) {
  visit("learning_rate", adagrad.learning_rate);
  visit("initial_accumulator_value", adagrad.initial_accumulator_value);
  visit("common", adagrad.common);
}
void fields(Is<AdagradMomentum> auto& adagrad_momentum, auto& visit) {
  visit("learning_rate", adagrad_momentum.learning_rate);
  visit("momentum", adagrad_momentum.momentum);
  visit("use_nesterov", adagrad_momentum.use_nesterov);
  visit("exponent", adagrad_momentum.exponent);
  visit("beta2", adagrad_momentum.beta2);
  visit("epsilon", adagrad_momentum.epsilon);
  visit("common", adagrad_momentum.common);
}
void fields(Is<Adam> auto& adam, auto& visit) {
  visit("learning_rate", adam.learning_rate);
  visit("beta_1", adam.beta_1);
  visit("beta_2", adam.beta_2);
  visit("epsilon", adam.epsilon);
  visit("lazy_adam", adam.lazy_adam);
  visit("sum_inside_sqrt", adam.sum_inside_sqrt);
  visit("bias_correction", adam.bias_correction);
  visit("common", adam.common);
}
void fields(Is<Ftrl> auto& ftrl, auto& visit) {
  visit("learning_rate", ftrl.learning_rate);
  visit("learning_rate_power", ftrl.learning_rate_power);
  visit("l1_regularization_strength", ftrl.l1_regularization_strength);
  visit("l2_regularization_strength", ftrl.l2_regularization_strength);
  visit("beta", ftrl.beta);
  visit("initial_accumulator_value", ftrl.initial_accumulator_value);
  visit("multiply_linear_by_learning_rate", ftrl.multiply_linear_by_learning_rate);
  visit("allow_zero_accumulator", ftrl.allow_zero_accumulator);
  visit("common", ftrl.common);
}
void fields(Is<RowwiseAdagrad> auto& rowwise_adagrad, auto& visit) {
  visit("learning_rate", rowwise_adagrad.learning_rate);
  visit("initial_accumulator_value", rowwise_adagrad.initial_accumulator_value);
  visit("epsilon", rowwise_adagrad.epsilon);
  visit("common", rowwise_adagrad.common);
}
void fields(Is<ExponentialDecay> auto& schedule, auto& visit) {
  visit("initial_learning_rate", schedule.initial_learning_rate);
  visit("decay_steps", schedule.decay_steps);
  visit("decay_rate", schedule.decay_rate);
  visit("staircase", schedule.staircase);
}
void fields(Is<PiecewiseConstant> auto& schedule, auto& visit) {
  visit("boundaries", schedule.boundaries);
  visit("values", schedule.values);
}
void fields(Is<LinearWarmup> auto& schedule, auto& visit) {
  visit("target_learning_rate", schedule.target_learning_rate);
  visit("warmup_steps", schedule.warmup_steps);
  visit("initial_learning_rate", schedule.initial_learning_rate);
}
void fields(Is<TruncatedNormal> auto& initializer, auto& visit) {
  visit("mean", initializer.mean);
  visit("stddev", initializer.stddev);
}
void fields(Is<Constant> auto& initializer, auto& visit) { visit("value", initializer.value); }
void fields(Is<RowId> auto& initializer, auto& visit) { visit("offset", initializer.offset); }
void fields(Is<QuantizationConfig> auto& quantization, auto& visit) {
  visit("num_buckets", quantization.num_buckets);
  visit("lower", quantization.lower);
  visit("upper", quantization.upper);
}
void fields(Is<DynamicVocabulary> auto& vocabulary, auto& visit) {
  visit("capacity", vocabulary.capacity);
  visit("min_count", vocabulary.min_count);
  visit("ttl_steps", vocabulary.ttl_steps);
  visit("when_full", vocabulary.when_full);
}
void fields(Is<TableConfig> auto& table, auto& visit) {
  visit("name", table.name);
  visit("vocabulary_size", table.vocabulary_size);
  visit("dim", table.dim);
  visit("combiner", table.combiner);
  visit("initializer", table.initializer);
  visit("optimizer", table.optimizer);
  visit("quantization_config", table.quantization_config);
  visit("dynamic_vocabulary", table.dynamic_vocabulary);
  visit("dtype", table.dtype);
  visit("rounding", table.rounding);
}
void fields(Is<FeatureConfig> auto& feature, auto& visit) {
  visit("name", feature.name);
  visit("table", feature.table);
  visit("max_sequence_length", feature.max_sequence_length);
  visit("output_shape", feature.output_shape);
  visit("validate_weights_and_indices", feature.validate_weights_and_indices);
}

// The "kind" of each alternative of Initializer and LearningRate that is written as an object.
std::string_view kind_of(const TruncatedNormal&) { return "truncated_normal"; }
std::string_view kind_of(const Constant&) { return "constant"; }
std::string_view kind_of(const RowId&) { return "row_id"; }
std::string_view kind_of(const InitializerCallback&) { return "callback"; }
std::string_view kind_of(const ExponentialDecay&) { return "exponential_decay"; }
std::string_view kind_of(const PiecewiseConstant&) { return "piecewise_constant"; }
std::string_view kind_of(const LinearWarmup&) { return "linear_warmup"; }
std::string_view kind_of(const LearningRateCallback&) { return "callback"; }

struct AnyVisitor {
  template <class T>
  void operator()(std::string_view, T&) const {}
};
template <class T>
concept HasFields = requires(T& value, AnyVisitor& visit) {
  fields(value, visit);
};
template <class T>
concept HasKind = requires(const T& value) {
  kind_of(value);
};

// ---------------------------------------------------------------------------------------------
// Writing.

Json value_to_json(float value);
Json value_to_json(bool value);
Json value_to_json(int64_t value);
Json value_to_json(const std::string& value);
Json value_to_json(Combiner combiner);
Json value_to_json(WhenFull when_full);
Json value_to_json(DType dtype);
Json value_to_json(Rounding rounding);
template <class T>
Json value_to_json(const std::vector<T>& values);
Json value_to_json(const LearningRate& learning_rate);
Json value_to_json(const Initializer& initializer);
Json value_to_json(const Optimizer& optimizer);
template <HasFields T>
Json value_to_json(const T& value);

// Adds each visited field to `object`; an unset optional is left out, and so are a table's dtype
// and rounding at their defaults (float32, stochastic), so that a float32 table's config reads as
// it did before 16-bit tables.
struct Writer {
  Json& object;

  template <class T>
  void operator()(std::string_view key, const T& value) {
    object[std::string(key)] = value_to_json(value);
  }
  template <class T>
  void operator()(std::string_view key, const std::optional<T>& value) {
    if (value) (*this)(key, *value);
  }
  void operator()(std::string_view key, DType value) {
    if (value != DType::kFloat32) object[std::string(key)] = value_to_json(value);
  }
  void operator()(std::string_view key, Rounding value) {
    if (value != Rounding::kStochastic) object[std::string(key)] = value_to_json(value);
  }
};

Json value_to_json(float value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // The float's shortest decimal form (0.001 rather than 0.0010000000474974513) when that reads
  // back as the same float. It does for every float but +-7.038531e-26 (checked exhaustively),
  // where rounding the decimal to double and then to float rounds twice.
  const std::string text = support::float_text(value);
  double shortest = 0.0;
  std::from_chars(text.data(), text.data() + text.size(), shortest);
  return static_cast<float>(shortest) == value ? shortest : static_cast<double>(value);
}
Json value_to_json(bool value) { return value; }
Json value_to_json(int64_t value) { return value; }
Json value_to_json(const std::string& value) { return value; }
Json value_to_json(Combiner combiner) { return std::string(combiner_name(combiner)); }
Json value_to_json(WhenFull when_full) { return std::string(when_full_name(when_full)); }
Json value_to_json(DType dtype) { return std::string(dtype_name(dtype)); }
Json value_to_json(Rounding rounding) { return std::string(rounding_name(rounding)); }

template <class T>
Json value_to_json(const std::vector<T>& values) {
  Json array = Json::array();
  for (const T& value : values) array.push_back(value_to_json(value));
  return array;
}

template <HasFields T>
Json value_to_json(const T& value) {
  Json object = Json::object();
  Writer writer{object};
  fields(value, writer);
  return object;
}

// {"kind": ..., <fields>}, or a plain value for an alternative without a kind (a constant
// learning rate).
template <class Variant>
Json variant_to_json(const Variant& variant) {
  return std::visit(
      [](const auto& alternative) -> Json {
        using T = std::decay_t<decltype(alternative)>;
        if constexpr (HasKind<T>) {
          Json object = {{"kind", std::string(kind_of(alternative))}};
          if constexpr (HasFields<T>) {
            Writer writer{object};
            fields(alternative, writer);
          }
          return object;
        } else {
          return value_to_json(alternative);
        }
      },
      variant);
}

Json value_to_json(const LearningRate& learning_rate) { return variant_to_json(learning_rate); }
Json value_to_json(const Initializer& initializer) { return variant_to_json(initializer); }

Json value_to_json(const Optimizer& optimizer) {
  Json object = {{"name", optimizer_name(optimizer)}};
  Writer writer{object};
  std::visit([&writer](const auto& alternative) { fields(alternative, writer); }, optimizer);
  return object;
}

// ---------------------------------------------------------------------------------------------
// Reading.

void read_value(const JsonReader& json, float& value);
void read_value(const JsonReader& json, bool& value);
void read_value(const JsonReader& json, int64_t& value);
void read_value(const JsonReader& json, std::string& value);
void read_value(const JsonReader& json, Combiner& combiner);
void read_value(const JsonReader& json, WhenFull& when_full);
void read_value(const JsonReader& json, DType& dtype);
void read_value(const JsonReader& json, Rounding& rounding);
template <class T>
void read_value(const JsonReader& json, std::vector<T>& values);
template <class T>
void read_value(const JsonReader& json, std::optional<T>& value);
void read_value(const JsonReader& json, LearningRate& learning_rate);
void read_value(const JsonReader& json, Initializer& initializer);
void read_value(const JsonReader& json, Optimizer& optimizer);
template <HasFields T>
void read_value(const JsonReader& json, T& value);

// Reads the visited fields of one JSON object; absent keys leave the field as it is (its default).
class ObjectReader {
 public:
  explicit ObjectReader(JsonReader json) : json_(std::move(json)) { json_.expect_object(); }

  template <class T>
  void operator()(std::string_view key, T& value) {
    known_keys_.push_back(key);
    if (const std::optional<JsonReader> found = json_.find(key)) read_value(*found, value);
  }

  // The string under `key`, which must be present (the "kind" or "name" that selects a type).
  std::string tag(std::string_view key) {
    known_keys_.push_back(key);
    return json_.member(key).string();
  }

  void require(std::string_view key) const { json_.member(key); }

  // A misspelt field would otherwise be silently replaced by its default.
  void reject_unknown_keys() const { json_.expect_only(known_keys_); }

 private:
  JsonReader json_;
  std::vector<std::string_view> known_keys_;
};

void read_value(const JsonReader& json, float& value) {
  if (json.json().is_number()) {
    const double number = json.number();
    // Converting a double beyond the float range to float is undefined behaviour.
    if (std::abs(number) > static_cast<double>(std::numeric_limits<float>::max())) {
      json.fail("value " + describe(json.json()) + " is outside the float range");
    }
    value = static_cast<float>(number);
    return;
  }
  if (json.json().is_string()) {
    const std::string text = json.string();
    if (text == "inf" || text == "-inf" || text == "nan") {
      value = text == "nan"
                  ? std::numeric_limits<float>::quiet_NaN()
                  : (text == "inf" ? 1.0f : -1.0f) * std::numeric_limits<float>::infinity();
      return;
    }
  }
  json.fail("expected a number or \"inf\", \"-inf\", \"nan\", got " + describe(json.json()));
}

void read_value(const JsonReader& json, bool& value) { value = json.boolean(); }

void read_value(const JsonReader& json, int64_t& value) { value = json.integer(); }

void read_value(const JsonReader& json, std::string& value) { value = json.string(); }

void read_value(const JsonReader& json, Combiner& combiner) {
  try {
    // A long name is cut, so that the message quotes a few dozen characters; it stays invalid.
    combiner = parse_combiner(support::excerpt(json.string()));
  } catch (const InvalidArgument& error) {
    json.fail(error.what());
  }
}

void read_value(const JsonReader& json, WhenFull& when_full) {
  try {
    when_full = parse_when_full(support::excerpt(json.string()));
  } catch (const InvalidArgument& error) {
    json.fail(error.what());
  }
}

void read_value(const JsonReader& json, DType& dtype) {
  try {
    dtype = parse_dtype(support::excerpt(json.string()));
  } catch (const InvalidArgument& error) {
    json.fail(error.what());
  }
}

void read_value(const JsonReader& json, Rounding& rounding) {
  try {
    rounding = parse_rounding(support::excerpt(json.string()));
  } catch (const InvalidArgument& error) {
    json.fail(error.what());
  }
}

template <class T>
void read_value(const JsonReader& json, std::vector<T>& values) {
  std::vector<T> read(json.size());
  for (size_t i = 0; i < read.size(); ++i) read_value(json.element(i), read[i]);
  values = std::move(read);
}

template <class T>
void read_value(const JsonReader& json, std::optional<T>& value) {
  if (json.json().is_null()) {
    value.reset();
    return;
  }
  T read{};
  read_value(json, read);
  value = std::move(read);
}

template <HasFields T>
void read_value(const JsonReader& json, T& value) {
  ObjectReader reader(json);
  fields(value, reader);
  reader.reject_unknown_keys();
}

// Every alternative of Variant, default-constructed, in variant order.
template <class Variant, size_t... kIndex>
std::vector<Variant> default_alternatives(std::index_sequence<kIndex...>) {
  return {Variant(std::in_place_index<kIndex>)...};
}

// Reads {"kind": ..., <fields>} into the alternative of that kind.
template <class Variant>
void read_kind(const JsonReader& json, Variant& variant, std::string_view what) {
  ObjectReader reader(json);
  const std::string kind = reader.tag("kind");
  std::string valid_kinds;
  bool found = false;
  for (Variant& candidate :
       default_alternatives<Variant>(std::make_index_sequence<std::variant_size_v<Variant>>())) {
    const std::string_view candidate_kind = std::visit(
        [](const auto& alternative) -> std::string_view {
          if constexpr (HasKind<std::decay_t<decltype(alternative)>>) return kind_of(alternative);
          return {};
        },
        candidate);
    if (candidate_kind.empty()) continue;
    valid_kinds += (valid_kinds.empty() ? "\"" : ", \"") + std::string(candidate_kind) + "\"";
    if (candidate_kind == kind) {
      variant = std::move(candidate);
      found = true;
    }
  }
  if (!found) {
    json.member("kind").fail("unknown " + std::string(what) + " kind \"" + support::excerpt(kind) +
                             "\"; expected one of " + valid_kinds);
  }
  std::visit(
      [&reader](auto& alternative) {
        if constexpr (HasFields<std::decay_t<decltype(alternative)>>) fields(alternative, reader);
      },
      variant);
  reader.reject_unknown_keys();
}

void read_value(const JsonReader& json, LearningRate& learning_rate) {
  if (json.json().is_number() || json.json().is_string()) {
    float constant = 0.0f;
    read_value(json, constant);
    learning_rate = constant;
    return;
  }
  read_kind(json, learning_rate, "learning rate");
  if (std::holds_alternative<LearningRateCallback>(learning_rate)) {
    json.fail(
        "a callback learning rate cannot be rebuilt from JSON; construct the optimizer in code "
        "(or restore into an Embedding built with it)");
  }
}

void read_value(const JsonReader& json, Initializer& initializer) {
  read_kind(json, initializer, "initializer");
  if (std::holds_alternative<InitializerCallback>(initializer)) initializer = TruncatedNormal{};
}

void read_value(const JsonReader& json, Optimizer& optimizer) {
  ObjectReader reader(json);
  // A long name is cut, so that the message quotes a few dozen characters; it stays invalid.
  const std::string name = support::excerpt(reader.tag("name"));
  try {
    optimizer = parse_optimizer(name);
  } catch (const InvalidArgument& error) {
    json.member("name").fail(error.what());
  }
  std::visit([&reader](auto& alternative) { fields(alternative, reader); }, optimizer);
  reader.reject_unknown_keys();
}

template <class T>
T read_config(const JsonReader& json, std::initializer_list<std::string_view> required) {
  T config;
  ObjectReader reader(json);
  fields(config, reader);
  // Unknown keys first: a misspelt required key is reported as the typo it is.
  reader.reject_unknown_keys();
  for (std::string_view key : required) reader.require(key);
  return config;
}

}  // namespace

Json table_to_json(const TableConfig& table) { return value_to_json(table); }

TableConfig table_from_json(const JsonReader& json) {
  return read_config<TableConfig>(json, {"name", "vocabulary_size", "dim"});
}

Json feature_to_json(const FeatureConfig& feature) { return value_to_json(feature); }

FeatureConfig feature_from_json(const JsonReader& json) {
  return read_config<FeatureConfig>(json, {"name", "table"});
}

Json optimizer_to_json(const Optimizer& optimizer) { return value_to_json(optimizer); }

Optimizer optimizer_from_json(const JsonReader& json) {
  Optimizer optimizer;
  read_value(json, optimizer);
  return optimizer;
}

uint64_t checksum_from_json(const JsonReader& json) {
  uint64_t checksum = 0;
  if (!json.json().is_string() || !parse_checksum(json.string(), checksum)) {
    json.fail("expected 16 lowercase hex digits, got " + support::describe(json.json()));
  }
  return checksum;
}

}  // namespace recemb::format
