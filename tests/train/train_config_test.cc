#include "train/train_config.h"

#include <filesystem>
#include <fstream>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <string>

#include "recemb/error.h"

#include "testing/error_of.h"

namespace recemb::train {
namespace {

using test::error_of;
using ::testing::HasSubstr;

std::string write_file(const std::string& name, const std::string& text) {
  const std::filesystem::path path = std::filesystem::path(::testing::TempDir()) / name;
  std::ofstream(path) << text;
  return path.string();
}

TEST(TrainConfig, DefaultsAreTheDocumentedOnes) {
  const TrainConfig c = load_train_config("", {});
  EXPECT_EQ(c.data.path, "");
  EXPECT_EQ(c.data.preset, "small");
  EXPECT_EQ(c.data.eval_examples, 65536);
  EXPECT_EQ(c.model.embedding_dim, 16);
  EXPECT_EQ(c.model.bottom_mlp, (std::vector<int64_t>{64, 16}));
  EXPECT_EQ(c.model.top_mlp, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(c.embedding.optimizer, "adagrad");
  EXPECT_EQ(c.embedding.sharding, "auto");
  EXPECT_DOUBLE_EQ(c.embedding.learning_rate, 1.0);
  EXPECT_EQ(c.train.steps, 2500);
  EXPECT_EQ(c.dense.optimizer, "adam");
  EXPECT_DOUBLE_EQ(c.dense.learning_rate, 0.003);
  EXPECT_EQ(c.train.batch_size, 2048);
  EXPECT_EQ(c.checkpoint.keep, 2);
  EXPECT_EQ(c.output.dir, "recemb-run");
  EXPECT_TRUE(c.tables.empty());
  EXPECT_THAT(std::string(default_config_toml()), HasSubstr("[tables.C3]"));
}

TEST(TrainConfig, FileThenOverridesInOrder) {
  const std::string path = write_file("config_order.toml", R"(
[model]
embedding_dim = 32
bottom_mlp = [128, 32]
[embedding]
learning_rate = 2        # an integer where a float is expected is accepted
[tables.C3]
vocabulary_size = 5000
optimizer = "rowwise_adagrad"
)");
  const TrainConfig c =
      load_train_config(path, {"train.steps=7", "train.steps=9", "data.path=\"day_0.tsv\"",
                               "tables.C3.learning_rate=0.5", "model.top_mlp=[8]"});
  EXPECT_EQ(c.model.embedding_dim, 32);
  EXPECT_EQ(c.model.bottom_mlp, (std::vector<int64_t>{128, 32}));
  EXPECT_EQ(c.model.top_mlp, (std::vector<int64_t>{8}));
  EXPECT_DOUBLE_EQ(c.embedding.learning_rate, 2.0);
  EXPECT_EQ(c.train.steps, 9);
  EXPECT_EQ(c.data.path, "day_0.tsv");
  ASSERT_EQ(c.tables.count("C3"), 1u);
  EXPECT_EQ(c.tables.at("C3").vocabulary_size, 5000);
  EXPECT_EQ(c.tables.at("C3").optimizer, "rowwise_adagrad");
  EXPECT_EQ(c.tables.at("C3").learning_rate, 0.5);
}

TEST(TrainConfig, ToTomlRoundTrips) {
  const TrainConfig original =
      load_train_config("", {"model.embedding_dim=8", "model.bottom_mlp=[4,8]",
                             "tables.C26.vocabulary_size=77", "dense.optimizer=\"adagrad\"",
                             "data.synthetic_seed=12345", "embedding.learning_rate=0.3"});
  const std::string path = write_file("config_round_trip.toml", to_toml(original));
  const TrainConfig again = load_train_config(path, {});
  EXPECT_EQ(to_toml(again), to_toml(original));
  EXPECT_EQ(again.model.bottom_mlp, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(again.tables.at("C26").vocabulary_size, 77);
  EXPECT_EQ(again.data.synthetic_seed, 12345u);
  EXPECT_DOUBLE_EQ(again.embedding.learning_rate, 0.3);
}

TEST(TrainConfig, ShardingNamesAStrategy) {
  EXPECT_EQ(sharding_strategy("auto"), ShardingStrategy::kAuto);
  EXPECT_EQ(sharding_strategy("table_wise"), ShardingStrategy::kTableWise);
  EXPECT_EQ(sharding_strategy("row_wise"), ShardingStrategy::kRowWise);
  EXPECT_EQ(sharding_strategy("column_wise"), ShardingStrategy::kColumnWise);
  EXPECT_EQ(sharding_strategy("replicated"), ShardingStrategy::kReplicated);
  const TrainConfig c = load_train_config("", {"embedding.sharding=\"row_wise\""});
  EXPECT_EQ(c.embedding.sharding, "row_wise");
  EXPECT_THAT(to_toml(c), HasSubstr("sharding = 'row_wise'"));
  EXPECT_THAT(
      error_of<InvalidArgument>([] { load_train_config("", {"embedding.sharding=\"rows\""}); }),
      AllOf(HasSubstr("embedding.sharding"), HasSubstr("'rows'"), HasSubstr("row_wise")));
}

TEST(TrainConfig, UnknownKeysNameTheKeyAndTheValidOnes) {
  EXPECT_THAT(error_of<InvalidArgument>([] { load_train_config("", {"model.embeding_dim=3"}); }),
              AllOf(HasSubstr("model.embeding_dim"), HasSubstr("embedding_dim")));
  EXPECT_THAT(error_of<InvalidArgument>([] { load_train_config("", {"modle.seed=3"}); }),
              AllOf(HasSubstr("unknown key 'modle'"), HasSubstr("checkpoint")));
  EXPECT_THAT(
      error_of<InvalidArgument>([] { load_train_config("", {"tables.C27.optimizer=\"sgd\""}); }),
      HasSubstr("C1..C26"));
  EXPECT_THAT(error_of<InvalidArgument>([] { load_train_config("", {"tables.C2.dim=3"}); }),
              HasSubstr("tables.C2.dim"));
  const std::string path = write_file("config_unknown.toml", "[train]\nstepz = 3\n");
  EXPECT_THAT(error_of<InvalidArgument>([&] { load_train_config(path, {}); }),
              AllOf(HasSubstr(path), HasSubstr("train.stepz")));
}

TEST(TrainConfig, WrongTypesAndSyntaxErrorsAreReported) {
  EXPECT_THAT(error_of<InvalidArgument>([] { load_train_config("", {"train.steps=\"ten\""}); }),
              AllOf(HasSubstr("train.steps"), HasSubstr("expected integer"), HasSubstr("string")));
  EXPECT_THAT(error_of<InvalidArgument>([] { load_train_config("", {"model.top_mlp=[1.5]"}); }),
              HasSubstr("model.top_mlp"));
  EXPECT_THAT(error_of<InvalidArgument>([] { load_train_config("", {"train.steps"}); }),
              HasSubstr("expected section.key=value"));
  EXPECT_THAT(error_of<InvalidArgument>([] { load_train_config("", {"train.steps=[1"}); }),
              HasSubstr("override 'train.steps=[1'"));
  const std::string path = write_file("config_syntax.toml", "[train]\nsteps = = 3\n");
  EXPECT_THAT(error_of<InvalidArgument>([&] { load_train_config(path, {}); }),
              HasSubstr(path + ":2:"));
  EXPECT_THAT(error_of<InvalidArgument>([] { load_train_config("/nonexistent/recemb.toml", {}); }),
              HasSubstr("/nonexistent/recemb.toml"));
}

TEST(TrainConfig, RangesAreValidated) {
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

}  // namespace
}  // namespace recemb::train
