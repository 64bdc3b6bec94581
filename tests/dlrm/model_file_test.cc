// The trainer's model file (dlrm/model_file.cc): the dense model written as named arrays and
// metadata of one serving model and read back bitwise; what a writer and a reader refuse; the dense
// part of a checkpoint; export_checkpoint.
#include "dlrm/model_file.h"

#include <fstream>
#include <functional>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "recemb/checkpoint.h"
#include "recemb/embedding.h"
#include "recemb/error.h"
#include "recemb/serving.h"

#include "dlrm/criteo_profile.h"
#include "dlrm/example_batch.h"
#include "testing/temporary_directory.h"

namespace recemb::dlrm {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kDim = 8;

Embedding criteo_embedding(uint64_t seed, int64_t dim = kDim) {
  std::mt19937_64 random(seed);
  std::vector<TableConfig> tables;
  std::vector<FeatureConfig> features;
  for (int f = 0; f < kNumCategoricalFeatures; ++f) {
    const std::string name = categorical_feature_name(f);
    tables.push_back(
        {.name = name, .vocabulary_size = 1 + static_cast<int64_t>(random() % 200), .dim = dim});
    features.push_back({.name = name, .table = name});
  }
  return Embedding(tables, features, {.num_threads = 1, .seed = seed});
}

std::vector<int64_t> vocabulary_sizes(const Embedding& embedding) {
  std::vector<int64_t> sizes;
  for (const TableConfig& table : embedding.tables()) sizes.push_back(table.vocabulary_size);
  return sizes;
}

// A dense model of random parameters (its own initialisation, from `seed`).
DenseModelPart random_dense(uint64_t seed) {
  const DlrmDenseModel model(
      {.embedding_dim = kDim, .bottom_mlp = {16, kDim}, .top_mlp = {32, 4}, .seed = seed});
  return {.config = model.config(),
          .parameters = {model.parameters().begin(), model.parameters().end()}};
}

TEST(ModelFileTest, DenseConfigMetadataAndModelFilePath) {
  EXPECT_EQ(
      dense_config_metadata({.embedding_dim = 16, .bottom_mlp = {64, 16}, .top_mlp = {}}),
      (std::map<std::string, std::string>{
          {"dense/bottom_mlp", "64,16"}, {"dense/embedding_dim", "16"}, {"dense/top_mlp", ""}}));
  const test::TemporaryDirectory dir;
  EXPECT_EQ(model_file_path(dir.path()), dir / "model.recemb");
  EXPECT_EQ(model_file_path(dir / "m.recemb"), dir / "m.recemb");
}

// The dense model's parameter blocks are arrays "dense/<block>" with their shapes, holding the
// parameters bitwise; read_dense_part gives back the config, the parameters and the tables' sizes.
TEST(ModelFileTest, WritesTheDenseModelAsNamedArraysAndReadsItBack) {
  const test::TemporaryDirectory dir;
  Embedding embedding = criteo_embedding(3);
  embedding.set_step(77);
  const DenseModelPart dense = random_dense(4);
  write_model_file(embedding, dense, dir / "model.recemb", ServingDtype::kFloat16);
  const ServingModel model = ServingModel::open(dir / "model.recemb");
  EXPECT_EQ(model.dtype(), ServingDtype::kFloat16);
  EXPECT_EQ(model.metadata(),
            (std::map<std::string, std::string>{{"dense/bottom_mlp", "16,8"},
                                                {"dense/embedding_dim", "8"},
                                                {"dense/top_mlp", "32,4"},
                                                {"input/categorical_hash", "splitmix64_salted"},
                                                {"input/dense_transform", "log1p_max0"},
                                                {"input/format", "criteo_tsv"},
                                                {"step", "77"}}));
  const DlrmDenseModel shape(dense.config);
  const std::vector<ParameterBlock> blocks = shape.parameter_blocks();
  ASSERT_EQ(model.extra_arrays().size(), blocks.size());
  EXPECT_EQ(model.extra_arrays()[0].name, "dense/bottom_mlp/layer_0/weights");
  EXPECT_EQ(model.extra_arrays()[0].shape, (std::vector<int64_t>{13, 16}));
  EXPECT_EQ(model.extra_arrays().back().name, "dense/top_mlp/layer_2/bias");
  EXPECT_EQ(model.extra_arrays().back().shape, (std::vector<int64_t>{1}));
  for (size_t b = 0; b < blocks.size(); ++b) {
    const ServingArray& array = model.extra_arrays()[b];
    EXPECT_EQ(array.name, "dense/" + blocks[b].name);
    EXPECT_EQ(array.shape, blocks[b].shape);
    EXPECT_TRUE(std::equal(array.values.begin(), array.values.end(),
                           dense.parameters.begin() + blocks[b].offset))
        << array.name;
  }

  const ModelFileDensePart read = read_dense_part(model);
  EXPECT_EQ(read.dense.config.embedding_dim, kDim);
  EXPECT_EQ(read.dense.config.bottom_mlp, dense.config.bottom_mlp);
  EXPECT_EQ(read.dense.config.top_mlp, dense.config.top_mlp);
  EXPECT_EQ(read.dense.parameters, dense.parameters);
  EXPECT_EQ(read.ids.vocabulary_sizes, vocabulary_sizes(embedding));
}

TEST(ModelFileTest, WriteValidatesBeforeCreatingAnything) {
  const test::TemporaryDirectory dir;
  const Embedding embedding = criteo_embedding(3);
  DenseModelPart short_parameters = random_dense(1);
  short_parameters.parameters.pop_back();
  DenseModelPart not_finite = random_dense(1);
  not_finite.parameters[7] = std::numeric_limits<float>::infinity();
  DenseModelPart other_dim = random_dense(1);
  other_dim.config.embedding_dim = 4;
  other_dim.config.bottom_mlp = {16, 4};
  const Embedding renamed(
      [&] {
        std::vector<TableConfig> tables = embedding.tables();
        for (TableConfig& table : tables) table.optimizer.reset();
        return tables;
      }(),
      [&] {
        std::vector<FeatureConfig> features = embedding.features();
        std::swap(features[0], features[1]);
        return features;
      }(),
      {.num_threads = 1});
  const auto rejected = [&](const Embedding& tables, const DenseModelPart& dense) {
    try {
      write_model_file(tables, dense, dir / "model.recemb", ServingDtype::kFloat32);
    } catch (const InvalidArgument& error) {
      return std::string(error.what());
    }
    return std::string("(no error)");
  };
  EXPECT_THAT(rejected(embedding, short_parameters),
              HasSubstr("model file '" + (dir / "model.recemb").string() +
                        "': 12016 dense parameters; the model has 12017"));
  EXPECT_THAT(rejected(embedding, not_finite),
              AllOf(HasSubstr("'dense/bottom_mlp/layer_0/weights': value 7 is inf")));
  EXPECT_THAT(rejected(embedding, other_dim),
              HasSubstr("feature 'C1' is not a bag of one id looked up in a table of dim 4"));
  EXPECT_THAT(rejected(renamed, random_dense(1)),
              HasSubstr("feature 0 is 'C2'; the dense model takes the Criteo columns C1..C26"));
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

// A trainer's model of dynamic tables (embedding.vocabulary = dynamic) takes the raw keys; a
// model mixing dynamic and static tables is not one the trainer makes.
TEST(ModelFileTest, CriteoIdsAreHashedRowsOrTheKeysOfDynamicTables) {
  std::vector<TableConfig> tables;
  std::vector<FeatureConfig> features;
  for (int f = 0; f < kNumCategoricalFeatures; ++f) {
    const std::string name = "C" + std::to_string(f + 1);
    tables.push_back(
        {.name = name, .dim = 8, .dynamic_vocabulary = DynamicVocabulary{.capacity = 10 + f}});
    features.push_back({.name = name, .table = name});
  }
  const CriteoIds keys = criteo_ids(tables, features, 8);
  EXPECT_EQ(keys.kind, CategoricalIds::kRawKeys);
  EXPECT_TRUE(keys.vocabulary_sizes.empty());
  tables[3].dynamic_vocabulary.reset();
  tables[3].vocabulary_size = 77;
  try {
    criteo_ids(tables, features, 8);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), HasSubstr("table 'C4' is static and table 'C1' is not: the dense "
                                        "model takes 26 static tables"));
  }
  for (TableConfig& table : tables) {
    table.dynamic_vocabulary.reset();
    table.vocabulary_size = 100 + table.dim;
  }
  const CriteoIds hashed = criteo_ids(tables, features, 8);
  EXPECT_EQ(hashed.kind, CategoricalIds::kHashedRows);
  EXPECT_EQ(hashed.vocabulary_sizes, std::vector<int64_t>(kNumCategoricalFeatures, 108));
}

