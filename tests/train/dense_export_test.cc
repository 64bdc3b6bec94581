#include "train/dense_export.h"

#include <cerrno>
#include <cstring>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include "recemb/checkpoint.h"
#include "recemb/embedding.h"
#include "recemb/error.h"

#include "format/checksum.h"
#include "testing/fault_file_system.h"
#include "testing/files.h"
#include "testing/temporary_directory.h"
#include "train/criteo_profile.h"
#include "train/example_batch.h"

namespace recemb::train {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<TableConfig> criteo_tables(uint64_t seed, int64_t dim) {
  std::mt19937_64 random(seed);
  std::vector<TableConfig> tables;
  for (int f = 0; f < kNumCategoricalFeatures; ++f) {
    tables.push_back({.name = categorical_feature_name(f),
                      .vocabulary_size = 1 + static_cast<int64_t>(random() % 200),
                      .dim = dim});
  }
  return tables;
}

std::vector<FeatureConfig> criteo_features() {
  std::vector<FeatureConfig> features;
  for (int f = 0; f < kNumCategoricalFeatures; ++f) {
    features.push_back({.name = categorical_feature_name(f), .table = categorical_feature_name(f)});
  }
  return features;
}

// A model of random parameters (its own initialisation, from `seed`).
DenseModelFile random_model(uint64_t seed) {
  const DlrmDenseModel model(
      {.embedding_dim = 8, .bottom_mlp = {16, 8}, .top_mlp = {32, 4}, .seed = seed});
  return {.config = model.config(),
          .parameters = {model.parameters().begin(), model.parameters().end()},
          .input = criteo_input(criteo_tables(seed, 8), criteo_features(), 8)};
}

void expect_equal(const DenseModelFile& read, const DenseModelFile& written) {
  EXPECT_EQ(read.config.num_dense_features, written.config.num_dense_features);
  EXPECT_EQ(read.config.num_sparse_features, written.config.num_sparse_features);
  EXPECT_EQ(read.config.embedding_dim, written.config.embedding_dim);
  EXPECT_EQ(read.config.bottom_mlp, written.config.bottom_mlp);
  EXPECT_EQ(read.config.top_mlp, written.config.top_mlp);
  EXPECT_EQ(read.parameters, written.parameters);  // bitwise
  EXPECT_EQ(read.input.features, written.input.features);
  EXPECT_EQ(read.input.vocabulary_sizes, written.input.vocabulary_sizes);
}

template <typename T>
T load(const std::vector<std::byte>& bytes, size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

template <typename T>
void store(std::vector<std::byte>& bytes, size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
}

// The file with its header's checksum made to match again (the specified layout: XXH3-64 of bytes
// [0, 56) at 56).
void reseal_header(std::vector<std::byte>& file) {
  store<uint64_t>(file, 56, format::checksum(std::span(file).first(56)));
}

// The file with its manifest replaced by `text` (padded to 64 bytes), checksums made to match.
std::vector<std::byte> with_manifest(const std::vector<std::byte>& file, std::string text) {
  const auto manifest_size = load<uint64_t>(file, 16);
  text.resize((text.size() + 63) / 64 * 64, ' ');
  std::vector<std::byte> edited(file.begin(), file.begin() + 64);
  const auto* text_bytes = reinterpret_cast<const std::byte*>(text.data());
  edited.insert(edited.end(), text_bytes, text_bytes + text.size());
  edited.insert(edited.end(), file.begin() + 64 + static_cast<ptrdiff_t>(manifest_size),
                file.end());
  store<uint64_t>(edited, 16, text.size());
  store<uint64_t>(edited, 24, format::checksum(std::as_bytes(std::span(text))));
  store<uint64_t>(edited, 32, edited.size());
  reseal_header(edited);
  return edited;
}

std::string manifest_of(const std::vector<std::byte>& file) {
  const auto size = load<uint64_t>(file, 16);
  return std::string(reinterpret_cast<const char*>(file.data()) + 64, size);
}

// What reading `bytes` as a dense model file throws (DataLoss expected); "" if it reads.
std::string read_error(const test::TemporaryDirectory& dir, const std::vector<std::byte>& bytes) {
  test::write_bytes(dir / "damaged.recemb", bytes);
  try {
    read_dense_model_file(dir / "damaged.recemb");
  } catch (const DataLoss& error) {
    return error.what();
  }
  return "";
}

TEST(DenseModelFileTest, ReadsBackWhatWasWritten) {
  const test::TemporaryDirectory dir;
  const DenseModelFile model = random_model(4);
  write_dense_model_file(dir / "dense.recemb", model);
  expect_equal(read_dense_model_file(dir / "dense.recemb"), model);
  // The specified layout: magic, version, a manifest of whole 64-byte blocks, then the parameters.
  const std::vector<std::byte> file = test::read_bytes(dir / "dense.recemb");
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(file.data()), 8), "RECEMBDN");
  EXPECT_EQ(load<uint32_t>(file, 8), 1u);
  const auto manifest_size = load<uint64_t>(file, 16);
  EXPECT_EQ(manifest_size % 64, 0u);
  EXPECT_EQ(load<uint64_t>(file, 32), file.size());
  EXPECT_EQ(file.size(), 64 + manifest_size + 4 * model.parameters.size());
  EXPECT_EQ(std::memcmp(file.data() + 64 + manifest_size, model.parameters.data(),
                        4 * model.parameters.size()),
            0);
  EXPECT_THAT(manifest_of(file), AllOf(HasSubstr("\"bottom_mlp\": [\n   16,\n   8\n  ]"),
                                       HasSubstr("\"name\": \"top_mlp/layer_2/weights\""),
                                       HasSubstr("\"categorical_hash\": \"splitmix64_salted\"")));
  EXPECT_THAT(dir.entries(), ElementsAre("dense.recemb"));
}

