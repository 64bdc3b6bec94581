#include "train/config/train_config.h"

#include <filesystem>
#include <fstream>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "recemb/error.h"

#include "testing/error_of.h"
#include "testing/temporary_directory.h"

namespace recemb::train {
namespace {

using test::error_of;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

std::string write_file(const std::string& name, const std::string& text) {
  const std::filesystem::path path = std::filesystem::path(::testing::TempDir()) / name;
  std::ofstream(path) << text;
  return path.string();
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
  EXPECT_THAT(c.data.paths, ElementsAre("day_0.tsv"));
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
  // A word that is no TOML value: what the setting takes, not what the parser guessed from its
  // first letter ('f' as in false).
  for (const auto& [assignment, message] : std::vector<std::pair<std::string, std::string>>{
           {"embedding.learning_rate=fast",
            "embedding.learning_rate: expected a number, got 'fast'"},
           {"train.steps=ten", "train.steps: expected an integer, got 'ten'"},
           {"data.strict=yes", "data.strict: expected true or false, got 'yes'"},
           {"model.top_mlp=wide", "model.top_mlp: expected a list ([...]), got 'wide'"}}) {
    const std::string error =
        error_of<InvalidArgument>([&] { load_train_config("", {assignment}); });
    EXPECT_THAT(error, HasSubstr(message)) << assignment;
    EXPECT_THAT(error, Not(HasSubstr("parsing"))) << assignment;
  }
  const std::string path = write_file("config_syntax.toml", "[train]\nsteps = = 3\n");
  EXPECT_THAT(error_of<InvalidArgument>([&] { load_train_config(path, {}); }),
              HasSubstr(path + ":2:"));
  EXPECT_THAT(error_of<InvalidArgument>([] { load_train_config("/nonexistent/recemb.toml", {}); }),
              HasSubstr("/nonexistent/recemb.toml"));
}

// What a shell leaves of --set embedding.optimizer="adam": a bare word, taken as the string it
// reads as wherever the setting is a string, and nowhere else.
TEST(TrainConfig, BareWordsAreStringsWhereTheSettingIsAString) {
  const TrainConfig c = load_train_config(
      "", {"embedding.optimizer=rowwise_adagrad", "tables.C3.optimizer=adam",
           "data.path=/data/day_0.tsv", "output.dir=2024", "embedding.sharding=row_wise"});
  EXPECT_EQ(c.embedding.optimizer, "rowwise_adagrad");
  EXPECT_EQ(c.tables.at("C3").optimizer, "adam");
  EXPECT_THAT(c.data.paths, ElementsAre("/data/day_0.tsv"));
  EXPECT_EQ(c.output.dir, "2024");
  EXPECT_EQ(c.embedding.sharding, "row_wise");
  EXPECT_THAT(load_train_config("", {"data.path=\"x y.tsv\""}).data.paths, ElementsAre("x y.tsv"));
  EXPECT_THAT(error_of<InvalidArgument>([] { load_train_config("", {"data.path=x y.tsv"}); }),
              AllOf(HasSubstr("data.path is a string"), HasSubstr("--set data.path='\"")));
  EXPECT_THAT(error_of<InvalidArgument>([] { load_train_config("", {"train.steps=many"}); }),
              HasSubstr("override 'train.steps=many'"));
  EXPECT_THAT(
      error_of<InvalidArgument>([] { load_train_config("", {"embedding.optimizer=adamw"}); }),
      AllOf(HasSubstr("embedding.optimizer"), HasSubstr("adamw")));
}

TEST(TrainConfig, VocabularySettings) {
  const TrainConfig hashed = load_train_config("", {});
  EXPECT_EQ(hashed.embedding.vocabulary, "hashed");
  EXPECT_FALSE(dynamic_vocabulary(hashed));
  EXPECT_EQ(hashed.embedding.capacity, 0);
  EXPECT_EQ(hashed.embedding.min_count, 1);
  EXPECT_EQ(hashed.embedding.ttl_steps, 0);
  EXPECT_EQ(hashed.embedding.when_full, "evict_least_recent");
  const TrainConfig dynamic = load_train_config(
      "", {"embedding.vocabulary=dynamic", "embedding.capacity=5000", "embedding.min_count=3",
           "embedding.ttl_steps=40", "embedding.when_full=evict_least_frequent"});
  EXPECT_TRUE(dynamic_vocabulary(dynamic));
  EXPECT_EQ(dynamic.embedding.capacity, 5000);
  EXPECT_EQ(dynamic.embedding.min_count, 3);
  EXPECT_EQ(dynamic.embedding.ttl_steps, 40);
  EXPECT_EQ(dynamic.embedding.when_full, "evict_least_frequent");
  const std::string path = write_file("config_dynamic.toml", to_toml(dynamic));
  EXPECT_EQ(to_toml(load_train_config(path, {})), to_toml(dynamic));

  const auto error = [](const std::string& setting) {
    return error_of<InvalidArgument>([&] { load_train_config("", {setting}); });
  };
  EXPECT_THAT(error("embedding.vocabulary=open"),
              HasSubstr("embedding.vocabulary must be hashed or dynamic, not 'open'"));
  EXPECT_THAT(error("embedding.capacity=-1"), HasSubstr("embedding.capacity must be >= 0"));
  EXPECT_THAT(error("embedding.min_count=0"), HasSubstr("embedding.min_count must be >= 1, not 0"));
  EXPECT_THAT(error("embedding.ttl_steps=-2"),
              HasSubstr("embedding.ttl_steps must be >= 0 (0: no TTL), not -2"));
  EXPECT_THAT(error("embedding.when_full=drop"),
              AllOf(HasSubstr("embedding.when_full: "), HasSubstr("drop")));
  EXPECT_THAT(error("embedding.capacity=1.5"), HasSubstr("'embedding.capacity'"));
  EXPECT_EQ(hashed.embedding.dtype, "float32");
  EXPECT_EQ(load_train_config("", {"embedding.dtype=bfloat16"}).embedding.dtype, "bfloat16");
  EXPECT_THAT(error("embedding.dtype=float64"),
              AllOf(HasSubstr("embedding.dtype: "), HasSubstr("'float64'")));
  EXPECT_EQ(load_train_config("", {"embedding.vocabulary=dynamic", "embedding.dtype=float16"})
                .embedding.dtype,
            "float16");
  EXPECT_EQ(hashed.data.synthetic_item_lifetime, 1 << 20);
  EXPECT_THAT(error("data.synthetic_item_lifetime=0"),
              HasSubstr("data.synthetic_item_lifetime must be >= 1, not 0"));
}

TEST(TrainConfig, DataPathIsOneStringOrAListAndTheDataSettingsAreChecked) {
  const TrainConfig one = load_train_config("", {"data.path=\"day_0.gz\""});
  EXPECT_THAT(one.data.paths, ElementsAre("day_0.gz"));
  EXPECT_THAT(to_toml(one), HasSubstr("path = 'day_0.gz'"));  // a string, as configs had it
  const TrainConfig several =
      load_train_config("", {"data.path=[\"day_0.gz\", \"day_*.gz\"]", "train.epochs=3",
                             "data.eval_fraction=0.05", "data.strict=true"});
  EXPECT_THAT(several.data.paths, ElementsAre("day_0.gz", "day_*.gz"));
  EXPECT_EQ(several.train.epochs, 3);
  EXPECT_EQ(several.data.eval_fraction, 0.05);
  EXPECT_TRUE(several.data.strict);
  // The effective settings load back to the same.
  const test::TemporaryDirectory dir;
  std::ofstream(dir / "config.toml") << to_toml(several);
  const TrainConfig again = load_train_config((dir / "config.toml").string(), {});
  EXPECT_EQ(to_toml(again), to_toml(several));

  for (const auto& [setting, message] : std::vector<std::pair<std::string, std::string>>{
           {"train.epochs=0", "train.epochs must be >= 1"},
           {"train.epochs=-2", "train.epochs must be >= 1"},
           {"data.eval_fraction=1.0", "data.eval_fraction must be in (0, 1)"},
           {"data.eval_fraction=-0.1", "data.eval_fraction must be in (0, 1)"},
           {"data.eval_fraction=1.5", "data.eval_fraction must be in (0, 1)"},
           {"data.path=[\"a\", 3]", "'data.path' must be a string or a list of strings"},
           {"data.path=[\"a\", \"\"]", "data.path: an empty path"},
           {"data.strict=1", "'data.strict': expected boolean"},
           {"data.reader_threads=3", "data.reader_threads must be 1 or 2, not 3"},
           {"data.reader_threads=0", "data.reader_threads must be 1 or 2, not 0"},
       }) {
    EXPECT_THAT(error_of<InvalidArgument>([&] { load_train_config("", {setting}); }),
                HasSubstr(message))
        << setting;
  }
  EXPECT_THAT(error_of<InvalidArgument>([] {
                load_train_config("", {"data.eval_fraction=0.1", "data.eval_path=\"held.tsv\""});
              }),
              AllOf(HasSubstr("data.eval_fraction"), HasSubstr("data.eval_path")));
}

TEST(TrainConfig, FlatSettingsNameEverySettingByItsDottedKey) {
  const TrainConfig c = load_train_config(
      "", {"model.top_mlp=[8, 4]", "tables.C3.optimizer=adam", "data.path=[\"a\", \"b\"]"});
  const std::map<std::string, std::string> settings = flat_settings(to_toml(c), "the settings");
  EXPECT_EQ(settings.at("model.top_mlp"), "[ 8, 4 ]");
  EXPECT_EQ(settings.at("tables.C3.optimizer"), "'adam'");
  EXPECT_EQ(settings.at("tables.C3.learning_rate"), "0.01");
  EXPECT_EQ(settings.at("train.steps"), "2500");
  EXPECT_EQ(settings.at("data.path"), "[ 'a', 'b' ]");
  EXPECT_EQ(settings.count("model"), 0u);  // sections are not settings
  EXPECT_THAT(error_of<InvalidArgument>([] { flat_settings("[train]\nsteps = = 3\n", "ckpt-9"); }),
              HasSubstr("ckpt-9:2:"));
}

}  // namespace
}  // namespace recemb::train