// A model file whose dense part was edited: exported with `edit` applied to the options a good
// file was written with.
class ModelFileReadTest : public ::testing::Test {
 protected:
  ModelFileReadTest() {
    write_model_file(embedding_, dense_, dir_ / "good.recemb", ServingDtype::kFloat32);
  }

  // read_dense_part's error (of type Error) on the good file's tables and dense part edited.
  template <typename Error>
  std::string error_of(const std::function<void(ExportOptions&)>& edit,
                       const Embedding* tables = nullptr) {
    const ServingModel good = ServingModel::open(dir_ / "good.recemb");
    ExportOptions options{.extra_arrays = good.extra_arrays(), .metadata = good.metadata()};
    edit(options);
    export_serving_model(tables != nullptr ? *tables : embedding_, dir_ / "edited.recemb", options);
    try {
      read_dense_part(ServingModel::open(dir_ / "edited.recemb"));
    } catch (const Error& error) {
      return error.what();
    }
    return "(no error)";
  }

  const test::TemporaryDirectory dir_;
  const Embedding embedding_ = criteo_embedding(5);
  const DenseModelPart dense_ = random_dense(6);
};

TEST_F(ModelFileReadTest, AModelWithoutADensePartServesLookupsOnly) {
  EXPECT_THAT(
      error_of<InvalidArgument>([](ExportOptions& options) {
        options.extra_arrays.clear();
        options.metadata.clear();
      }),
      AllOf(HasSubstr("edited.recemb' has no dense model"), HasSubstr("serves lookups only")));
  // Arrays of other names (another program's) are not a dense part either, and are ignored.
  const std::vector<float> values = {1.0f};
  EXPECT_THAT(error_of<InvalidArgument>([&](ExportOptions& options) {
                options.extra_arrays = {{.name = "mine", .shape = {1}, .values = values}};
                options.metadata = {{"run", "7"}};
              }),
              HasSubstr("has no dense model"));
  EXPECT_EQ(error_of<DataLoss>([&](ExportOptions& options) {
              options.extra_arrays.push_back({.name = "mine", .shape = {1}, .values = values});
            }),
            "(no error)");
}

