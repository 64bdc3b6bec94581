// publish by several ranks together (src/serving/publisher.cc): tables split by rows, columns or
// whole tables over 2 and 3 ranks, static and dynamic, and every rank's changes gathered; rank 0
// writes the files. A base plus its deltas equals, byte for byte, a one-process export of the
// checkpoint saved at the same step. Ranks are threads connected by in_process_communicators.
#include <filesystem>
#include <functional>
#include <gtest/gtest.h>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "recemb/checkpoint.h"
#include "recemb/communicator.h"
#include "recemb/embedding.h"
#include "recemb/placement.h"
#include "recemb/publish.h"
#include "recemb/serving.h"

#include "serving/model_access.h"
#include "testing/embedding_calls.h"
#include "testing/temporary_directory.h"

namespace recemb {
namespace {

namespace fs = std::filesystem;
using internal::ServingModelAccess;
using test::TemporaryDirectory;

constexpr int64_t kBatch = 6;
constexpr int kRounds = 3;

Embedding make_layer(int ranks, ShardingStrategy strategy,
                     std::shared_ptr<Communicator> communicator) {
  const std::vector<TableConfig> tables = {
      {.name = "items", .vocabulary_size = 60, .dim = 4},
      {.name = "user",
       .dim = 6,
       .dynamic_vocabulary = DynamicVocabulary{.capacity = 24, .min_count = 2, .ttl_steps = 3}}};
  const std::vector<FeatureConfig> features = {{.name = "item_bags", .table = "items"},
                                               {.name = "user_bags", .table = "user"}};
  return Embedding(tables, features,
                   {.optimizer = Adagrad{.learning_rate = 0.2f},
                    .num_threads = 1,
                    .seed = 4,
                    .placement = PlacementOptions{.num_shards = ranks, .strategy = strategy},
                    .communicator = std::move(communicator)});
}

// Steps [first, last) on this rank's share of each step's global batch (testing/embedding_calls.h):
// items from their 60 rows, users from 70 keys (the table holds 24).
void train(Embedding& layer, int64_t first, int64_t last) {
  test::train_rank_share(layer, first, last, kBatch, 77, [](const TableConfig& table) {
    return table.dynamic_vocabulary ? int64_t{70} : table.vocabulary_size;
  });
}

void expect_same_tables(const ServingModel& model, const ServingModel& expected) {
  ASSERT_EQ(model.tables().size(), expected.tables().size());
  for (size_t t = 0; t < model.tables().size(); ++t) {
    SCOPED_TRACE(model.tables()[t].name);
    const auto rows = ServingModelAccess::table_rows(model, t);
    const auto expected_rows = ServingModelAccess::table_rows(expected, t);
    EXPECT_TRUE(std::equal(rows.begin(), rows.end(), expected_rows.begin(), expected_rows.end()));
    const auto keys = ServingModelAccess::table_keys(model, t);
    const auto expected_keys = ServingModelAccess::table_keys(expected, t);
    EXPECT_TRUE(std::equal(keys.begin(), keys.end(), expected_keys.begin(), expected_keys.end()));
  }
}

TEST(PublishRanksTest, BasePlusDeltasEqualsTheExportOfACheckpointOfTheSameStep) {
  for (const int ranks : {2, 3}) {
    for (const ShardingStrategy strategy :
         {ShardingStrategy::kRowWise, ShardingStrategy::kTableWise,
          ShardingStrategy::kColumnWise}) {
      SCOPED_TRACE(std::to_string(ranks) + " ranks, " +
                   std::string(sharding_strategy_name(strategy)));
      TemporaryDirectory directory;
      const fs::path dir = directory / "model";
      std::vector<std::vector<PublishResult>> results(static_cast<size_t>(ranks));
      std::vector<std::string> errors(static_cast<size_t>(ranks));
      const std::vector<std::shared_ptr<Communicator>> communicators =
          in_process_communicators(ranks);
      std::vector<std::thread> threads;
      for (int r = 0; r < ranks; ++r) {
        threads.emplace_back([&, r] {
          try {
            Embedding layer = make_layer(ranks, strategy, communicators[static_cast<size_t>(r)]);
            train(layer, 0, 2);
            results[static_cast<size_t>(r)].push_back(publish(layer, dir));
            for (int round = 1; round <= kRounds; ++round) {
              train(layer, 2 * round, 2 * round + 2);
              results[static_cast<size_t>(r)].push_back(publish(layer, dir));
              save_checkpoint(layer, directory / ("ckpt" + std::to_string(round)));
            }
          } catch (const std::exception& error) {
            errors[static_cast<size_t>(r)] = error.what();
          }
        });
      }
      for (std::thread& thread : threads) thread.join();
      for (int r = 0; r < ranks; ++r) {
        ASSERT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
        ASSERT_EQ(results[static_cast<size_t>(r)].size(), kRounds + 1u);
        for (int k = 0; k <= kRounds; ++k) {
          EXPECT_EQ(results[static_cast<size_t>(r)][static_cast<size_t>(k)].sequence, k);
          EXPECT_EQ(results[static_cast<size_t>(r)][static_cast<size_t>(k)].file,
                    results[0][static_cast<size_t>(k)].file);
          EXPECT_EQ(results[static_cast<size_t>(r)][static_cast<size_t>(k)].rows,
                    results[0][static_cast<size_t>(k)].rows);
        }
      }
      ServingModel model = ServingModel::open(results[0][0].file);
      for (int round = 1; round <= kRounds; ++round) {
        SCOPED_TRACE("delta " + std::to_string(round));
        model.apply_delta(results[0][static_cast<size_t>(round)].file);
        const Embedding whole =
            load_checkpoint(*latest_checkpoint(directory / ("ckpt" + std::to_string(round))));
        export_serving_model(whole, directory / "fresh.recemb");
        expect_same_tables(model, ServingModel::open(directory / "fresh.recemb"));
      }
    }
  }
}

}  // namespace
}  // namespace recemb
