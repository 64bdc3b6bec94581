// The recemb command's JSON: nlohmann's library, included here only. (The library's own JSON
// wrapper, src/format/json.h, is private to the library; the command uses the public API only.)
#include "tools/recemb/lookup_command.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <vector>

#include "recemb/error.h"
#include "recemb/serving.h"
#include "recemb/string_key.h"

namespace recemb::tools {
namespace {

// A request line nests at most 3 levels: {"a": {"ids": [1, 2]}}. Deeper lines are refused while
// they are parsed, before anything walks them recursively.
constexpr int kMaxRequestDepth = 3;
// How much of a request's text (a key, a string, a parser message) an error message quotes.
constexpr size_t kMaxQuotedLength = 40;
constexpr size_t kMaxParserMessageLength = 160;

std::string truncated(std::string_view text, size_t max_length = kMaxQuotedLength) {
  if (text.size() <= max_length) return std::string(text);
  return std::string(text.substr(0, max_length)) + "...";
}

// A short form of a request value for messages; never the whole of a long or nested value.
std::string describe(const nlohmann::json& value) {
  if (value.is_array()) return "[...]";
  if (value.is_object()) return "{...}";
  if (value.is_string()) return "\"" + truncated(value.get_ref<const std::string&>()) + "\"";
  return value.dump();  // a number, true, false or null: short
}

// One example's ids and weights of every feature, and the views the lookup takes.
struct ExampleInputs {
  std::vector<std::vector<int64_t>> ids;
  std::vector<std::vector<float>> weights;
  std::vector<std::array<int64_t, 2>> row_splits;
  std::vector<FeatureInput> inputs;
};

// Parses one request line. Throws InvalidArgument for text that is not JSON (including numbers
// beyond double's range, such as 1e400), nests deeper than kMaxRequestDepth, or repeats a key (a
// feature, or a field of a feature's object, named in the message).
nlohmann::json parse_request(const std::string& line) {
  using Event = nlohmann::json::parse_event_t;
  std::vector<std::set<std::string>> keys_of_open_objects;
  std::string feature;  // the last key of the request object
  // nlohmann's parser calls this at each event, with the number of enclosing arrays and objects
  // (for a key: 1 in the request object, 2 in a feature's object).
  const auto check = [&](int depth, Event event, nlohmann::json& parsed) {
    if ((event == Event::array_start || event == Event::object_start) &&
        depth >= kMaxRequestDepth) {
      throw InvalidArgument("arrays and objects nest deeper than " +
                            std::to_string(kMaxRequestDepth) + " levels");
    }
    if (event == Event::object_start) keys_of_open_objects.emplace_back();
    if (event == Event::object_end) keys_of_open_objects.pop_back();
    if (event == Event::key) {
      const auto& key = parsed.get_ref<const std::string&>();
      const bool repeated = !keys_of_open_objects.back().insert(key).second;
      if (depth == 1) {
        feature = key;
        if (repeated) throw InvalidArgument("feature '" + truncated(key) + "' appears twice");
      } else if (repeated) {
        // Outside a request object (a line that is an array) there is no feature to name.
        throw InvalidArgument((feature.empty() ? "" : "feature '" + truncated(feature) + "': ") +
                              "field '" + truncated(key) + "' appears twice");
      }
    }
    return true;
  };
  try {
    return nlohmann::json::parse(line, check);
  } catch (const nlohmann::json::exception& error) {
    throw InvalidArgument("not JSON: " + truncated(error.what(), kMaxParserMessageLength));
  }
}

// An id of feature `name`: an integer, or for a feature of a dynamic table a string, whose key is
// string_key's of its UTF-8 bytes (docs/serving.md, "recemb lookup").
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

void parse_feature(const nlohmann::json& value, const std::string& name, bool dynamic,
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

void parse_example(const std::string& line, const ServingModel& model, ExampleInputs& example) {
  const nlohmann::json json = parse_request(line);
  if (!json.is_object()) {
    throw InvalidArgument("expected an object of features, got " + describe(json));
  }
  const auto& features = model.features();
  for (const auto& [key, value] : json.items()) {
    bool known = false;
    for (const FeatureConfig& feature : features) known = known || feature.name == key;
    if (!known) throw InvalidArgument("unknown feature '" + truncated(key) + "'");
  }
  const size_t n = features.size();
  example.ids.resize(n);
  example.weights.resize(n);
  example.row_splits.resize(n);
  example.inputs.clear();
  for (size_t f = 0; f < n; ++f) {
    const std::string& name = features[f].name;
    if (!json.contains(name)) throw InvalidArgument("feature '" + name + "' is missing");
    example.ids[f].clear();
    example.weights[f].clear();
    parse_feature(json[name], name, model.is_dynamic(features[f].table), example.ids[f],
                  example.weights[f]);
    example.row_splits[f] = {0, static_cast<int64_t>(example.ids[f].size())};
    example.inputs.push_back(
        RaggedIds{.values = std::span<const int64_t>(example.ids[f]),
                  .row_splits = std::span<const int64_t>(example.row_splits[f]),
                  .weights = example.weights[f]});
  }
}

void print_values(std::span<const float> values, std::span<const int64_t> shape,
                  std::ostream& out) {
  out << '[';
  if (shape.size() <= 1) {
    for (size_t i = 0; i < values.size(); ++i) {
      char number[32];
      std::snprintf(number, sizeof number, "%.9g", static_cast<double>(values[i]));
      out << (i == 0 ? "" : ", ") << number;
    }
  } else {
    const size_t inner = values.size() / static_cast<size_t>(shape[0]);
    for (int64_t row = 0; row < shape[0]; ++row) {
      if (row > 0) out << ", ";
      print_values(values.subspan(static_cast<size_t>(row) * inner, inner), shape.subspan(1), out);
    }
  }
  out << ']';
}

// A JSON string of `text`, whose bytes may be cut UTF-8 (a truncated quote of a request).
std::string json_string(const std::string& text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The answer to a request: its features' activations, in the model's feature order.
void print_answer(const std::vector<FeatureConfig>& features,
                  const std::vector<std::vector<float>>& activations,
                  const std::vector<std::vector<int64_t>>& shapes, std::ostream& out) {
  out << '{';
  for (size_t f = 0; f < features.size(); ++f) {
    out << (f == 0 ? "" : ", ") << json_string(features[f].name) << ": ";
    // The leading dimension is the batch of one example.
    print_values(activations[f], std::span<const int64_t>(shapes[f]).subspan(1), out);
  }
  out << "}\n";
}

}  // namespace

void write_error_answer(int64_t line_number, const std::string& message, std::ostream& out) {
  out << "{\"error\": {\"line\": " << line_number
      << ", \"code\": \"InvalidArgument\", \"message\": " << json_string(message) << "}}\n";
}

int run_lookup_command(const LookupArguments& args, std::istream& in, std::ostream& out,
                       std::ostream& err) {
  const ServingModel model = ServingModel::open(args.model, {.verify = args.verify});
  const auto& features = model.features();
  ExampleInputs example;
  std::vector<std::vector<float>> activations(features.size());
  std::vector<std::span<float>> activation_spans(features.size());
  std::vector<std::vector<int64_t>> shapes(features.size());
  int status = 0;
  std::string line;
  for (int64_t line_number = 1; std::getline(in, line); ++line_number) {
    try {
      if (line.find_first_not_of(" \t\r") == std::string::npos) {
        throw InvalidArgument("an empty line (each line is one request: an object of features)");
      }
      parse_example(line, model, example);
      for (size_t f = 0; f < features.size(); ++f) {
        shapes[f] = model.activation_shape(f, example.inputs[f]);
        size_t size = 1;
        for (int64_t extent : shapes[f]) size *= static_cast<size_t>(extent);
        activations[f].resize(size);
        activation_spans[f] = activations[f];
      }
      model.lookup(example.inputs, activation_spans);
      print_answer(features, activations, shapes, out);
    } catch (const InvalidArgument& error) {
      write_error_answer(line_number, error.what(), out);
      err << "recemb lookup: line " << line_number << ": " << error.what() << "\n";
      status = 1;
    }
    out << std::flush;
  }
  return status;
}

}  // namespace recemb::tools
