#include "serve/json_ids.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <set>

#include "recemb/error.h"
#include "recemb/string_key.h"

namespace recemb::serve {
namespace {

// How much of a parser's message an error message quotes.
constexpr size_t kMaxParserMessageLength = 160;

int64_t parse_id(const nlohmann::json& id, const std::string& name, bool dynamic) {
  if (dynamic && id.is_string()) return string_key(id.get_ref<const std::string&>());
  if (!id.is_number_integer()) {
    throw InvalidArgument("feature '" + name + "': id " + describe(id) + " is not an integer" +
                          (dynamic ? " or a string" : ""));
  }
  if (id.is_number_unsigned() &&
      id.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    throw InvalidArgument("feature '" + name + "': id " + id.dump() +
                          " is beyond the 64-bit integer range");
  }
  return id.get<int64_t>();
}

float parse_weight(const nlohmann::json& weight, const std::string& name) {
  if (!weight.is_number()) {
    throw InvalidArgument("feature '" + name + "': weight " + describe(weight) +
                          " is not a number");
  }
  const auto value = weight.get<double>();
  // Converting a double beyond the float range to float is undefined behaviour.
  if (std::abs(value) > static_cast<double>(std::numeric_limits<float>::max())) {
    throw InvalidArgument("feature '" + name + "': weight " + weight.dump() +
                          " is outside the float range");
  }
  return static_cast<float>(value);
}

}  // namespace

std::string truncated(std::string_view text, size_t max_length) {
  if (text.size() <= max_length) return std::string(text);
  return std::string(text.substr(0, max_length)) + "...";
}

std::string describe(const nlohmann::json& value) {
  if (value.is_array()) return "[...]";
  if (value.is_object()) return "{...}";
  if (value.is_string()) return "\"" + truncated(value.get_ref<const std::string&>()) + "\"";
  return value.dump();  // a number, true, false or null: short
}

nlohmann::json parse_request_json(std::string_view text, int max_depth, int feature_depth) {
  using Event = nlohmann::json::parse_event_t;
  std::vector<std::set<std::string>> keys_of_open_objects;
  std::string feature;  // the last key at feature_depth
  // nlohmann's parser calls this at each event, with the number of enclosing arrays and objects.
  const auto check = [&](int depth, Event event, nlohmann::json& parsed) {
    if ((event == Event::array_start || event == Event::object_start) && depth >= max_depth) {
      throw InvalidArgument("arrays and objects nest deeper than " + std::to_string(max_depth) +
                            " levels");
    }
    if (event == Event::object_start) keys_of_open_objects.emplace_back();
    if (event == Event::object_end) keys_of_open_objects.pop_back();
    if (event == Event::key) {
      const auto& key = parsed.get_ref<const std::string&>();
      const bool repeated = !keys_of_open_objects.back().insert(key).second;
      if (depth == feature_depth) {
        feature = key;
        if (repeated) throw InvalidArgument("feature '" + truncated(key) + "' appears twice");
      } else if (repeated) {
        // Outside a feature (a request that is an array) there is no feature to name.
        throw InvalidArgument((depth < feature_depth || feature.empty()
                                   ? ""
                                   : "feature '" + truncated(feature) + "': ") +
                              "field '" + truncated(key) + "' appears twice");
      }
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text, check);
  } catch (const nlohmann::json::exception& error) {
    throw InvalidArgument("not JSON: " + truncated(error.what(), kMaxParserMessageLength));
  }
}

void check_known_features(const nlohmann::json& features_by_name,
                          const std::vector<FeatureConfig>& features) {
  for (const auto& [key, value] : features_by_name.items()) {
    bool known = false;
    for (const FeatureConfig& feature : features) known = known || feature.name == key;
    if (!known) throw InvalidArgument("unknown feature '" + truncated(key) + "'");
  }
}

void parse_feature_ids(const nlohmann::json& value, const std::string& name, bool dynamic,
                       std::vector<int64_t>& ids, std::vector<float>& weights) {
  const auto id_list = [&](const nlohmann::json& list) {
    if (list.is_number() || (dynamic && list.is_string())) {
      ids.push_back(parse_id(list, name, dynamic));
      return;
    }
    if (!list.is_array()) {
      throw InvalidArgument("feature '" + name + "': ids must be " +
                            (dynamic ? "an integer or a string" : "an integer") +
                            " or an array of them, got " + describe(list));
    }
    for (const nlohmann::json& id : list) ids.push_back(parse_id(id, name, dynamic));
  };
  if (!value.is_object()) {
    id_list(value);
    return;
  }
  for (const auto& [key, field] : value.items()) {
    if (key != "ids" && key != "weights") {
      throw InvalidArgument("feature '" + name + "': unknown field '" + truncated(key) +
                            "' (expected ids, weights)");
    }
  }
  if (!value.contains("ids")) throw InvalidArgument("feature '" + name + "': no \"ids\"");
  id_list(value["ids"]);
  if (value.contains("weights")) {
    const nlohmann::json& list = value["weights"];
    if (!list.is_array()) {
      throw InvalidArgument("feature '" + name + "': weights must be an array of numbers, got " +
                            describe(list));
    }
    for (const nlohmann::json& weight : list) weights.push_back(parse_weight(weight, name));
  }
}

void append_values(std::span<const float> values, std::span<const int64_t> shape,
                   std::string& out) {
  out += '[';
  if (shape.size() <= 1) {
    for (size_t i = 0; i < values.size(); ++i) {
      // As printf's "%.9g" (the standard says so), several times faster.
      char number[32];
      const char* end = std::to_chars(number, number + sizeof number,
                                      static_cast<double>(values[i]), std::chars_format::general, 9)
                            .ptr;
      if (i > 0) out += ", ";
      out.append(number, static_cast<size_t>(end - number));
    }
  } else {
    const size_t rows = static_cast<size_t>(shape[0]);
    const size_t inner = rows == 0 ? 0 : values.size() / rows;
    for (size_t row = 0; row < rows; ++row) {
      if (row > 0) out += ", ";
      append_values(values.subspan(row * inner, inner), shape.subspan(1), out);
    }
  }
  out += ']';
}

std::string json_string(std::string_view text) {
  return nlohmann::json(std::string(text))
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace recemb::serve
