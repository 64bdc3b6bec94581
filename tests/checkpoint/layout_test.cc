// Checkpoint directory names, listing, latest_checkpoint and resolving a path to a checkpoint
// (src/checkpoint/layout.cc).
#include "checkpoint/layout.h"

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "recemb/checkpoint.h"
#include "recemb/error.h"

#include "testing/temporary_directory.h"

namespace recemb::internal {
namespace {

namespace fs = std::filesystem;
using test::TemporaryDirectory;
using ::testing::HasSubstr;

TEST(LayoutTest, DirectoryNamesRoundTrip) {
  EXPECT_EQ(checkpoint_directory_name(0), "ckpt-000000000000");
  EXPECT_EQ(checkpoint_directory_name(42), "ckpt-000000000042");
  EXPECT_EQ(checkpoint_directory_name(999999999999), "ckpt-999999999999");
  EXPECT_EQ(checkpoint_directory_name(1234567890123456), "ckpt-1234567890123456");
  for (const int64_t step : {int64_t{0}, int64_t{7}, int64_t{1} << 40, int64_t{1} << 62}) {
    EXPECT_EQ(checkpoint_step(checkpoint_directory_name(step)), step);
  }
}

TEST(LayoutTest, OnlyWrittenNamesAreCheckpoints) {
  for (const char* name :
       {"ckpt-42", "ckpt-", "ckpt-00000000004x", "ckpt-0000000000042", "ckpt-+00000000042",
        "ckpt--00000000042", "xckpt-000000000042", ".tmp-ckpt-000000000042-12-1",
        "ckpt-000000000042.old", "ckpt-99999999999999999999"}) {
    EXPECT_EQ(checkpoint_step(name), std::nullopt) << name;
  }
}

TEST(LayoutTest, TemporaryNamesAreUniqueAndMarked) {
  std::set<std::string> names;
  for (int i = 0; i < 100; ++i) {
    const std::string name = temporary_name("ckpt-000000000001");
    EXPECT_TRUE(name.starts_with(".tmp-ckpt-000000000001-")) << name;
    EXPECT_EQ(checkpoint_step(name), std::nullopt);
    names.insert(name);
  }
  EXPECT_EQ(names.size(), 100u);
}

TEST(LayoutTest, FileNamesUseTheTableIndex) {
  EXPECT_EQ(variable_file_name(0, "parameters"), "t0.parameters.f32");
  EXPECT_EQ(variable_file_name(12, "accumulators"), "t12.accumulators.f32");
  EXPECT_EQ(variable_file_name(3, "parameters", DType::kBFloat16), "t3.parameters.bf16");
  EXPECT_EQ(variable_file_name(3, "parameters", DType::kFloat16), "t3.parameters.f16");
  EXPECT_EQ(extra_array_file_name(3), "x3.f32");
  EXPECT_EQ(key_array_file_name(2, "last_seen"), "t2.last_seen.i64");
}

TEST(LayoutTest, ListsCompleteCheckpointsByStepAndIgnoresEverythingElse) {
  TemporaryDirectory directory;
  const fs::path& root = directory.path();
  for (const char* name : {"ckpt-000000000010", "ckpt-000000000002", "ckpt-000000000300",
                           ".tmp-ckpt-000000000400-1-1", "ckpt-5", "other"}) {
    fs::create_directory(root / name);
  }
  std::ofstream(root / "ckpt-000000000500") << "a file, not a directory";

  const std::vector<CheckpointDirectory> checkpoints = list_checkpoints(root);
  ASSERT_EQ(checkpoints.size(), 3u);
  EXPECT_EQ(checkpoints[0].step, 2);
  EXPECT_EQ(checkpoints[1].step, 10);
  EXPECT_EQ(checkpoints[2].step, 300);
  EXPECT_EQ(checkpoints[2].path, root / "ckpt-000000000300");
  EXPECT_EQ(latest_checkpoint(root), root / "ckpt-000000000300");

  EXPECT_TRUE(list_checkpoints(root / "missing").empty());
  EXPECT_EQ(latest_checkpoint(root / "missing"), std::nullopt);
  EXPECT_EQ(latest_checkpoint(root / "ckpt-000000000500"), std::nullopt);  // a file
  EXPECT_EQ(latest_checkpoint(root / "other"), std::nullopt);
}

TEST(LayoutTest, ResolvesACheckpointOrARoot) {
  TemporaryDirectory directory;
  const fs::path& root = directory.path();
  const fs::path older = root / "ckpt-000000000001";
  const fs::path newer = root / "ckpt-000000000002";
  fs::create_directory(older);
  fs::create_directory(newer);
  std::ofstream(older / kManifestFile) << "{}";
  std::ofstream(newer / kManifestChecksumFile) << "0\n";  // damaged, but a checkpoint
  EXPECT_EQ(resolve_checkpoint(older), older);
  EXPECT_EQ(resolve_checkpoint(newer), newer);
  EXPECT_EQ(resolve_checkpoint(root), newer);
  // A missing path is ENOENT; an existing directory without checkpoints a bad argument.
  try {
    resolve_checkpoint(root / "missing");
    FAIL() << "resolved a missing path";
  } catch (const std::system_error& error) {
    EXPECT_EQ(error.code().value(), ENOENT);
    EXPECT_THAT(error.what(), HasSubstr("no checkpoint at '" + (root / "missing").string() + "'"));
  }
  fs::create_directory(root / "other");
  try {
    resolve_checkpoint(root / "other");
    FAIL() << "resolved a path without checkpoints";
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), HasSubstr("no checkpoint at '" + (root / "other").string() +
                                        "': it is neither a checkpoint (no manifest.json) nor a "
                                        "root holding ckpt-* checkpoints"));
  }
}

}  // namespace
}  // namespace recemb::internal
