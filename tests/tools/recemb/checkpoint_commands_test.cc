#include "tools/recemb/checkpoint_commands.h"

#include <filesystem>
#include <fstream>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <map>
#include <random>
#include <sstream>
#include <system_error>

#include "recemb/checkpoint.h"
#include "recemb/embedding.h"
#include "recemb/error.h"
#include "recemb/serving.h"

#include "dlrm/model_file.h"

namespace recemb::tools {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / ("checkpoint_commands_" + name);
  std::filesystem::remove_all(dir);
  return dir;
}

Embedding trained_embedding() {
  Embedding embedding({{.name = "users", .vocabulary_size = 50, .dim = 4},
                       {.name = "items",
                        .vocabulary_size = 30,
                        .dim = 8,
                        .optimizer = RowwiseAdagrad{.learning_rate = 0.5f}}},
                      {{.name = "user", .table = "users"}, {.name = "item", .table = "items"}},
                      {.optimizer = Adagrad{.learning_rate = 0.1f}, .num_threads = 1, .seed = 3});
  std::mt19937_64 rng(11);
  std::vector<int64_t> users(16), items(16);
  std::vector<float> user_grad(16 * 4), item_grad(16 * 8);
  std::normal_distribution<float> normal;
  for (int step = 0; step < 3; ++step) {
    for (auto& id : users) id = static_cast<int64_t>(rng() % 50);
    for (auto& id : items) id = static_cast<int64_t>(rng() % 30);
    for (auto& g : user_grad) g = normal(rng);
    for (auto& g : item_grad) g = normal(rng);
    std::vector<float> user_act(16 * 4), item_act(16 * 8);
    const std::vector<FeatureInput> inputs{
        DenseIds{.ids = std::span<const int64_t>(users), .shape = {16}},
        DenseIds{.ids = std::span<const int64_t>(items), .shape = {16}}};
    const std::vector<std::span<float>> acts{user_act, item_act};
    LookupBatch batch;
    embedding.lookup(inputs, acts, batch);
    const std::vector<std::span<const float>> grads{user_grad, item_grad};
    embedding.apply_gradients(batch, grads);
  }
  return embedding;
}

