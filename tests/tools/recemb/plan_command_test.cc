#include "tools/recemb/plan_command.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sstream>

#include "recemb/error.h"
#include "recemb/placement.h"

#include "testing/error_of.h"
#include "train/config/embedding_model.h"

namespace recemb::tools {
namespace {

using ::testing::HasSubstr;

TEST(PlanCommand, PrintsThePlanOfTheTrainersTables) {
  std::ostringstream out;
  EXPECT_EQ(run_plan_command({.preset = "criteo-kaggle", .shards = 4}, out), 0);
  // The same plan computed directly from the trainer's model.
  const train::EmbeddingModel model =
      train::embedding_model(train::load_train_config("", {"data.preset=\"criteo-kaggle\""}));
  const Placement expected =
      plan_placement(model.tables, model.features, model.optimizer, {.num_shards = 4});
  EXPECT_EQ(out.str(), format_placement(expected));
  EXPECT_THAT(out.str(), AllOf(HasSubstr("row_wise"), HasSubstr("table_wise"), HasSubstr("C3")));

  // Column ranges half-open, bytes naming the slots they include.
  std::ostringstream columns;
  run_plan_command({.shards = 2, .strategy = "column_wise"}, columns);
  EXPECT_THAT(columns.str(),
              AllOf(HasSubstr(" [0,8) "), HasSubstr(" [8,16) "), HasSubstr("bytes_with_slots")));

  std::ostringstream replicated;
  run_plan_command(
      {.overrides = {"tables.C1.vocabulary_size=10"}, .shards = 2, .strategy = "replicated"},
      replicated);
  EXPECT_THAT(replicated.str(), HasSubstr("replicated"));
  EXPECT_THAT(replicated.str(), ::testing::Not(HasSubstr("row_wise")));
}

TEST(PlanCommand, BadArgumentsAreErrors) {
  std::ostringstream out;
  EXPECT_THROW(run_plan_command({.strategy = "diagonal"}, out), InvalidArgument);
  EXPECT_THROW(run_plan_command({.shards = 0}, out), InvalidArgument);
  EXPECT_THAT(test::error_of<InvalidArgument>(
                  [&] { run_plan_command({.shards = kMaxNumShards + 1}, out); }),
              HasSubstr("num_shards must be in [1, 65536], got 65537"));
  EXPECT_THROW(run_plan_command({.overrides = {"model.depth=2"}}, out), InvalidArgument);
  EXPECT_EQ(out.str(), "");
}

}  // namespace
}  // namespace recemb::tools
