#include "train/report/run_summary.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <memory>
#include <string>
#include <vector>

#include "recemb/embedding.h"

#include "dlrm/criteo_reader.h"
#include "testing/temporary_directory.h"

namespace recemb::train {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(RunSummary, ARunLearnedWhenItsAucIsHighEnoughAndItsLogLossWentDown) {
  EXPECT_TRUE(learned(kLearnedAuc, 0.50, 0.51));
  EXPECT_TRUE(learned(0.75, 0.40, 0.69));
  EXPECT_FALSE(learned(0.5199, 0.40, 0.69));       // the AUC is too low
  EXPECT_FALSE(learned(0.75, 0.69, 0.69));         // the log loss did not go down
  EXPECT_FALSE(learned(0.75, 0.70, 0.69));         // it went up
  EXPECT_TRUE(learned(0.75, 0.40, std::nan("")));  // no initial log loss (a resumed run's)
  EXPECT_FALSE(learned(0.40, 0.40, std::nan("")));
}

TableConfig hashed_table(const std::string& name, int64_t rows) {
  return {.name = name, .vocabulary_size = rows, .dim = 16};
}

TableConfig dynamic_table(const std::string& name, int64_t capacity) {
  return {.name = name, .dim = 16, .dynamic_vocabulary = DynamicVocabulary{.capacity = capacity}};
}

TEST(RunSummary, TheFirstLineNamesTheTablesTheDenseModelAndTheData) {
  EXPECT_EQ(
      run_description(load_train_config("", {}), {hashed_table("C1", 1000), hashed_table("C2", 24)},
                      3 << 20, 27601, dlrm::DenseIsa::kAvx2, "synthetic Criteo-like"),
      "recemb train: 26 tables, 1024 rows x 16 dims, 3.0 MiB with optimizer slots; 27601 "
      "dense parameters (avx2); data: synthetic Criteo-like");
  EXPECT_EQ(run_description(load_train_config("", {"embedding.vocabulary=dynamic"}),
                            {dynamic_table("C1", 5000), dynamic_table("C2", 250)}, 5 << 19, 12,
                            dlrm::DenseIsa::kBaseline, "day_0.gz"),
            "recemb train: 26 dynamic tables, 5250 keys at most x 16 dims, 2.5 MiB with optimizer "
            "slots when full; 12 dense parameters (baseline); data: day_0.gz");
}

// The dynamic tables alone, in table order, with their capacities and what they hold.
TEST(RunSummary, TheVocabulariesAreThoseOfTheDynamicTables) {
  Embedding embedding(
      {dynamic_table("C1", 100), hashed_table("C2", 10), dynamic_table("C3", 7)},
      {{.name = "C1", .table = "C1"}, {.name = "C2", .table = "C2"}, {.name = "C3", .table = "C3"}},
      {.num_threads = 1});
  embedding.write_dynamic_table("C3",
                                {.keys = {4, 9, 11}, .parameters = std::vector<float>(48, 0.5f)});
  const std::vector<TableVocabulary> vocabularies = table_vocabularies(embedding);
  ASSERT_EQ(vocabularies.size(), 2u);
  EXPECT_EQ(vocabularies[0].table, "C1");
  EXPECT_EQ(vocabularies[0].capacity, 100);
  EXPECT_EQ(vocabularies[0].stats.size, 0);
  EXPECT_EQ(vocabularies[1].table, "C3");
  EXPECT_EQ(vocabularies[1].capacity, 7);
  EXPECT_EQ(vocabularies[1].stats.size, 3);
  EXPECT_TRUE(table_vocabularies(Embedding({hashed_table("C1", 10)},
                                           {{.name = "C1", .table = "C1"}}, {.num_threads = 1}))
                  .empty());
}

// Criteo lines: a label, 13 integers and 26 hex values.
std::string criteo_line(int label) {
  std::string line = std::to_string(label);
  for (int f = 0; f < 13; ++f) line += "\t" + std::to_string(f);
  for (int f = 0; f < 26; ++f) line += "\ta" + std::to_string(f);
  return line + "\n";
}

// The readers share the run's MalformedLines (TrainingData::malformed): its lines are added once.
TEST(RunSummary, TheMalformedLinesOfBothReadersAreAddedUp) {
  const test::TemporaryDirectory dir;
  std::ofstream(dir / "train.tsv") << criteo_line(1) << "1\tnot-a-number\n"
                                   << criteo_line(0) << "0\tbad\n";
  std::ofstream(dir / "eval.tsv") << criteo_line(0) << "x\n" << criteo_line(1);
  TrainingData data;
  data.malformed = std::make_shared<dlrm::MalformedLines>();
  const dlrm::ReaderOptions options{.vocabulary_sizes = std::vector<int64_t>(26, 100),
                                    .malformed = data.malformed};
  dlrm::CriteoReader train_reader({(dir / "train.tsv").string()}, options);
  data.train_reader = &train_reader;
  data.eval_reader = std::make_unique<dlrm::CriteoReader>(
      std::vector<std::string>{(dir / "eval.tsv").string()}, options);
  dlrm::ExampleBatch batch;
  EXPECT_EQ(train_reader.next(batch, 10), 2);
  EXPECT_EQ(data.eval_reader->next(batch, 10), 2);
  TrainSummary summary;
  summary.malformed_lines = 1;  // added to
  add_malformed_lines(data, summary);
  EXPECT_EQ(summary.malformed_lines, 4);
  EXPECT_EQ(summary.short_lines, 0);
  ASSERT_EQ(summary.malformed_messages.size(), 3u);
  EXPECT_THAT(summary.malformed_messages[0], HasSubstr("train.tsv:2: "));
  EXPECT_THAT(summary.malformed_messages[1], HasSubstr("train.tsv:4: "));
  EXPECT_THAT(summary.malformed_messages[2], HasSubstr("eval.tsv:2: "));

  TrainSummary synthetic;  // no readers
  add_malformed_lines(TrainingData{}, synthetic);
  EXPECT_EQ(synthetic.malformed_lines, 0);
  EXPECT_TRUE(synthetic.malformed_messages.empty());
}

}  // namespace
}  // namespace recemb::train
