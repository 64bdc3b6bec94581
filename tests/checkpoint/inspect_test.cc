// inspect_checkpoint (src/checkpoint/inspect.cc): reports every file, damage included, without
// throwing; throws only for an unreadable manifest.
#include <cstddef>
#include <filesystem>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <string>
#include <vector>

#include "recemb/checkpoint.h"
#include "recemb/error.h"

#include "checkpoint/checkpoint_fixtures.h"
#include "format/checksum.h"
#include "support/json.h"
#include "testing/files.h"
#include "testing/temporary_directory.h"

namespace recemb {
namespace {

namespace fs = std::filesystem;
using test::TemporaryDirectory;
using ::testing::HasSubstr;

class InspectCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Embedding embedding = test::make_fixture(3);
    test::train_steps(embedding, 0, 4);
    const std::vector<float> dense(10, 2.0f);
    checkpoint_ = save_checkpoint(
        embedding, directory_.path(),
        {.extra_arrays = {{.name = "dense", .values = dense}}, .checksum_block_bytes = 64});
  }

  TemporaryDirectory directory_;
  fs::path checkpoint_;
};

TEST_F(InspectCheckpointTest, DescribesEveryFile) {
  const CheckpointInfo info = inspect_checkpoint(directory_.path());  // a root: its latest
  EXPECT_TRUE(info.ok);
  EXPECT_EQ(info.format_version, 1);
  EXPECT_EQ(info.step, 4);
  ASSERT_EQ(info.tables.size(), 3u);
  const std::vector<std::pair<std::string, std::string>> optimizers = {
      {"video", "adagrad"}, {"words", "adam"}, {"tags", "rowwise_adagrad"}};
  const std::vector<TableConfig> tables = test::fixture_tables();
  for (size_t t = 0; t < 3; ++t) {
    EXPECT_EQ(info.tables[t].name, optimizers[t].first);
    EXPECT_EQ(info.tables[t].optimizer, optimizers[t].second);
    EXPECT_EQ(info.tables[t].vocabulary_size, tables[t].vocabulary_size);
    EXPECT_EQ(info.tables[t].dim, tables[t].dim);
  }
  ASSERT_EQ(info.features.size(), 4u);
  EXPECT_EQ(info.features[2].name, "query");
  EXPECT_EQ(info.features[2].table, "words");
  EXPECT_EQ(info.manifest_json, test::read_text(checkpoint_ / "manifest.json"));
  EXPECT_EQ(support::Json::parse(info.manifest_json)["step"], 4);
  std::vector<std::string> paths;
  for (const CheckpointFile& file : info.files) {
    paths.push_back(file.path);
    EXPECT_TRUE(file.ok) << file.path;
    EXPECT_TRUE(file.error.empty()) << file.path;
    const std::vector<std::byte> bytes = test::read_bytes(checkpoint_ / file.path);
    EXPECT_EQ(file.bytes, bytes.size()) << file.path;
    EXPECT_EQ(file.checksum, format::checksum_to_hex(format::checksum(bytes))) << file.path;
  }
  EXPECT_EQ(paths,
            (std::vector<std::string>{"manifest.json", "t0.parameters.f32", "t0.accumulators.f32",
                                      "t1.parameters.f32", "t1.momenta.f32", "t1.velocities.f32",
                                      "t2.parameters.f32", "t2.accumulators.f32", "x0.f32"}));
}

TEST_F(InspectCheckpointTest, ReportsDamagedDataFilesWithoutThrowing) {
  std::vector<std::byte> bytes = test::read_bytes(checkpoint_ / "t1.momenta.f32");
  bytes[100] ^= std::byte{0x01};
  test::write_bytes(checkpoint_ / "t1.momenta.f32", bytes);
  fs::remove(checkpoint_ / "x0.f32");

  const CheckpointInfo info = inspect_checkpoint(checkpoint_);
  EXPECT_FALSE(info.ok);
  for (const CheckpointFile& file : info.files) {
    if (file.path == "t1.momenta.f32") {
      EXPECT_FALSE(file.ok);
      EXPECT_THAT(file.error, HasSubstr("(table 'words' variable 'momenta') is damaged: block 1 "
                                        "of 8 (bytes 64..128)"));
    } else if (file.path == "x0.f32") {
      EXPECT_FALSE(file.ok);
      EXPECT_THAT(file.error, HasSubstr("x0.f32': No such file or directory"));
    } else {
      EXPECT_TRUE(file.ok) << file.path << ": " << file.error;
    }
  }

  // Without verification only sizes and presence are checked.
  const CheckpointInfo quick = inspect_checkpoint(checkpoint_, {.verify = false});
  EXPECT_FALSE(quick.ok);
  for (const CheckpointFile& file : quick.files) EXPECT_EQ(file.ok, file.path != "x0.f32");
  bytes.pop_back();
  test::write_bytes(checkpoint_ / "t1.momenta.f32", bytes);
  for (const CheckpointFile& file : inspect_checkpoint(checkpoint_, {.verify = false}).files) {
    if (file.path == "t1.momenta.f32") {
      EXPECT_THAT(file.error, HasSubstr("has 479 bytes, the manifest records 480 (truncated)"));
    }
  }
}

TEST_F(InspectCheckpointTest, ThrowsForAnUnreadableManifest) {
  std::vector<std::byte> bytes = test::read_bytes(checkpoint_ / "manifest.json");
  bytes[10] ^= std::byte{0x20};
  test::write_bytes(checkpoint_ / "manifest.json", bytes);
  try {
    inspect_checkpoint(checkpoint_);
    FAIL() << "inspected a damaged manifest";
  } catch (const DataLoss& error) {
    EXPECT_THAT(error.what(), HasSubstr("manifest.json does not match its checksum"));
  }
  fs::remove(checkpoint_ / "manifest.json");
  EXPECT_THROW(inspect_checkpoint(checkpoint_), std::system_error);
}

}  // namespace
}  // namespace recemb
