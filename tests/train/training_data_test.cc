// open_training_data (train/training_data.cc): the synthetic stream and its planted model's
// metrics, a Criteo file's head held out (at most a fifth of a small file), a held-out file of its
// own, and the refusals; bytes_before. The trainer's use of it is in trainer_test.cc.
#include "train/training_data.h"

#include <filesystem>
#include <fstream>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <random>
#include <string>
#include <vector>

#include "recemb/error.h"

#include "testing/criteo_lines.h"
#include "testing/temporary_directory.h"

namespace recemb::train {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

const std::vector<int64_t> kSizes(26, 50);

TrainConfig config_with(std::vector<std::string> overrides) {
  overrides.push_back("data.table_budget_mib=1");
  return load_train_config("", overrides);
}

void write_lines(const std::filesystem::path& path, int count, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::ofstream(path) << test::random_criteo_text(random, count);
}

// Every example `source` gives, in batches of 7.
int64_t count_examples(ExampleSource& source) {
  ExampleBatch batch;
  int64_t count = 0;
  while (const int64_t read = source.next(batch, 7)) count += read;
  return count;
}

TEST(TrainingDataTest, SyntheticDataHoldsOutItsOwnStreamAndKnowsTheBestModel) {
  const TrainingData data = open_training_data(config_with({"data.eval_examples=3000"}), kSizes);
  EXPECT_EQ(data.eval_set.size, 3000);
  EXPECT_EQ(data.train_reader, nullptr);
  EXPECT_TRUE(data.held_out_message.empty());
  // The planted model separates clicks well above chance, and its log loss is that of a model.
  EXPECT_GT(data.best_auc, 0.6);
  EXPECT_LE(data.best_auc, 1.0);
  EXPECT_GT(data.best_log_loss, 0.0);
  EXPECT_LT(data.best_log_loss, 0.7);
  // The training stream is another one than the held-out set.
  ExampleBatch first;
  data.train_source->next(first, 100);
  EXPECT_NE(first.dense, std::vector<float>(data.eval_set.dense.begin(),
                                            data.eval_set.dense.begin() + 100 * 13));
}

// embedding.vocabulary = dynamic: the synthetic examples are the hashed mode's, keyed by the items
// of their moment; update_held_out_set keys the held-out set by the items of the moment given
// (the examples stay), and leaves a hashed held-out set as it is.
TEST(TrainingDataTest, ADynamicHeldOutSetIsKeyedByTheItemsOfTheMoment) {
  const TrainConfig hashed_config = config_with({"data.eval_examples=2000"});
  const TrainConfig dynamic_config =
      config_with({"data.eval_examples=2000", "embedding.vocabulary=dynamic"});
  TrainingData hashed = open_training_data(hashed_config, kSizes);
  TrainingData dynamic = open_training_data(dynamic_config, kSizes);
  EXPECT_EQ(dynamic.eval_set.labels, hashed.eval_set.labels);
  EXPECT_EQ(dynamic.eval_set.dense, hashed.eval_set.dense);
  EXPECT_EQ(dynamic.best_auc, hashed.best_auc);
  EXPECT_NE(dynamic.eval_set.categorical, hashed.eval_set.categorical);  // keys, not rows

  const ExampleBatch at_start = dynamic.eval_set;
  update_held_out_set(dynamic, 0);
  EXPECT_EQ(dynamic.eval_set.categorical, at_start.categorical);
  // Two lifetimes of an item later every slot holds another item: every key is new.
  const int64_t later = 2 * SyntheticOptions{}.item_lifetime;
  update_held_out_set(dynamic, later);
  EXPECT_EQ(dynamic.eval_set.labels, at_start.labels);
  EXPECT_EQ(dynamic.eval_set.dense, at_start.dense);
  ASSERT_EQ(dynamic.eval_set.categorical.size(), at_start.categorical.size());
  for (size_t k = 0; k < at_start.categorical.size(); ++k) {
    ASSERT_NE(dynamic.eval_set.categorical[k], at_start.categorical[k]) << k;
  }
  // As the training stream sees them at that moment: a held-out key is the key its slot has in
  // the training examples there (the one-slot feature C1 shows it).
  std::vector<int64_t> one_slot = kSizes;
  one_slot[0] = 1;
  TrainingData single = open_training_data(dynamic_config, one_slot);
  update_held_out_set(single, later);
  single.train_source->seek("synthetic:" + std::to_string(later));
  ExampleBatch train;
  single.train_source->next(train, 1);
  EXPECT_EQ(single.eval_set.categorical_ids(0)[0], train.categorical_ids(0)[0]);

  const ExampleBatch hashed_set = hashed.eval_set;
  update_held_out_set(hashed, later);
  EXPECT_EQ(hashed.eval_set.categorical, hashed_set.categorical);
}

TEST(TrainingDataTest, AFilesHeadIsHeldOutAndItsRestTrains) {
  const test::TemporaryDirectory dir;
  write_lines(dir / "day.tsv", 1000, 1);
  const std::string path = "data.path=\"" + (dir / "day.tsv").string() + "\"";
  TrainingData data = open_training_data(config_with({path, "data.eval_examples=100"}), kSizes);
  EXPECT_EQ(data.eval_set.size, 100);
  EXPECT_TRUE(data.held_out_message.empty());
  EXPECT_TRUE(std::isnan(data.best_auc));
  ASSERT_NE(data.train_reader, nullptr);
  const auto bytes = static_cast<double>(std::filesystem::file_size(dir / "day.tsv"));
  EXPECT_NEAR(data.bytes_per_line, bytes / 1000, bytes / 1000 * 0.2);
  EXPECT_EQ(count_examples(*data.train_source), 900);

  // A held-out file of its own: all of data.path trains.
  write_lines(dir / "held_out.tsv", 40, 2);
  data = open_training_data(
      config_with({path, "data.eval_examples=100",
                   "data.eval_path=\"" + (dir / "held_out.tsv").string() + "\""}),
      kSizes);
  EXPECT_EQ(data.eval_set.size, 40);
  EXPECT_NE(data.eval_reader, nullptr);
  EXPECT_EQ(count_examples(*data.train_source), 1000);
}

// A file smaller than data.eval_examples: its first fifth (by bytes) is held out, the rest trains,
// and the message says so.
TEST(TrainingDataTest, ASmallFileIsHeldOutUpToAFifth) {
  const test::TemporaryDirectory dir;
  write_lines(dir / "small.tsv", 100, 3);
  TrainingData data =
      open_training_data(config_with({"data.path=\"" + (dir / "small.tsv").string() + "\"",
                                      "data.eval_examples=4096"}),
                         kSizes);
  // The lines have nearly equal lengths: about 20 of them are a fifth of the bytes.
  EXPECT_GE(data.eval_set.size, 17);
  EXPECT_LE(data.eval_set.size, 23);
  EXPECT_EQ(count_examples(*data.train_source), 100 - data.eval_set.size);
  EXPECT_THAT(data.held_out_message,
              AllOf(HasSubstr("data.eval_examples = 4096 would hold out 100 examples"),
                    HasSubstr("(100% of the file)"),
                    HasSubstr("holding out its first " + std::to_string(data.eval_set.size))));

  write_lines(dir / "one.tsv", 1, 4);
  try {
    open_training_data(config_with({"data.path=\"" + (dir / "one.tsv").string() + "\""}), kSizes);
    FAIL() << "no error";
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), AllOf(HasSubstr("one.tsv holds 1 example"),
                                    HasSubstr("data.eval_path (--eval-data)")));
  }
  std::ofstream(dir / "empty.tsv") << "";
  EXPECT_THROW(open_training_data(
                   config_with({"data.path=\"" + (dir / "empty.tsv").string() + "\""}), kSizes),
               InvalidArgument);
}

TEST(TrainingDataTest, BytesBeforeAPosition) {
  const test::TemporaryDirectory dir;
  std::ofstream(dir / "f.tsv") << std::string(1234, 'x');
  EXPECT_EQ(bytes_before("criteo:0:517:12", (dir / "f.tsv").string()), 517);
  EXPECT_EQ(bytes_before("criteo:0:0:0", (dir / "f.tsv").string()), 0);
  EXPECT_EQ(bytes_before("criteo:1:0:0", (dir / "f.tsv").string()), 1234);  // at its end
}

}  // namespace
}  // namespace recemb::train
