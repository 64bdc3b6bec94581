// support/json.h: the bounded parse, the path in every error, the exception chosen by the
// document, messages that quote a few dozen characters at most; the streamed events; the writer,
// checked against nlohmann's own serializer on random documents.
#include "support/json.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "recemb/error.h"

#include "testing/error_of.h"

namespace recemb::support {
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
  EXPECT_EQ(excerpt("abc"), "abc");
  EXPECT_EQ(excerpt(long_text, 5), "xxxxx...");
  // Control bytes are escaped (a NUL would end the message, a C string); UTF-8 is kept.
  EXPECT_EQ(excerpt(std::string("a\0b\x1b\x7f", 5)), "a\\x00b\\x1b\\x7f");
  EXPECT_EQ(excerpt(std::string(50, 'k')), std::string(40, 'k') + "...");
  EXPECT_EQ(excerpt("\xc3\xa9t\xc3\xa9"), "\xc3\xa9t\xc3\xa9");
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
    const Json written = {
        {"i", integer}, {"u", unsigned_integer}, {"n", number}, {"s", text}, {"b", i % 2 == 0}};
    const Json json = parse_json(written.dump(), kRequest);
    const JsonReader root(json, kRequest);
    ASSERT_EQ(root.member("i").integer(), integer);
    ASSERT_EQ(root.member("u").unsigned_integer(), unsigned_integer);
    ASSERT_EQ(root.member("n").number(), number);
    ASSERT_EQ(root.member("s").string(), text);
    ASSERT_EQ(root.member("b").boolean(), i % 2 == 0);
    root.member("s").expect_string(text);
    // An integer beyond int64 is refused rather than wrapped.
    if (unsigned_integer > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      EXPECT_THAT(
          error_of<InvalidArgument>([&] { root.member("u").integer(); }),
          HasSubstr("u: expected a 64-bit integer, got " + std::to_string(unsigned_integer)));
    }
  }
  const Json json = Json::parse(R"({"s": "a"})");
  EXPECT_EQ(
      error_of<InvalidArgument>([&] { JsonReader(json, kRequest).member("s").expect_string("b"); }),
      "request: s: expected \"b\", got \"a\"");
}

// A random document of every kind of value: strings with escapes, control bytes and UTF-8, doubles
// of any magnitude, nesting up to `depth`.
Json random_document(std::mt19937_64& rng, int depth) {
  const int kind = static_cast<int>(rng() % (depth > 0 ? 8 : 6));
  switch (kind) {
    case 0:
      return nullptr;
    case 1:
      return rng() % 2 == 0;
    case 2:
      return static_cast<int64_t>(rng());
    case 3:
      return std::ldexp(static_cast<double>(static_cast<int64_t>(rng())),
                        static_cast<int>(rng() % 200) - 100);
    case 4:
    case 5: {
      static constexpr const char* kPieces[] = {"a",  "b",    "\"", "\\",      "\n",
                                                "\t", "\x01", "/",  "\xc3\xa9"};
      std::string text;
      for (uint64_t n = rng() % 12; n > 0; --n) text += kPieces[rng() % std::size(kPieces)];
      return text;
    }
    case 6: {
      Json array = Json::array();
      for (uint64_t n = rng() % 5; n > 0; --n) array.push_back(random_document(rng, depth - 1));
      return array;
    }
    default: {
      Json object = Json::object();
      for (uint64_t n = rng() % 5; n > 0; --n) {
        object["k" + std::to_string(rng() % 8)] = random_document(rng, depth - 1);
      }
      return object;
    }
  }
}

void write(const Json& value, JsonWriter& writer) {
  if (value.is_object()) {
    writer.begin_object();
    for (auto item = value.begin(); item != value.end(); ++item) {
      writer.key(item.key());
      write(item.value(), writer);
    }
    writer.end_object();
  } else if (value.is_array()) {
    writer.begin_array();
    for (const Json& element : value) write(element, writer);
    writer.end_array();
  } else if (value.is_string()) {
    writer.string(value.get<std::string>());
  } else if (value.is_boolean()) {
    writer.boolean(value.get<bool>());
  } else if (value.is_number_unsigned()) {
    writer.unsigned_integer(value.get<uint64_t>());
  } else if (value.is_number_integer()) {
    writer.integer(value.get<int64_t>());
  } else if (value.is_number_float()) {
    writer.number(value.get<double>());
  } else {
    writer.null();
  }
}

// What the writer writes parses back as the document; indented, it is exactly nlohmann's own
// dump(2) of documents without doubles (whose text nlohmann writes in its own way: 1e+06 vs
// 1000000.0).
TEST(JsonWriterTest, WritesWhatParsesBackAndIndentsAsPythonDoes) {
  std::mt19937_64 rng(17);
  for (int i = 0; i < 2000; ++i) {
    const Json document = random_document(rng, 4);
    for (const auto layout : {JsonWriter::Layout::kLine, JsonWriter::Layout::kIndented}) {
      JsonWriter writer(layout);
      write(document, writer);
      ASSERT_EQ(Json::parse(writer.text()), document) << writer.text();
    }
    std::string floats_removed = document.dump();
    if (floats_removed.find_first_of(".e") == std::string::npos) {
      JsonWriter writer(JsonWriter::Layout::kIndented);
      write(document, writer);
      ASSERT_EQ(writer.text(), document.dump(2));
    }
  }
  JsonWriter line;
  line.begin_object().key("step").integer(10).key("loss").number(0.1).key("ranks").begin_array();
  line.integer(0).integer(1).end_array().key("empty").begin_object().end_object().end_object();
  EXPECT_EQ(line.text(), R"({"step": 10, "loss": 0.1, "ranks": [0, 1], "empty": {}})");
}

