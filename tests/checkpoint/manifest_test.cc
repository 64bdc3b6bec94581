// The checkpoint manifest: its JSON form, its checksum file, version and structure checks
// (src/checkpoint/manifest.cc).
#include "checkpoint/manifest.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <string>
#include <vector>

#include "recemb/checkpoint.h"
#include "recemb/error.h"

#include "checkpoint/checkpoint_fixtures.h"
#include "checkpoint/layout.h"
#include "format/checksum.h"
#include "support/json.h"
#include "testing/error_of.h"
#include "testing/files.h"
#include "testing/temporary_directory.h"

namespace recemb::internal {
namespace {

namespace fs = std::filesystem;
using support::Json;
using test::error_of;
using test::TemporaryDirectory;
using ::testing::HasSubstr;

// A saved checkpoint of the fixture, with extra arrays and metadata.
class ManifestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Embedding embedding(test::fixture_tables(), test::fixture_features(),
                        {.optimizer = Adagrad{.learning_rate = 0.2f},
                         .num_threads = 1,
                         .seed = uint64_t{1} << 63,
                         .non_finite_gradients = NonFiniteGradients::kSkipRows});
    test::train_steps(embedding, 0, 5);
    checkpoint_ = save_checkpoint(embedding, directory_.path(),
                                  {.extra_arrays = {{.name = "dense", .values = dense_}},
                                   .metadata = {{"epoch", "3"}},
                                   .checksum_block_bytes = 100});
    json_ = Json::parse(test::read_text(checkpoint_ / kManifestFile));
  }

  // Writes `json` as the manifest, with a matching checksum file.
  void rewrite(const Json& json) {
    const std::string text = json.dump();
    std::ofstream(checkpoint_ / kManifestFile, std::ios::trunc) << text;
    std::ofstream(checkpoint_ / kManifestChecksumFile, std::ios::trunc)
        << format::checksum_to_hex(format::checksum(std::as_bytes(std::span(text)))) << "\n";
  }

  std::vector<float> dense_ = std::vector<float>(7, 1.5f);
  TemporaryDirectory directory_;
  fs::path checkpoint_;
  Json json_;
};

TEST_F(ManifestTest, RecordsTheEmbedding) {
  const ManifestFile file = read_manifest(checkpoint_);
  EXPECT_EQ(file.text, test::read_text(checkpoint_ / kManifestFile));
  const Manifest& manifest = file.manifest;
  EXPECT_EQ(manifest.format_version, 1);  // no dynamic table
  EXPECT_EQ(manifest.step, 5);
  EXPECT_EQ(manifest.checksum_block_bytes, 100);
  EXPECT_EQ(manifest.optimizer["name"], "adagrad");
  EXPECT_EQ(manifest.seed, uint64_t{1} << 63);
  EXPECT_EQ(manifest.non_finite_gradients, NonFiniteGradients::kSkipRows);
  ASSERT_EQ(manifest.tables.size(), 3u);
  EXPECT_EQ(manifest.tables[0].config.name, "video");
  EXPECT_TRUE(manifest.tables[0].optimizer.is_null());
  EXPECT_EQ(manifest.tables[1].optimizer["name"], "adam");
  EXPECT_FALSE(manifest.tables[1].config.optimizer.has_value());
  EXPECT_EQ(effective_optimizer_name(manifest, manifest.tables[0]), "adagrad");
  EXPECT_EQ(effective_optimizer_name(manifest, manifest.tables[2]), "rowwise_adagrad");
  const std::vector<ArrayEntry>& tags = manifest.tables[2].variables;
  ASSERT_EQ(tags.size(), 2u);
  EXPECT_EQ(tags[1].name, "accumulators");
  EXPECT_EQ(tags[1].shape, (std::vector<int64_t>{20}));
  EXPECT_EQ(tags[1].data.file, "t2.accumulators.f32");
  EXPECT_EQ(tags[1].data.bytes, 80u);
  EXPECT_EQ(tags[1].data.block_checksums.size(), 1u);
  EXPECT_EQ(manifest.tables[0].variables[0].data.block_checksums.size(), 13u);  // 1280 bytes
  ASSERT_EQ(manifest.features.size(), 4u);
  EXPECT_EQ(manifest.features[3].table, "tags");
  ASSERT_EQ(manifest.extra_arrays.size(), 1u);
  EXPECT_EQ(manifest.extra_arrays[0].shape, (std::vector<int64_t>{7}));
  EXPECT_EQ(manifest.metadata, (std::map<std::string, std::string>{{"epoch", "3"}}));

  // The documented top-level form, in order.
  std::vector<std::string> keys;
  for (auto item = json_.begin(); item != json_.end(); ++item) keys.push_back(item.key());
  EXPECT_EQ(keys,
            (std::vector<std::string>{"format", "format_version", "step", "placement", "byte_order",
                                      "checksum", "checksum_block_bytes", "embedding", "tables",
                                      "features", "extra_arrays", "metadata"}));
  EXPECT_EQ(json_["placement"], Json::parse(R"({"kind": "single"})"));
  // Writing the parsed manifest gives the same JSON.
  EXPECT_EQ(manifest_to_json(manifest), json_);
}

