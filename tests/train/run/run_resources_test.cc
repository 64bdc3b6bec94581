// train/run/run_resources.cc: the memory estimate and its check, the bytes of tables and slots, the
// strategy counts, the peak resident size.
#include "train/run/run_resources.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <string>
#include <vector>

#include "recemb/error.h"

namespace recemb::train {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TrainConfig config_with(std::vector<std::string> overrides) {
  overrides.push_back("data.table_budget_mib=1");
  return load_train_config("", overrides);
}

// The estimate is the step's bytes per example times the batch plus the held-out set's; the
// check passes at the estimate and refuses a byte less, naming both settings and the limit.
TEST(RunResourcesTest, TheMemoryCheckRefusesBuffersBeyondTheLimit) {
  const TrainConfig small = config_with({"train.batch_size=1000", "data.eval_examples=1"});
  const TrainConfig twice = config_with({"train.batch_size=2000", "data.eval_examples=1"});
  const TrainConfig held_out = config_with({"train.batch_size=1000", "data.eval_examples=11"});
  // A held-out example: label, 13 dense values, a probability (floats) and 26 ids.
  const int64_t held_out_example = 4 * 15 + 8 * 26;
  const int64_t step = run_buffer_bytes(small) - held_out_example;
  EXPECT_GT(step, 1000 * 26 * 16 * 4 * 2);  // at least the activations and their gradients
  EXPECT_EQ(run_buffer_bytes(twice), 2 * step + held_out_example);
  EXPECT_EQ(run_buffer_bytes(held_out), step + 11 * held_out_example);
  const int64_t needed = run_buffer_bytes(held_out);
  EXPECT_NO_THROW(check_memory(held_out, {.bytes = needed, .what = "a test's limit"}));
  try {
    check_memory(held_out, {.bytes = needed - 1, .what = "a test's limit"});
    FAIL() << "no error";
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), AllOf(HasSubstr("train.batch_size 1000 needs about"),
                                    HasSubstr("data.eval_examples 11 about"),
                                    HasSubstr("more than a test's limit"),
                                    HasSubstr("lower train.batch_size or data.eval_examples")));
  }
  // The overlapped loop holds a second step's batch, activations, gradients and lookup record.
  const TrainConfig overlapped =
      config_with({"train.batch_size=1000", "data.eval_examples=1", "train.overlap=true"});
  const int64_t overlapped_step = run_buffer_bytes(overlapped) - held_out_example;
  EXPECT_EQ(overlapped_step - step, 1000 * ((4 * 14 + 8 * 26) + 2 * 4 * 26 * 16 + 3 * 8 * 26));
  const MemoryLimit limit = memory_limit();
  EXPECT_GT(limit.bytes, int64_t{1} << 26);
  EXPECT_FALSE(limit.what.empty());
}

TEST(RunResourcesTest, EmbeddingBytesCountEveryTableAndSlot) {
  const Embedding embedding({{.name = "a", .vocabulary_size = 10, .dim = 3, .optimizer = Adagrad{}},
                             {.name = "b", .vocabulary_size = 7, .dim = 2, .optimizer = Sgd{}}},
                            {{.name = "f", .table = "a"}, {.name = "g", .table = "b"}},
                            {.num_threads = 1});
  // a: parameters and accumulators; b: parameters alone.
  EXPECT_EQ(embedding_bytes(embedding), (2 * 10 * 3 + 7 * 2) * 4);
  // 16-bit rows take 2 bytes a value; slots stay float32.
  const Embedding half(
      {{.name = "a",
        .vocabulary_size = 10,
        .dim = 3,
        .optimizer = Adagrad{},
        .dtype = DType::kBFloat16},
       {.name = "b", .vocabulary_size = 7, .dim = 2, .optimizer = Sgd{}, .dtype = DType::kFloat16}},
      {{.name = "f", .table = "a"}, {.name = "g", .table = "b"}}, {.num_threads = 1});
  EXPECT_EQ(embedding_bytes(half), 10 * 3 * 2 + 10 * 3 * 4 + 7 * 2 * 2);
  // A dynamic table: its capacity's rows and slots, the rows in its dtype.
  const Embedding dynamic({{.name = "d",
                            .dim = 4,
                            .optimizer = Adagrad{},
                            .dynamic_vocabulary = DynamicVocabulary{.capacity = 9},
                            .dtype = DType::kBFloat16}},
                          {{.name = "f", .table = "d"}}, {.num_threads = 1});
  EXPECT_EQ(embedding_bytes(dynamic), 9 * (4 * 2 + 4 * 4));
}

TEST(RunResourcesTest, StrategyCountsNameEachStrategyOnce) {
  Placement placement;
  for (const ShardingStrategy strategy :
       {ShardingStrategy::kTableWise, ShardingStrategy::kRowWise, ShardingStrategy::kTableWise,
        ShardingStrategy::kColumnWise}) {
    placement.tables.push_back({.table = "t", .strategy = strategy});
  }
  EXPECT_EQ(strategy_counts(placement), "1 column-wise, 1 row-wise, 2 table-wise");
  EXPECT_EQ(strategy_counts(Placement{}), "");
}

TEST(RunResourcesTest, PeakResidentBytesIncludeWhatWasTouched) {
  std::vector<char> touched(64 << 20, 1);
  EXPECT_GE(peak_resident_bytes(), static_cast<int64_t>(touched.size()));
}

}  // namespace
}  // namespace recemb::train
