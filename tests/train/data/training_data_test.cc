// open_training_data (train/data/training_data.cc): the synthetic stream and its planted model's
// metrics, a Criteo file's head held out (at most a fifth of a small file), a held-out file of its
// own, and the refusals. The trainer's use of it is in trainer_test.cc.
#include "train/data/training_data.h"

#include <filesystem>
#include <fstream>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <random>
#include <string>
#include <vector>
#include <zlib.h>

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
int64_t count_examples(dlrm::ExampleSource& source) {
  dlrm::ExampleBatch batch;
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
  dlrm::ExampleBatch first;
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

  const dlrm::ExampleBatch at_start = dynamic.eval_set;
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
  dlrm::ExampleBatch train;
  single.train_source->next(train, 1);
  EXPECT_EQ(single.eval_set.categorical_ids(0)[0], train.categorical_ids(0)[0]);

  const dlrm::ExampleBatch hashed_set = hashed.eval_set;
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
                    HasSubstr("(100% of the data)"),
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

// Example i of `batch` as one vector: label, 13 dense values, 26 ids.
std::vector<double> example(const dlrm::ExampleBatch& batch, int64_t i) {
  std::vector<double> values = {batch.labels[static_cast<size_t>(i)]};
  for (int j = 0; j < 13; ++j) values.push_back(batch.dense[static_cast<size_t>(i * 13 + j)]);
  for (int f = 0; f < 26; ++f) {
    values.push_back(static_cast<double>(batch.categorical_ids(f)[static_cast<size_t>(i)]));
  }
  return values;
}

// Every example of `source`, in order.
std::vector<std::vector<double>> all_examples(dlrm::ExampleSource& source) {
  std::vector<std::vector<double>> all;
  dlrm::ExampleBatch batch;
  while (source.next(batch, 64) > 0) {
    for (int64_t i = 0; i < batch.size; ++i) all.push_back(example(batch, i));
  }
  return all;
}

void write_gzip(const std::filesystem::path& path, const std::string& text) {
  gzFile file = gzopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr);
  ASSERT_EQ(gzwrite(file, text.data(), static_cast<unsigned>(text.size())),
            static_cast<int>(text.size()));
  ASSERT_EQ(gzclose(file), Z_OK);
}

// The examples of `paths` read as one plain file each by a reader of its own (the reference).
std::vector<std::vector<double>> reference_examples(const std::vector<std::string>& paths) {
  dlrm::CriteoReader reader(paths, {.vocabulary_sizes = kSizes});
  return all_examples(reader);
}

TEST(TrainingDataTest, GlobsExpandInSortedOrderAndMustMatch) {
  const test::TemporaryDirectory dir;
  for (const char* name : {"day_2.gz", "day_0.gz", "day_1.tsv", "other.tsv"}) {
    std::ofstream(dir / name) << "";
  }
  const std::string d = dir.path().string() + "/";
  EXPECT_THAT(expand_data_paths({d + "day_*", d + "other.tsv", d + "not_a_glob"}),
              ::testing::ElementsAre(d + "day_0.gz", d + "day_1.tsv", d + "day_2.gz",
                                     d + "other.tsv", d + "not_a_glob"));
  EXPECT_THAT(expand_data_paths({d + "day_[01]*"}),
              ::testing::ElementsAre(d + "day_0.gz", d + "day_1.tsv"));
  try {
    expand_data_paths({d + "day_*", d + "week_*.gz"});
    FAIL() << "no error";
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), AllOf(HasSubstr("data.path"), HasSubstr("'" + d + "week_*.gz'"),
                                    HasSubstr("matches no file")));
  }
}

