// The recemb command's JSON: nlohmann's library, included here only. (The library's own JSON
// wrapper, src/format/json.h, is private to the library; the command uses the public API only.)
#include "tools/recemb/lookup_command.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "recemb/error.h"
#include "recemb/serving.h"

namespace recemb::tools {
namespace {

// One example's ids and weights of every feature, and the views the lookup takes.
struct ExampleInputs {
  std::vector<std::vector<int64_t>> ids;
  std::vector<std::vector<float>> weights;
  std::vector<std::array<int64_t, 2>> row_splits;
  std::vector<FeatureInput> inputs;
};

void parse_feature(const nlohmann::json& value, const std::string& name, std::vector<int64_t>& ids,
                   std::vector<float>& weights) {
  const auto id_list = [&](const nlohmann::json& list) {
    if (list.is_number_integer()) {
      ids.push_back(list.get<int64_t>());
      return;
    }
    if (!list.is_array()) throw InvalidArgument("feature '" + name + "': ids must be integers");
    for (const nlohmann::json& id : list) {
      if (!id.is_number_integer()) {
        throw InvalidArgument("feature '" + name + "': id " + id.dump() + " is not an integer");
      }
      ids.push_back(id.get<int64_t>());
    }
  };
  if (!value.is_object()) {
    id_list(value);
    return;
  }
  for (const auto& [key, field] : value.items()) {
    if (key != "ids" && key != "weights") {
      throw InvalidArgument("feature '" + name + "': unknown field '" + key +
                            "' (expected ids, weights)");
    }
  }
  if (!value.contains("ids")) throw InvalidArgument("feature '" + name + "': no \"ids\"");
  id_list(value["ids"]);
  if (value.contains("weights")) {
    for (const nlohmann::json& weight : value["weights"]) {
      if (!weight.is_number()) {
        throw InvalidArgument("feature '" + name + "': weight " + weight.dump() +
                              " is not a number");
      }
      weights.push_back(weight.get<float>());
    }
  }
}

void parse_example(const std::string& line, const ServingModel& model, ExampleInputs& example) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(line);
  } catch (const nlohmann::json::parse_error& error) {
    throw InvalidArgument(std::string("not JSON: ") + error.what());
  }
  if (!json.is_object()) throw InvalidArgument("expected an object of features");
  const auto& features = model.features();
  for (const auto& [key, value] : json.items()) {
    bool known = false;
    for (const FeatureConfig& feature : features) known = known || feature.name == key;
    if (!known) throw InvalidArgument("unknown feature '" + key + "'");
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
    parse_feature(json[name], name, example.ids[f], example.weights[f]);
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

}  // namespace

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
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      parse_example(line, model, example);
      for (size_t f = 0; f < features.size(); ++f) {
        shapes[f] = model.activation_shape(f, example.inputs[f]);
        size_t size = 1;
        for (int64_t extent : shapes[f]) size *= static_cast<size_t>(extent);
        activations[f].resize(size);
        activation_spans[f] = activations[f];
      }
      model.lookup(example.inputs, activation_spans);
    } catch (const InvalidArgument& error) {
      err << "recemb lookup: line " << line_number << ": " << error.what() << "\n";
      status = 1;
      continue;
    }
    out << '{';
    for (size_t f = 0; f < features.size(); ++f) {
      out << (f == 0 ? "" : ", ") << nlohmann::json(features[f].name).dump() << ": ";
      // The leading dimension is the batch of one example.
      print_values(activations[f], std::span<const int64_t>(shapes[f]).subspan(1), out);
    }
    out << "}\n" << std::flush;
  }
  return status;
}

}  // namespace recemb::tools