// Doubles and floats read back bit for bit; JSON has no text for NaN and infinities: null.
TEST(JsonWriterTest, DoublesReadBackAndNonFiniteOnesAreNull) {
  std::mt19937_64 rng(3);
  for (int i = 0; i < 10000; ++i) {
    uint64_t bits = rng();
    double value = 0;
    std::memcpy(&value, &bits, sizeof value);
    JsonWriter writer;
    writer.number(value);
    if (!std::isfinite(value)) {
      ASSERT_EQ(writer.text(), "null");
      continue;
    }
    const double read = Json::parse(writer.text()).get<double>();
    ASSERT_EQ(std::memcmp(&read, &value, sizeof value), 0) << writer.text();
    if (!(std::abs(value) <= std::numeric_limits<float>::max())) continue;  // no float of it
    const auto single = static_cast<float>(value);
    JsonWriter float_writer;
    float_writer.number(single);
    const float read_single = Json::parse(float_writer.text()).get<float>();
    ASSERT_EQ(std::memcmp(&read_single, &single, sizeof single), 0) << float_writer.text();
  }
  JsonWriter writer;
  writer.begin_array().number(std::nan("")).number(-INFINITY).number(1e6).number(0.1f);
  writer.number(-std::numeric_limits<float>::infinity()).raw_value() += "[1.5]";
  writer.end_array();
  EXPECT_EQ(writer.text(), "[null, null, 1e+06, 0.1, null, [1.5]]");
}

TEST(JsonWriterTest, StringsAreEscapedAndBadUtf8IsReplaced) {
  EXPECT_EQ(json_string("a\"\xff"), "\"a\\\"\xef\xbf\xbd\"");
  EXPECT_EQ(json_string(std::string("\n\0\x1f", 3)), R"("\n\u0000\u001f")");
  JsonWriter writer;
  writer.begin_object().key("a\"b").string("\xc3\xa9").end_object();
  EXPECT_EQ(writer.text(), "{\"a\\\"b\": \"\xc3\xa9\"}");
}

// Rewrites the events of a document as text with a JsonWriter: what a streaming decoder sees.
class Rewriter final : public JsonEvents {
 public:
  bool scalar(const JsonScalar& value) override {
    switch (value.kind) {
      case JsonScalar::Kind::kNull:
        writer.null();
        break;
      case JsonScalar::Kind::kBoolean:
        writer.boolean(value.boolean);
        break;
      case JsonScalar::Kind::kInteger:
        writer.integer(value.integer);
        break;
      case JsonScalar::Kind::kUnsigned:
        writer.unsigned_integer(value.unsigned_value);
        break;
      case JsonScalar::Kind::kFloat:
        writer.number(value.number);
        break;
      case JsonScalar::Kind::kString:
        writer.string(value.text);
        break;
    }
    return true;
  }
  bool start_object(size_t) override {
    writer.begin_object();
    return true;
  }
  bool key(string_t& name) override {
    writer.key(name);
    return true;
  }
  bool end_object() override {
    writer.end_object();
    return true;
  }
  bool start_array(size_t) override {
    writer.begin_array();
    return true;
  }
  bool end_array() override {
    writer.end_array();
    return true;
  }

  JsonWriter writer;
};

TEST(JsonEventsTest, EveryValueComesAsAnEvent) {
  std::mt19937_64 rng(23);
  for (int i = 0; i < 1000; ++i) {
    const Json document = random_document(rng, 4);
    Rewriter rewriter;
    rewriter.parse(document.dump());
    ASSERT_EQ(Json::parse(rewriter.writer.text()), document);
  }
  const JsonScalar number{.kind = JsonScalar::Kind::kFloat, .number = 2.5, .text = "25e-1"};
  EXPECT_TRUE(number.is_number());
  EXPECT_EQ(number.as_double(), 2.5);
  EXPECT_EQ(number.describe(), "25e-1");
  EXPECT_EQ((JsonScalar{.kind = JsonScalar::Kind::kInteger, .integer = -3}).as_double(), -3.0);
  EXPECT_EQ((JsonScalar{.kind = JsonScalar::Kind::kString, .text = "a\nb"}).describe(),
            "\"a\\x0ab\"");
  EXPECT_FALSE(JsonScalar{}.is_number());
}

TEST(JsonEventsTest, TextThatIsNotJsonIsRefused) {
  for (const char* text : {"{", "[1,]", "[1e400]", "{\"a\" 1}", ""}) {
    Rewriter rewriter;
    EXPECT_THAT(error_of<InvalidArgument>([&] { rewriter.parse(text); }),
                StartsWith("not valid JSON: "))
        << text;
  }
  // A binary value never comes from JSON text; were one to come, it is refused as well.
  Rewriter rewriter;
  nlohmann::json::binary_t binary;
  EXPECT_THAT(error_of<InvalidArgument>([&] { rewriter.binary(binary); }),
              StartsWith("not valid JSON: "));
}

}  // namespace
}  // namespace recemb::support
