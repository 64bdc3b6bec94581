// PublishSchedule (train/run/publish_schedule.h): a base at the first publish, said at once; then
// deltas written on another thread, counted and reported; a delta applied to the base equals a
// fresh export of the tables (ServingModel, the reference). Not due before the first publish.
#include "train/run/publish_schedule.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "recemb/serving.h"

#include "testing/temporary_directory.h"
#include "train/config/embedding_model.h"

namespace recemb::train {
namespace {

using ::testing::HasSubstr;

TrainConfig config_with(const std::filesystem::path& publish_dir) {
  return load_train_config(
      "", {"data.table_budget_mib=1", "model.embedding_dim=4", "model.bottom_mlp=[8,4]",
           "model.top_mlp=[8]", "serving.publish_dir=\"" + publish_dir.string() + "\"",
           "serving.publish_every_seconds=0.001"});
}

Embedding embedding_of(const TrainConfig& config) {
  EmbeddingModel model = embedding_model(config);
  return Embedding(std::move(model.tables), std::move(model.features),
                   {.optimizer = Adagrad{.learning_rate = 0.5f}, .num_threads = 1});
}

// One training step on random ids of every table.
void train(Embedding& embedding, std::mt19937_64& rng) {
  std::vector<std::vector<int64_t>> ids;
  std::vector<FeatureInput> inputs;
  std::vector<std::vector<float>> activations, gradients;
  for (const TableConfig& table : embedding.tables()) {
    std::vector<int64_t>& feature = ids.emplace_back();
    for (int e = 0; e < 8; ++e)
      feature.push_back(static_cast<int64_t>(rng() % 50) % table.vocabulary_size);
  }
  for (size_t f = 0; f < ids.size(); ++f) {
    inputs.push_back(DenseIds{.ids = ids[f], .shape = {8}, .weights = {}});
    activations.emplace_back(8 * static_cast<size_t>(embedding.tables()[f].dim));
    gradients.emplace_back(activations.back().size(), 0.25f);
  }
  std::vector<std::span<float>> outs(activations.begin(), activations.end());
  LookupBatch batch;
  embedding.lookup(inputs, outs, batch);
  std::vector<std::span<const float>> grads(gradients.begin(), gradients.end());
  embedding.apply_gradients(batch, grads);
}

// Every feature's activations of every row of its table (ids i % rows, as many as the largest
// table's rows).
std::vector<std::vector<float>> activations_of_every_row(const ServingModel& model) {
  int64_t examples = 0;
  for (const TableConfig& table : model.tables())
    examples = std::max(examples, table.vocabulary_size);
  std::vector<std::vector<int64_t>> ids;
  std::vector<FeatureInput> inputs;
  std::vector<std::vector<float>> activations;
  for (const FeatureConfig& feature : model.features()) {
    int64_t rows = 0, dim = 0;
    for (const TableConfig& table : model.tables()) {
      if (table.name == feature.table) {
        rows = table.vocabulary_size;
        dim = table.dim;
      }
    }
    std::vector<int64_t>& feature_ids = ids.emplace_back();
    for (int64_t i = 0; i < examples; ++i) feature_ids.push_back(i % rows);
    activations.emplace_back(static_cast<size_t>(examples * dim));
  }
  for (const std::vector<int64_t>& feature_ids : ids) {
    inputs.push_back(DenseIds{.ids = feature_ids, .shape = {examples}, .weights = {}});
  }
  std::vector<std::span<float>> outs(activations.begin(), activations.end());
  model.lookup(inputs, outs);
  return activations;
}

TEST(PublishScheduleTest, ABaseThenDeltasThatBringTheBaseToTheTables) {
  const test::TemporaryDirectory dir;
  const TrainConfig config = config_with(dir / "model");
  Embedding embedding = embedding_of(config);
  const dlrm::DlrmDenseModel model(
      dlrm::DlrmDenseConfig{.embedding_dim = 4, .bottom_mlp = {8, 4}, .top_mlp = {8}, .seed = 3});
  std::ostringstream log;
  ProgressDisplay progress(log, ProgressMode::kLines);
  TrainSummary summary;
  PublishSchedule schedule(config, embedding, model, progress, summary);
  ASSERT_TRUE(schedule.enabled());
  EXPECT_FALSE(schedule.due());  // the run makes the first publish itself
  EXPECT_EQ(schedule.published_step(), -1);
  schedule.publish(0);
  EXPECT_THAT(log.str(),
              HasSubstr("published a base: " + (dir / "model" / "1" / "model.recemb").string()));
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_TRUE(schedule.due());  // publish_every_seconds 0.001
  std::mt19937_64 rng(9);
  for (int step = 1; step <= 3; ++step) {
    train(embedding, rng);
    schedule.publish(step);
  }
  schedule.finish();
  schedule.report_deltas();
  EXPECT_EQ(schedule.published_step(), 3);
  EXPECT_EQ(summary.publishes, 4);
  EXPECT_THAT(log.str(), HasSubstr("3 deltas"));

  ServingModel served = ServingModel::open(dir / "model" / "1" / "model.recemb");
  for (int sequence = 1; sequence <= 3; ++sequence) {
    served.apply_delta(dir / "model" / "1" / delta_file_name(sequence));
  }
  const std::filesystem::path fresh = dir / "fresh.recemb";
  export_serving_model(embedding, fresh);
  const ServingModel reference = ServingModel::open(fresh);
  EXPECT_EQ(activations_of_every_row(served), activations_of_every_row(reference));
}

TEST(PublishScheduleTest, NotEnabledWithoutAPublishDirectory) {
  const TrainConfig config = load_train_config("", {"data.table_budget_mib=1"});
  Embedding embedding = embedding_of(config);
  const dlrm::DlrmDenseModel model(dlrm::DlrmDenseConfig{.seed = 1});
  std::ostringstream log;
  ProgressDisplay progress(log, ProgressMode::kLines);
  TrainSummary summary;
  const PublishSchedule schedule(config, embedding, model, progress, summary);
  EXPECT_FALSE(schedule.enabled());
  EXPECT_FALSE(schedule.due());
}

}  // namespace
}  // namespace recemb::train
