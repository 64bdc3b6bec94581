#include "support/json.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <type_traits>

#include "recemb/error.h"

#include "support/number_text.h"

namespace recemb::support {
namespace {

// How much of nlohmann's message a parse error quotes: enough for its position and reason; its
// "last read" token may be as long as the document.
constexpr size_t kMaxParserMessageLength = 160;

// Appends a short form of `value` to `text`, stopping once `text` is longer than `budget`. The
// recursion is at most `budget` deep: each level appends a bracket first.
void append_preview(const Json& value, std::string& text, size_t budget) {
  if (text.size() > budget) return;
  const auto quote = [&](std::string_view string) {
    // Cut first, so that a long string is never copied whole; the cut may split a UTF-8
    // sequence, which dump's replace handler shows as U+FFFD.
    const size_t room = text.size() <= budget ? budget - text.size() + 1 : 0;
    text += Json(std::string(string.substr(0, room)))
                .dump(-1, ' ', false, Json::error_handler_t::replace);
  };
  if (value.is_array()) {
    text += '[';
    for (size_t i = 0; i < value.size() && text.size() <= budget; ++i) {
      if (i > 0) text += ',';
      append_preview(value[i], text, budget);
    }
    text += ']';
  } else if (value.is_object()) {
    text += '{';
    for (auto item = value.begin(); item != value.end() && text.size() <= budget; ++item) {
      if (item != value.begin()) text += ',';
      quote(item.key());
      text += ':';
      append_preview(item.value(), text, budget);
    }
    text += '}';
  } else if (value.is_string()) {
    quote(value.get_ref<const std::string&>());
  } else {
    text += value.dump();  // a number, true, false or null: short
  }
}

// The path of member `key` of the value at `path` ("tables[2].config" + "dim").
std::string member_path(const std::string& path, std::string_view key) {
  return path.empty() ? excerpt(key) : path + "." + excerpt(key);
}

// An array or object being parsed: its path, and what parse_json checks inside it.
struct OpenValue {
  bool is_array = false;
  std::string path;
  size_t elements = 0;           // of an array, so far
  std::string key;               // of an object: the last key read
  std::set<std::string> keys{};  // of an object: every key read
};

}  // namespace

void fail(const JsonDocument& document, const std::string& problem) {
  const std::string message = document.name.empty() ? problem : document.name + ": " + problem;
  if (document.source == JsonSource::kFile) throw DataLoss(message);
  throw InvalidArgument(message);
}

Json parse_json(std::string_view text, const JsonDocument& document) {
  using Event = Json::parse_event_t;
  std::vector<OpenValue> open;  // the arrays and objects enclosing the parser, outermost first
  // The path of the value the parser is at, inside open.back().
  const auto child_path = [&open] {
    if (open.empty()) return std::string();
    const OpenValue& parent = open.back();
    return parent.is_array ? parent.path + "[" + std::to_string(parent.elements) + "]"
                           : member_path(parent.path, parent.key);
  };
  // A value ends: the next element of an array has the next index.
  const auto value_ends = [&open] {
    if (!open.empty() && open.back().is_array) ++open.back().elements;
  };
  // nlohmann's parser calls this at each event; `depth` is the number of enclosing arrays and
  // objects of one that starts.
  const auto check = [&](int depth, Event event, Json& parsed) {
    switch (event) {
      case Event::array_start:
      case Event::object_start:
        if (depth >= kMaxJsonDepth) {
          fail(document,
               "arrays and objects nest deeper than " + std::to_string(kMaxJsonDepth) + " levels");
        }
        open.push_back({.is_array = event == Event::array_start, .path = child_path()});
        break;
      case Event::key: {
        // A repeated key is refused: which of its values would count is anyone's guess.
        OpenValue& object = open.back();
        object.key = parsed.get<std::string>();
        if (!object.keys.insert(object.key).second) {
          fail(document, child_path() + ": the key appears twice in its object (once at most)");
        }
        break;
      }
      case Event::array_end:
      case Event::object_end:
        open.pop_back();
        value_ends();
        break;
      case Event::value:
        value_ends();
        break;
    }
    return true;
  };
  try {
    return Json::parse(text, check);
  } catch (const JsonError& error) {
    fail(document, "not valid JSON: " + excerpt(error.what(), kMaxParserMessageLength));
  }
}

std::string describe(const Json& value) {
  std::string text;
  append_preview(value, text, kMaxQuotedLength);
  return excerpt(text);
}

std::string excerpt(std::string_view text, size_t max_length) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string result;
  result.reserve(std::min(text.size(), max_length) + 3);
  for (const char c : text.substr(0, max_length)) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      result += {'\\', 'x', kHex[byte >> 4], kHex[byte & 15]};
    } else {
      result += c;
    }
  }
  if (text.size() > max_length) result += "...";
  return result;
}