TEST_F(ManifestTest, ExpectedVariablesFollowTheOptimizer) {
  const TableConfig table{.name = "t", .vocabulary_size = 6, .dim = 3};
  const auto names_and_shapes = [&](const std::optional<std::string>& optimizer) {
    std::vector<std::pair<std::string, std::vector<int64_t>>> result;
    for (const ArrayEntry& entry : expected_variables(table, table.vocabulary_size, optimizer)) {
      result.emplace_back(entry.name, entry.shape);
    }
    return result;
  };
  using Expected = std::vector<std::pair<std::string, std::vector<int64_t>>>;
  EXPECT_EQ(names_and_shapes(std::nullopt), (Expected{{"parameters", {6, 3}}}));
  EXPECT_EQ(names_and_shapes("ftrl"),
            (Expected{{"parameters", {6, 3}}, {"accumulators", {6, 3}}, {"linears", {6, 3}}}));
  EXPECT_EQ(names_and_shapes("rowwise_adagrad"),
            (Expected{{"parameters", {6, 3}}, {"accumulators", {6}}}));
}

TEST_F(ManifestTest, ANewerVersionIsRefusedBeforeAnythingElse) {
  Json json = json_;
  json["format_version"] = 4;
  json["tables"] = "changed in version 4";
  rewrite(json);
  EXPECT_EQ(error_of<DataLoss>([&] { read_manifest(checkpoint_); }),
            "checkpoint '" + checkpoint_.string() +
                "': manifest.json: format_version: checkpoint format version 4 is newer "
                "than this recemb reads (3); read it with a newer recemb");
}

// A 16-bit table's parameters are stored as they are (2 bytes a value, named by their type) and
// need format version 3; its slots stay float32; a checkpoint without one keeps version 1.
TEST(ManifestHalf, A16BitTableIsStoredAsItIsInVersion3) {
  for (const DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    TemporaryDirectory directory;
    Embedding embedding({{.name = "t", .vocabulary_size = 6, .dim = 3, .dtype = dtype},
                         {.name = "u", .vocabulary_size = 4, .dim = 2}},
                        {{.name = "f", .table = "t"}, {.name = "g", .table = "u"}},
                        {.optimizer = RowwiseAdagrad{.learning_rate = 0.1f}, .num_threads = 1});
    const Manifest manifest = read_manifest(save_checkpoint(embedding, directory.path())).manifest;
    EXPECT_EQ(manifest.format_version, 3);
    EXPECT_EQ(minimum_format_version(manifest), 3);
    const std::vector<ArrayEntry>& variables = manifest.tables[0].variables;
    ASSERT_EQ(variables.size(), 2u);
    EXPECT_EQ(variables[0].dtype, array_type(dtype));
    EXPECT_EQ(variables[0].data.file,
              dtype == DType::kBFloat16 ? "t0.parameters.bf16" : "t0.parameters.f16");
    EXPECT_EQ(variables[0].data.bytes, 6u * 3u * 2u);
    EXPECT_EQ(variables[1].dtype, ArrayType::kFloat32);
    EXPECT_EQ(variables[1].data.file, "t0.accumulators.f32");
    EXPECT_EQ(variables[1].data.bytes, 6u * 4u);
    EXPECT_EQ(manifest.tables[1].variables[0].data.file, "t1.parameters.f32");
    EXPECT_EQ(element_bytes(array_type(dtype)), 2);
  }
}

