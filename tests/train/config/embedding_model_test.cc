#include "train/config/embedding_model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "recemb/error.h"

#include "dlrm/criteo_profile.h"
#include "train/config/default_config.h"

namespace recemb::train {
namespace {

TEST(EmbeddingModel, TablesFollowThePresetBudgetAndOverrides) {
  const TrainConfig config = load_train_config(
      "", {"data.preset=\"criteo-kaggle\"", "model.embedding_dim=8", "model.bottom_mlp=[8]",
           "data.table_budget_mib=16", "tables.C3.vocabulary_size=777",
           "tables.C5.optimizer=\"sgd\"", "tables.C6.learning_rate=0.25",
           "embedding.optimizer=\"rowwise_adagrad\"", "embedding.learning_rate=0.5"});
  const EmbeddingModel model = embedding_model(config);
  const std::vector<int64_t> fitted = dlrm::fit_to_budget(
      dlrm::kCriteoKaggleCardinalities, {.dim = 8, .max_bytes = int64_t{16} << 20});
  ASSERT_EQ(model.tables.size(), 26u);
  ASSERT_EQ(model.features.size(), 26u);
  for (size_t f = 0; f < 26; ++f) {
    const std::string name = "C" + std::to_string(f + 1);
    EXPECT_EQ(model.tables[f].name, name);
    EXPECT_EQ(model.tables[f].dim, 8);
    EXPECT_EQ(model.tables[f].vocabulary_size, f == 2 ? 777 : fitted[f]) << name;
    EXPECT_EQ(model.features[f].name, name);
    EXPECT_EQ(model.features[f].table, name);
    EXPECT_EQ(model.tables[f].optimizer.has_value(), f == 4 || f == 5) << name;
  }
  EXPECT_EQ(optimizer_name(model.optimizer), "rowwise_adagrad");
  EXPECT_FLOAT_EQ(std::get<float>(std::get<RowwiseAdagrad>(model.optimizer).learning_rate), 0.5f);
  // C5: SGD at SGD's default rate (the global rate is row-wise Adagrad's); C6: the global
  // optimizer at its own rate.
  const Sgd& c5 = std::get<Sgd>(*model.tables[4].optimizer);
  EXPECT_FLOAT_EQ(std::get<float>(c5.learning_rate),
                  static_cast<float>(default_learning_rate("sgd")));
  const RowwiseAdagrad& c6 = std::get<RowwiseAdagrad>(*model.tables[5].optimizer);
  EXPECT_FLOAT_EQ(std::get<float>(c6.learning_rate), 0.25f);
}

TEST(EmbeddingModel, SmallPresetByDefault) {
  const EmbeddingModel model = embedding_model(load_train_config("", {}));
  const std::vector<int64_t> small = dlrm::preset_vocabulary_sizes("small");
  ASSERT_EQ(model.tables.size(), small.size());
  for (size_t f = 0; f < small.size(); ++f) EXPECT_EQ(model.tables[f].vocabulary_size, small[f]);
  EXPECT_THROW(embedding_model(load_train_config("", {"data.preset=\"tiny\""})), InvalidArgument);
}

TEST(EmbeddingModel, DynamicVocabulariesKeepTheSizesAsDefaultCapacities) {
  const TrainConfig config = load_train_config(
      "", {"embedding.vocabulary=dynamic", "embedding.min_count=2", "embedding.ttl_steps=30",
           "embedding.when_full=error", "tables.C3.vocabulary_size=777", "train.batch_size=100"});
  const EmbeddingModel model = embedding_model(config);
  std::vector<int64_t> sizes = dlrm::preset_vocabulary_sizes("small");
  sizes[2] = 777;
  EXPECT_EQ(model.sizes, sizes);
  for (size_t f = 0; f < 26; ++f) {
    const TableConfig& table = model.tables[f];
    EXPECT_EQ(table.vocabulary_size, 0) << table.name;
    ASSERT_TRUE(table.dynamic_vocabulary.has_value()) << table.name;
    EXPECT_EQ(table.dynamic_vocabulary->capacity, sizes[f] + 100) << table.name;
    EXPECT_EQ(table.dynamic_vocabulary->min_count, 2);
    EXPECT_EQ(table.dynamic_vocabulary->ttl_steps, 30);
    EXPECT_EQ(table.dynamic_vocabulary->when_full, WhenFull::kError);
  }
  const EmbeddingModel capped = embedding_model(
      load_train_config("", {"embedding.vocabulary=dynamic", "embedding.capacity=64"}));
  for (const TableConfig& table : capped.tables) {
    EXPECT_EQ(table.dynamic_vocabulary->capacity, 64) << table.name;
    EXPECT_FALSE(table.dynamic_vocabulary->ttl_steps.has_value()) << table.name;  // 0: no TTL
    EXPECT_EQ(table.dynamic_vocabulary->when_full, WhenFull::kEvictLeastRecent);
  }
  // Hashed tables have no vocabulary, and float32 rows unless embedding.dtype says otherwise.
  for (const TableConfig& table : embedding_model(load_train_config("", {})).tables) {
    EXPECT_FALSE(table.dynamic_vocabulary.has_value());
    EXPECT_EQ(table.dtype, DType::kFloat32);
  }
  for (const TableConfig& table :
       embedding_model(load_train_config("", {"embedding.dtype=bfloat16"})).tables) {
    EXPECT_EQ(table.dtype, DType::kBFloat16) << table.name;
  }
}

}  // namespace
}  // namespace recemb::train
