#include "serve/json_ids.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <limits>
#include <random>

#include "recemb/error.h"
#include "recemb/string_key.h"

#include "testing/error_of.h"

namespace recemb::serve {
namespace {

using recemb::test::error_of;
using ::testing::HasSubstr;

TEST(JsonIds, ParsesWithDepthAndRepeatedKeyChecks) {
  EXPECT_EQ(parse_request_json(R"({"a": [1]})", 3, 1)["a"][0], 1);
  EXPECT_THAT(error_of<InvalidArgument>([] { parse_request_json("[[[[1]]]]", 3, 1); }),
              HasSubstr("nest deeper than 3 levels"));
  EXPECT_THAT(error_of<InvalidArgument>([] { parse_request_json(R"({"a": 1, "a": 2})", 3, 1); }),
              HasSubstr("feature 'a' appears twice"));
  EXPECT_THAT(
      error_of<InvalidArgument>([] { parse_request_json(R"({"a": {"ids": 1, "ids": 2}})", 3, 1); }),
      HasSubstr("feature 'a': field 'ids' appears twice"));
  // Features one level down: a repeated key above them names no feature.
  EXPECT_THAT(error_of<InvalidArgument>(
                  [] { parse_request_json(R"({"inputs": {}, "inputs": {}})", 5, 2); }),
              HasSubstr("field 'inputs' appears twice"));
  EXPECT_THAT(error_of<InvalidArgument>(
                  [] { parse_request_json(R"({"inputs": {"f": [], "f": []}})", 5, 2); }),
              HasSubstr("feature 'f' appears twice"));
  EXPECT_THAT(error_of<InvalidArgument>([] { parse_request_json("1e400", 3, 1); }),
              HasSubstr("not JSON"));
}

TEST(JsonIds, FeatureIds) {
  std::vector<int64_t> ids;
  std::vector<float> weights;
  parse_feature_ids(nlohmann::json::parse(R"({"ids": [3, "k"], "weights": [0.5, 2]})"), "f", true,
                    ids, weights);
  parse_feature_ids(nlohmann::json::parse("-9"), "f", false, ids, weights);
  EXPECT_EQ(ids, (std::vector<int64_t>{3, string_key("k"), -9}));
  EXPECT_EQ(weights, (std::vector<float>{0.5f, 2.0f}));
  EXPECT_THAT(error_of<InvalidArgument>([&] {
                parse_feature_ids(nlohmann::json::parse(R"(["k"])"), "f", false, ids, weights);
              }),
              HasSubstr("feature 'f': id \"k\" is not an integer"));
  EXPECT_THAT(error_of<InvalidArgument>([&] {
                parse_feature_ids(nlohmann::json::parse(R"({"ids": [1], "weights": [1e39]})"), "f",
                                  false, ids, weights);
              }),
              HasSubstr("outside the float range"));
  EXPECT_THAT(error_of<InvalidArgument>([&] {
                parse_feature_ids(nlohmann::json::parse(R"({"id": [1]})"), "f", false, ids,
                                  weights);
              }),
              HasSubstr("unknown field 'id'"));
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
  EXPECT_EQ(json_string("a\"\xff"), "\"a\\\"\xef\xbf\xbd\"");
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

}  // namespace
}  // namespace recemb::serve
