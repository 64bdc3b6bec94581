#include "serve/json_ids.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>

#include "recemb/error.h"
#include "recemb/string_key.h"

#include "serve/serving_fixtures.h"
#include "testing/error_of.h"
#include "testing/temporary_directory.h"

namespace recemb::serve {
namespace {

using recemb::test::error_of;
using ::testing::HasSubstr;

class JsonIdsTest : public ::testing::Test {
 protected:
  static ServingModel exported(const recemb::test::TemporaryDirectory& dir) {
    test::export_to(test::lookup_embedding(), dir.path());
    return ServingModel::open(dir.path() / "model.recemb");
  }

  LookupRequest batch(const std::string& text, RequestLimits limits = {}) {
    return decode_json_lookup_ids(text, model_, JsonLookupLayout::kBatch, limits);
  }
  std::string batch_error(const std::string& text, RequestLimits limits = {}) {
    return error_of<InvalidArgument>([&] { batch(text, limits); });
  }
  LookupRequest example(const std::string& text) {
    return decode_json_lookup_ids(text, model_, JsonLookupLayout::kExample, {});
  }
  std::string example_error(const std::string& text) {
    return error_of<InvalidArgument>([&] { example(text); });
  }

  recemb::test::TemporaryDirectory dir_;
  ServingModel model_ = exported(dir_);  // features a (t), b (u), s (u, sequence), user (dynamic)
};

// Both layouts decode to the features' ids, offsets and weights, in the model's feature order
// whatever the text's order; weights given by some examples are 1 per id in the others, given
// before or after the ids.
TEST_F(JsonIdsTest, DecodesBothLayouts) {
  const LookupRequest request = batch(
      R"({"inputs": {"user": ["ann", [-7, "bob"]], "s": [[], 4],
          "b": [[1, 2], {"weights": [0.5], "ids": 3}],
          "a": [{"ids": [1, 2], "weights": [0.5, 2]}, [3]]}})");
  EXPECT_EQ(request.examples, 2);
  ASSERT_EQ(request.features.size(), 4u);
  EXPECT_EQ(request.features[0].ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(request.features[0].row_splits, (std::vector<int64_t>{0, 2, 3}));
  EXPECT_EQ(request.features[0].weights, (std::vector<float>{0.5f, 2.0f, 1.0f}));
  EXPECT_EQ(request.features[1].ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(request.features[1].weights, (std::vector<float>{1.0f, 1.0f, 0.5f}));
  EXPECT_EQ(request.features[2].ids, (std::vector<int64_t>{4}));
  EXPECT_EQ(request.features[2].row_splits, (std::vector<int64_t>{0, 0, 1}));
  EXPECT_TRUE(request.features[2].weights.empty());
  EXPECT_EQ(request.features[3].ids,
            (std::vector<int64_t>{string_key("ann"), -7, string_key("bob")}));

  const LookupRequest one = example(R"({"b": 5, "a": {"ids": [3, 4], "weights": [1, -1]},
                                        "s": [1, 2, 3], "user": "ann"})");
  EXPECT_EQ(one.examples, 1);
  EXPECT_EQ(one.features[0].ids, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(one.features[0].weights, (std::vector<float>{1.0f, -1.0f}));
  EXPECT_EQ(one.features[1].row_splits, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(one.features[2].ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(one.features[3].ids, (std::vector<int64_t>{string_key("ann")}));
}

// Random batches written as JSON text here decode to exactly their ids, offsets and weights.
TEST_F(JsonIdsTest, RandomBatchesDecodeExactly) {
  std::mt19937_64 random(17);
  for (int round = 0; round < 30; ++round) {
    const test::RandomBatch expected = test::random_batch(random, 1 + round % 9);
    const LookupRequest got = batch(test::json_body(expected));
    ASSERT_EQ(got.examples, expected.examples);
    for (size_t f = 0; f < 4; ++f) {
      EXPECT_EQ(got.features[f].ids, expected.ids[f]) << round << " " << f;
      EXPECT_EQ(got.features[f].row_splits, expected.row_splits[f]) << round << " " << f;
      EXPECT_EQ(got.features[f].weights, expected.weights[f]) << round << " " << f;
    }
  }
}

TEST_F(JsonIdsTest, BadRequestsAreRefusedNamingWhatIsWrong) {
  const std::string rest = R"("b": [1], "s": [1], "user": [1])";
  EXPECT_THAT(batch_error("{"), HasSubstr("not valid JSON"));
  EXPECT_THAT(batch_error(R"({"inputs": {"a": [1e400], )" + rest + "}}"),
              HasSubstr("not valid JSON"));
  EXPECT_THAT(batch_error("[]"), HasSubstr("the body must be a JSON object"));
  EXPECT_THAT(batch_error(R"({"inputs": {}, "inputs": {}})"),
              HasSubstr("field 'inputs' appears twice"));
  EXPECT_THAT(batch_error(R"({"outputs": {}})"), HasSubstr("unknown field 'outputs'"));
  EXPECT_THAT(batch_error("{}"), HasSubstr("no \"inputs\""));
  EXPECT_THAT(batch_error(R"({"inputs": {"a": [1], "a": [1], )" + rest + "}}"),
              HasSubstr("feature 'a' appears twice"));
  EXPECT_THAT(batch_error(R"({"inputs": {"a": {"x": 1}, )" + rest + "}}"),
              HasSubstr("feature 'a' must be a list of examples, got {...}"));
  EXPECT_THAT(batch_error(R"({"inputs": {"a": [1, {"ids": [1], "ids": [2]}], )" + rest + "}}"),
              HasSubstr("example 1: feature 'a': field 'ids' appears twice"));
  EXPECT_THAT(batch_error(R"({"inputs": {"a": [{"id": 1}], )" + rest + "}}"),
              HasSubstr("example 0: feature 'a': unknown field 'id' (expected ids, weights)"));
  EXPECT_THAT(batch_error(R"({"inputs": {"a": [{"weights": []}], )" + rest + "}}"),
              HasSubstr("example 0: feature 'a': no \"ids\""));
  EXPECT_THAT(batch_error(R"({"inputs": {"a": [[[1]]], )" + rest + "}}"),
              HasSubstr("example 0: feature 'a': id [...] is not an integer"));
  EXPECT_THAT(batch_error(R"({"inputs": {"a": [null], )" + rest + "}}"),
              HasSubstr("feature 'a': ids must be an integer or an array of them, got null"));
  EXPECT_THAT(batch_error(R"({"inputs": {"a": ["x"], )" + rest + "}}"),
              HasSubstr("feature 'a': ids must be an integer or an array of them, got \"x\""));
  EXPECT_THAT(batch_error(R"({"inputs": {"a": [[1, 2.5]], )" + rest + "}}"),
              HasSubstr("feature 'a': id 2.5 is not an integer"));
  EXPECT_THAT(batch_error(R"({"inputs": {"a": [1], "b": [1], "s": [1], "user": [[true]]}})"),
              HasSubstr("feature 'user': id true is not an integer or a string"));
  EXPECT_THAT(batch_error(R"({"inputs": {"a": [[9223372036854775808]], )" + rest + "}}"),
              HasSubstr("id 9223372036854775808 is beyond the 64-bit integer range"));
  EXPECT_THAT(batch_error(R"({"inputs": {"a": [{"ids": [1], "weights": 2}], )" + rest + "}}"),
              HasSubstr("feature 'a': weights must be an array of numbers, got 2"));
  EXPECT_THAT(batch_error(R"({"inputs": {"a": [{"ids": [1], "weights": ["2"]}], )" + rest + "}}"),
              HasSubstr("feature 'a': weight \"2\" is not a number"));
  EXPECT_THAT(
      batch_error(R"({"inputs": {"a": [1, {"ids": [1, 2], "weights": [1]}], )" + rest + "}}"),
      HasSubstr("example 1: feature 'a': 2 ids but 1 weights"));
  EXPECT_THAT(batch_error(R"({"inputs": {"a": [], )" + rest + "}}"),
              HasSubstr("feature 'a': no examples"));
  EXPECT_THAT(batch_error(R"({"inputs": {"a": [1, 2, 3], "b": [1, 2, 3], "s": [1, 2, 3],
                              "user": [1, 2, 3]}})",
                          {.max_examples = 2}),
              HasSubstr("feature 'a': 3 examples, more than --max-examples 2"));
  EXPECT_THAT(batch_error(R"({"inputs": {"a": [1, 2], )" + rest + "}}"),
              HasSubstr("feature 'b' has 1 examples but feature 'a' has 2"));
  EXPECT_THAT(batch_error(R"({"inputs": {"a": [1], "b": [1], "s": [1]}})"),
              HasSubstr("feature 'user' is missing"));
  EXPECT_THAT(example_error("[1]"), HasSubstr("expected an object of features, got [...]"));
  EXPECT_THAT(example_error(R"({"a": 1, "b": 1, "s": 1, "user": 1, "z": 1})"),
              HasSubstr("unknown feature 'z'"));
  // The example's index is named in a batch only.
  EXPECT_EQ(example_error(R"({"a": [1.5], "b": 1, "s": 1, "user": 1})"),
            "feature 'a': id 1.5 is not an integer");
}

// Names and text quoted in messages are cut and escaped: a NUL in a feature's name does not end
// the message (std::exception::what() is a C string), nor do other control bytes garble it.
TEST_F(JsonIdsTest, QuotedNamesAreEscaped) {
  const std::string message = batch_error(R"({"inputs": {"a\u0000b\u001bc": [1]}})");
  EXPECT_EQ(message, "unknown feature 'a\\x00b\\x1bc'");
  EXPECT_EQ(example_error(R"({"a": "x\u007fy"})"),
            "feature 'a': ids must be an integer or an array of them, got \"x\\x7fy\"");
}

// A weight is refused when its float32 rounding is infinite, or 0 while it is not; the shortest
// decimal of float's largest value (3.4028235e38, above it as a double) rounds to it.
TEST_F(JsonIdsTest, WeightsAreCheckedAfterRoundingToFloat) {
  const auto weight = [&](const std::string& text) {
    const LookupRequest request =
        example(R"({"a": {"ids": [1], "weights": [)" + text + R"(]}, "b": 1, "s": 1, "user": 1})");
    return request.features[0].weights.at(0);
  };
  constexpr float kMax = std::numeric_limits<float>::max();
  EXPECT_EQ(weight("3.4028235e38"), kMax);
  EXPECT_EQ(weight("-3.4028235e38"), -kMax);
  EXPECT_EQ(weight("3.40282356e38"), kMax);  // below the midpoint to 2^128
  EXPECT_EQ(weight("1e-45"), std::numeric_limits<float>::denorm_min());
  EXPECT_EQ(weight("0"), 0.0f);
  EXPECT_EQ(weight("-0.0"), 0.0f);
  EXPECT_EQ(weight("16777217"), 16777216.0f);
  const auto error = [&](const std::string& text) {
    return batch_error(R"({"inputs": {"a": [1, {"ids": [1], "weights": [)" + text +
                       R"(]}], "b": [1, 1], "s": [1, 1], "user": [1, 1]}})");
  };
  // 2^128 - 2^103, the midpoint, rounds (to even) to infinity.
  EXPECT_EQ(error("3.4028235677973366e38"),
            "example 1: feature 'a': weight 3.4028235677973366e38 is outside the float range (it "
            "rounds to infinity)");
  EXPECT_THAT(error("-1e39"), HasSubstr("weight -1e39 is outside the float range"));
  EXPECT_EQ(error("1e-50"),
            "example 1: feature 'a': weight 1e-50 rounds to 0 as a float (the smallest non-zero "
            "float is 1.4e-45)");
  EXPECT_THAT(error("-7e-46"), HasSubstr("weight -7e-46 rounds to 0"));
}

// The budget counts the memory the decoded arrays hold as they grow: a request whose arrays hold
// exactly the budget is decoded, one byte less is refused, and that memory is at least their
// values' and at most twice it (and 16 values an array); a huge request is refused without its
// arrays ever being taken.
TEST_F(JsonIdsTest, TheMemoryBudgetBoundsTheDecodedArrays) {
  std::mt19937_64 random(5);
  for (int round = 0; round < 10; ++round) {
    const test::RandomBatch random_batch = test::random_batch(random, 1 + round * 7);
    const std::string text = test::json_body(random_batch);
    // Independently: 8 bytes an id and an offset, 4 a weight; each array is 16 values or more.
    int64_t values = 0;
    int64_t arrays = 0;
    for (size_t f = 0; f < 4; ++f) {
      values += static_cast<int64_t>(8 * random_batch.ids[f].size() +
                                     8 * random_batch.row_splits[f].size() +
                                     4 * random_batch.weights[f].size());
      arrays += 16 * (8 + 8 + (random_batch.weights[f].empty() ? 0 : 4));
    }
    const LookupRequest request = batch(text);
    EXPECT_GE(request.bytes(), values);
    EXPECT_LE(request.bytes(), 2 * values + arrays);
    EXPECT_EQ(batch(text, {.max_request_memory = request.bytes()}).bytes(), request.bytes());
    EXPECT_THAT(error_of<RequestTooLarge>(
                    [&] { batch(text, {.max_request_memory = request.bytes() - 1}); }),
                HasSubstr("more than --max-request-memory " + std::to_string(request.bytes() - 1) +
                          " bytes"));
  }
  // A bag of a million ids under a budget of 1000 bytes.
  std::string ids = "1";
  for (int i = 0; i < 1000000; ++i) ids += ", 1";
  const std::string huge =
      R"({"inputs": {"a": [[)" + ids + R"(]], "b": [1], "s": [1], "user": [1]}})";
  EXPECT_THAT(error_of<RequestTooLarge>([&] { batch(huge, {.max_request_memory = 1000}); }),
              HasSubstr("send fewer ids a request (or raise --max-request-memory)"));
  EXPECT_EQ(batch(huge).features[0].ids.size(), 1000001u);
}

// Printed values read back as the same floats, nested as the shape says.
TEST(JsonIds, ValuesRoundTrip) {
  std::mt19937_64 random(7);
  std::vector<float> values(24);
  for (float& value : values) {
    const auto bits = static_cast<uint32_t>(random());
    std::memcpy(&value, &bits, sizeof value);
    if (!std::isfinite(value)) value = 1.0f / 3.0f;
  }
  const std::vector<int64_t> shape = {2, 3, 4};
  std::string text;
  append_values(values, shape, text);
  const nlohmann::json parsed = nlohmann::json::parse(text);
  ASSERT_EQ(parsed.size(), 2u);
  ASSERT_EQ(parsed[1].size(), 3u);
  ASSERT_EQ(parsed[1][2].size(), 4u);
  for (size_t i = 0; i < values.size(); ++i) {
    const float got = parsed[i / 12][(i / 4) % 3][i % 4].get<float>();
    EXPECT_EQ(std::memcmp(&got, &values[i], sizeof got), 0) << i;
  }
}

// Each value as printf's "%.9g" writes it (docs/serving.md: 9 significant digits), ", " between.
TEST(JsonIds, ValuesPrintedAsPrintfWith9Digits) {
  std::mt19937_64 random(11);
  std::vector<float> values = {0.0f,
                               -0.0f,
                               1.0f,
                               -2.5f,
                               1e-7f,
                               123456789.0f,
                               1e20f,
                               3e-42f,
                               std::numeric_limits<float>::max(),
                               std::numeric_limits<float>::denorm_min()};
  while (values.size() < 1000) {
    const auto bits = static_cast<uint32_t>(random());
    float value = 0;
    std::memcpy(&value, &bits, sizeof value);
    if (std::isfinite(value)) values.push_back(value);
  }
  std::string expected = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    char number[32];
    std::snprintf(number, sizeof number, "%.9g", static_cast<double>(values[i]));
    expected += (i == 0 ? "" : ", ") + std::string(number);
  }
  expected += "]";
  std::string text;
  append_values(values, std::vector<int64_t>{static_cast<int64_t>(values.size())}, text);
  EXPECT_EQ(text, expected);
}

// The bound of a JSON answer's text is never below the text append_values writes, for random
// shapes and the longest floats, and within 2 bytes a value of it for such floats.
TEST(JsonIds, ValuesTextBoundBoundsTheText) {
  std::mt19937_64 random(3);
  for (int round = 0; round < 200; ++round) {
    std::vector<int64_t> shape(1 + random() % 4);
    int64_t count = 1;
    for (int64_t& extent : shape) {
      extent = 1 + static_cast<int64_t>(random() % 3);
      count *= extent;
    }
    // The longest text of a float: negative, 9 digits, a two-digit negative exponent.
    const std::vector<float> values(static_cast<size_t>(count), -1.17549435e-38f);
    std::string text;
    append_values(values, shape, text);
    const int64_t bound = values_text_bound(shape);
    EXPECT_GE(bound, static_cast<int64_t>(text.size())) << round;
    EXPECT_LE(bound, static_cast<int64_t>(text.size()) + 4 + 2 * count + 4 * count) << round;
  }
  EXPECT_EQ(values_text_bound(std::vector<int64_t>{int64_t{1} << 40, int64_t{1} << 40}),
            std::numeric_limits<int64_t>::max());
}

}  // namespace
}  // namespace recemb::serve
