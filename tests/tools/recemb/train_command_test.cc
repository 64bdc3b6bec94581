#include "tools/recemb/train_command.h"

#include <filesystem>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sstream>

#include "recemb/error.h"

#include "train/train_config.h"

namespace recemb::tools {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(TrainCommand, ShortcutsBecomeOverridesThatSetOptionsWin) {
  const TrainArguments args{.overrides = {"train.steps=9"},
                            .data = {"day \"0\".tsv"},
                            .preset = "criteo-kaggle",
                            .output = "out",
                            .steps = 5,
                            .threads = 0};
  EXPECT_THAT(
      train_overrides(args),
      ElementsAre("data.path=\"day \\\"0\\\".tsv\"", "data.preset=\"criteo-kaggle\"",
                  "output.dir=\"out\"", "train.steps=5", "embedding.threads=0", "train.steps=9"));
  EXPECT_TRUE(train_overrides({}).empty());
}

TEST(TrainCommand, SeveralDataFilesBecomeOneList) {
  const TrainArguments args{.data = {"day_0.gz", "day_*.gz"}};
  EXPECT_THAT(train_overrides(args), ElementsAre("data.path=[\"day_0.gz\", \"day_*.gz\"]"));
  const train::TrainConfig config = train::load_train_config("", train_overrides(args));
  EXPECT_THAT(config.data.paths, ElementsAre("day_0.gz", "day_*.gz"));
}

TEST(TrainCommand, PrintsConfigsWithoutTraining) {
  std::ostringstream out, log;
  EXPECT_EQ(
      run_train_command({.steps = 3, .print_config = true}, out, log, train::ProgressMode::kLines),
      0);
  EXPECT_THAT(out.str(), HasSubstr("steps = 3"));
  EXPECT_EQ(log.str(), "");
  std::ostringstream defaults;
  run_train_command({.print_default_config = true}, defaults, log, train::ProgressMode::kLines);
  EXPECT_THAT(defaults.str(), HasSubstr("# recemb train: every field with its default."));
}

TEST(TrainCommand, TrainsAndPrintsTheSummary) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "train_command_run";
  std::filesystem::remove_all(dir);
  std::ostringstream out, log;
  const TrainArguments args{
      .overrides = {"data.table_budget_mib=1", "data.eval_examples=1024", "model.embedding_dim=4",
                    "model.bottom_mlp=[4]", "model.top_mlp=[4]"},
      .output = dir.string(),
      .steps = 4,
      .batch_size = 64,
      .threads = 1};
  EXPECT_EQ(run_train_command(args, out, log, train::ProgressMode::kLines), 0);
  EXPECT_THAT(out.str(), AllOf(HasSubstr("trained steps 0..4"), HasSubstr("held-out AUC"),
                               HasSubstr("wrote " + dir.string())));
  EXPECT_THAT(log.str(), HasSubstr("4/4 steps"));
  EXPECT_THROW(
      run_train_command({.overrides = {"train.steps=0"}}, out, log, train::ProgressMode::kLines),
      InvalidArgument);
}

// A shortcut given is checked as its setting is: 0 and negative values are errors, not "not
// given".
TEST(TrainCommand, ShortcutsGivenAreCheckedLikeTheirSettings) {
  EXPECT_THAT(train_overrides({.steps = 0, .batch_size = 0, .threads = -5}),
              ElementsAre("train.steps=0", "train.batch_size=0", "embedding.threads=-5"));
  const auto error = [](const TrainArguments& args) {
    std::ostringstream out, log;
    try {
      run_train_command(args, out, log, train::ProgressMode::kLines);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(error({.steps = 0}), HasSubstr("train.steps must be >= 1, not 0"));
  EXPECT_THAT(error({.batch_size = 0}), HasSubstr("train.batch_size must be 1 to 1048576, not 0"));
  EXPECT_THAT(error({.threads = -5}),
              HasSubstr("embedding.threads must be in [0, 1024] (0: one per core), not -5"));
}

}  // namespace
}  // namespace recemb::tools
