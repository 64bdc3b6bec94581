#include "format/json_reader.h"

#include <algorithm>
#include <set>

#include "recemb/error.h"

#include "format/checksum.h"

namespace recemb::format {
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
  return path.empty() ? truncated(key) : path + "." + truncated(key);
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
    fail(document, "not valid JSON: " + truncated(error.what(), kMaxParserMessageLength));
  }
}

std::string describe(const Json& value) {
  std::string text;
  append_preview(value, text, kMaxQuotedLength);
  return truncated(text);
}

std::string truncated(std::string_view text, size_t max_length) {
  if (text.size() <= max_length) return std::string(text);
  return std::string(text.substr(0, max_length)) + "...";
}

void JsonReader::fail(const std::string& problem) const {
  format::fail(*document_, path_.empty() ? problem : path_ + ": " + problem);
}

std::string JsonReader::member_path(std::string_view key) const {
  return format::member_path(path_, key);
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

uint64_t checksum_from_json(const JsonReader& json) {
  uint64_t checksum = 0;
  if (!json.json().is_string() || !parse_checksum(json.string(), checksum)) {
    json.fail("expected 16 lowercase hex digits, got " + describe(json.json()));
  }
  return checksum;
}

}  // namespace recemb::format
