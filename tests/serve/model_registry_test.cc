#include "serve/model_registry.h"

#include <filesystem>
#include <fstream>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sstream>

#include "recemb/error.h"

#include "serve/serving_fixtures.h"
#include "testing/error_of.h"
#include "testing/temporary_directory.h"

namespace recemb::serve {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

TEST(ModelRegistry, ValidNamesAndVersions) {
  for (const char* name : {"ctr", "a.b-c_1", "X", "..a"}) EXPECT_TRUE(is_valid_model_name(name));
  for (const char* name : {"", ".", "..", "a/b", "a b", "a:b", "é", "a\\b"}) {
    EXPECT_FALSE(is_valid_model_name(name)) << name;
  }
  EXPECT_EQ(parse_version("1"), 1);
  EXPECT_EQ(parse_version("9223372036854775807"), INT64_MAX);
  for (const char* name : {"", "0", "01", "-1", "+1", "1a", "9223372036854775808", " 1"}) {
    EXPECT_EQ(parse_version(name), std::nullopt) << name;
  }
}

// The newest version that opens is served; a damaged newer one is refused and logged; versions
// found are listed; invalid names and non-version directories are skipped.
TEST(ModelRegistry, ServesTheNewestVersionThatOpens) {
  recemb::test::TemporaryDirectory dir;
  const Embedding first = test::lookup_embedding(1);
  const Embedding second = test::lookup_embedding(2);  // versions 12 and 20
  test::export_to(first, dir / "ctr" / "3");
  test::export_to(second, dir / "ctr" / "12");
  fs::create_directories(dir / "ctr" / "20");
  fs::copy_file(dir / "ctr" / "12" / "model.recemb", dir / "ctr" / "20" / "model.recemb");
  {  // damage one byte of version 20's tables
    std::fstream file(dir / "ctr" / "20" / "model.recemb",
                      std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(-8, std::ios::end);
    file.put('\x55');
  }
  fs::create_directories(dir / "ctr" / "latest");
  test::export_to(first, dir / "bad name");
  test::export_to(first, dir / "other" / "1");

  std::ostringstream log;
  const ModelRegistry registry(dir.path(), log);
  EXPECT_EQ(registry.names(), (std::vector<std::string>{"ctr", "other"}));
  const auto ctr = registry.find("ctr");
  ASSERT_NE(ctr, nullptr);
  EXPECT_EQ(ctr->version, 12);
  EXPECT_EQ(ctr->versions, (std::vector<int64_t>{3, 12, 20}));
  EXPECT_EQ(ctr->predictor, nullptr);
  EXPECT_THAT(ctr->no_predict_reason, HasSubstr("dense"));
  EXPECT_EQ(ctr->file, fs::canonical(dir / "ctr" / "12" / "model.recemb"));
  EXPECT_EQ(registry.find("nothing"), nullptr);
  EXPECT_THAT(log.str(), HasSubstr("refusing model 'ctr' version 20"));
  EXPECT_THAT(log.str(), HasSubstr("serving model 'ctr' version 12"));
  EXPECT_THAT(log.str(), HasSubstr("skipping 'bad name': not a model name"));
  EXPECT_THAT(log.str(), HasSubstr("directory 'latest': not a version"));
}

// No symlink can take a name or a version outside the model directory.
TEST(ModelRegistry, SymlinksMustStayInside) {
  recemb::test::TemporaryDirectory outside, dir;
  test::export_to(test::lookup_embedding(), outside / "m" / "1");
  fs::create_directory_symlink(outside / "m", dir / "escaped");
  fs::create_directories(dir / "v");
  fs::create_directory_symlink(outside / "m" / "1", dir / "v" / "1");
  fs::create_directories(dir / "f" / "1");
  fs::create_symlink(outside / "m" / "1" / "model.recemb", dir / "f" / "1" / "model.recemb");
  test::export_to(test::lookup_embedding(), dir / "inside" / "1");
  fs::create_directory_symlink(dir / "inside", dir / "alias");  // inside: served

  std::ostringstream log;
  const ModelRegistry registry(dir.path(), log);
  EXPECT_EQ(registry.names(), (std::vector<std::string>{"alias", "inside"}));
  EXPECT_THAT(log.str(), HasSubstr("outside the model directory"));
  EXPECT_EQ(registry.find("escaped"), nullptr);
  EXPECT_EQ(registry.find("v"), nullptr);
  EXPECT_EQ(registry.find("f"), nullptr);
}

TEST(ModelRegistry, NoModelIsAnErrorSayingTheLayout) {
  recemb::test::TemporaryDirectory dir;
  std::ostringstream log;
  EXPECT_THAT(recemb::test::error_of<InvalidArgument>([&] { ModelRegistry(dir.path(), log); }),
              HasSubstr("expected MODEL_DIR/NAME/VERSION/model.recemb"));
  EXPECT_THAT(recemb::test::error_of<InvalidArgument>([&] { ModelRegistry(dir / "missing", log); }),
              HasSubstr("is not a directory"));
  test::export_to(test::lookup_embedding(), dir / "m");  // no version directory
  EXPECT_THAT(recemb::test::error_of<InvalidArgument>([&] { ModelRegistry(dir.path(), log); }),
              HasSubstr("no model to serve"));
}

}  // namespace
}  // namespace recemb::serve
