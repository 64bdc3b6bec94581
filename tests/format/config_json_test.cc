// JSON forms of TableConfig, FeatureConfig and Optimizer (format/config_json.h).
//
// Round trips compare field by field against the original structs (the comparisons below list the
// fields independently of the library's field lists), on random non-default values, and a golden
// text pins the written names and forms.
#include "format/config_json.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <limits>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "recemb/error.h"

#include "format/checksum.h"
#include "testing/error_of.h"

namespace recemb::format {
namespace {

using support::Json;
using support::JsonDocument;
using support::JsonReader;
using support::JsonSource;
using ::testing::HasSubstr;

constexpr float kInfinity = std::numeric_limits<float>::infinity();

// Bitwise float equality (so that -0.0f != 0.0f and NaN == NaN of the same payload).
void expect_same(float expected, float actual, const std::string& field) {
  EXPECT_EQ(std::bit_cast<uint32_t>(expected), std::bit_cast<uint32_t>(actual))
      << field << ": expected " << expected << ", got " << actual;
}

void expect_same(const LearningRate& expected, const LearningRate& actual) {
  ASSERT_EQ(expected.index(), actual.index());
  if (const auto* constant = std::get_if<float>(&expected)) {
    expect_same(*constant, std::get<float>(actual), "learning_rate");
  } else if (const auto* decay = std::get_if<ExponentialDecay>(&expected)) {
    const auto& other = std::get<ExponentialDecay>(actual);
    expect_same(decay->initial_learning_rate, other.initial_learning_rate, "initial_learning_rate");
    EXPECT_EQ(decay->decay_steps, other.decay_steps);
    expect_same(decay->decay_rate, other.decay_rate, "decay_rate");
    EXPECT_EQ(decay->staircase, other.staircase);
  } else if (const auto* piecewise = std::get_if<PiecewiseConstant>(&expected)) {
    const auto& other = std::get<PiecewiseConstant>(actual);
    EXPECT_EQ(piecewise->boundaries, other.boundaries);
    ASSERT_EQ(piecewise->values.size(), other.values.size());
    for (size_t i = 0; i < piecewise->values.size(); ++i) {
      expect_same(piecewise->values[i], other.values[i], "values");
    }
  } else {
    const auto& warmup = std::get<LinearWarmup>(expected);
    const auto& other = std::get<LinearWarmup>(actual);
    expect_same(warmup.target_learning_rate, other.target_learning_rate, "target_learning_rate");
    EXPECT_EQ(warmup.warmup_steps, other.warmup_steps);
    expect_same(warmup.initial_learning_rate, other.initial_learning_rate, "initial_learning_rate");
  }
}

void expect_same(const CommonHyperparameters& expected, const CommonHyperparameters& actual) {
  EXPECT_EQ(expected.use_gradient_accumulation, actual.use_gradient_accumulation);
  expect_same(expected.clip_weight_min, actual.clip_weight_min, "clip_weight_min");
  expect_same(expected.clip_weight_max, actual.clip_weight_max, "clip_weight_max");
  expect_same(expected.weight_decay_factor, actual.weight_decay_factor, "weight_decay_factor");
  EXPECT_EQ(expected.multiply_weight_decay_factor_by_learning_rate,
            actual.multiply_weight_decay_factor_by_learning_rate);
  expect_same(expected.clip_gradient_min, actual.clip_gradient_min, "clip_gradient_min");
  expect_same(expected.clip_gradient_max, actual.clip_gradient_max, "clip_gradient_max");
}

void expect_same_fields(const Sgd&, const Sgd&) {}
void expect_same_fields(const Adagrad& expected, const Adagrad& actual) {
  expect_same(expected.initial_accumulator_value, actual.initial_accumulator_value,
              "initial_accumulator_value");
}
void expect_same_fields(const AdagradMomentum& expected, const AdagradMomentum& actual) {
  expect_same(expected.momentum, actual.momentum, "momentum");
  EXPECT_EQ(expected.use_nesterov, actual.use_nesterov);
  expect_same(expected.exponent, actual.exponent, "exponent");
  expect_same(expected.beta2, actual.beta2, "beta2");
  expect_same(expected.epsilon, actual.epsilon, "epsilon");
}
void expect_same_fields(const Adam& expected, const Adam& actual) {
  expect_same(expected.beta_1, actual.beta_1, "beta_1");
  expect_same(expected.beta_2, actual.beta_2, "beta_2");
  expect_same(expected.epsilon, actual.epsilon, "epsilon");
  EXPECT_EQ(expected.lazy_adam, actual.lazy_adam);
  EXPECT_EQ(expected.sum_inside_sqrt, actual.sum_inside_sqrt);
  EXPECT_EQ(expected.bias_correction, actual.bias_correction);
}
void expect_same_fields(const Ftrl& expected, const Ftrl& actual) {
  expect_same(expected.learning_rate_power, actual.learning_rate_power, "learning_rate_power");
  expect_same(expected.l1_regularization_strength, actual.l1_regularization_strength, "l1");
  expect_same(expected.l2_regularization_strength, actual.l2_regularization_strength, "l2");
  expect_same(expected.beta, actual.beta, "beta");
  expect_same(expected.initial_accumulator_value, actual.initial_accumulator_value,
              "initial_accumulator_value");
  EXPECT_EQ(expected.multiply_linear_by_learning_rate, actual.multiply_linear_by_learning_rate);
  EXPECT_EQ(expected.allow_zero_accumulator, actual.allow_zero_accumulator);
}
void expect_same_fields(const RowwiseAdagrad& expected, const RowwiseAdagrad& actual) {
  expect_same(expected.initial_accumulator_value, actual.initial_accumulator_value,
              "initial_accumulator_value");
  expect_same(expected.epsilon, actual.epsilon, "epsilon");
}

void expect_same(const Optimizer& expected, const Optimizer& actual) {
  ASSERT_EQ(expected.index(), actual.index());
  std::visit(
      [&actual](const auto& want) {
        const auto& got = std::get<std::decay_t<decltype(want)>>(actual);
        expect_same(want.learning_rate, got.learning_rate);
        expect_same(want.common, got.common);
        expect_same_fields(want, got);
      },
      expected);
}

void expect_same(const Initializer& expected, const Initializer& actual) {
  ASSERT_EQ(expected.index(), actual.index());
  if (const auto* normal = std::get_if<TruncatedNormal>(&expected)) {
    expect_same(normal->mean, std::get<TruncatedNormal>(actual).mean, "mean");
    expect_same(normal->stddev, std::get<TruncatedNormal>(actual).stddev, "stddev");
  } else if (const auto* constant = std::get_if<Constant>(&expected)) {
    expect_same(constant->value, std::get<Constant>(actual).value, "value");
  } else {
    expect_same(std::get<RowId>(expected).offset, std::get<RowId>(actual).offset, "offset");
  }
}

void expect_same(const TableConfig& expected, const TableConfig& actual) {
  EXPECT_EQ(expected.name, actual.name);
  EXPECT_EQ(expected.vocabulary_size, actual.vocabulary_size);
  EXPECT_EQ(expected.dim, actual.dim);
  expect_same(expected.initializer, actual.initializer);
  ASSERT_EQ(expected.optimizer.has_value(), actual.optimizer.has_value());
  if (expected.optimizer) expect_same(*expected.optimizer, *actual.optimizer);
  EXPECT_EQ(expected.combiner, actual.combiner);
  ASSERT_EQ(expected.quantization_config.has_value(), actual.quantization_config.has_value());
  if (expected.quantization_config) {
    EXPECT_EQ(expected.quantization_config->num_buckets, actual.quantization_config->num_buckets);
    expect_same(expected.quantization_config->lower, actual.quantization_config->lower, "lower");
    expect_same(expected.quantization_config->upper, actual.quantization_config->upper, "upper");
  }
  ASSERT_EQ(expected.dynamic_vocabulary.has_value(), actual.dynamic_vocabulary.has_value());
  if (expected.dynamic_vocabulary) {
    EXPECT_EQ(expected.dynamic_vocabulary->capacity, actual.dynamic_vocabulary->capacity);
    EXPECT_EQ(expected.dynamic_vocabulary->min_count, actual.dynamic_vocabulary->min_count);
    EXPECT_EQ(expected.dynamic_vocabulary->ttl_steps, actual.dynamic_vocabulary->ttl_steps);
    EXPECT_EQ(expected.dynamic_vocabulary->when_full, actual.dynamic_vocabulary->when_full);
  }
  EXPECT_EQ(expected.dtype, actual.dtype);
  EXPECT_EQ(expected.rounding, actual.rounding);
}

// Random values that a decimal rendering with too few digits would not reproduce.
class RandomValues {
 public:
  explicit RandomValues(uint64_t seed) : rng_(seed) {}
  float real() { return std::uniform_real_distribution<float>(0.001f, 3.0f)(rng_); }
  int64_t integer() { return std::uniform_int_distribution<int64_t>(1, int64_t{1} << 40)(rng_); }
  bool flip() { return std::bernoulli_distribution(0.5)(rng_); }