void JsonReader::fail(const std::string& problem) const {
  support::fail(*document_, path_.empty() ? problem : path_ + ": " + problem);
}

std::string JsonReader::member_path(std::string_view key) const {
  return support::member_path(path_, key);
}

void JsonReader::expect_object() const {
  if (!value_->is_object()) fail("expected an object, got " + describe(*value_));
}

void JsonReader::expect_array() const {
  if (!value_->is_array()) fail("expected an array, got " + describe(*value_));
}

JsonReader JsonReader::member(std::string_view key) const {
  std::optional<JsonReader> found = find(key);
  if (!found) child(*value_, member_path(key)).fail("required but missing");
  return *std::move(found);
}

std::optional<JsonReader> JsonReader::find(std::string_view key) const {
  expect_object();
  const auto found = value_->find(key);
  if (found == value_->end()) return std::nullopt;
  return child(*found, member_path(key));
}

void JsonReader::expect_only(const std::vector<std::string_view>& known) const {
  for_each_member([&known](const std::string& key, const JsonReader& value) {
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      std::string names;
      for (std::string_view name : known) names += (names.empty() ? "" : ", ") + std::string(name);
      value.fail("not a known field (known: " + names + ")");
    }
  });
}

size_t JsonReader::size() const {
  expect_array();
  return value_->size();
}

JsonReader JsonReader::element(size_t index) const {
  expect_array();
  return child((*value_)[index], path_ + "[" + std::to_string(index) + "]");
}

std::string JsonReader::string() const {
  if (!value_->is_string()) fail("expected a string, got " + describe(*value_));
  return value_->get<std::string>();
}

void JsonReader::expect_string(std::string_view expected) const {
  if (string() != expected) {
    fail("expected \"" + std::string(expected) + "\", got " + describe(*value_));
  }
}

bool JsonReader::boolean() const {
  if (!value_->is_boolean()) fail("expected true or false, got " + describe(*value_));
  return value_->get<bool>();
}

int64_t JsonReader::integer(int64_t minimum) const {
  const Json& value = *value_;
  const bool fits =
      value.is_number_integer() &&
      !(value.is_number_unsigned() &&
        value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) &&
      value.get<int64_t>() >= minimum;
  if (!fits) {
    fail((minimum == std::numeric_limits<int64_t>::min()
              ? std::string("expected a 64-bit integer")
              : "expected an integer >= " + std::to_string(minimum)) +
         ", got " + describe(value));
  }
  return value.get<int64_t>();
}

uint64_t JsonReader::unsigned_integer() const {
  if (!value_->is_number_unsigned()) fail("expected an integer >= 0, got " + describe(*value_));
  return value_->get<uint64_t>();
}

double JsonReader::number() const {
  if (!value_->is_number()) fail("expected a number, got " + describe(*value_));
  return value_->get<double>();
}


bool JsonScalar::is_number() const {
  return kind == Kind::kInteger || kind == Kind::kUnsigned || kind == Kind::kFloat;
}

double JsonScalar::as_double() const {
  if (kind == Kind::kInteger) return static_cast<double>(integer);
  if (kind == Kind::kUnsigned) return static_cast<double>(unsigned_value);
  return number;
}

std::string JsonScalar::describe() const {
  switch (kind) {
    case Kind::kNull:
      return "null";
    case Kind::kBoolean:
      return boolean ? "true" : "false";
    case Kind::kInteger:
      return std::to_string(integer);
    case Kind::kUnsigned:
      return std::to_string(unsigned_value);
    case Kind::kFloat:
      return excerpt(text);
    case Kind::kString:
      return "\"" + excerpt(text) + "\"";
  }
  return "";
}

