#include "format/json_reader.h"

#include <algorithm>

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

}  // namespace

void fail(const JsonDocument& document, const std::string& problem) {
  const std::string message = document.name.empty() ? problem : document.name + ": " + problem;
  if (document.source == JsonSource::kFile) throw DataLoss(message);
  throw InvalidArgument(message);
}

Json parse_json(std::string_view text, const JsonDocument& document) {
  // nlohmann's parser calls this before it opens each array or object, with the number of
  // enclosing ones.
  const auto bound_depth = [&document](int depth, Json::parse_event_t event, Json&) {
    if ((event == Json::parse_event_t::array_start || event == Json::parse_event_t::object_start) &&
        depth >= kMaxJsonDepth) {
      fail(document,
           "arrays and objects nest deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    }
    return true;
  };
  try {
    return Json::parse(text, bound_depth);
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
  return path_.empty() ? truncated(key) : path_ + "." + truncated(key);
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