  LearningRate learning_rate(size_t kind) {
    switch (kind) {
      case 0:
        return real();
      case 1:
        return ExponentialDecay{.initial_learning_rate = real(),
                                .decay_steps = integer(),
                                .decay_rate = real(),
                                .staircase = true};
      case 2:
        return PiecewiseConstant{.boundaries = {integer(), integer() + (int64_t{1} << 41)},
                                 .values = {real(), real(), real()}};
      default:
        return LinearWarmup{.target_learning_rate = real(),
                            .warmup_steps = integer(),
                            .initial_learning_rate = real()};
    }
  }

  CommonHyperparameters common() {
    return {.use_gradient_accumulation = flip(),
            .clip_weight_min = -real(),
            .clip_weight_max = real(),
            .weight_decay_factor = real(),
            .multiply_weight_decay_factor_by_learning_rate = true,
            .clip_gradient_min = -real(),
            .clip_gradient_max = flip() ? kInfinity : real()};
  }

  // Every field away from its default.
  Optimizer optimizer(size_t index, size_t learning_rate_kind) {
    const LearningRate lr = learning_rate(learning_rate_kind);
    switch (index) {
      case 0:
        return Sgd{.learning_rate = lr, .common = common()};
      case 1:
        return Adagrad{
            .learning_rate = lr, .initial_accumulator_value = real(), .common = common()};
      case 2:
        return AdagradMomentum{.learning_rate = lr,
                               .momentum = real(),
                               .use_nesterov = true,
                               .exponent = real(),
                               .beta2 = real(),
                               .epsilon = real(),
                               .common = common()};
      case 3:
        return Adam{.learning_rate = lr,
                    .beta_1 = real() / 4,
                    .beta_2 = real() / 4,
                    .epsilon = real(),
                    .lazy_adam = false,
                    .sum_inside_sqrt = false,
                    .bias_correction = true,
                    .common = common()};
      case 4:
        return Ftrl{.learning_rate = lr,
                    .learning_rate_power = -real(),
                    .l1_regularization_strength = real(),
                    .l2_regularization_strength = real(),
                    .beta = real(),
                    .initial_accumulator_value = real(),
                    .multiply_linear_by_learning_rate = true,
                    .allow_zero_accumulator = true,
                    .common = common()};
      default:
        return RowwiseAdagrad{.learning_rate = lr,
                              .initial_accumulator_value = real(),
                              .epsilon = real(),
                              .common = common()};
    }
  }