TEST_F(ModelFileReadTest, IncompleteOrForeignDensePartsAreDataLoss) {
  const std::vector<std::pair<std::function<void(ExportOptions&)>, std::string>> cases = {
      {[](ExportOptions& o) { o.metadata.erase("input/format"); },
       "metadata 'input/format' is missing"},
      {[](ExportOptions& o) { o.metadata["input/categorical_hash"] = "murmur3"; },
       "metadata 'input/categorical_hash' is 'murmur3'; this recemb reads 'splitmix64_salted' "
       "only"},
      {[](ExportOptions& o) { o.metadata.erase("dense/top_mlp"); },
       "metadata 'dense/top_mlp' is missing"},
      {[](ExportOptions& o) { o.metadata["dense/bottom_mlp"] = "16,x"; },
       "metadata 'dense/bottom_mlp' is not a list of widths from 1 to 65536"},
      {[](ExportOptions& o) { o.metadata["dense/bottom_mlp"] = "16,,8"; },
       "metadata 'dense/bottom_mlp' is not a list of widths"},
      {[](ExportOptions& o) { o.metadata["dense/bottom_mlp"] = "16,8,"; },
       "metadata 'dense/bottom_mlp' is not a list of widths"},
      {[](ExportOptions& o) { o.metadata["dense/bottom_mlp"] = " 16,8"; },
       "metadata 'dense/bottom_mlp' is not a list of widths"},
      {[](ExportOptions& o) { o.metadata["dense/bottom_mlp"] = ""; },
       "metadata 'dense/bottom_mlp' is empty"},
      {[](ExportOptions& o) { o.metadata["dense/top_mlp"] = "32,99999999999999999999"; },
       "metadata 'dense/top_mlp' is not a list of widths"},
      {[](ExportOptions& o) { o.metadata["dense/embedding_dim"] = "8,8"; },
       "metadata 'dense/embedding_dim' is not one width"},
      {[](ExportOptions& o) { o.metadata["dense/bottom_mlp"] = "16,4"; },
       "describes no valid dense model"},
      {[](ExportOptions& o) { o.metadata["dense/top_mlp"] = "32,5"; },
       "the dense model its metadata describes has 12051 parameters; its 'dense/' arrays hold "
       "12017"},
      {[](ExportOptions& o) { o.extra_arrays.pop_back(); }, "its 'dense/' arrays hold 12016"},
      {[](ExportOptions& o) { std::swap(o.extra_arrays[4], o.extra_arrays[5]); },
       "its 'dense/' arrays are not the parameter blocks of the model its metadata describes "
       "(from block 4)"},
      {[](ExportOptions& o) {
         o.extra_arrays[0].shape = {16, 13};
       },
       "(from block 0)"},
      {[](ExportOptions& o) { o.extra_arrays[1].name = "dense/bottom_mlp/layer_0/biases"; },
       "(from block 1)"},
  };
  for (const auto& [edit, fragment] : cases) {
    EXPECT_THAT(error_of<DataLoss>(edit), AllOf(HasSubstr("model file '"), HasSubstr(fragment)))
        << fragment;
  }
  // Tables that do not fit the dense model (another dim).
  const Embedding narrow = criteo_embedding(5, 4);
  EXPECT_THAT(error_of<DataLoss>([](ExportOptions&) {}, &narrow),
              HasSubstr("its tables do not fit its dense model: feature 'C1' is not a bag of one "
                        "id looked up in a table of dim 8"));
}

