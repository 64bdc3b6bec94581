// The recemb command's JSON, through serve/json_ids.h (the rules it shares with `recemb serve`).
// The library's own JSON wrapper, src/format/json.h, is private to the library; the command uses
// the public API only.
#include "tools/recemb/lookup_command.h"

#include <limits>
#include <span>
#include <string>
#include <vector>

#include "recemb/error.h"
#include "recemb/serving.h"

#include "dlrm/model_file.h"
#include "serve/json_ids.h"
#include "support/json.h"

namespace recemb::tools {
namespace {

// The answer to a request: its features' activations, in the model's feature order.
void print_answer(const std::vector<FeatureConfig>& features,
                  const std::vector<std::vector<float>>& activations,
                  const std::vector<std::vector<int64_t>>& shapes, std::ostream& out) {
  support::JsonWriter answer;
  answer.begin_object();
  for (size_t f = 0; f < features.size(); ++f) {
    // The leading dimension is the batch of one example.
    serve::append_values(activations[f], std::span<const int64_t>(shapes[f]).subspan(1),
                         answer.key(features[f].name).raw_value());
  }
  out << answer.end_object().text() << "\n";
}

}  // namespace

void write_error_answer(int64_t line_number, const std::string& message, std::ostream& out) {
  support::JsonWriter answer;
  answer.begin_object().key("error").begin_object().key("line").integer(line_number);
  answer.key("code").string("InvalidArgument").key("message").string(message);
  out << answer.end_object().end_object().text() << "\n";
}

int run_lookup_command(const LookupArguments& args, std::istream& in, std::ostream& out,
                       std::ostream& err) {
  const ServingModel model =
      ServingModel::open(dlrm::model_file_path(args.model), {.verify = args.verify});
  const auto& features = model.features();
  // One example a line, and no budget but the machine's.
  const serve::RequestLimits limits{.max_examples = 1,
                                    .max_request_memory = std::numeric_limits<int64_t>::max()};
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
      const serve::LookupRequest example =
          serve::decode_json_lookup_ids(line, model, serve::JsonLookupLayout::kExample, limits);
      const std::vector<FeatureInput> inputs = example.inputs();
      for (size_t f = 0; f < features.size(); ++f) {
        shapes[f] = model.activation_shape(f, inputs[f]);
        size_t size = 1;
        for (int64_t extent : shapes[f]) size *= static_cast<size_t>(extent);
        activations[f].resize(size);
        activation_spans[f] = activations[f];
      }
      model.lookup(inputs, activation_spans);
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