TEST(DenseModelFileTest, WriteValidatesBeforeCreatingAnything) {
  const test::TemporaryDirectory dir;
  DenseModelFile short_parameters = random_model(1);
  short_parameters.parameters.pop_back();
  DenseModelFile not_finite = random_model(1);
  not_finite.parameters[7] = std::nanf("");
  DenseModelFile wrong_input = random_model(1);
  std::swap(wrong_input.input.features[0], wrong_input.input.features[1]);
  DenseModelFile not_criteo = random_model(1);
  not_criteo.config.num_dense_features = 12;
  not_criteo.parameters.resize(
      static_cast<size_t>(DlrmDenseModel(not_criteo.config).num_parameters()));
  const std::pair<const DenseModelFile*, const char*> cases[] = {
      {&short_parameters, "parameters; the model has"},
      {&not_finite, "parameter 7 is not finite"},
      {&wrong_input, "categorical feature 0 is 'C2'; the Criteo columns are C1..C26"},
      {&not_criteo, "the model takes 12 dense"}};
  for (const auto& [model, message] : cases) {
    try {
      write_dense_model_file(dir / "dense.recemb", *model);
      ADD_FAILURE() << "written: " << message;
    } catch (const InvalidArgument& error) {
      EXPECT_THAT(error.what(), AllOf(HasSubstr("dense.recemb"), HasSubstr(message)));
    }
  }
  EXPECT_TRUE(dir.entries().empty());
}

// Every byte of the file is covered: a flipped byte anywhere is DataLoss naming the file and the
// damaged part.
TEST(DenseModelFileTest, FlippedBytesAreDetectedInEveryPart) {
  const test::TemporaryDirectory dir;
  write_dense_model_file(dir / "dense.recemb", random_model(2));
  const std::vector<std::byte> file = test::read_bytes(dir / "dense.recemb");
  const auto manifest_size = load<uint64_t>(file, 16);
  for (size_t offset = 0; offset < file.size(); offset += offset < 64 ? 1 : 127) {
    SCOPED_TRACE("byte " + std::to_string(offset));
    std::vector<std::byte> damaged = file;
    damaged[offset] ^= std::byte{0x20};
    const std::string error = read_error(dir, damaged);
    EXPECT_THAT(error, HasSubstr("dense model '" + (dir / "damaged.recemb").string() + "': "));
    if (offset < 8) {
      EXPECT_THAT(error, HasSubstr("not a recemb dense model"));
    } else if (offset < 64) {
      EXPECT_THAT(error, HasSubstr("header"));
    } else if (offset < 64 + manifest_size) {
      EXPECT_THAT(error, HasSubstr("manifest: the checksum does not match"));
    } else {
      EXPECT_THAT(error, HasSubstr("parameters: the checksum does not match"));
    }
  }
}

