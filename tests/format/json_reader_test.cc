// The JSON reader (format/json_reader.h): the bounded parse, the path in every error, the
// exception chosen by the document, and messages that quote a few dozen characters at most.
#include "format/json_reader.h"

#include <cmath>
#include <cstdint>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "recemb/error.h"

#include "format/checksum.h"
#include "testing/error_of.h"

namespace recemb::format {
namespace {

using test::error_of;
using ::testing::HasSubstr;
using ::testing::SizeIs;
using ::testing::StartsWith;

const JsonDocument kRequest{.name = "request", .source = JsonSource::kInput};
const JsonDocument kFile{.name = "manifest.json", .source = JsonSource::kFile};

// `depth` arrays, one inside the other.
std::string nested_arrays(size_t depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

TEST(JsonReaderTest, ParseErrorsAreTheDocumentsException) {
  EXPECT_THAT(error_of<InvalidArgument>([] { parse_json("{\"a\": ", kRequest); }),
              StartsWith("request: not valid JSON: "));
  EXPECT_THAT(error_of<DataLoss>([] { parse_json("{\"a\": ", kFile); }),
              StartsWith("manifest.json: not valid JSON: "));
  // A number beyond double's range is nlohmann's out_of_range, not a parse_error: caught as well.
  EXPECT_THAT(error_of<InvalidArgument>([] { parse_json(R"({"a": [1e400]})", kRequest); }),
              AllOf(StartsWith("request: not valid JSON: "), HasSubstr("1e400")));
  EXPECT_EQ(parse_json(R"({"a": [1e300]})", kRequest)["a"][0].get<double>(), 1e300);
}

TEST(JsonReaderTest, NestingIsBoundedAtParse) {
  EXPECT_EQ(parse_json(nested_arrays(kMaxJsonDepth), kRequest).dump(),
            nested_arrays(kMaxJsonDepth));
  const std::string too_deep =
      "request: arrays and objects nest deeper than " + std::to_string(kMaxJsonDepth) + " levels";
  EXPECT_EQ(
      error_of<InvalidArgument>([] { parse_json(nested_arrays(kMaxJsonDepth + 1), kRequest); }),
      too_deep);
  // Far deeper than any stack would survive in a recursive walk (or nlohmann's dump).
  EXPECT_EQ(error_of<InvalidArgument>([] { parse_json(nested_arrays(100000), kRequest); }),
            too_deep);
  std::string objects;
  for (int i = 0; i < 100000; ++i) objects += "{\"a\": ";
  objects += "1" + std::string(100000, '}');
  EXPECT_EQ(error_of<InvalidArgument>([&] { parse_json(objects, kRequest); }), too_deep);
  // Inside a valid document, after other values.
  EXPECT_THAT(error_of<DataLoss>([] {
                parse_json("{\"tables\": [1, 2], \"x\": " + nested_arrays(50) + "}", kFile);
              }),
              HasSubstr("nest deeper than"));
}

// A key repeated in an object is refused at parse, naming its path (arrays and objects at any
// depth, in documents of either source); the same key in different objects is fine.
TEST(JsonReaderTest, RepeatedKeysAreRefusedNamingTheirPath) {
  EXPECT_EQ(error_of<DataLoss>([] { parse_json(R"({"dim": 4, "seed": 1, "dim": 5})", kFile); }),
            "manifest.json: dim: the key appears twice in its object (once at most)");
  EXPECT_EQ(error_of<InvalidArgument>([] { parse_json(R"({"a": 1, "a": 1})", kRequest); }),
            "request: a: the key appears twice in its object (once at most)");
  EXPECT_EQ(error_of<DataLoss>([] {
              parse_json(R"({"seed": [1, {"x": 2}], "tables": [{"config": {"dim": 4}},)"
                         R"( [3, [4]], {"config": {"name": "t", "dim": 4, "dim": 4}}]})",
                         kFile);
            }),
            "manifest.json: tables[2].config.dim: the key appears twice in its object (once at "
            "most)");
  EXPECT_EQ(error_of<DataLoss>([] { parse_json(R"([[], {}, {"k": {}, "k": 1}])", kFile); }),
            "manifest.json: [2].k: the key appears twice in its object (once at most)");
  const std::string long_key(1000, 'k');
  EXPECT_THAT(error_of<DataLoss>(
                  [&] { parse_json("{\"" + long_key + "\": 1, \"" + long_key + "\": 2}", kFile); }),
              StartsWith("manifest.json: " + std::string(kMaxQuotedLength, 'k') + "...: "));
  // The same keys in sibling and nested objects, and the same value twice, are not repeats.
  const Json json =
      parse_json(R"({"a": {"a": {"a": 1}}, "b": [{"a": 1}, {"a": 1}], "c": {"a": 1}})", kFile);
  EXPECT_EQ(json["b"][1]["a"], 1);
}

TEST(JsonReaderTest, MessagesQuoteAFewDozenCharacters) {
  const std::string long_text(100000, 'x');
  // A parser message whose token is the whole (invalid) document.
  const std::string parse_error =
      error_of<InvalidArgument>([&] { parse_json("\"" + long_text + "\x01\"", kRequest); });
  EXPECT_THAT(parse_error, StartsWith("request: not valid JSON: "));
  EXPECT_LT(parse_error.size(), 250u);
  // A long string, a long array, a deep value and a long key.
  const Json json = {{"s", long_text},
                     {"a", std::vector<int>(100000, 7)},
                     {"d", Json::parse(nested_arrays(kMaxJsonDepth))},
                     {long_text, 1}};
  const JsonReader root(json, kRequest);
  for (const char* key : {"s", "a", "d"}) {
    const std::string error = error_of<InvalidArgument>([&] { root.member(key).boolean(); });
    EXPECT_THAT(error,
                StartsWith("request: " + std::string(key) + ": expected true or false, got "))
        << error;
    EXPECT_LT(error.size(), 100u) << error;
  }
  const std::string unknown = error_of<InvalidArgument>([&] { root.expect_only({"s", "a", "d"}); });
  EXPECT_THAT(unknown, StartsWith("request: " + std::string(kMaxQuotedLength, 'x') + "...: "));
  EXPECT_LT(unknown.size(), 150u);

  EXPECT_EQ(describe(Json::parse(R"({"a": [1, 2.5, true, null], "b": "c"})")),
            R"({"a":[1,2.5,true,null],"b":"c"})");
  EXPECT_EQ(describe(Json(long_text)), "\"" + std::string(kMaxQuotedLength - 1, 'x') + "...");
  EXPECT_THAT(describe(Json(std::vector<int>(100000, 7))), SizeIs(kMaxQuotedLength + 3));
  EXPECT_EQ(truncated("abc"), "abc");
  EXPECT_EQ(truncated(long_text, 5), "xxxxx...");
}

TEST(JsonReaderTest, ErrorsNameTheDocumentAndThePath) {
  const Json json = Json::parse(
      R"({"tables": [{"dim": 4}, {"dim": "4", "shape": [1, -2]}], "seed": -1, "on": 1})");
  const JsonReader root(json, kFile);
  const JsonReader second = root.member("tables").element(1);
  EXPECT_EQ(second.path(), "tables[1]");
  EXPECT_EQ(error_of<DataLoss>([&] { second.member("dim").integer(); }),
            "manifest.json: tables[1].dim: expected a 64-bit integer, got \"4\"");
  EXPECT_EQ(error_of<DataLoss>([&] { second.member("shape").element(1).integer(0); }),
            "manifest.json: tables[1].shape[1]: expected an integer >= 0, got -2");
  EXPECT_EQ(error_of<DataLoss>([&] { second.member("name"); }),
            "manifest.json: tables[1].name: required but missing");
  EXPECT_EQ(error_of<DataLoss>([&] { second.expect_only({"dim"}); }),
            "manifest.json: tables[1].shape: not a known field (known: dim)");
  EXPECT_EQ(error_of<DataLoss>([&] { root.member("seed").unsigned_integer(); }),
            "manifest.json: seed: expected an integer >= 0, got -1");
  EXPECT_EQ(error_of<DataLoss>([&] { root.member("on").boolean(); }),
            "manifest.json: on: expected true or false, got 1");
  EXPECT_EQ(error_of<DataLoss>([&] { root.member("tables").string(); }),
            "manifest.json: tables: expected a string, got "
            "[{\"dim\":4},{\"dim\":\"4\",\"shape\":[1,-2]}]");
  EXPECT_EQ(error_of<DataLoss>([&] { root.element(0); }),
            "manifest.json: expected an array, got "
            "{\"tables\":[{\"dim\":4},{\"dim\":\"4\",\"shape\":...");
  EXPECT_EQ(error_of<DataLoss>([&] { root.member("seed").member("x"); }),
            "manifest.json: seed: expected an object, got -1");
  EXPECT_EQ(root.member("seed").number(), -1.0);
  EXPECT_EQ(error_of<DataLoss>([&] { root.member("on").member("x"); }),
            "manifest.json: on: expected an object, got 1");
  EXPECT_EQ(error_of<DataLoss>([&] { root.member("tables").element(0).number(); }),
            "manifest.json: tables[0]: expected a number, got {\"dim\":4}");
  EXPECT_FALSE(root.find("missing").has_value());
  EXPECT_EQ(root.find("seed")->path(), "seed");

  const Json edited = Json::parse(R"({"x": true})");
  EXPECT_EQ(error_of<DataLoss>([&] { second.at_same_path(edited).member("x").string(); }),
            "manifest.json: tables[1].x: expected a string, got true");

  std::vector<std::string> keys;
  root.for_each_member([&keys](const std::string& key, const JsonReader& value) {
    keys.push_back(key + "=" + value.path());
  });
  EXPECT_EQ(keys, (std::vector<std::string>{"tables=tables", "seed=seed", "on=on"}));
}

// Random integers, numbers and strings read back as written, through text.
TEST(JsonReaderTest, ScalarsReadBackThroughText) {
  std::mt19937_64 rng(31);
  for (int i = 0; i < 1000; ++i) {
    const auto integer = static_cast<int64_t>(rng());
    const uint64_t unsigned_integer = rng();
    const double number =
        std::ldexp(static_cast<double>(rng() >> 11), static_cast<int>(rng() % 200) - 100) *
        (rng() % 2 == 0 ? 1.0 : -1.0);
    const std::string text = "s" + std::to_string(rng());
    const uint64_t checksum = rng();
    const Json written = {{"i", integer}, {"u", unsigned_integer},          {"n", number},
                          {"s", text},    {"c", checksum_to_hex(checksum)}, {"b", i % 2 == 0}};
    const Json json = parse_json(written.dump(), kRequest);
    const JsonReader root(json, kRequest);
    ASSERT_EQ(root.member("i").integer(), integer);
    ASSERT_EQ(root.member("u").unsigned_integer(), unsigned_integer);
    ASSERT_EQ(root.member("n").number(), number);
    ASSERT_EQ(root.member("s").string(), text);
    ASSERT_EQ(checksum_from_json(root.member("c")), checksum);
    ASSERT_EQ(root.member("b").boolean(), i % 2 == 0);
    root.member("s").expect_string(text);
    // An integer beyond int64 is refused rather than wrapped.
    if (unsigned_integer > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      EXPECT_THAT(
          error_of<InvalidArgument>([&] { root.member("u").integer(); }),
          HasSubstr("u: expected a 64-bit integer, got " + std::to_string(unsigned_integer)));
    }
  }
  const Json json = Json::parse(R"({"c": "0123456789ABCDEF", "s": "a"})");
  EXPECT_EQ(error_of<InvalidArgument>(
                [&] { checksum_from_json(JsonReader(json, kRequest).member("c")); }),
            "request: c: expected 16 lowercase hex digits, got \"0123456789ABCDEF\"");
  EXPECT_EQ(
      error_of<InvalidArgument>([&] { JsonReader(json, kRequest).member("s").expect_string("b"); }),
      "request: s: expected \"b\", got \"a\"");
}

}  // namespace
}  // namespace recemb::format
