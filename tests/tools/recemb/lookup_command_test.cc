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

// Hostile lines (numbers beyond double's range, deep nesting, long keys, values of the wrong
// shape) each get a short error naming the line, and the next line is still answered.
TEST(LookupCommand, HostileLinesGetAShortErrorAndTheNextLineIsAnswered) {
  const auto path = std::filesystem::path(::testing::TempDir()) / "lookup_command_hostile.model";
  export_model(path);
  const std::string deep = std::string(100000, '[') + "1" + std::string(100000, ']');
  const std::string long_key(100000, 'k');
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"a": [1e400], "b": 1, "s": 1})", "not JSON: "},
      {"{\"a\": " + deep + ", \"b\": 1, \"s\": 1}", "arrays and objects nest deeper than 3 levels"},
      {"{\"a\": {\"ids\": [1], \"weights\": " + deep + "}, \"b\": 1, \"s\": 1}",
       "arrays and objects nest deeper than 3 levels"},
      {"{\"a\": [[1]], \"b\": 1, \"s\": 1}", "feature 'a': id [...] is not an integer"},
      {"{\"" + long_key + "\": 1, \"a\": 1, \"b\": 1, \"s\": 1}",
       "unknown feature '" + std::string(40, 'k') + "...'"},
      {"{\"a\": \"" + long_key + "\", \"b\": 1, \"s\": 1}",
       "feature 'a': ids must be an integer or an array of them, got \"" + std::string(40, 'k') +
           "...\""},
      {R"({"a": 18446744073709551615, "b": 1, "s": 1})",
       "feature 'a': id 18446744073709551615 is beyond the 64-bit integer range"},
      {R"({"a": {"ids": [1], "weights": 5}, "b": 1, "s": 1})",
       "feature 'a': weights must be an array of numbers, got 5"},
      {R"({"a": {"ids": [1], "weights": {"x": 2}}, "b": 1, "s": 1})",
       "feature 'a': weights must be an array of numbers, got {...}"},
      {R"({"a": {"ids": [1], "weights": [1e300]}, "b": 1, "s": 1})",
       "feature 'a': weight 1e+300 is outside the float range"},
      {R"({"a": 1, "b": 1, "s": 1, "a": 2})", "key 'a' appears twice"},
  };
  std::string input;
  for (const auto& [line, expected] : cases) input += line + "\n{\"a\": 2, \"b\": 2, \"s\": 2}\n";
  std::istringstream in(input);
  std::ostringstream out, err;
  EXPECT_EQ(run_lookup_command({.model = path.string(), .verify = false}, in, out, err), 1);
  std::istringstream errors(err.str());
  std::string error;
  for (size_t i = 0; i < cases.size(); ++i) {
    ASSERT_TRUE(std::getline(errors, error)) << i;
    EXPECT_EQ(error.rfind("recemb lookup: line " + std::to_string(2 * i + 1) + ": ", 0), 0u)
        << error;
    EXPECT_THAT(error, HasSubstr(cases[i].second)) << i;
    EXPECT_LT(error.size(), 250u) << i;
  }
  EXPECT_FALSE(std::getline(errors, error)) << error;
  // Every good line is answered, all alike.
  std::istringstream answers(out.str());
  std::string first, answer;
  ASSERT_TRUE(std::getline(answers, first));
  size_t count = 1;
  while (std::getline(answers, answer)) {
    EXPECT_EQ(answer, first);
    ++count;
  }
  EXPECT_EQ(count, cases.size());
}

}  // namespace
}  // namespace recemb::tools