TEST_F(ManifestTest, ChecksumFileErrors) {
  const std::string prefix = "checkpoint '" + checkpoint_.string() + "': ";
  std::ofstream(checkpoint_ / kManifestChecksumFile, std::ios::trunc) << "0123456789ABCDEF\n";
  EXPECT_EQ(error_of<DataLoss>([&] { read_manifest(checkpoint_); }),
            prefix + "manifest.xxh3 is damaged: expected 16 lowercase hex digits and a newline");
  std::ofstream(checkpoint_ / kManifestChecksumFile, std::ios::trunc) << "0123456789abcdef\n";
  EXPECT_EQ(error_of<DataLoss>([&] { read_manifest(checkpoint_); }),
            prefix +
                "manifest.json does not match its checksum in manifest.xxh3: one of them is "
                "damaged or truncated");
  // A checksum that matches text that is not valid JSON (only a writer bug could produce it).
  const std::string text = "{\"format\": ";
  std::ofstream(checkpoint_ / kManifestFile, std::ios::trunc) << text;
  std::ofstream(checkpoint_ / kManifestChecksumFile, std::ios::trunc)
      << format::checksum_to_hex(format::checksum(std::as_bytes(std::span(text)))) << "\n";
  EXPECT_THAT(error_of<DataLoss>([&] { read_manifest(checkpoint_); }),
              HasSubstr(prefix + "manifest.json: not valid JSON: "));
}

// Each change, with a valid checksum, is refused with the field's path.
TEST_F(ManifestTest, StructureErrorsNameTheField) {
  struct Case {
    std::function<void(Json&)> change;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {[](Json& j) { j["format"] = "gguf"; },
       "manifest.json: format: expected \"recemb-checkpoint\", got \"gguf\""},
      {[](Json& j) { j.erase("step"); }, "step: required but missing"},
      {[](Json& j) { j["step"] = -1; }, "step: expected an integer >= 0, got -1"},
      {[](Json& j) { j["format_version"] = 0; }, "format_version: expected an integer >= 1"},
      {[](Json& j) { j["placement"]["kind"] = "row_wise"; },
       "placement.kind: expected \"single\", got \"row_wise\""},
      {[](Json& j) { j["byte_order"] = "big"; }, "byte_order: expected \"little\""},
      {[](Json& j) { j["checksum_block_bytes"] = 6; },
       "checksum_block_bytes: expected a multiple of 4 up to 2^40, got 6"},
      {[](Json& j) { j["embedding"]["optimizer"]["name"] = "lamb"; },
       "embedding.optimizer.name: unknown optimizer name 'lamb'"},
      {[](Json& j) { j["embedding"]["seed"] = -3; }, "embedding.seed: expected an integer"},
      {[](Json& j) { j["embedding"]["non_finite_gradients"] = "ignore"; },
       "embedding.non_finite_gradients: unknown non_finite_gradients 'ignore'; valid names are "
       "'reject', 'skip_rows'"},
      {[](Json& j) { j["tables"] = Json::array(); }, "tables: a checkpoint has at least one table"},
      {[](Json& j) { j["tables"][1]["config"]["dim"] = "4"; },
       "tables[1].config.dim: expected a 64-bit integer, got \"4\""},
      {[](Json& j) { j["tables"][0]["config"]["dtype"] = "bfloat16"; },
       "tables[0].config: a 16-bit table needs format version 3 or later"},
      {[](Json& j) {
         j["format_version"] = 3;
         j["tables"][0]["config"]["dtype"] = "bfloat16";
       },
       "tables[0].variables[0].dtype: expected \"bfloat16\", got \"float32\""},
      {[](Json& j) { j["tables"][1]["config"]["dim"] = 0; },
       "tables[1].config: vocabulary_size and dim must be >= 1"},
      {[](Json& j) { j["tables"][2]["config"]["name"] = "video"; },
       "tables[2]: table name 'video' appears twice"},
      {[](Json& j) { j["tables"][1]["config"]["optimizer"]["name"] = "sgd"; },
       "tables[1].variables: expected 1 variables for table 'words' (optimizer sgd), got "
       "3"},
      {[](Json& j) { j["tables"][0]["variables"][1]["name"] = "momenta"; },
       "tables[0].variables[1]: expected variable 'accumulators' [40, 8], got 'momenta' "
       "[40, 8]"},
      {[](Json& j) {
         j["tables"][0]["variables"][0]["shape"] = {40, 4};
       },
       "tables[0].variables[0].bytes: 1280 bytes do not hold the 160 float32 elements of the "
       "shape"},
      {[](Json& j) {
         j["tables"][0]["variables"][0]["shape"] = {int64_t{1} << 62, 8};
       },
       "tables[0].variables[0].shape: the number of elements overflows"},
      {[](Json& j) { j["tables"][0]["variables"][0]["dtype"] = "float16"; },
       "tables[0].variables[0].dtype: expected \"float32\", got \"float16\""},
      {[](Json& j) { j["tables"][0]["variables"][0]["file"] = "../../etc/passwd"; },
       "tables[0].variables[0].file: \"../../etc/passwd\" is not a plain data file name"},
      {[](Json& j) { j["tables"][0]["variables"][0]["file"] = "manifest.json"; },
       "\"manifest.json\" is not a plain data file name"},
      {[](Json& j) { j["tables"][0]["variables"][0]["file"] = ".hidden"; },
       "\".hidden\" is not a plain data file name"},
      {[](Json& j) { j["tables"][0]["variables"][1]["file"] = "t0.parameters.f32"; },
       "tables[0].variables[1].file: file \"t0.parameters.f32\" is listed twice"},
      {[](Json& j) { j["tables"][0]["variables"][0]["block_checksums"].erase(0); },
       "tables[0].variables[0].block_checksums: expected 13 checksums for 1280 bytes in "
       "blocks of 100, got 12"},
      {[](Json& j) { j["tables"][0]["variables"][0]["checksum"] = "xyz"; },
       "tables[0].variables[0].checksum: expected 16 lowercase hex digits, got \"xyz\""},
      {[](Json& j) { j["features"][0]["table"] = 5; },
       "features[0].table: expected a string, got 5"},
      {[](Json& j) { j["extra_arrays"][0]["name"] = ""; },
       "extra_arrays[0]: extra array name '' is empty or appears twice"},
      {[](Json& j) { j["metadata"]["epoch"] = 3; }, "metadata.epoch: expected a string, got 3"},
      {[](Json& j) { j = Json::array(); }, "manifest.json: expected an object, got []"},
  };
  for (const Case& c : cases) {
    Json json = json_;
    c.change(json);
    rewrite(json);
    const std::string error = error_of<DataLoss>([&] { read_manifest(checkpoint_); });
    EXPECT_THAT(error, HasSubstr("checkpoint '" + checkpoint_.string() + "': manifest.json: "));
    EXPECT_THAT(error, HasSubstr(c.expected)) << json.dump().substr(0, 200);
  }
  rewrite(json_);
  EXPECT_EQ(read_manifest(checkpoint_).manifest.step, 5);
}

