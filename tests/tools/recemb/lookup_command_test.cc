#include "tools/recemb/lookup_command.h"

#include <cmath>
#include <filesystem>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <regex>
#include <sstream>
#include <system_error>

#include "recemb/embedding.h"
#include "recemb/error.h"
#include "recemb/serving.h"

namespace recemb::tools {
namespace {

using ::testing::HasSubstr;

// A model of two tables (sum and mean combiners) and a sequence feature; returns the embedding
// whose tables it holds.
Embedding export_model(const std::filesystem::path& path) {
  Embedding embedding({{.name = "t", .vocabulary_size = 20, .dim = 3, .combiner = Combiner::kSum},
                       {.name = "u", .vocabulary_size = 10, .dim = 2, .combiner = Combiner::kMean}},
                      {{.name = "a", .table = "t"},
                       {.name = "b", .table = "u"},
                       {.name = "s", .table = "u", .max_sequence_length = 2}},
                      {.seed = 5});
  export_serving_model(embedding, path);
  return embedding;
}

std::vector<double> numbers_of(const std::string& text) {
  std::vector<double> numbers;
  const std::regex number(R"(-?[0-9][0-9.e+-]*)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), number);
       it != std::sregex_iterator(); ++it) {
    numbers.push_back(std::stod(it->str()));
  }
  return numbers;
}

TEST(LookupCommand, AnswersEachLineWithTheCombinedRows) {
  const auto path = std::filesystem::path(::testing::TempDir()) / "lookup_command.model";
  Embedding embedding = export_model(path);
  std::vector<float> t(20 * 3), u(10 * 2);
  embedding.read_variable("t", "parameters", t);
  embedding.read_variable("u", "parameters", u);

  std::istringstream in(
      "{\"a\": 4, \"b\": [1, 3], \"s\": [7]}\n"
      "\n"
      "{\"a\": {\"ids\": [2, 2], \"weights\": [0.5, 2]}, \"b\": [], \"s\": [1, 2, 3]}\n");
  std::ostringstream out, err;
  ASSERT_EQ(run_lookup_command({.model = path.string()}, in, out, err), 0) << err.str();
  std::istringstream lines(out.str());
  std::string first, second;
  std::getline(lines, first);
  std::getline(lines, second);
  EXPECT_THAT(first, HasSubstr("{\"a\": ["));
  EXPECT_THAT(first, HasSubstr("\"s\": [["));  // a sequence: max_sequence_length rows

  // Independent expectation in double: sum combiner (a), mean (b), sequence rows (s).
  std::vector<double> expected;
  for (int d = 0; d < 3; ++d) expected.push_back(t[4 * 3 + d]);
  for (int d = 0; d < 2; ++d) expected.push_back((double{u[1 * 2 + d]} + u[3 * 2 + d]) / 2);
  for (int d = 0; d < 2; ++d) expected.push_back(u[7 * 2 + d]);
  for (int d = 0; d < 2; ++d) expected.push_back(0.0);  // position 1 missing
  const std::vector<double> got = numbers_of(first);
  ASSERT_EQ(got.size(), expected.size()) << first;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-6) << i;

  std::vector<double> expected_second;
  for (int d = 0; d < 3; ++d) expected_second.push_back(2.5 * t[2 * 3 + d]);
  for (int d = 0; d < 2; ++d) expected_second.push_back(0.0);  // empty bag
  for (int d = 0; d < 2; ++d) expected_second.push_back(u[1 * 2 + d]);
  for (int d = 0; d < 2; ++d) expected_second.push_back(u[2 * 2 + d]);  // id 3 dropped (L = 2)
  const std::vector<double> got_second = numbers_of(second);
  ASSERT_EQ(got_second.size(), expected_second.size()) << second;
  for (size_t i = 0; i < got_second.size(); ++i) {
    EXPECT_NEAR(got_second[i], expected_second[i], 1e-6) << i;
  }
}

TEST(LookupCommand, BadLinesAreReportedWithLineNumbersAndTheOthersAnswered) {
  const auto path = std::filesystem::path(::testing::TempDir()) / "lookup_command_bad.model";
  export_model(path);
  std::istringstream in(
      "{\"a\": 1, \"b\": 1, \"s\": 1}\n"
      "not json\n"
      "{\"a\": 1, \"b\": 1}\n"
      "{\"a\": 99, \"b\": 1, \"s\": 1}\n"
      "{\"a\": 1, \"b\": 1, \"s\": 1, \"z\": 2}\n"
      "{\"a\": [1.5], \"b\": 1, \"s\": 1}\n"
      "{\"a\": 2, \"b\": 2, \"s\": 2}\n");
  std::ostringstream out, err;
  EXPECT_EQ(run_lookup_command({.model = path.string(), .verify = false}, in, out, err), 1);
  const std::string errors = err.str();
  EXPECT_THAT(errors, HasSubstr("line 2: not JSON"));
  EXPECT_THAT(errors, HasSubstr("line 3: feature 's' is missing"));
  EXPECT_THAT(errors, AllOf(HasSubstr("line 4: "), HasSubstr("99")));
  EXPECT_THAT(errors, HasSubstr("line 5: unknown feature 'z'"));
  EXPECT_THAT(errors, HasSubstr("line 6: feature 'a': id 1.5 is not an integer"));
  const std::string answers = out.str();
  EXPECT_EQ(std::count(answers.begin(), answers.end(), '\n'), 2);

  std::istringstream none;
  EXPECT_THROW(run_lookup_command({.model = "/nonexistent.model"}, none, out, err),
               std::system_error);
}

}  // namespace
}  // namespace recemb::tools