 private:
  std::mt19937_64 rng_;
};

// The readers on a whole document, a caller's input named after what it holds.
const JsonDocument kTableDocument{.name = "table", .source = JsonSource::kInput};
const JsonDocument kFeatureDocument{.name = "feature", .source = JsonSource::kInput};
const JsonDocument kOptimizerDocument{.name = "optimizer", .source = JsonSource::kInput};

TableConfig read_table(const Json& json) {
  return table_from_json(JsonReader(json, kTableDocument));
}
FeatureConfig read_feature(const Json& json) {
  return feature_from_json(JsonReader(json, kFeatureDocument));
}
Optimizer read_optimizer(const Json& json) {
  return optimizer_from_json(JsonReader(json, kOptimizerDocument));
}

using test::error_of;

TEST(ConfigJsonTest, EveryOptimizerAndScheduleRoundTrips) {
  for (uint64_t seed : {1u, 2u, 3u}) {
    RandomValues random(seed);
    for (size_t index = 0; index < std::variant_size_v<Optimizer>; ++index) {
      for (size_t kind = 0; kind < 4; ++kind) {
        SCOPED_TRACE("seed " + std::to_string(seed) + " optimizer " + std::to_string(index) +
                     " learning rate kind " + std::to_string(kind));
        const Optimizer optimizer = random.optimizer(index, kind);
        const Json json = optimizer_to_json(optimizer);
        EXPECT_EQ(json["name"], optimizer_name(optimizer));
        // Through text, as a manifest is stored.
        expect_same(optimizer, read_optimizer(Json::parse(json.dump())));
      }
    }
  }
}

// Floats are written in their shortest form where that reads back exactly; every float, normal or
// subnormal, of either sign, must come back bit for bit through the text.
TEST(ConfigJsonTest, EveryFloatReadsBackBitForBit) {
  std::mt19937_64 rng(13);
  // The two floats whose shortest form rounds twice (to double, then to float) to a neighbour,
  // +-7.038531e-26, then random bit patterns.
  std::vector<uint32_t> patterns = {0x15ae43fd, 0x95ae43fd};
  for (int i = 0; i < 20000; ++i) patterns.push_back(static_cast<uint32_t>(rng()));
  for (const uint32_t bits : patterns) {
    const float value = std::bit_cast<float>(bits);
    if (!std::isfinite(value)) continue;
    const TableConfig table{
        .name = "t", .vocabulary_size = 1, .dim = 1, .initializer = Constant{.value = value}};
    const TableConfig read = read_table(Json::parse(table_to_json(table).dump()));
    ASSERT_EQ(std::bit_cast<uint32_t>(std::get<Constant>(read.initializer).value), bits) << value;
  }
  EXPECT_EQ(table_to_json({.name = "t", .initializer = Constant{.value = 0.001f}}).dump(),
            R"({"name":"t","vocabulary_size":0,"dim":0,"combiner":"mean",)"
            R"("initializer":{"kind":"constant","value":0.001}})");
}

TEST(ConfigJsonTest, InfiniteAndNanFloatsAreStrings) {
  const Optimizer sgd = Sgd{};  // clip bounds default to -inf / +inf
  const Json json = optimizer_to_json(sgd);
  EXPECT_EQ(json["common"]["clip_weight_min"], "-inf");
  EXPECT_EQ(json["common"]["clip_weight_max"], "inf");
  expect_same(sgd, read_optimizer(Json::parse(json.dump())));

  const Optimizer nan_decay =
      Sgd{.learning_rate = 0.5f,
          .common = {.weight_decay_factor = std::numeric_limits<float>::quiet_NaN()}};
  const Json nan_json = optimizer_to_json(nan_decay);
  EXPECT_EQ(nan_json["common"]["weight_decay_factor"], "nan");
  const Optimizer read = read_optimizer(nan_json);
  EXPECT_TRUE(std::isnan(std::get<Sgd>(read).common.weight_decay_factor));
}

// The golden text pins the written names and forms (what docs/formats.md documents).
TEST(ConfigJsonTest, WritesTheDocumentedForm) {
  const TableConfig table{
      .name = "video",
      .vocabulary_size = 1000,
      .dim = 16,
      .initializer = RowId{.offset = 0.5f},
      .optimizer = Adagrad{.learning_rate = ExponentialDecay{.initial_learning_rate = 0.25f,
                                                             .decay_steps = 100,
                                                             .decay_rate = 0.5f,
                                                             .staircase = true},
                           .initial_accumulator_value = 0.125f,
                           .common = {.clip_weight_max = 2.0f}},
      .combiner = Combiner::kSqrtn,
      .quantization_config = QuantizationConfig{.num_buckets = 8, .lower = -1.0f, .upper = 1.0f}};
  EXPECT_EQ(
      table_to_json(table).dump(),
      R"({"name":"video","vocabulary_size":1000,"dim":16,"combiner":"sqrtn",)"
      R"("initializer":{"kind":"row_id","offset":0.5},"optimizer":{"name":"adagrad",)"
      R"("learning_rate":{"kind":"exponential_decay","initial_learning_rate":0.25,)"
      R"("decay_steps":100,"decay_rate":0.5,"staircase":true},"initial_accumulator_value":0.125,)"
      R"("common":{"use_gradient_accumulation":true,"clip_weight_min":"-inf","clip_weight_max":2.0,)"
      R"("weight_decay_factor":0.0,"multiply_weight_decay_factor_by_learning_rate":false,)"
      R"("clip_gradient_min":"-inf","clip_gradient_max":"inf"}},)"
      R"("quantization_config":{"num_buckets":8,"lower":-1.0,"upper":1.0}})");

  const FeatureConfig feature{.name = "watched",
                              .table = "video",
                              .max_sequence_length = 3,
                              .output_shape = {2, 5},
                              .validate_weights_and_indices = false};
  EXPECT_EQ(feature_to_json(feature).dump(),
            R"({"name":"watched","table":"video","max_sequence_length":3,"output_shape":[2,5],)"
            R"("validate_weights_and_indices":false})");
}

TEST(ConfigJsonTest, TablesRoundTripWithEveryInitializerAndCombiner) {
  RandomValues random(7);
  const std::vector<Initializer> initializers = {
      TruncatedNormal{.mean = random.real(), .stddev = random.real()},
      Constant{.value = -random.real()}, RowId{.offset = random.real()}};
  const std::vector<Combiner> combiners = {Combiner::kSum, Combiner::kMean, Combiner::kSqrtn};
  for (const Initializer& initializer : initializers) {
    for (const Combiner combiner : combiners) {
      for (bool with_optionals : {false, true}) {
        TableConfig table{.name = "t" + std::to_string(random.integer()),
                          .vocabulary_size = random.integer(),
                          .dim = random.integer(),
                          .initializer = initializer,
                          .combiner = combiner};
        if (with_optionals) {
          table.optimizer = random.optimizer(3, 2);
          table.quantization_config = QuantizationConfig{
              .num_buckets = random.integer(), .lower = -random.real(), .upper = random.real()};
          table.dynamic_vocabulary = DynamicVocabulary{
              .capacity = random.integer(),
              .min_count = random.integer(),
              .ttl_steps = random.integer(),
              .when_full =
                  random.integer() % 2 == 0 ? WhenFull::kError : WhenFull::kEvictLeastFrequent};
        }
        const Json json = table_to_json(table);
        EXPECT_EQ(json.contains("optimizer"), with_optionals);
        EXPECT_EQ(json.contains("quantization_config"), with_optionals);
        EXPECT_EQ(json.contains("dynamic_vocabulary"), with_optionals);
        expect_same(table, read_table(Json::parse(json.dump())));
      }
    }
  }
}

// A 16-bit table's dtype and rounding round trip; at their defaults (float32, stochastic) they are
// left out, so that a float32 table's config is written as before 16-bit tables.
TEST(ConfigJsonTest, DTypeAndRoundingRoundTripAndDefaultsAreLeftOut) {
  for (const DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    for (const Rounding rounding : {Rounding::kStochastic, Rounding::kNearest}) {
      const TableConfig table{
          .name = "t", .vocabulary_size = 4, .dim = 2, .dtype = dtype, .rounding = rounding};
      const Json json = table_to_json(table);
      EXPECT_EQ(json.contains("dtype"), dtype != DType::kFloat32);
      EXPECT_EQ(json.contains("rounding"), rounding != Rounding::kStochastic);
      if (dtype != DType::kFloat32) {
        EXPECT_EQ(json["dtype"], std::string(dtype_name(dtype)));
      }
      expect_same(table, read_table(Json::parse(json.dump())));
    }
  }
  const Json bad = Json::parse(R"({"name": "t", "vocabulary_size": 4, "dim": 2, "dtype": "int4"})");
  EXPECT_THAT([&] { read_table(bad); },
              ::testing::ThrowsMessage<InvalidArgument>(::testing::HasSubstr(
                  "dtype: unknown dtype 'int4'; valid names are 'float32', 'bfloat16', "
                  "'float16'")));
}

TEST(ConfigJsonTest, CallbackInitializerIsWrittenAsCallbackAndReadAsTheDefault) {
  const TableConfig table{
      .name = "t",
      .vocabulary_size = 3,
      .dim = 2,
      .initializer = InitializerCallback([](int64_t, int64_t, int64_t, std::span<float>) {})};
  const Json json = table_to_json(table);
  EXPECT_EQ(json["initializer"], Json::parse(R"({"kind":"callback"})"));
  const TableConfig read = read_table(json);
  ASSERT_TRUE(std::holds_alternative<TruncatedNormal>(read.initializer));
  expect_same(Initializer(TruncatedNormal{}), read.initializer);
}

TEST(ConfigJsonTest, CallbackLearningRateIsWrittenButNotRead) {
  const Optimizer adam = Adam{.learning_rate = LearningRateCallback([](int64_t) { return 0.1f; })};
  const Json json = optimizer_to_json(adam);
  EXPECT_EQ(json["learning_rate"], Json::parse(R"({"kind":"callback"})"));
  const std::string error = error_of<InvalidArgument>([&] { read_optimizer(json); });
  EXPECT_THAT(error, HasSubstr("optimizer: learning_rate"));
  EXPECT_THAT(error, HasSubstr("callback"));
  // Inside a table, the path runs from the document's root.
  Json table = Json::parse(R"({"name": "video", "vocabulary_size": 4, "dim": 2})");
  table["optimizer"] = json;
  EXPECT_THAT(error_of<InvalidArgument>([&] { read_table(table); }),
              HasSubstr("table: optimizer.learning_rate"));
}

TEST(ConfigJsonTest, FeaturesRoundTrip) {
  RandomValues random(11);
  for (int i = 0; i < 5; ++i) {
    const FeatureConfig feature{.name = "f" + std::to_string(random.integer()),
                                .table = "t" + std::to_string(random.integer()),
                                .max_sequence_length = random.integer(),
                                .output_shape = {random.integer(), random.integer()},
                                .validate_weights_and_indices = random.flip()};
    const FeatureConfig read = read_feature(Json::parse(feature_to_json(feature).dump()));
    EXPECT_EQ(read.name, feature.name);
    EXPECT_EQ(read.table, feature.table);
    EXPECT_EQ(read.max_sequence_length, feature.max_sequence_length);
    EXPECT_EQ(read.output_shape, feature.output_shape);
    EXPECT_EQ(read.validate_weights_and_indices, feature.validate_weights_and_indices);
  }
}

TEST(ConfigJsonTest, AbsentKeysTakeTheDefaults) {
  const TableConfig table =
      read_table(Json::parse(R"({"name": "t", "vocabulary_size": 5, "dim": 2})"));
  expect_same(TableConfig{.name = "t", .vocabulary_size = 5, .dim = 2}, table);
  const TableConfig with_nulls = read_table(Json::parse(
      R"({"name": "t", "vocabulary_size": 5, "dim": 2, "optimizer": null,
          "quantization_config": null})"));
  EXPECT_FALSE(with_nulls.optimizer.has_value());
  EXPECT_FALSE(with_nulls.quantization_config.has_value());

  expect_same(Optimizer(Adam{}), read_optimizer(Json::parse(R"({"name": "adam"})")));
  expect_same(Optimizer(Ftrl{.learning_rate = 0.5f, .common = {.clip_weight_max = 3.0f}}),
              read_optimizer(Json::parse(
                  R"({"name": "ftrl", "learning_rate": 0.5, "common": {"clip_weight_max": 3}})")));

  const FeatureConfig feature = read_feature(Json::parse(R"({"name": "f", "table": "t"})"));
  EXPECT_EQ(feature.max_sequence_length, 0);
  EXPECT_TRUE(feature.output_shape.empty());
  EXPECT_TRUE(feature.validate_weights_and_indices);
}

TEST(ConfigJsonTest, ErrorsNameTheDocumentAndThePath) {
  struct Case {
    const char* json;
    const char* expected;
  };
  const std::vector<Case> table_cases = {
      {R"([1, 2])", "table: expected an object, got [1,2]"},
      {R"({"vocabulary_size": 5, "dim": 2})", "table: name: required but missing"},
      {R"({"name": "t", "dim": 2})", "table: vocabulary_size: required"},
      {R"({"name": "t", "vocabulary_size": 5})", "table: dim: required"},
      {R"({"name": 3, "vocabulary_size": 5, "dim": 2})", "table: name: expected a string, got 3"},
      {R"({"name": "t", "vocabulary_size": 5, "dim": "2"})",
       "table: dim: expected a 64-bit integer, got \"2\""},
      {R"({"name": "t", "vocabulary_size": 5.5, "dim": 2})",
       "vocabulary_size: expected a 64-bit integer, got 5.5"},
      {R"({"name": "t", "vocabulary_size": 9223372036854775808, "dim": 2})",
       "vocabulary_size: expected a 64-bit integer"},
      {R"({"name": "t", "vocabulary_sise": 5, "dim": 2})",
       "table: vocabulary_sise: not a known field"},
      {R"({"name": "t", "vocabulary_size": 5, "dim": 2, "combiner": "max"})",
       "table: combiner: unknown combiner 'max'"},
      {R"({"name": "t", "vocabulary_size": 5, "dim": 2, "initializer": {"kind": "zeros"}})",
       "table: initializer.kind: unknown initializer kind \"zeros\"; expected one of "
       "\"truncated_normal\", \"constant\", \"row_id\", \"callback\""},
      {R"({"name": "t", "vocabulary_size": 5, "dim": 2, "initializer": {"value": 1}})",
       "table: initializer.kind: required but missing"},
      {R"({"name": "t", "vocabulary_size": 5, "dim": 2,
           "initializer": {"kind": "constant", "mean": 1}})",
       "table: initializer.mean: not a known field (known: kind, value)"},
      {R"({"name": "t", "vocabulary_size": 5, "dim": 2, "optimizer": {"name": "lamb"}})",
       "table: optimizer.name: unknown optimizer name 'lamb'"},
      {R"({"name": "t", "vocabulary_size": 5, "dim": 2,
           "optimizer": {"name": "sgd", "common": {"clip_weight_min": true}}})",
       "table: optimizer.common.clip_weight_min: expected a number or \"inf\", "
       "\"-inf\", \"nan\", got true"},
      {R"({"name": "t", "vocabulary_size": 5, "dim": 2,
           "optimizer": {"name": "sgd", "learning_rate": 1e40}})",
       "table: optimizer.learning_rate: value 1e+40 is outside the float range"},
      {R"({"name": "t", "vocabulary_size": 5, "dim": 2,
           "optimizer": {"name": "sgd", "learning_rate": "fast"}})",
       "optimizer.learning_rate: expected a number"},
      {R"({"name": "t", "vocabulary_size": 5, "dim": 2,
           "optimizer": {"name": "sgd", "learning_rate": {"kind": "piecewise_constant",
                         "boundaries": [1, "x"], "values": [1, 2, 3]}}})",
       "table: optimizer.learning_rate.boundaries[1]: expected a 64-bit integer"},
      {R"({"name": "t", "vocabulary_size": 5, "dim": 2,
           "quantization_config": {"num_buckets": 4, "lower": 0, "uper": 1}})",
       "table: quantization_config.uper: not a known field"},
  };
  for (const Case& c : table_cases) {
    EXPECT_THAT(error_of<InvalidArgument>([&] { read_table(Json::parse(c.json)); }),
                HasSubstr(c.expected))
        << c.json;
  }
  const std::vector<Case> feature_cases = {
      {R"({"name": "f"})", "feature: table: required but missing"},
      {R"({"name": "f", "table": "t", "output_shape": 3})",
       "feature: output_shape: expected an array, got 3"},
      {R"({"name": "f", "table": "t", "validate_weights_and_indices": 1})",
       "feature: validate_weights_and_indices: expected true or false, got 1"},
  };
  for (const Case& c : feature_cases) {
    EXPECT_THAT(error_of<InvalidArgument>([&] { read_feature(Json::parse(c.json)); }),
                HasSubstr(c.expected))
        << c.json;
  }
  EXPECT_EQ(
      error_of<InvalidArgument>([] { read_optimizer(Json::parse(R"({"learning_rate": 1})")); }),
      "optimizer: name: required but missing");
  EXPECT_EQ(error_of<InvalidArgument>([] { read_optimizer(Json::parse(R"("adam")")); }),
            "optimizer: expected an object, got \"adam\"");
}