// A manifest with a value nested 100,000 arrays deep (and a matching checksum) is refused at
// parse by every reader, without walking it (a recursive walk would overflow the stack).
TEST_F(ManifestTest, DeepNestingIsRefusedByEveryReader) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  std::string text = json_.dump();
  text.insert(text.rfind('}'), ", \"deep\": " + deep);
  std::ofstream(checkpoint_ / kManifestFile, std::ios::trunc) << text;
  std::ofstream(checkpoint_ / kManifestChecksumFile, std::ios::trunc)
      << format::checksum_to_hex(format::checksum(std::as_bytes(std::span(text)))) << "\n";
  const std::string expected = "checkpoint '" + checkpoint_.string() +
                               "': manifest.json: arrays and objects nest deeper than " +
                               std::to_string(support::kMaxJsonDepth) + " levels";
  EXPECT_EQ(error_of<DataLoss>([&] { read_manifest(checkpoint_); }), expected);
  EXPECT_EQ(error_of<DataLoss>([&] { inspect_checkpoint(checkpoint_); }), expected);
  EXPECT_EQ(error_of<DataLoss>([&] { load_checkpoint(checkpoint_); }), expected);
  Embedding target(test::fixture_tables(), test::fixture_features(),
                   {.optimizer = Adagrad{.learning_rate = 0.2f}, .num_threads = 1});
  EXPECT_EQ(error_of<DataLoss>([&] { restore_checkpoint(target, checkpoint_); }), expected);
}

}  // namespace
}  // namespace recemb::internal