TEST(TrainingDataTest, SeveralFilesPlainAndGzipTrainInOrderForEachEpoch) {
  const test::TemporaryDirectory dir;
  std::mt19937_64 random(7);
  std::vector<std::string> plain;
  for (int f = 0; f < 3; ++f) {
    const std::string text = test::random_criteo_text(random, 300);
    const std::string name = "day_" + std::to_string(f);
    plain.push_back((dir / (name + ".plain")).string());
    std::ofstream(plain.back()) << text;
    write_gzip(dir / (name + ".gz"), text);
  }
  const std::vector<std::vector<double>> reference = reference_examples(plain);
  ASSERT_EQ(reference.size(), 900u);
  TrainingData data =
      open_training_data(config_with({"data.path=[\"" + dir.path().string() + "/day_*.gz\"]",
                                      "data.eval_examples=100", "train.epochs=2"}),
                         kSizes);
  EXPECT_EQ(data.description,
            "3 files, " + (dir / "day_0.gz").string() + " ... " + (dir / "day_2.gz").string());
  ASSERT_EQ(data.eval_set.size, 100);
  for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(example(data.eval_set, i), reference[i]);
  // Each epoch trains on what follows the held-out head, never on the head itself.
  std::vector<std::vector<double>> expected(reference.begin() + 100, reference.end());
  expected.insert(expected.end(), reference.begin() + 100, reference.end());
  EXPECT_EQ(examples_left(data, data.train_source->position()), std::nullopt);  // gzip
  EXPECT_EQ(all_examples(*data.train_source), expected);

  // Plain files: the examples left are estimated from their bytes, both epochs counted.
  data = open_training_data(
      config_with({"data.path=[\"" + plain[0] + "\", \"" + plain[1] + "\", \"" + plain[2] + "\"]",
                   "data.eval_examples=100", "train.epochs=2"}),
      kSizes);
  const std::optional<int64_t> left = examples_left(data, data.train_source->position());
  ASSERT_TRUE(left.has_value());
  EXPECT_NEAR(static_cast<double>(*left), 1600, 1600 * 0.15);
}

TEST(TrainingDataTest, EvalFractionHoldsOutTheTailOfTheTrainingData) {
  const test::TemporaryDirectory dir;
  std::mt19937_64 random(9);
  std::vector<std::string> paths;
  for (int f = 0; f < 2; ++f) {
    paths.push_back((dir / ("part_" + std::to_string(f) + ".tsv")).string());
    std::ofstream(paths.back()) << test::random_criteo_text(random, 500);
  }
  const std::vector<std::vector<double>> reference = reference_examples(paths);
  const std::string path = "data.path=[\"" + paths[0] + "\", \"" + paths[1] + "\"]";
  // A tenth of 1000 lines: lines 901..1000, which lie in the second file.
  TrainingData data = open_training_data(
      config_with({path, "data.eval_fraction=0.1", "data.eval_examples=5000", "train.epochs=3"}),
      kSizes);
  ASSERT_EQ(data.eval_set.size, 100);
  for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(example(data.eval_set, i), reference[900 + i]);
  std::vector<std::vector<double>> expected;
  for (int e = 0; e < 3; ++e)
    expected.insert(expected.end(), reference.begin(), reference.end() - 100);
  EXPECT_TRUE(data.held_out_message.empty());
  // The examples left: 3 epochs of the 900 lines before the tail (the lines' lengths vary).
  const std::optional<int64_t> left = examples_left(data, data.train_source->position());
  ASSERT_TRUE(left.has_value());
  EXPECT_NEAR(static_cast<double>(*left), 2700, 2700 * 0.15);
  EXPECT_EQ(all_examples(*data.train_source), expected);
  // data.eval_examples caps the held-out set: the tail's first examples.
  data = open_training_data(config_with({path, "data.eval_fraction=0.25", "data.eval_examples=30"}),
                            kSizes);
  ASSERT_EQ(data.eval_set.size, 30);
  for (int64_t i = 0; i < 30; ++i) EXPECT_EQ(example(data.eval_set, i), reference[750 + i]);
  EXPECT_EQ(all_examples(*data.train_source).size(), 750u);
  // A fraction that holds out no line.
  try {
    open_training_data(config_with({path, "data.eval_fraction=0.0001"}), kSizes);
    FAIL() << "no error";
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), AllOf(HasSubstr("data.eval_fraction"), HasSubstr("1000 lines")));
  }
}

TEST(TrainingDataTest, StrictDataRefusesANonCanonicalLine) {
  const test::TemporaryDirectory dir;
  std::mt19937_64 random(10);
  std::string text = test::random_criteo_text(random, 50);
  text += "1\t2\t3\n";  // a short line: 3 fields
  std::ofstream(dir / "short.tsv") << text;
  const std::string path = "data.path=\"" + (dir / "short.tsv").string() + "\"";
  TrainingData lenient = open_training_data(config_with({path, "data.eval_examples=5"}), kSizes);
  EXPECT_EQ(all_examples(*lenient.train_source).size(), 46u);
  EXPECT_EQ(lenient.train_reader->short_lines(), 1);
  try {
    TrainingData strict =
        open_training_data(config_with({path, "data.eval_examples=5", "data.strict=true"}), kSizes);
    all_examples(*strict.train_source);
    FAIL() << "no error";
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), AllOf(HasSubstr((dir / "short.tsv").string() + ":51: a short line"),
                                    HasSubstr("data.strict")));
  }
}

}  // namespace
}  // namespace recemb::train
