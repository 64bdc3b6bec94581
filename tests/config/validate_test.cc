#include "config/validate.h"

#include <functional>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "recemb/error.h"

#include "testing/error_of.h"
#include "testing/thread_per_index_executor.h"

namespace recemb::internal {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

struct Configs {
  std::vector<TableConfig> tables{{.name = "video", .vocabulary_size = 100, .dim = 8},
                                  {.name = "user", .vocabulary_size = 10, .dim = 4}};
  std::vector<FeatureConfig> features{{.name = "watched", .table = "video"},
                                      {.name = "liked", .table = "video"},
                                      {.name = "user_id", .table = "user"}};
  EmbeddingOptions options;
};

// The message of the InvalidArgument validate_configs throws once `change` is applied to valid
// configs.
std::string config_error(const std::function<void(Configs&)>& change) {
  Configs c;
  change(c);
  return test::error_of<InvalidArgument>(
      [&] { validate_configs(c.tables, c.features, c.options); });
}

TEST(ValidateConfigsTest, AcceptsValidConfigs) {
  Configs c;
  EXPECT_NO_THROW(validate_configs(c.tables, c.features, c.options));
}

TEST(ValidateConfigsTest, TableErrorsNameTheTableAndField) {
  EXPECT_THAT(config_error([](Configs& c) { c.tables[1].dim = 0; }),
              AllOf(HasSubstr("table 'user'"), HasSubstr("dim"), HasSubstr("0")));
  EXPECT_THAT(config_error([](Configs& c) { c.tables[0].vocabulary_size = -3; }),
              AllOf(HasSubstr("table 'video'"), HasSubstr("vocabulary_size"), HasSubstr("-3")));
  EXPECT_THAT(config_error([](Configs& c) { c.tables[1].name = "video"; }),
              AllOf(HasSubstr("unique"), HasSubstr("'video'")));
  EXPECT_THAT(config_error([](Configs& c) { c.tables[0].name.clear(); }),
              AllOf(HasSubstr("table #0"), HasSubstr("name")));
  EXPECT_THAT(config_error([](Configs& c) { c.tables[0].combiner = static_cast<Combiner>(9); }),
              AllOf(HasSubstr("table 'video'"), HasSubstr("combiner")));
  EXPECT_THAT(config_error([](Configs& c) {
                c.tables[0].quantization_config = QuantizationConfig{.num_buckets = 1};
              }),
              AllOf(HasSubstr("table 'video'"), HasSubstr("num_buckets")));
  EXPECT_THAT(config_error([](Configs& c) {
                c.tables[0].quantization_config =
                    QuantizationConfig{.num_buckets = 4, .lower = 1.0f, .upper = 1.0f};
              }),
              AllOf(HasSubstr("table 'video'"), HasSubstr("lower < upper")));
  EXPECT_THAT(config_error([](Configs& c) {
                c.tables[0].dim = int64_t{1} << 40;
                c.tables[0].vocabulary_size = int64_t{1} << 40;
              }),
              HasSubstr("overflows"));
  EXPECT_THAT(config_error([](Configs& c) { c.tables[1].initializer = InitializerCallback{}; }),
              AllOf(HasSubstr("table 'user'"), HasSubstr("initializer")));
  EXPECT_THAT(
      config_error([](Configs& c) { c.tables[1].initializer = TruncatedNormal{.stddev = -1}; }),
      AllOf(HasSubstr("table 'user'"), HasSubstr("stddev")));
}

TEST(ValidateConfigsTest, DynamicVocabularyErrorsNameTheOwnerAndField) {
  const auto error = [](const DynamicVocabulary& vocabulary) {
    return test::error_of<InvalidArgument>(
        [&] { validate_dynamic_vocabulary(vocabulary, "table 'user'"); });
  };
  EXPECT_NO_THROW(validate_dynamic_vocabulary({.capacity = 1, .ttl_steps = 1}, "t"));
  EXPECT_EQ(error({.capacity = 0}),
            "table 'user': dynamic_vocabulary.capacity must be in [1, 2147483648], got 0");
  EXPECT_EQ(error({.capacity = 5, .min_count = 0}),
            "table 'user': dynamic_vocabulary.min_count must be >= 1, got 0");
  EXPECT_THAT(error({.capacity = 5, .ttl_steps = -2}),
              HasSubstr("table 'user': dynamic_vocabulary.ttl_steps must be >= 1"));
  EXPECT_THAT(error({.capacity = 5, .when_full = static_cast<WhenFull>(7)}), HasSubstr("WhenFull"));
}

TEST(ValidateConfigsTest, OptimizerErrorsNameTheirOwner) {
  EXPECT_THAT(config_error([](Configs& c) {
                c.tables[1].optimizer = Adagrad{.initial_accumulator_value = 0};
              }),
              AllOf(HasSubstr("table 'user'"), HasSubstr("initial_accumulator_value")));
  EXPECT_THAT(config_error([](Configs& c) { c.options.optimizer = Adam{.beta_1 = 1.5f}; }),
              AllOf(HasSubstr("global optimizer"), HasSubstr("beta_1")));
  EXPECT_THAT(config_error([](Configs& c) { c.options.num_threads = -1; }),
              HasSubstr("num_threads"));
}

TEST(ValidateConfigsTest, NumThreadsIsBoundedByKMaxNumThreads) {
  for (const int threads : {kMaxNumThreads + 1, 5000}) {
    EXPECT_THAT(config_error([&](Configs& c) { c.options.num_threads = threads; }),
                AllOf(HasSubstr("EmbeddingOptions.num_threads"), HasSubstr("[0, 1024]"),
                      HasSubstr("this machine has"), HasSubstr("got " + std::to_string(threads))));
  }
  Configs c;
  c.options.num_threads = kMaxNumThreads;
  EXPECT_NO_THROW(validate_configs(c.tables, c.features, c.options));
}

TEST(ValidateConfigsTest, AnExecutorNeedsNumThreadsZeroAndAMaxThreadsInRange) {
  const auto executor_of = [](int max_threads) {
    return std::make_shared<test::ThreadPerIndexExecutor>(max_threads, std::vector<int>{0});
  };
  EXPECT_THAT(
      config_error([&](Configs& c) {
        c.options.executor = executor_of(2);
        c.options.num_threads = 2;
      }),
      AllOf(HasSubstr("num_threads must be 0 when an executor is set"), HasSubstr("got 2")));
  for (const int threads : {0, -3, kMaxNumThreads + 1}) {
    EXPECT_THAT(config_error([&](Configs& c) { c.options.executor = executor_of(threads); }),
                AllOf(HasSubstr("executor->max_threads() must be in [1, 1024]"),
                      HasSubstr("got " + std::to_string(threads))));
  }
  for (const int threads : {1, kMaxNumThreads}) {
    Configs c;
    c.options.executor = executor_of(threads);
    EXPECT_NO_THROW(validate_configs(c.tables, c.features, c.options));
  }
}

TEST(ValidateConfigsTest, InitializersThatGiveNonFiniteValuesAreRefused) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float max = std::numeric_limits<float>::max();
  for (const float value : {inf, -inf, nan}) {
    EXPECT_THAT(
        config_error([&](Configs& c) { c.tables[1].initializer = Constant{.value = value}; }),
        AllOf(HasSubstr("table 'user'"), HasSubstr("Constant"), HasSubstr("finite")));
    EXPECT_THAT(config_error([&](Configs& c) { c.tables[0].initializer = RowId{.offset = value}; }),
                AllOf(HasSubstr("table 'video'"), HasSubstr("RowId"), HasSubstr("finite")));
    EXPECT_THAT(config_error([&](Configs& c) {
                  c.tables[1].initializer = TruncatedNormal{.mean = value, .stddev = 1};
                }),
                AllOf(HasSubstr("table 'user'"), HasSubstr("TruncatedNormal"), HasSubstr("mean")));
  }
  // Finite parameters whose values may reach beyond float32's range.
  EXPECT_THAT(config_error([&](Configs& c) {
                c.tables[1].initializer = TruncatedNormal{.mean = max / 2, .stddev = max / 2};
              }),
              AllOf(HasSubstr("table 'user'"), HasSubstr("overflows")));
  EXPECT_THAT(config_error([&](Configs& c) {
                c.tables[1].initializer = TruncatedNormal{.mean = -max, .stddev = max / 1e6f};
              }),
              AllOf(HasSubstr("table 'user'"), HasSubstr("overflows")));
  // The extremes that stay finite.
  Configs c;
  c.tables[0].initializer = Constant{.value = -max};
  c.tables[1].initializer = TruncatedNormal{.mean = max / 2, .stddev = max / 4};
  EXPECT_NO_THROW(validate_configs(c.tables, c.features, c.options));
  c.tables[1].initializer = RowId{.offset = max};
  EXPECT_NO_THROW(validate_configs(c.tables, c.features, c.options));
}

TEST(ValidateConfigsTest, FeatureErrorsNameTheFeatureAndField) {
  EXPECT_THAT(config_error([](Configs& c) { c.features[2].table = "item"; }),
              AllOf(HasSubstr("feature 'user_id'"), HasSubstr("'item'")));
  EXPECT_THAT(config_error([](Configs& c) { c.features[1].name = "watched"; }),
              AllOf(HasSubstr("unique"), HasSubstr("'watched'")));
  EXPECT_THAT(config_error([](Configs& c) { c.features[0].max_sequence_length = -1; }),
              AllOf(HasSubstr("feature 'watched'"), HasSubstr("max_sequence_length")));
  EXPECT_THAT(config_error([](Configs& c) {
                c.features[0].output_shape = {2, 0};
              }),
              AllOf(HasSubstr("feature 'watched'"), HasSubstr("output_shape")));
  EXPECT_THAT(config_error([](Configs& c) { c.features.clear(); }),
              HasSubstr("at least one feature"));
  EXPECT_THAT(config_error([](Configs& c) { c.features[0].name.clear(); }),
              AllOf(HasSubstr("feature #0"), HasSubstr("name")));
}

}  // namespace
}  // namespace recemb::internal
