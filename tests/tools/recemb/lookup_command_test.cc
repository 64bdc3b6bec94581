#include "tools/recemb/lookup_command.h"

#include <cmath>
#include <filesystem>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <sstream>
#include <system_error>

#include "recemb/embedding.h"
#include "recemb/error.h"
#include "recemb/serving.h"
#include "recemb/string_key.h"

#include "testing/error_of.h"

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

// MODEL as `recemb predict` takes it: a model file, or a model directory (its model.recemb); a
// training run's output directory is refused with the way to a model (recemb export).
TEST(LookupCommand, TakesAModelDirectoryAndNamesExportForARunDirectory) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "lookup_command_dir";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "model");
  export_model(dir / "model" / "model.recemb");
  const std::string request = "{\"a\": 4, \"b\": [1, 3], \"s\": [7]}\n";
  std::istringstream in(request), in_file(request);
  std::ostringstream out, out_file, err;
  ASSERT_EQ(run_lookup_command({.model = (dir / "model").string()}, in, out, err), 0) << err.str();
  ASSERT_EQ(run_lookup_command({.model = (dir / "model" / "model.recemb").string()}, in_file,
                               out_file, err),
            0);
  EXPECT_EQ(out.str(), out_file.str());

  std::filesystem::create_directories(dir / "run" / "checkpoints");
  std::istringstream none;
  EXPECT_THAT(test::error_of<InvalidArgument>(
                  [&] { run_lookup_command({.model = (dir / "run").string()}, none, out, err); }),
              AllOf(HasSubstr("output directory of a training run"),
                    HasSubstr("recemb export " + (dir / "run" / "checkpoints").string())));
}

// A dynamic table's feature takes int64 keys and string ids (their string_key); a key the table
// does not hold is a zero row whose weight counts in the mean; a static table's feature still
// refuses strings.
TEST(LookupCommand, DynamicTablesTakeKeysAndStrings) {
  const auto path = std::filesystem::path(::testing::TempDir()) / "lookup_command_dynamic.model";
  Embedding embedding({{.name = "users",
                        .dim = 2,
                        .combiner = Combiner::kMean,
                        .dynamic_vocabulary = DynamicVocabulary{.capacity = 10}},
                       {.name = "t", .vocabulary_size = 4, .dim = 1, .combiner = Combiner::kSum}},
                      {{.name = "user", .table = "users"}, {.name = "a", .table = "t"}},
                      {.seed = 3});
  const int64_t alice = string_key("alice");
  const std::vector<int64_t> keys = alice < -(int64_t{1} << 62)
                                        ? std::vector<int64_t>{alice, -(int64_t{1} << 62)}
                                        : std::vector<int64_t>{-(int64_t{1} << 62), alice};
  const std::vector<float> rows = {0.5f, -1.5f, 2.0f, 0.25f};
  embedding.write_dynamic_table("users", {.keys = keys, .parameters = rows});
  export_serving_model(embedding, path);
  const auto row_of = [&](int64_t key, int d) {
    return double{rows[static_cast<size_t>(key == keys[0] ? d : 2 + d)]};
  };

  std::istringstream in(R"({"user": ["alice", -4611686018427387904], "a": 1}
{"user": {"ids": ["alice", "bob", 5], "weights": [1, 2, 1]}, "a": 1}
{"user": "alice", "a": "x"}
{"user": 1.5, "a": 1}
)");
  std::ostringstream out, err;
  EXPECT_EQ(run_lookup_command({.model = path.string()}, in, out, err), 1);
  std::istringstream lines(out.str());
  std::string line;
  std::getline(lines, line);
  std::vector<double> got = numbers_of(line);
  ASSERT_EQ(got.size(), 3u) << line;
  for (int d = 0; d < 2; ++d) {
    EXPECT_NEAR(got[static_cast<size_t>(d)],
                (row_of(alice, d) + row_of(-(int64_t{1} << 62), d)) / 2, 1e-6);
  }
  std::getline(lines, line);  // "bob" and 5 are absent: zero rows, weights 2 and 1 still count
  got = numbers_of(line);
  ASSERT_EQ(got.size(), 3u) << line;
  for (int d = 0; d < 2; ++d) EXPECT_NEAR(got[static_cast<size_t>(d)], row_of(alice, d) / 4, 1e-6);
  std::getline(lines, line);
  EXPECT_THAT(line, HasSubstr("feature 'a': ids must be an integer or an array of them"));
  std::getline(lines, line);
  EXPECT_THAT(line, HasSubstr("feature 'user': id 1.5 is not an integer or a string"));
}

