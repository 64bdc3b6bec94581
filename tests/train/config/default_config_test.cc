#include "train/config/default_config.h"

#include <fstream>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <string>
#include <vector>

#include "recemb/error.h"

#include "testing/error_of.h"
#include "testing/temporary_directory.h"
#include "train/config/train_config.h"

namespace recemb::train {
namespace {

using test::error_of;
using ::testing::HasSubstr;

TEST(DefaultConfig, DefaultsAreTheDocumentedOnes) {
  const TrainConfig c = load_train_config("", {});
  EXPECT_TRUE(c.data.paths.empty());
  EXPECT_EQ(c.train.epochs, 1);
  EXPECT_EQ(c.data.eval_fraction, 0.0);
  EXPECT_FALSE(c.data.strict);
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
  EXPECT_FALSE(c.train.overlap);
  EXPECT_TRUE(load_train_config("", {"train.overlap=true"}).train.overlap);
  EXPECT_EQ(c.checkpoint.keep, 2);
  EXPECT_EQ(c.output.dir, "recemb-run");
  EXPECT_TRUE(c.tables.empty());
  EXPECT_THAT(std::string(default_config_toml()), HasSubstr("[tables.C3]"));
}

TEST(DefaultConfig, EachOptimizerHasItsOwnLearningRateUnlessOneIsSet) {
  const std::vector<std::string> optimizers = {"sgd",  "adagrad", "adagrad_momentum",
                                               "adam", "ftrl",    "rowwise_adagrad"};
  for (const std::string& name : optimizers) {
    const TrainConfig c = load_train_config("", {"embedding.optimizer=\"" + name + "\""});
    EXPECT_DOUBLE_EQ(c.embedding.learning_rate, default_learning_rate(name)) << name;
    EXPECT_GT(c.embedding.learning_rate, 0.0) << name;
  }
  EXPECT_DOUBLE_EQ(default_learning_rate("adagrad"), 1.0);
  EXPECT_LT(default_learning_rate("adam"), 0.1);  // Adagrad's 1.0 does not learn with Adam
  EXPECT_GT(default_learning_rate("sgd"), 1.0);   // the raw gradient of a mean loss is small
  EXPECT_THAT(error_of<InvalidArgument>([] { default_learning_rate("adamw"); }),
              HasSubstr("adamw"));

  // A rate that is set wins, wherever it is set, whatever its value.
  EXPECT_DOUBLE_EQ(load_train_config("", {"embedding.optimizer=adam", "embedding.learning_rate=1"})
                       .embedding.learning_rate,
                   1.0);
  const test::TemporaryDirectory dir;
  std::ofstream(dir / "config_rate.toml")
      << "[embedding]\noptimizer = \"adam\"\nlearning_rate = 0.5\n";
  EXPECT_DOUBLE_EQ(
      load_train_config((dir / "config_rate.toml").string(), {}).embedding.learning_rate, 0.5);

  // A table with an optimizer of its own and no rate gets that optimizer's; with the run's
  // optimizer, the run's rate (left unset here).
  const TrainConfig tables = load_train_config(
      "", {"embedding.learning_rate=0.7", "tables.C3.optimizer=adam", "tables.C4.optimizer=adagrad",
           "tables.C5.optimizer=sgd", "tables.C5.learning_rate=3"});
  EXPECT_EQ(tables.tables.at("C3").learning_rate, default_learning_rate("adam"));
  EXPECT_FALSE(tables.tables.at("C4").learning_rate.has_value());
  EXPECT_EQ(tables.tables.at("C5").learning_rate, 3.0);
}

}  // namespace
}  // namespace recemb::train