TEST(DenseModelFileTest, TruncatedExtendedAndOtherVersionsAreRefused) {
  const test::TemporaryDirectory dir;
  write_dense_model_file(dir / "dense.recemb", random_model(2));
  const std::vector<std::byte> file = test::read_bytes(dir / "dense.recemb");
  EXPECT_THAT(read_error(dir, {file.begin(), file.end() - 4}), HasSubstr("(truncated)"));
  EXPECT_THAT(read_error(dir, {file.begin(), file.begin() + 10}),
              HasSubstr("fewer than the 64-byte header"));
  std::vector<std::byte> extended = file;
  extended.push_back(std::byte{0});
  EXPECT_THAT(read_error(dir, extended), HasSubstr("(bytes were appended)"));
  std::vector<std::byte> version_2 = file;
  store<uint32_t>(version_2, 8, 2);
  reseal_header(version_2);
  EXPECT_THAT(read_error(dir, version_2),
              HasSubstr("format version 2 is not supported (this recemb reads version 1)"));
  store<uint32_t>(version_2, 8, 1);
  store<uint64_t>(version_2, 40, 1);
  reseal_header(version_2);
  EXPECT_THAT(read_error(dir, version_2), HasSubstr("reserved bytes are not zero"));
}

// Manifests with matching checksums but contents that do not fit: each refused, naming the field.
TEST(DenseModelFileTest, EditedManifestsAreValidated) {
  const test::TemporaryDirectory dir;
  write_dense_model_file(dir / "dense.recemb", random_model(2));
  const std::vector<std::byte> file = test::read_bytes(dir / "dense.recemb");
  const std::string manifest = manifest_of(file);
  const auto edited = [&](const std::string& from, const std::string& to) {
    std::string text = manifest;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    return read_error(dir, with_manifest(file, text));
  };
  EXPECT_EQ(edited("\"float32\"", "\"float32\""), "");  // the editing itself keeps the file valid
  EXPECT_THAT(edited("\"float32\"", "\"float16\""), HasSubstr("manifest: dtype: expected"));
  EXPECT_THAT(edited("\"splitmix64_salted\"", "\"murmur3\""),
              HasSubstr("input.categorical_hash: expected"));
  EXPECT_THAT(edited("\"log1p_max0\"", "\"identity\""), HasSubstr("input.dense_transform"));
  EXPECT_THAT(edited("\"embedding_dim\": 8", "\"embedding_dim\": 9"),
              HasSubstr("must equal embedding_dim (9)"));
  EXPECT_THAT(edited("\"top_mlp\": [\n   32,", "\"top_mlp\": [\n   31,"),
              HasSubstr("manifest: model: the model has 11653 parameters; the data holds 12017"));
  // A hostile shape is refused before anything of its size is allocated.
  EXPECT_THAT(edited("\"top_mlp\": [\n   32,", "\"top_mlp\": [\n   60000,"),
              HasSubstr("the model has 21840369 parameters; the data holds 12017"));
  EXPECT_THAT(edited("\"top_mlp\": [\n   32,", "\"top_mlp\": [\n   1000000000000,"),
              HasSubstr("model.top_mlp[0]: 1000000000000 is more than 65536"));
  EXPECT_THAT(edited("\"count\": 12017", "\"count\": 12018"),
              HasSubstr("parameters.count: 12018 is not the model's 12017 parameters"));
  EXPECT_THAT(edited("\"name\": \"C3\"", "\"name\": \"C4\""),
              HasSubstr("input: categorical feature 2 is 'C4'"));
  EXPECT_THAT(edited("\"dtype\"", "\"dtipe\""), HasSubstr("not a known field"));
  EXPECT_THAT(edited("top_mlp/layer_0/bias", "top_mlp/layer_0/biass"),
              HasSubstr("parameters.blocks: the parameter blocks are not those of the model"));
  EXPECT_THAT(edited("{", std::string(100, '[')), HasSubstr("manifest"));
}

// Every write, fsync, rename and directory fsync fails in turn: std::system_error with that
// errno, and the path holds the previous file or the new one, never a part; nothing else is left.
TEST(DenseModelFileTest, EveryFailingCallLeavesTheOldOrTheNewFile) {
  const test::TemporaryDirectory dir;
  const std::filesystem::path path = dir / "dense.recemb";
  write_dense_model_file(path, random_model(1));
  const std::vector<std::byte> previous = test::read_bytes(path);
  write_dense_model_file(path, random_model(2));
  const std::vector<std::byte> next = test::read_bytes(path);
  int injected = 0;
  for (const test::FaultPoint point : test::kFaultPoints) {
    for (const auto& [error_number, short_write] :
         std::vector<std::pair<int, bool>>{{ENOSPC, false}, {EIO, false}, {ENOSPC, true}}) {
      if (short_write && point != test::FaultPoint::kWrite) continue;
      for (int nth = 1;; ++nth) {
        SCOPED_TRACE(test::fault_point_name(point) + " number " + std::to_string(nth));
        test::write_bytes(path, previous);
        test::FaultFileSystem file_system;
        file_system.fail(point, nth, error_number, short_write);
        try {
          write_dense_model_file(path, random_model(2));
          break;  // nth is past the last call of that kind
        } catch (const std::system_error& error) {
          EXPECT_EQ(error.code().value(), error_number) << error.what();
        }
        ++injected;
        EXPECT_THAT(dir.entries(), ElementsAre("dense.recemb"));
        const std::vector<std::byte> now = test::read_bytes(path);
        EXPECT_TRUE(now == previous || now == next);
      }
    }
  }
  EXPECT_GE(injected, 5);
}