// What a request line should be answered with: activations (in feature order, flattened) or an
// error object whose message contains `error`.
struct Expected {
  std::vector<double> values;
  std::string error;
};

// Random good requests (bags with and without weights, empty bags, sequences) mixed with every
// kind of bad line: each input line gets exactly one output line, in order, and each answer is
// the independently computed one, or the error object naming the line and the problem.
TEST(LookupCommand, EveryLineGetsOneAnswerInOrder) {
  const auto path = std::filesystem::path(::testing::TempDir()) / "lookup_command_pairs.model";
  Embedding embedding = export_model(path);
  std::vector<float> t(20 * 3), u(10 * 2);
  embedding.read_variable("t", "parameters", t);
  embedding.read_variable("u", "parameters", u);

  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"{\"a\": 1, \"b\": 1, \"s\": 1", "not valid JSON"},
      {R"({"a": [1e400], "b": 1, "s": 1})", "not valid JSON"},
      {"{\"a\": " + deep + ", \"b\": 1, \"s\": 1}", "feature 'a': id [...] is not an integer"},
      {R"({"a": 1, "b": 1, "s": 1, "z": 2})", "unknown feature 'z'"},
      {R"({"a": 1, "b": 1})", "feature 's' is missing"},
      {R"({"b": 1})", "2 features are missing: 'a', 's' (every feature"},
      {R"({"a": "7", "b": 1, "s": 1})", "feature 'a': ids must be an integer or an array"},
      {R"({"a": [1.5], "b": 1, "s": 1})", "feature 'a': id 1.5 is not an integer"},
      {R"({"a": 20, "b": 1, "s": 1})", "feature 'a'"},
      {R"({"a": 1, "b": [-1], "s": 1})", "feature 'b'"},
      {R"({"a": 18446744073709551615, "b": 1, "s": 1})",
       "feature 'a': id 18446744073709551615 is beyond the 64-bit integer range"},
      {R"({"a": 1, "b": 1, "s": 1, "a": 2})", "feature 'a' appears twice"},
      {R"({"a": {"ids": [1], "ids": [2]}, "b": 1, "s": 1})",
       "feature 'a': field 'ids' appears twice"},
      {R"({"a": {"ids": [1], "weights": 5}, "b": 1, "s": 1})",
       "feature 'a': weights must be an array of numbers, got 5"},
      {R"({"a": {"ids": [1], "weights": {"w": 2}}, "b": 1, "s": 1})",
       "feature 'a': weights must be an array of numbers, got {...}"},
      {R"({"a": {"ids": [1, 2], "weights": [1]}, "b": 1, "s": 1})", "feature 'a'"},
      {"", "an empty line"},
      {"[1, 2]", "expected an object of features"},
      {R"([{"ids": 1, "ids": 2}])", "expected an object of features, got [...]"},
  };

  std::mt19937_64 rng(24);
  const auto uniform = [&rng](int64_t n) {
    return std::uniform_int_distribution<int64_t>(0, n - 1)(rng);
  };
  std::string input;
  std::vector<Expected> expected;
  for (size_t i = 0; i < 3 * bad.size(); ++i) {
    if (i % 3 == 1) {
      input += bad[i / 3].first + "\n";
      expected.push_back({.error = bad[i / 3].second});
      continue;
    }
    Expected answer;
    // a: a sum bag of 0-3 ids, weighted on odd lines.
    const int64_t na = uniform(4);
    std::vector<double> a(3, 0.0);
    std::string ids, weights;
    for (int64_t j = 0; j < na; ++j) {
      const int64_t id = uniform(20);
      const double weight = i % 2 == 1 ? static_cast<double>(uniform(8)) / 4 : 1.0;
      for (int d = 0; d < 3; ++d) a[static_cast<size_t>(d)] += weight * t[id * 3 + d];
      ids += (j == 0 ? "" : ", ") + std::to_string(id);
      weights += (j == 0 ? "" : ", ") + std::to_string(weight);
    }
    const std::string a_text =
        i % 2 == 1 ? "{\"ids\": [" + ids + "], \"weights\": [" + weights + "]}" : "[" + ids + "]";
    // b: a mean bag of 1-3 ids.
    const int64_t nb = 1 + uniform(3);
    std::vector<double> b(2, 0.0);
    std::string b_text;
    for (int64_t j = 0; j < nb; ++j) {
      const int64_t id = uniform(10);
      for (int d = 0; d < 2; ++d) b[static_cast<size_t>(d)] += u[id * 2 + d] / double(nb);
      b_text += (j == 0 ? "" : ", ") + std::to_string(id);
    }
    // s: a sequence of 0-3 ids, of which the first max_sequence_length = 2 are kept.
    const int64_t ns = uniform(4);
    std::vector<double> s(4, 0.0);
    std::string s_text;
    for (int64_t j = 0; j < ns; ++j) {
      const int64_t id = uniform(10);
      for (int d = 0; d < 2 && j < 2; ++d) s[static_cast<size_t>(j * 2 + d)] = u[id * 2 + d];
      s_text += (j == 0 ? "" : ", ") + std::to_string(id);
    }
    input += "{\"s\": [" + s_text + "], \"a\": " + a_text + ", \"b\": [" + b_text + "]}\n";
    for (const auto* part : {&a, &b, &s}) {
      answer.values.insert(answer.values.end(), part->begin(), part->end());
    }
    expected.push_back(answer);
  }

  std::istringstream in(input);
  std::ostringstream out, err;
  EXPECT_EQ(run_lookup_command({.model = path.string(), .verify = false}, in, out, err), 1);
  std::istringstream answers(out.str());
  std::string answer;
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_TRUE(std::getline(answers, answer)) << "no answer to line " << i + 1;
    const nlohmann::json json = nlohmann::json::parse(answer);
    if (!expected[i].error.empty()) {
      ASSERT_TRUE(json.contains("error")) << "line " << i + 1 << ": " << answer;
      EXPECT_EQ(json.size(), 1u) << answer;
      EXPECT_EQ(json["error"]["line"], i + 1) << answer;
      EXPECT_EQ(json["error"]["code"], "InvalidArgument") << answer;
      EXPECT_THAT(json["error"]["message"].get<std::string>(), HasSubstr(expected[i].error))
          << "line " << i + 1;
      EXPECT_LT(answer.size(), 300u) << answer;
      continue;
    }
    ASSERT_FALSE(json.contains("error")) << "line " << i + 1 << ": " << answer;
    EXPECT_EQ(json.size(), 3u);
    std::vector<double> got;
    for (const char* name : {"a", "b", "s"}) {
      const std::vector<double> numbers = numbers_of(json[name].dump());
      got.insert(got.end(), numbers.begin(), numbers.end());
    }
    ASSERT_EQ(got.size(), expected[i].values.size()) << answer;
    for (size_t k = 0; k < got.size(); ++k) {
      EXPECT_NEAR(got[k], expected[i].values[k], 1e-5) << "line " << i + 1 << " value " << k;
    }
  }
  EXPECT_FALSE(std::getline(answers, answer)) << "an answer too many: " << answer;
  // stderr repeats each error with its line number, for a person reading a terminal.
  EXPECT_THAT(err.str(), AllOf(HasSubstr("recemb lookup: line 2: not valid JSON"),
                               HasSubstr("recemb lookup: line 11: unknown feature 'z'")));

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
      {R"({"a": [1e400], "b": 1, "s": 1})", "not valid JSON: "},
      {"{\"a\": " + deep + ", \"b\": 1, \"s\": 1}", "feature 'a': id [...] is not an integer"},
      {"{\"a\": {\"ids\": [1], \"weights\": " + deep + "}, \"b\": 1, \"s\": 1}",
       "feature 'a': weight [...] is not a number"},
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
       "feature 'a': weight 1e300 is outside the float range"},
      {R"({"a": 1, "b": 1, "s": 1, "a": 2})", "feature 'a' appears twice"},
      // A NUL in a name is escaped, not the end of the message.
      {R"({"a\u0000b": 1, "a": 1, "b": 1, "s": 1})", "unknown feature 'a\\x00b'"},
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
  // Every line is answered: the hostile ones with an error object, the good ones all alike.
  std::istringstream answers(out.str());
  std::string first, answer;
  size_t count = 0;
  while (std::getline(answers, answer)) {
    if (count % 2 == 0) {
      EXPECT_EQ(answer.rfind("{\"error\": {\"line\": " + std::to_string(count + 1) + ",", 0), 0u)
          << answer;
    } else if (count == 1) {
      first = answer;
    } else {
      EXPECT_EQ(answer, first);
    }
    ++count;
  }
  EXPECT_EQ(count, 2 * cases.size());
}

}  // namespace
}  // namespace recemb::tools
