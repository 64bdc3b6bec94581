// `recemb hash` (tools/recemb/hash_command.h): the trainer's rows of raw Criteo values, checked
// against the golden ids of tests/dlrm/criteo_reader_test.cc (computed by a separate Python
// implementation), with the vocabulary sizes of the settings or of a serving model.
#include "tools/recemb/hash_command.h"

#include <filesystem>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sstream>
#include <string>

#include "recemb/embedding.h"
#include "recemb/error.h"
#include "recemb/serving.h"
#include "recemb/string_key.h"

#include "testing/error_of.h"

namespace recemb::tools {
namespace {

using test::error_of;
using ::testing::HasSubstr;

struct Output {
  int status;
  std::string out;
  std::string err;
};

Output hash(const HashArguments& args, const std::string& input) {
  std::istringstream in(input);
  std::ostringstream out, err;
  const int status = run_hash_command(args, in, out, err);
  return {status, out.str(), err.str()};
}

// The default settings (preset "small": C1 keeps Kaggle's 1460 rows, C3 is cut to 129,719).
TEST(HashCommand, GivesTheTrainersRowsUnderTheSettings) {
  EXPECT_EQ(hash({.feature = "C1"}, "68fd1e64\n68FD1E64\r\n\n").out, "1197\n1197\n0\n");
  EXPECT_EQ(hash({.feature = "C3"}, "80e26c9b\n").out, "33209\n");
  // The settings' sizes count: C21 at Kaggle's 7,046,547 rows, C9 overridden to 3 rows.
  EXPECT_EQ(hash({.feature = "C21", .preset = "criteo-kaggle"}, "ffffffffffffffff\n").out,
            "2099965\n");
  EXPECT_EQ(hash({.feature = "C9", .overrides = {"tables.C9.vocabulary_size=3"}}, "a73ee510\n").out,
            "2\n");
}

TEST(HashCommand, GivesTheRowsUnderAServingModelsSizes) {
  const auto path = std::filesystem::path(::testing::TempDir()) / "hash_command.model";
  Embedding embedding({{.name = "C1", .vocabulary_size = 1460, .dim = 1},
                       {.name = "C3", .vocabulary_size = 129719, .dim = 1},
                       {.name = "C20", .vocabulary_size = 4, .dim = 1}},
                      {{.name = "C1", .table = "C1"},
                       {.name = "C3", .table = "C3"},
                       {.name = "C20", .table = "C20"}});
  export_serving_model(embedding, path);
  EXPECT_EQ(hash({.feature = "C1", .model = path.string()}, "68fd1e64\n").out, "1197\n");
  EXPECT_EQ(hash({.feature = "C3", .model = path.string()}, "80e26c9b\n").out, "33209\n");
  EXPECT_EQ(hash({.feature = "C20", .model = path.string()}, "5bb5ffa8\n").out, "1\n");
  EXPECT_THAT(
      error_of<InvalidArgument>([&] { hash({.feature = "C2", .model = path.string()}, ""); }),
      HasSubstr("has no feature 'C2'"));
}

// A dynamic table's ids are the fields' keys (categorical_key): hex values as integers, anything
// else its string_key; no value is malformed there.
TEST(HashCommand, GivesADynamicTablesKeys) {
  EXPECT_EQ(hash({.feature = "C1", .overrides = {"embedding.vocabulary=dynamic"}},
                 "68fd1e64\nffffffffffffffff\nnot hex\n\n")
                .out,
            "1761418852\n-1\n" + std::to_string(string_key("not hex")) + "\n" +
                std::to_string(string_key("")) + "\n");
}

// Each line gets one answer, in order: a bad value an error object naming the line.
TEST(HashCommand, EveryLineGetsOneAnswerInOrder) {
  const Output output = hash(
      {.feature = "C1"}, "68fd1e64\n0x12\n\nxyz\n12345678901234567\n-1\n 1\n0000000068fd1e64\n");
  EXPECT_EQ(output.status, 1);
  std::istringstream answers(output.out);
  std::string answer;
  const std::vector<std::string> expected = {"1197", "0x12", "0",   "xyz", "12345678901234567",
                                             "-1",   " 1",   "1197"};
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_TRUE(std::getline(answers, answer)) << i;
    if (expected[i] == "0" || expected[i] == "1197") {
      EXPECT_EQ(answer, expected[i]) << "line " << i + 1;
    } else {
      EXPECT_EQ(answer,
                "{\"error\": {\"line\": " + std::to_string(i + 1) +
                    ", \"code\": \"InvalidArgument\", \"message\": \"feature 'C1': value '" +
                    expected[i] +
                    "' is not 1 to 16 hexadecimal digits (or empty, for a missing "
                    "value)\"}}");
    }
  }
  EXPECT_FALSE(std::getline(answers, answer)) << answer;
  EXPECT_THAT(output.err, HasSubstr("recemb hash: line 2: feature 'C1': value '0x12'"));
  EXPECT_EQ(hash({.feature = "C1"}, "1\n").status, 0);
}

TEST(HashCommand, OnlyCriteoCategoricalFeatures) {
  for (const char* feature : {"C0", "C27", "I1", "c1", ""}) {
    EXPECT_THAT(error_of<InvalidArgument>([&] { hash({.feature = feature}, "1\n"); }),
                HasSubstr("is not a Criteo categorical feature (C1 .. C26)"))
        << feature;
  }
}

}  // namespace
}  // namespace recemb::tools
