// CheckpointSchedule (train/run/checkpoint_schedule.h): due every checkpoint.every steps before
// the last; a save writes a checkpoint that restores the run's progress and tables as saved, and
// a step saved already (or resumed at) is not saved again.
#include "train/run/checkpoint_schedule.h"

#include <filesystem>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sstream>
#include <string>
#include <vector>

#include "recemb/checkpoint.h"

#include "testing/temporary_directory.h"

namespace recemb::train {
namespace {

using ::testing::HasSubstr;

TEST(CheckpointScheduleTest, DueOnScheduleAndSavesWhatRestores) {
  const test::TemporaryDirectory dir;
  const TrainConfig config = load_train_config(
      "", {"data.table_budget_mib=1", "model.embedding_dim=4", "model.bottom_mlp=[8,4]",
           "model.top_mlp=[8]", "checkpoint.every=10", "train.steps=30", "checkpoint.keep=2"});
  const auto make_embedding = [] {
    return Embedding({{.name = "t", .vocabulary_size = 6, .dim = 2}}, {{.name = "f", .table = "t"}},
                     {.num_threads = 1, .seed = 4});
  };
  Embedding embedding = make_embedding();
  const dlrm::DlrmDenseConfig dense{
      .embedding_dim = 4, .bottom_mlp = {8, 4}, .top_mlp = {8}, .seed = 5};
  const dlrm::DlrmDenseModel model(dense);
  const dlrm::DenseOptimizer optimizer(dlrm::DenseAdam{.learning_rate = 0.01f},
                                       dlrm::DlrmDenseModel::parameter_count(dense),
                                       dlrm::default_dense_isa());
  std::ostringstream log;
  ProgressDisplay progress(log, ProgressMode::kLines);
  TrainSummary summary;
  CheckpointSchedule schedule(config, dir / "checkpoints", embedding, model, optimizer, progress,
                              summary);
  std::vector<int64_t> due;
  for (int64_t step = 1; step <= 30; ++step) {
    if (schedule.due(step)) due.push_back(step);
  }
  EXPECT_EQ(due, (std::vector<int64_t>{10, 20}));  // the 30th: the run's end saves it

  std::filesystem::create_directories(dir / "checkpoints");
  const TrainerProgress run{.data_position = "synthetic:123",
                            .examples = 4096,
                            .loss_window_sum = 1.5,
                            .loss_window_count = 3};
  schedule.save(10, run);
  schedule.save(10, run);  // saved already: nothing
  EXPECT_EQ(summary.checkpoints, 1);
  EXPECT_THAT(log.str(), HasSubstr("checkpoint " + (dir / "checkpoints").string()));
  const std::filesystem::path saved = *latest_checkpoint(dir / "checkpoints");
  Embedding restored_embedding = make_embedding();
  const RestoredState state = restore_checkpoint(restored_embedding, saved);
  dlrm::DlrmDenseModel restored_model(dense);
  dlrm::DenseOptimizer restored_optimizer(dlrm::DenseAdam{.learning_rate = 0.01f},
                                          dlrm::DlrmDenseModel::parameter_count(dense),
                                          dlrm::default_dense_isa());
  const TrainerProgress read =
      restore_trainer_state(state, config, saved.string(), restored_model, restored_optimizer);
  EXPECT_EQ(read.data_position, run.data_position);
  EXPECT_EQ(read.examples, run.examples);
  EXPECT_EQ(read.loss_window_sum, run.loss_window_sum);
  EXPECT_EQ(read.loss_window_count, run.loss_window_count);
  EXPECT_EQ(
      std::vector<float>(restored_model.parameters().begin(), restored_model.parameters().end()),
      std::vector<float>(model.parameters().begin(), model.parameters().end()));

  schedule.resumed_at(20);
  schedule.save(20, run);  // the step a run resumed at is saved already
  EXPECT_EQ(summary.checkpoints, 1);
}

}  // namespace
}  // namespace recemb::train