void JsonEvents::parse(std::string_view text) {
  nlohmann::json::sax_parse(text.begin(), text.end(), this);
}

bool JsonEvents::null() { return scalar({}); }

bool JsonEvents::boolean(bool value) {
  return scalar({.kind = JsonScalar::Kind::kBoolean, .boolean = value});
}

bool JsonEvents::number_integer(number_integer_t value) {
  return scalar({.kind = JsonScalar::Kind::kInteger, .integer = value});
}

bool JsonEvents::number_unsigned(number_unsigned_t value) {
  return scalar({.kind = JsonScalar::Kind::kUnsigned, .unsigned_value = value});
}

bool JsonEvents::number_float(number_float_t value, const string_t& text) {
  return scalar({.kind = JsonScalar::Kind::kFloat, .number = value, .text = text});
}

bool JsonEvents::string(string_t& value) {
  return scalar({.kind = JsonScalar::Kind::kString, .text = value});
}

bool JsonEvents::binary(binary_t&) {
  throw InvalidArgument("not valid JSON: a binary value");  // only binary formats have them
}

bool JsonEvents::parse_error(size_t, const std::string&, const nlohmann::detail::exception& error) {
  throw InvalidArgument("not valid JSON: " + excerpt(error.what(), kMaxParserMessageLength));
}

std::string json_string(std::string_view text) {
  return Json(std::string(text)).dump(-1, ' ', false, Json::error_handler_t::replace);
}

namespace {

// The JSON text of a float or double: null for NaN and infinities, "-0.0" for -0 (which "-0", an
// integer to JSON readers, would lose), else the shortest text that reads back.
template <class Number>
std::string number_text(Number value) {
  if (!std::isfinite(value)) return "null";
  if (value == 0 && std::signbit(value)) return "-0.0";
  if constexpr (std::is_same_v<Number, float>) {
    return float_text(value);
  } else {
    return double_text(value);
  }
}

}  // namespace

void JsonWriter::new_line() {
  text_ += '\n';
  text_.append(2 * empty_.size(), ' ');
}

void JsonWriter::begin_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (empty_.empty()) return;  // the document's value
  if (!empty_.back()) text_ += layout_ == Layout::kLine ? ", " : ",";
  empty_.back() = false;
  if (layout_ == Layout::kIndented) new_line();
}

void JsonWriter::begin(char bracket) {
  begin_value();
  text_ += bracket;
  empty_.push_back(true);
}

void JsonWriter::end(char bracket) {
  const bool was_empty = empty_.back();
  empty_.pop_back();
  if (layout_ == Layout::kIndented && !was_empty) new_line();
  text_ += bracket;
}

JsonWriter& JsonWriter::begin_object() {
  begin('{');
  return *this;
}

JsonWriter& JsonWriter::end_object() {
  end('}');
  return *this;
}

JsonWriter& JsonWriter::begin_array() {
  begin('[');
  return *this;
}

JsonWriter& JsonWriter::end_array() {
  end(']');
  return *this;
}

JsonWriter& JsonWriter::key(std::string_view name) {
  begin_value();
  text_ += json_string(name);
  text_ += ": ";
  after_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::string(std::string_view value) {
  begin_value();
  text_ += json_string(value);
  return *this;
}

JsonWriter& JsonWriter::integer(int64_t value) {
  begin_value();
  text_ += std::to_string(value);
  return *this;
}

JsonWriter& JsonWriter::unsigned_integer(uint64_t value) {
  begin_value();
  text_ += std::to_string(value);
  return *this;
}

JsonWriter& JsonWriter::number(double value) {
  begin_value();
  text_ += number_text(value);
  return *this;
}

JsonWriter& JsonWriter::number(float value) {
  begin_value();
  text_ += number_text(value);
  return *this;
}

JsonWriter& JsonWriter::boolean(bool value) {
  begin_value();
  text_ += value ? "true" : "false";
  return *this;
}

JsonWriter& JsonWriter::null() {
  begin_value();
  text_ += "null";
  return *this;
}

std::string& JsonWriter::raw_value() {
  begin_value();
  return text_;
}

}  // namespace recemb::support
