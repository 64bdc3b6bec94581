// train/run/trainer_checkpoint.cc: the trainer's state through a checkpoint (save_checkpoint,
// restore_checkpoint) and back bitwise; what a restore refuses before changing anything.
#include "train/run/trainer_checkpoint.h"

#include <algorithm>
#include <functional>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <random>
#include <string>
#include <vector>

#include "recemb/embedding.h"
#include "recemb/error.h"

#include "testing/temporary_directory.h"

namespace recemb::train {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TrainConfig config_with(std::vector<std::string> overrides) {
  overrides.insert(overrides.end(), {"data.table_budget_mib=1", "model.embedding_dim=4",
                                     "model.bottom_mlp=[8,4]", "model.top_mlp=[8]"});
  return load_train_config("", overrides);
}

dlrm::DlrmDenseConfig dense_config(const TrainConfig& config, uint64_t seed) {
  return {.embedding_dim = config.model.embedding_dim,
          .bottom_mlp = config.model.bottom_mlp,
          .top_mlp = config.model.top_mlp,
          .seed = seed};
}

// A model and an optimizer with state of their own: seed + 2 steps of random gradients.
struct DenseState {
  dlrm::DlrmDenseModel model;
  dlrm::DenseOptimizer optimizer;
};

DenseState trained_state(const TrainConfig& config, uint64_t seed) {
  DenseState state{
      dlrm::DlrmDenseModel(dense_config(config, seed)),
      dlrm::DenseOptimizer(dlrm::DenseAdam{.learning_rate = 0.01f},
                           dlrm::DlrmDenseModel::parameter_count(dense_config(config, seed)),
                           dlrm::default_dense_isa())};
  std::mt19937_64 random(seed);
  std::normal_distribution<float> normal;
  std::vector<float> gradients(state.model.parameters().size());
  for (uint64_t step = 0; step < seed + 2; ++step) {
    for (float& gradient : gradients) gradient = normal(random);
    state.optimizer.apply(state.model.parameters(), gradients);
  }
  return state;
}

Embedding small_embedding() {
  return Embedding({{.name = "t", .vocabulary_size = 4, .dim = 2}}, {{.name = "f", .table = "t"}},
                   {.num_threads = 1});
}

TEST(TrainerCheckpointTest, TheStateRoundTripsBitwiseThroughACheckpoint) {
  const test::TemporaryDirectory dir;
  const TrainConfig config = config_with({});
  const DenseState saved = trained_state(config, 1);
  const TrainerProgress progress{.data_position = "criteo:0:4096:37",
                                 .examples = 123456,
                                 .loss_window_sum = 0.1 + 0.2,
                                 .loss_window_count = 7};
  const std::filesystem::path checkpoint =
      save_checkpoint(small_embedding(), dir.path(),
                      trainer_save_options(config, saved.model, saved.optimizer, progress, 2));
  Embedding embedding = small_embedding();
  const RestoredState state = restore_checkpoint(embedding, checkpoint);
  EXPECT_EQ(state.metadata.at("dense/bottom_mlp"), "8,4");  // the model's shape (model_file.h)

  DenseState restored = trained_state(config, 2);
  const TrainerProgress read =
      restore_trainer_state(state, config, checkpoint.string(), restored.model, restored.optimizer);
  EXPECT_EQ(read.data_position, progress.data_position);
  EXPECT_EQ(read.examples, progress.examples);
  EXPECT_EQ(read.loss_window_sum, progress.loss_window_sum);  // bitwise: double_text round-trips
  EXPECT_EQ(read.loss_window_count, progress.loss_window_count);
  EXPECT_TRUE(std::equal(restored.model.parameters().begin(), restored.model.parameters().end(),
                         saved.model.parameters().begin()));
  EXPECT_TRUE(std::equal(restored.optimizer.slots().begin(), restored.optimizer.slots().end(),
                         saved.optimizer.slots().begin()));
  EXPECT_EQ(restored.optimizer.step(), 3);
}

// Each refusal names the checkpoint and the part, and leaves the model and optimizer unchanged.
TEST(TrainerCheckpointTest, IncompleteOrForeignStatesAreRefusedBeforeAnyChange) {
  const TrainConfig config = config_with({});
  const DenseState saved = trained_state(config, 1);
  const SaveOptions options = trainer_save_options(config, saved.model, saved.optimizer,
                                                   {.data_position = "p", .examples = 5}, 1);
  RestoredState good;
  for (const NamedArray& array : options.extra_arrays) {
    good.extra_arrays[array.name] = {array.values.begin(), array.values.end()};
  }
  good.metadata = options.metadata;

  const auto refused = [&](const std::function<void(RestoredState&)>& edit,
                           const TrainConfig& resumed) {
    RestoredState state = good;
    edit(state);
    DenseState target = trained_state(config, 2);
    const std::vector<float> before(target.model.parameters().begin(),
                                    target.model.parameters().end());
    try {
      restore_trainer_state(state, resumed, "ckpt-7", target.model, target.optimizer);
    } catch (const InvalidArgument& error) {
      EXPECT_TRUE(std::equal(before.begin(), before.end(), target.model.parameters().begin()));
      EXPECT_EQ(target.optimizer.step(), 4);
      return std::string(error.what());
    }
    return std::string("(no error)");
  };
  EXPECT_THAT(refused([](RestoredState& s) { s.extra_arrays.erase("dense/parameters"); }, config),
              HasSubstr("ckpt-7: 'dense/parameters' is missing or has another size"));
  EXPECT_THAT(
      refused([](RestoredState& s) { s.extra_arrays["dense/optimizer_slots"].pop_back(); }, config),
      HasSubstr("'dense/optimizer_slots' is missing or has another size"));
  EXPECT_THAT(refused([](RestoredState& s) { s.metadata.erase("data_position"); }, config),
              HasSubstr("ckpt-7: metadata 'data_position' is missing"));
  EXPECT_THAT(refused([](RestoredState& s) { s.metadata["examples"] = "many"; }, config),
              HasSubstr("malformed metadata 'examples'"));
  EXPECT_THAT(refused([](RestoredState& s) { s.metadata["loss_window"] = "0.5"; }, config),
              HasSubstr("malformed metadata 'loss_window'"));
  EXPECT_THAT(refused([](RestoredState&) {}, config_with({"train.batch_size=64"})),
              AllOf(HasSubstr("--resume: the run in ckpt-7 was trained with other settings"),
                    HasSubstr("train.batch_size is 64")));
  // Without saved settings (an older checkpoint), a resume is not checked.
  EXPECT_EQ(refused([](RestoredState& s) { s.metadata.erase("train_config"); },
                    config_with({"train.batch_size=64"})),
            "(no error)");
}

}  // namespace
}  // namespace recemb::train