TEST(CheckpointCommands, InspectListsTablesAndFilesAndFindsDamage) {
  const auto root = fresh_dir("inspect");
  const auto checkpoint = save_checkpoint(trained_embedding(), root);
  std::ostringstream out;
  EXPECT_EQ(run_inspect_command({.checkpoint = root.string()}, out), 0);
  EXPECT_THAT(out.str(), AllOf(HasSubstr("step 3"), HasSubstr("users"), HasSubstr("adagrad"),
                               HasSubstr("rowwise_adagrad"), HasSubstr("all checksums verified")));

  // Damage one data file: inspect names it and returns 1.
  const std::filesystem::path victim =
      checkpoint / inspect_checkpoint(checkpoint).files.back().path;
  {
    std::fstream file(victim, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(5);
    file.put('\x7f');
  }
  std::ostringstream damaged;
  EXPECT_EQ(run_inspect_command({.checkpoint = checkpoint.string()}, damaged), 1);
  EXPECT_THAT(damaged.str(), AllOf(HasSubstr("DAMAGED"), HasSubstr("1 damaged"),
                                   HasSubstr(victim.filename().string())));
  std::ostringstream unverified;
  EXPECT_EQ(run_inspect_command({.checkpoint = checkpoint.string(), .verify = false}, unverified),
            0);
  EXPECT_THAT(unverified.str(), HasSubstr("not verified"));
  EXPECT_THROW(run_inspect_command({.checkpoint = (root / "nothing").string()}, out),
               std::system_error);
}

// Each file is named with what it holds: a trainer's dense parameters and slots by their names.
TEST(CheckpointCommands, InspectNamesWhatEachFileHolds) {
  const auto root = fresh_dir("inspect_holds");
  const std::vector<float> parameters(10, 0.5f), slots(20, 0.25f);
  save_checkpoint(trained_embedding(), root,
                  {.extra_arrays = {{.name = "dense/parameters", .values = parameters},
                                    {.name = "dense/optimizer_slots", .values = slots}}});
  std::ostringstream out;
  EXPECT_EQ(run_inspect_command({.checkpoint = root.string()}, out), 0);
  EXPECT_THAT(out.str(),
              AllOf(HasSubstr("extra array 'dense/parameters'"),
                    HasSubstr("extra array 'dense/optimizer_slots'"),
                    HasSubstr("table 'items' variable 'parameters'"), HasSubstr("manifest")));
}

// A dynamic table is listed with the keys it holds.
TEST(CheckpointCommands, InspectListsTheKeysOfDynamicTables) {
  Embedding embedding(
      {{.name = "members", .dim = 4, .dynamic_vocabulary = DynamicVocabulary{.capacity = 100}}},
      {{.name = "member", .table = "members"}},
      {.optimizer = Adagrad{.learning_rate = 0.1f}, .num_threads = 1, .seed = 3});
  const std::vector<int64_t> keys = {-5, 9, 9, 1LL << 40, 77, -5, 3};  // 5 distinct
  std::vector<float> activations(keys.size() * 4), gradients(keys.size() * 4, 0.5f);
  const std::vector<FeatureInput> inputs{DenseIds{.ids = std::span<const int64_t>(keys),
                                                  .shape = {static_cast<int64_t>(keys.size())}}};
  const std::vector<std::span<float>> outputs{activations};
  LookupBatch batch;
  embedding.lookup(inputs, outputs, batch);
  const std::vector<std::span<const float>> grads{gradients};
  embedding.apply_gradients(batch, grads);
  const auto root = fresh_dir("inspect_dynamic");
  save_checkpoint(embedding, root);
  std::ostringstream out;
  EXPECT_EQ(run_inspect_command({.checkpoint = root.string()}, out), 0);
  EXPECT_THAT(out.str(), HasSubstr("  members                         5 keys x    4  adagrad  "
                                   "(dynamic)\n"));
}

TEST(CheckpointCommands, ExportWritesAServingModelOfTheTables) {
  const auto root = fresh_dir("export");
  const Embedding embedding = trained_embedding();
  save_checkpoint(embedding, root);
  for (const char* dtype : {"float32", "float16", "int8"}) {
    const auto model_dir = root / (std::string("model.") + dtype);
    std::ostringstream out;
    EXPECT_EQ(run_export_command(
                  {.checkpoint = root.string(), .output = model_dir.string(), .dtype = dtype}, out),
              0);
    EXPECT_THAT(out.str(), AllOf(HasSubstr("exported 2 tables (80 rows)"), HasSubstr(dtype)));
    EXPECT_THAT(out.str(), HasSubstr((model_dir / "model.recemb").string()));
    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(model_dir), {}), 1)
        << "one file, model.recemb";
    const ServingModel model = ServingModel::open(model_dir / dlrm::kModelFileName);
    EXPECT_EQ(std::string(serving_dtype_name(model.dtype())), dtype);
    ASSERT_EQ(model.tables().size(), 2u);
    EXPECT_EQ(model.tables()[1].dim, 8);
    // Not a checkpoint of recemb train: no dense part.
    EXPECT_TRUE(model.extra_arrays().empty());
    // The step its tables were trained to, alone: a checkpoint of another program has no dense
    // part.
    EXPECT_EQ(model.metadata(),
              (std::map<std::string, std::string>{{"step", std::to_string(embedding.step())}}));
    EXPECT_THAT(out.str(), Not(HasSubstr("dense")));
  }
  // float32 serving lookups equal the training lookups bitwise.
  const ServingModel model = ServingModel::open(root / "model.float32" / dlrm::kModelFileName);
  std::vector<int64_t> users = {0, 49, 7}, items = {29, 3, 3};
  const std::vector<FeatureInput> inputs{
      DenseIds{.ids = std::span<const int64_t>(users), .shape = {3}},
      DenseIds{.ids = std::span<const int64_t>(items), .shape = {3}}};
  std::vector<float> served_users(12), served_items(24), trained_users(12), trained_items(24);
  model.lookup(inputs, std::vector<std::span<float>>{served_users, served_items});
  Embedding restored = load_checkpoint(root, {.tables_only = true});
  restored.lookup(inputs, std::vector<std::span<float>>{trained_users, trained_items});
  EXPECT_EQ(served_users, trained_users);
  EXPECT_EQ(served_items, trained_items);

  std::ostringstream out;
  EXPECT_THROW(
      run_export_command(
          {.checkpoint = root.string(), .output = (root / "x").string(), .dtype = "int4"}, out),
      InvalidArgument);
  // OUT is a directory: a file there is refused, and left alone.
  std::ofstream(root / "file") << "mine";
  EXPECT_THROW(
      run_export_command({.checkpoint = root.string(), .output = (root / "file").string()}, out),
      InvalidArgument);
  EXPECT_EQ(std::filesystem::file_size(root / "file"), 4u);
}

}  // namespace
}  // namespace recemb::tools
