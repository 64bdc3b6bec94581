// The recemb command's JSON: nlohmann's library, through serve/json_ids.h (the rules it shares
// with `recemb serve`). The library's own JSON wrapper, src/format/json.h, is private to the
// library; the command uses the public API only.
#include "tools/recemb/lookup_command.h"

#include <array>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "recemb/error.h"
#include "recemb/serving.h"

#include "serve/json_ids.h"
#include "train/model_file.h"

namespace recemb::tools {
namespace {

// A request line nests at most 3 levels: {"a": {"ids": [1, 2]}}; its keys are features.
constexpr int kMaxRequestDepth = 3;
constexpr int kFeatureDepth = 1;

// One example's ids and weights of every feature, and the views the lookup takes.
struct ExampleInputs {
  std::vector<std::vector<int64_t>> ids;
  std::vector<std::vector<float>> weights;
  std::vector<std::array<int64_t, 2>> row_splits;
  std::vector<FeatureInput> inputs;
};

void parse_example(const std::string& line, const ServingModel& model, ExampleInputs& example) {
  const nlohmann::json json = serve::parse_request_json(line, kMaxRequestDepth, kFeatureDepth);
  if (!json.is_object()) {
    throw InvalidArgument("expected an object of features, got " + serve::describe(json));
  }
  const auto& features = model.features();
  serve::check_known_features(json, features);
  std::vector<std::string> missing;
  for (const FeatureConfig& feature : features) {
    if (!json.contains(feature.name)) missing.push_back("'" + feature.name + "'");
  }
  if (!missing.empty()) {
    std::string names;
    for (const std::string& name : missing) names += (names.empty() ? "" : ", ") + name;
    throw InvalidArgument(missing.size() == 1
                              ? "feature " + names + " is missing"
                              : std::to_string(missing.size()) + " features are missing: " + names +
                                    " (every feature of the model must be given)");
  }
  const size_t n = features.size();
  example.ids.resize(n);
  example.weights.resize(n);
  example.row_splits.resize(n);
  example.inputs.clear();
  for (size_t f = 0; f < n; ++f) {
    const std::string& name = features[f].name;
    example.ids[f].clear();
    example.weights[f].clear();
    serve::parse_feature_ids(json[name], name, model.is_dynamic(features[f].table), example.ids[f],
                             example.weights[f]);
    example.row_splits[f] = {0, static_cast<int64_t>(example.ids[f].size())};
    example.inputs.push_back(
        RaggedIds{.values = std::span<const int64_t>(example.ids[f]),
                  .row_splits = std::span<const int64_t>(example.row_splits[f]),
                  .weights = example.weights[f]});
  }
}

// The answer to a request: its features' activations, in the model's feature order.
void print_answer(const std::vector<FeatureConfig>& features,
                  const std::vector<std::vector<float>>& activations,
                  const std::vector<std::vector<int64_t>>& shapes, std::ostream& out) {
  std::string answer = "{";
  for (size_t f = 0; f < features.size(); ++f) {
    answer += (f == 0 ? "" : ", ") + serve::json_string(features[f].name) + ": ";
    // The leading dimension is the batch of one example.
    serve::append_values(activations[f], std::span<const int64_t>(shapes[f]).subspan(1), answer);
  }
  out << answer << "}\n";
}

}  // namespace

void write_error_answer(int64_t line_number, const std::string& message, std::ostream& out) {
  out << "{\"error\": {\"line\": " << line_number
      << ", \"code\": \"InvalidArgument\", \"message\": " << serve::json_string(message) << "}}\n";
}

int run_lookup_command(const LookupArguments& args, std::istream& in, std::ostream& out,
                       std::ostream& err) {
  const ServingModel model =
      ServingModel::open(train::model_file_path(args.model), {.verify = args.verify});
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