// In a file recemb wrote, the same errors are DataLoss, with the path from the file's root.
TEST(ConfigJsonTest, ErrorsInAFileAreDataLoss) {
  const JsonDocument file{.name = "manifest.json", .source = JsonSource::kFile};
  const Json json = Json::parse(R"({"tables": [{"name": "t", "vocabulary_size": 5, "dim": 2,
                                   "optimizer": {"name": "sgd", "learning_rate": [1]}}]})");
  EXPECT_EQ(test::error_of<DataLoss>(
                [&] { table_from_json(JsonReader(json, file).member("tables").element(0)); }),
            "manifest.json: tables[0].optimizer.learning_rate: expected an object, got [1]");
}

// A manifest's checksums: 16 lowercase hex digits, read back as written; anything else refused.
TEST(ConfigJsonTest, ChecksumsReadBackAndOthersAreRefused) {
  const JsonDocument request{.name = "request", .source = JsonSource::kInput};
  std::mt19937_64 rng(5);
  for (int i = 0; i < 100; ++i) {
    const uint64_t checksum = rng();
    const Json json = {{"c", checksum_to_hex(checksum)}};
    ASSERT_EQ(checksum_from_json(JsonReader(json, request).member("c")), checksum);
  }
  for (const Json& bad : {Json("0123456789ABCDEF"), Json("0123456789abcde"), Json(12)}) {
    const Json json = {{"c", bad}};
    EXPECT_EQ(test::error_of<InvalidArgument>(
                  [&] { checksum_from_json(JsonReader(json, request).member("c")); }),
              "request: c: expected 16 lowercase hex digits, got " + bad.dump());
  }
}

}  // namespace
}  // namespace recemb::format