// A checkpoint as `recemb train` saves it: the dense parameters as an extra array, the model's
// shape as metadata.
TEST(CheckpointDensePartTest, ReadsTheTrainersDenseModel) {
  const test::TemporaryDirectory dir;
  const DenseModelPart dense = random_dense(6);
  Embedding embedding = criteo_embedding(9);
  SaveOptions options{
      .extra_arrays = {{.name = kDenseParametersArray, .values = dense.parameters},
                       {.name = "dense/optimizer_slots", .values = dense.parameters}},
      .metadata = dense_config_metadata(dense.config)};
  options.metadata["data_position"] = "criteo:0:0:0";
  const std::filesystem::path checkpoint = save_checkpoint(embedding, dir / "a", options);
  const std::optional<DenseModelPart> read =
      dense_part_of(restore_checkpoint(embedding, checkpoint), "checkpoint 'a'");
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->config.bottom_mlp, dense.config.bottom_mlp);
  EXPECT_EQ(read->config.top_mlp, dense.config.top_mlp);
  EXPECT_EQ(read->config.embedding_dim, kDim);
  EXPECT_EQ(read->parameters, dense.parameters);
  // A checkpoint of another program has no dense part.
  EXPECT_FALSE(dense_part_of(RestoredState{.metadata = {{"run", "1"}}}, "c").has_value());
}

