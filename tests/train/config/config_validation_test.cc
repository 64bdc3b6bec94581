#include "train/config/config_validation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <string>
#include <utility>
#include <vector>

#include "recemb/embedding.h"
#include "recemb/error.h"
#include "recemb/publish.h"

#include "testing/error_of.h"
#include "train/config/train_config.h"

namespace recemb::train {
namespace {

using test::error_of;
using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(ConfigValidation, RangesAreValidated) {
  EXPECT_THAT(error_of<InvalidArgument>([] { load_train_config("", {"model.embedding_dim=32"}); }),
              HasSubstr("bottom_mlp must end with model.embedding_dim (32)"));
  EXPECT_THAT(error_of<InvalidArgument>([] { load_train_config("", {"train.batch_size=0"}); }),
              HasSubstr("train.batch_size"));
  EXPECT_THAT(
      error_of<InvalidArgument>([] { load_train_config("", {"embedding.optimizer=\"adamw\""}); }),
      AllOf(HasSubstr("embedding.optimizer"), HasSubstr("adamw")));
  EXPECT_THAT(
      error_of<InvalidArgument>([] { load_train_config("", {"tables.C1.optimizer=\"x\""}); }),
      HasSubstr("tables.C1.optimizer"));
  EXPECT_THAT(error_of<InvalidArgument>([] { load_train_config("", {"dense.optimizer=\"sgd\""}); }),
              HasSubstr("dense.optimizer must be adam or adagrad"));
  EXPECT_THAT(error_of<InvalidArgument>([] { load_train_config("", {"data.synthetic_seed=-1"}); }),
              HasSubstr("data.synthetic_seed"));
  EXPECT_THAT(
      error_of<InvalidArgument>([] { load_train_config("", {"tables.C5.vocabulary_size=0"}); }),
      HasSubstr("tables.C5.vocabulary_size"));
  EXPECT_THAT(error_of<InvalidArgument>([] { load_train_config("", {"checkpoint.keep=0"}); }),
              HasSubstr("checkpoint.keep"));
}

TEST(ConfigValidation, PublishingSettingsAreValidated) {
  const TrainConfig defaults = load_train_config("", {});
  EXPECT_EQ(defaults.serving.publish_dir, "");
  EXPECT_EQ(defaults.serving.publish_every_seconds, 10.0);
  EXPECT_EQ(defaults.serving.publish_dtype, "float32");
  EXPECT_EQ(
      load_train_config("", {"serving.publish_every_seconds=0.5"}).serving.publish_every_seconds,
      0.5);
  for (const std::string seconds : {"0.0", "-1.0"}) {
    EXPECT_THAT(error_of<InvalidArgument>(
                    [&] { load_train_config("", {"serving.publish_every_seconds=" + seconds}); }),
                HasSubstr("serving.publish_every_seconds must be > 0"));
  }
  EXPECT_THAT(error_of<InvalidArgument>(
                  [] { load_train_config("", {"serving.publish_dtype=\"bfloat16\""}); }),
              AllOf(HasSubstr("serving.publish_dtype"), HasSubstr("'bfloat16'")));
  // Retention: the library's defaults, and no negative bound.
  const PublishOptions library;
  EXPECT_EQ(defaults.serving.base_every_deltas, library.base_every_deltas);
  EXPECT_EQ(defaults.serving.base_every_bytes, library.base_every_bytes);
  EXPECT_EQ(defaults.serving.keep_versions, library.keep_versions);
  for (const auto& [setting, message] : std::vector<std::pair<std::string, std::string>>{
           {"serving.base_every_deltas=-1", "serving.base_every_deltas must be >= 0"},
           {"serving.base_every_bytes=-5", "serving.base_every_bytes must be >= 0"},
           {"serving.keep_versions=-2", "serving.keep_versions must be >= 0 (0: all), not -2"}}) {
    EXPECT_THAT(error_of<InvalidArgument>([&] { load_train_config("", {setting}); }),
                HasSubstr(message));
  }
}

TEST(ConfigValidation, StepsAndBatchSizeAreBounded) {
  EXPECT_THAT(error_of<InvalidArgument>([] { load_train_config("", {"train.steps=0"}); }),
              HasSubstr("train.steps must be >= 1, not 0"));
  EXPECT_EQ(load_train_config("", {"train.batch_size=1048576"}).train.batch_size, kMaxBatchSize);
  for (const std::string size : {"1048577", "100000000", "2147483648"}) {
    EXPECT_THAT(
        error_of<InvalidArgument>([&] { load_train_config("", {"train.batch_size=" + size}); }),
        HasSubstr("train.batch_size must be 1 to 1048576, not " + size));
  }
}

TEST(ConfigValidation, ThreadsAreBoundedAsTheLibrarysNumThreads) {
  EXPECT_EQ(load_train_config("", {"embedding.threads=1024"}).embedding.threads,
            recemb::kMaxNumThreads);
  for (const std::string threads : {"-5", "1025", "5000"}) {
    EXPECT_THAT(
        error_of<InvalidArgument>([&] { load_train_config("", {"embedding.threads=" + threads}); }),
        HasSubstr("embedding.threads must be in [0, 1024] (0: one per core), not " + threads));
  }
}

// Settings made in code, not read from TOML, are checked the same: a valid configuration passes,
// and each setting made invalid is named.
TEST(ConfigValidation, ChecksASettingsStructDirectly) {
  const TrainConfig valid = load_train_config("", {});
  EXPECT_NO_THROW(validate_train_config(valid));
  TrainConfig c = valid;
  c.dense.learning_rate = 0.0;
  EXPECT_THAT(error_of<InvalidArgument>([&] { validate_train_config(c); }),
              HasSubstr("dense.learning_rate must be > 0"));
  c = valid;
  c.model.bottom_mlp = {64, 8};
  EXPECT_THAT(error_of<InvalidArgument>([&] { validate_train_config(c); }),
              HasSubstr("model.bottom_mlp must end with model.embedding_dim (16)"));
  c = valid;
  c.data.eval_fraction = 0.1;
  c.data.eval_path = "held.tsv";
  EXPECT_THAT(error_of<InvalidArgument>([&] { validate_train_config(c); }),
              AllOf(HasSubstr("data.eval_fraction"), HasSubstr("data.eval_path")));
  c = valid;
  c.tables["C7"].learning_rate = -1.0;
  EXPECT_THAT(error_of<InvalidArgument>([&] { validate_train_config(c); }),
              HasSubstr("tables.C7.learning_rate must be > 0"));
  c = valid;
  c.embedding.sharding = "rows";
  EXPECT_THAT(error_of<InvalidArgument>([&] { validate_train_config(c); }),
              AllOf(HasSubstr("embedding.sharding"), HasSubstr("'rows'")));
}

}  // namespace
}  // namespace recemb::train