// A checkpoint as `recemb train` saves it: the dense parameters as an extra array, the model's
// shape as metadata.
Embedding criteo_embedding(int64_t dim) {
  return Embedding(criteo_tables(9, dim), criteo_features(), {.num_threads = 1});
}

TEST(CheckpointDensePartTest, ReadsTheTrainersDenseModel) {
  const test::TemporaryDirectory dir;
  const DenseModelFile model = random_model(6);
  const Embedding embedding = criteo_embedding(8);
  const auto checkpoint = save_checkpoint(
      embedding, dir / "a",
      {.extra_arrays = {{.name = kDenseParametersArray, .values = model.parameters},
                        {.name = "dense/optimizer_slots", .values = model.parameters}},
       .metadata = {{kDenseModelMetadata, dense_config_to_json(model.config)}}});
  const std::optional<DenseModelFile> read =
      read_checkpoint_dense_part(checkpoint, embedding.tables(), embedding.features());
  ASSERT_TRUE(read.has_value());
  DenseModelFile expected = model;
  expected.input = criteo_input(embedding.tables(), embedding.features(), 8);
  expect_equal(*read, expected);

  // A checkpoint of another program has no dense part.
  EXPECT_FALSE(read_checkpoint_dense_part(save_checkpoint(embedding, dir / "b"), embedding.tables(),
                                          embedding.features())
                   .has_value());
}

TEST(CheckpointDensePartTest, DamagedOrIncompleteDensePartsAreDataLoss) {
  const test::TemporaryDirectory dir;
  const DenseModelFile model = random_model(6);
  const Embedding embedding = criteo_embedding(8);
  const auto error_of = [&](const std::filesystem::path& checkpoint) -> std::string {
    try {
      read_checkpoint_dense_part(checkpoint, embedding.tables(), embedding.features());
    } catch (const DataLoss& error) {
      return error.what();
    }
    return "";
  };
  EXPECT_THAT(error_of(save_checkpoint(
                  embedding, dir / "a",
                  {.extra_arrays = {{.name = kDenseParametersArray, .values = model.parameters}}})),
              HasSubstr("but no metadata 'dense_model'"));
  std::vector<float> short_parameters = model.parameters;
  short_parameters.pop_back();
  EXPECT_THAT(
      error_of(save_checkpoint(
          embedding, dir / "b",
          {.extra_arrays = {{.name = kDenseParametersArray, .values = short_parameters}},
           .metadata = {{kDenseModelMetadata, dense_config_to_json(model.config)}}})),
      HasSubstr("metadata 'dense_model': the model has 12017 parameters; the data holds 12016"));
  EXPECT_THAT(error_of(save_checkpoint(
                  embedding, dir / "c",
                  {.extra_arrays = {{.name = kDenseParametersArray, .values = model.parameters}},
                   .metadata = {{kDenseModelMetadata, "{\"num_dense_features\": 13}"}}})),
              HasSubstr("metadata 'dense_model': num_sparse_features: required but missing"));
  const auto checkpoint = save_checkpoint(
      embedding, dir / "d",
      {.extra_arrays = {{.name = kDenseParametersArray, .values = model.parameters}},
       .metadata = {{kDenseModelMetadata, dense_config_to_json(model.config)}}});
  std::vector<std::byte> array = test::read_bytes(checkpoint / "x0.f32");
  array[100] ^= std::byte{1};
  test::write_bytes(checkpoint / "x0.f32", array);
  EXPECT_THAT(error_of(checkpoint), HasSubstr("extra array 'dense/parameters'"));
  // Features of another dim than the model's embeddings: not a model the trainer wrote.
  const Embedding narrow = criteo_embedding(4);
  EXPECT_THROW(
      read_checkpoint_dense_part(
          save_checkpoint(
              narrow, dir / "e",
              {.extra_arrays = {{.name = kDenseParametersArray, .values = model.parameters}},
               .metadata = {{kDenseModelMetadata, dense_config_to_json(model.config)}}}),
          narrow.tables(), narrow.features()),
      InvalidArgument);
}

}  // namespace
}  // namespace recemb::train