TEST(CheckpointDensePartTest, IncompleteDensePartsAreDataLoss) {
  const DenseModelPart dense = random_dense(6);
  const auto error_of = [](const RestoredState& state) -> std::string {
    try {
      dense_part_of(state, "checkpoint 'c'");
    } catch (const DataLoss& error) {
      return error.what();
    }
    return "(no error)";
  };
  EXPECT_THAT(error_of({.extra_arrays = {{kDenseParametersArray, dense.parameters}}}),
              HasSubstr("checkpoint 'c': holds the array 'dense/parameters' but no metadata "
                        "'dense/embedding_dim'"));
  EXPECT_THAT(error_of({.metadata = dense_config_metadata(dense.config)}),
              HasSubstr("but no array 'dense/parameters'"));
  std::vector<float> short_parameters = dense.parameters;
  short_parameters.pop_back();
  EXPECT_THAT(error_of({.extra_arrays = {{kDenseParametersArray, short_parameters}},
                        .metadata = dense_config_metadata(dense.config)}),
              HasSubstr("has 12017 parameters; the array 'dense/parameters' holds 12016"));
  std::map<std::string, std::string> bad = dense_config_metadata(dense.config);
  bad["dense/embedding_dim"] = "0";
  EXPECT_THAT(
      error_of({.extra_arrays = {{kDenseParametersArray, dense.parameters}}, .metadata = bad}),
      HasSubstr("metadata 'dense/embedding_dim' is not a list of widths"));
}

// export_checkpoint writes the one file MODEL_DIR/model.recemb: the tables and, from a trainer's
// checkpoint, the dense part; a file as MODEL_DIR is refused and left alone.
TEST(ExportCheckpointTest, WritesOneModelFileIntoTheModelDirectory) {
  const test::TemporaryDirectory dir;
  const DenseModelPart dense = random_dense(2);
  Embedding embedding = criteo_embedding(7);
  embedding.set_step(1234);
  save_checkpoint(embedding, dir / "ckpt",
                  {.extra_arrays = {{.name = kDenseParametersArray, .values = dense.parameters}},
                   .metadata = dense_config_metadata(dense.config)});
  const ExportedModel exported =
      export_checkpoint(dir / "ckpt", dir / "model", ServingDtype::kInt8, 1);
  EXPECT_EQ(exported.path, dir / "model" / "model.recemb");
  EXPECT_EQ(exported.tables, 26);
  int64_t rows = 0;
  for (const int64_t size : vocabulary_sizes(embedding)) rows += size;
  EXPECT_EQ(exported.rows, rows);
  EXPECT_EQ(exported.dense_parameters, 12017);
  EXPECT_EQ(exported.bytes, std::filesystem::file_size(exported.path));
  std::vector<std::string> entries;
  for (const auto& entry : std::filesystem::directory_iterator(dir / "model")) {
    entries.push_back(entry.path().filename().string());
  }
  EXPECT_THAT(entries, ElementsAre("model.recemb"));
  const ServingModel model = ServingModel::open(dir / "model" / "model.recemb");
  EXPECT_EQ(model.dtype(), ServingDtype::kInt8);
  EXPECT_EQ(read_dense_part(model).dense.parameters, dense.parameters);
  EXPECT_EQ(model.metadata().at(kStepMetadata), "1234");  // the step the tables were trained to

  std::ofstream(dir / "file") << "mine";
  EXPECT_THROW(export_checkpoint(dir / "ckpt", dir / "file", ServingDtype::kFloat32, 1),
               InvalidArgument);
  EXPECT_EQ(std::filesystem::file_size(dir / "file"), 4u);
}

}  // namespace
}  // namespace recemb::dlrm
