#include "serve/request_codec.h"

#include <bit>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "recemb/error.h"

#include "serve/json_ids.h"
#include "train/float_text.h"

namespace recemb::serve {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the binary bodies are read and written in the machine's byte order");

// {"inputs": {"f": [{"ids": [1]}]}} nests 5 levels; the keys of "inputs" are features.
constexpr int kMaxLookupDepth = 5;
constexpr int kLookupFeatureDepth = 2;
// {"instances": ["line"]} nests 2 levels.
constexpr int kMaxPredictDepth = 2;

// The only field of the object `json`, `field`, which must be of the JSON type `expected`.
const nlohmann::json& only_field(const nlohmann::json& json, const std::string& field,
                                 nlohmann::json::value_t expected, const std::string& what) {
  if (!json.is_object()) {
    throw InvalidArgument("the body must be a JSON object {\"" + field + "\": " + what + "}, got " +
                          describe(json));
  }
  for (const auto& [key, value] : json.items()) {
    if (key != field) {
      throw InvalidArgument("unknown field '" + truncated(key) + "' (expected only \"" + field +
                            "\")");
    }
  }
  if (!json.contains(field)) throw InvalidArgument("no \"" + field + "\" (" + what + ")");
  const nlohmann::json& value = json[field];
  if (value.type() != expected) {
    throw InvalidArgument("\"" + field + "\" must be " + what + ", got " + describe(value));
  }
  return value;
}

void check_examples(int64_t examples, int64_t max_examples, const std::string& feature) {
  if (examples < 1) throw InvalidArgument("feature '" + feature + "': no examples");
  if (examples > max_examples) {
    throw InvalidArgument("feature '" + feature + "': " + std::to_string(examples) +
                          " examples, more than --max-examples " + std::to_string(max_examples));
  }
}

void check_same_examples(int64_t examples, int64_t first_examples, const std::string& feature,
                         const std::string& first_feature) {
  if (examples != first_examples) {
    throw InvalidArgument("feature '" + feature + "' has " + std::to_string(examples) +
                          " examples but feature '" + first_feature + "' has " +
                          std::to_string(first_examples) +
                          " (every feature needs one per example)");
  }
}

// Reads the binary request layout, checking each length against the bytes left before reading.
// What is read is named (for the error only, so built only then) by a field and the feature being
// read, if any.
class BinaryReader {
 public:
  BinaryReader(std::string_view body, const std::vector<FeatureConfig>& features)
      : body_(body), features_(features) {}

  // Names the fields read from now on as fields of feature `feature`.
  void start_feature(size_t feature) { feature_ = feature; }

  // "feature 3 ('C4')", the feature being read.
  std::string feature_context() const {
    return "feature " + std::to_string(feature_) + " ('" + features_[feature_].name + "')";
  }

  template <typename T>
  T value(const char* field) {
    T result;
    std::memcpy(&result, take(sizeof(T), 1, field), sizeof(T));
    return result;
  }

  template <typename T>
  void array(int64_t count, std::vector<T>& out, const char* field) {
    const char* data = take(sizeof(T), count, field);
    out.resize(static_cast<size_t>(count));
    if (count > 0) std::memcpy(out.data(), data, out.size() * sizeof(T));
  }

  size_t offset() const { return offset_; }
  size_t left() const { return body_.size() - offset_; }

 private:
  const char* take(size_t size, int64_t count, const char* field) {
    if (count < 0 || static_cast<uint64_t>(count) > left() / size) {
      throw InvalidArgument(
          "binary body: " + (feature_ < features_.size() ? feature_context() + " " : "") + field +
          " (" + std::to_string(count) + " x " + std::to_string(size) + " bytes at byte " +
          std::to_string(offset_) + ") runs past the end of the body (" +
          std::to_string(body_.size()) + " bytes)");
    }
    const char* data = body_.data() + offset_;
    offset_ += size * static_cast<size_t>(count);
    return data;
  }

  std::string_view body_;
  const std::vector<FeatureConfig>& features_;
  size_t feature_ = std::numeric_limits<size_t>::max();  // none yet: the header
  size_t offset_ = 0;
};

// The number of values of an activation of shape `shape`.
size_t elements(const std::vector<int64_t>& shape) {
  size_t count = 1;
  for (int64_t extent : shape) count *= static_cast<size_t>(extent);
  return count;
}

// ServingModel::activation_shape of each input (InvalidArgument for one the model refuses).
std::vector<std::vector<int64_t>> activation_shapes(const ServingModel& model,
                                                    const std::vector<FeatureInput>& inputs) {
  std::vector<std::vector<int64_t>> shapes(inputs.size());
  for (size_t f = 0; f < inputs.size(); ++f) shapes[f] = model.activation_shape(f, inputs[f]);
  return shapes;
}

}  // namespace

std::vector<FeatureInput> LookupRequest::inputs() const {
  std::vector<FeatureInput> result;
  result.reserve(features.size());
  for (const FeatureIds& feature : features) {
    result.push_back(RaggedIds{.values = std::span<const int64_t>(feature.ids),
                               .row_splits = std::span<const int64_t>(feature.row_splits),
                               .weights = feature.weights});
  }
  return result;
}

LookupRequest decode_json_lookup(std::string_view body, const ServingModel& model,
                                 int64_t max_examples) {
  const nlohmann::json json = parse_request_json(body, kMaxLookupDepth, kLookupFeatureDepth);
  const nlohmann::json& inputs = only_field(json, "inputs", nlohmann::json::value_t::object,
                                            "an object of features, each a list of examples");
  const auto& features = model.features();
  check_known_features(inputs, features);
  LookupRequest request;
  request.features.resize(features.size());
  for (size_t f = 0; f < features.size(); ++f) {
    const std::string& name = features[f].name;
    if (!inputs.contains(name)) throw InvalidArgument("feature '" + name + "' is missing");
    const nlohmann::json& examples = inputs[name];
    if (!examples.is_array()) {
      throw InvalidArgument("feature '" + name + "' must be a list of examples, got " +
                            describe(examples));
    }
    const auto count = static_cast<int64_t>(examples.size());
    check_examples(count, max_examples, name);
    if (f == 0) request.examples = count;
    check_same_examples(count, request.examples, name, features[0].name);
    const bool dynamic = model.is_dynamic(features[f].table);
    FeatureIds& ids = request.features[f];
    // Per example: whether it gave weights, and where its weights start.
    bool any_weights = false;
    std::vector<float> weights;
    for (int64_t example = 0; example < count; ++example) {
      const size_t first = ids.ids.size();
      const size_t first_weight = weights.size();
      try {
        parse_feature_ids(examples[static_cast<size_t>(example)], name, dynamic, ids.ids, weights);
      } catch (const InvalidArgument& error) {
        throw InvalidArgument("example " + std::to_string(example) + ": " + error.what());
      }
      const size_t given_ids = ids.ids.size() - first;
      const size_t given_weights = weights.size() - first_weight;
      if (given_weights > 0 || examples[static_cast<size_t>(example)].contains("weights")) {
        if (given_weights != given_ids) {
          throw InvalidArgument("example " + std::to_string(example) + ": feature '" + name +
                                "': " + std::to_string(given_ids) + " ids but " +
                                std::to_string(given_weights) + " weights");
        }
        any_weights = true;
      } else {
        weights.insert(weights.end(), given_ids, 1.0f);  // unweighted: 1 per id
      }
      ids.row_splits.push_back(static_cast<int64_t>(ids.ids.size()));
    }
    if (any_weights) ids.weights = std::move(weights);
  }
  return request;
}

LookupRequest decode_binary_lookup(std::string_view body, const ServingModel& model,
                                   int64_t max_examples) {
  const auto& features = model.features();
  BinaryReader reader(body, features);
  const auto magic = reader.value<uint32_t>("the magic number");
  if (magic != kBinaryRequestMagic) {
    throw InvalidArgument("binary body: not a lookup request (its first 4 bytes are not \"REBQ\")");
  }
  const auto version = reader.value<uint32_t>("the version");
  if (version != kBinaryVersion) {
    throw InvalidArgument("binary body: version " + std::to_string(version) +
                          ", this server reads version " + std::to_string(kBinaryVersion));
  }
  const auto feature_count = reader.value<uint32_t>("the number of features");
  if (feature_count != features.size()) {
    throw InvalidArgument("binary body: " + std::to_string(feature_count) +
                          " features, the model has " + std::to_string(features.size()) +
                          " (all of them, in the model's order: GET /v1/models/NAME)");
  }
  if (reader.value<uint32_t>("the reserved header word") != 0) {
    throw InvalidArgument("binary body: the reserved header word (bytes 12-15) must be 0");
  }
  LookupRequest request;
  request.features.resize(features.size());
  for (size_t f = 0; f < features.size(); ++f) {
    const std::string& name = features[f].name;
    reader.start_feature(f);
    const auto examples = reader.value<int64_t>("examples");
    const auto total_ids = reader.value<int64_t>("total ids");
    const auto has_weights = reader.value<uint32_t>("has weights");
    const auto reserved = reader.value<uint32_t>("reserved word");
    check_examples(examples, max_examples, name);
    if (f == 0) request.examples = examples;
    check_same_examples(examples, request.examples, name, features[0].name);
    if (has_weights > 1 || reserved != 0) {
      throw InvalidArgument("binary body: " + reader.feature_context() +
                            ": has-weights must be 0 or 1 and the reserved word 0");
    }
    FeatureIds& ids = request.features[f];
    reader.array(examples + 1, ids.row_splits, "offsets");
    if (ids.row_splits.front() != 0 || ids.row_splits.back() != total_ids) {
      throw InvalidArgument("binary body: " + reader.feature_context() +
                            ": offsets must start at 0 and end at the total ids " +
                            std::to_string(total_ids) + ", got " +
                            std::to_string(ids.row_splits.front()) + " and " +
                            std::to_string(ids.row_splits.back()));
    }
    for (int64_t example = 0; example < examples; ++example) {
      if (ids.row_splits[static_cast<size_t>(example + 1)] <
          ids.row_splits[static_cast<size_t>(example)]) {
        throw InvalidArgument("binary body: " + reader.feature_context() +
                              ": offsets decrease at example " + std::to_string(example));
      }
    }
    reader.array(total_ids, ids.ids, "ids");
    if (has_weights == 1) reader.array(total_ids, ids.weights, "weights");
  }
  if (reader.left() != 0) {
    throw InvalidArgument("binary body: " + std::to_string(reader.left()) +
                          " bytes after the last feature (at byte " +
                          std::to_string(reader.offset()) + ")");
  }
  return request;
}

Activations look_up(const ServingModel& model, const LookupRequest& request) {
  const std::vector<FeatureInput> inputs = request.inputs();
  Activations activations;
  activations.shapes = activation_shapes(model, inputs);
  activations.values.resize(inputs.size());
  std::vector<std::span<float>> spans(inputs.size());
  for (size_t f = 0; f < inputs.size(); ++f) {
    activations.values[f].resize(elements(activations.shapes[f]));
    spans[f] = activations.values[f];
  }
  model.lookup(inputs, spans);
  return activations;
}

std::string encode_json_activations(const ServingModel& model, const Activations& activations) {
  const auto& features = model.features();
  std::string out = "{\"outputs\": {";
  for (size_t f = 0; f < features.size(); ++f) {
    out += (f == 0 ? "" : ", ") + json_string(features[f].name) + ": ";
    append_values(activations.values[f], activations.shapes[f], out);
  }
  out += "}}";
  return out;
}

std::string look_up_binary(const ServingModel& model, const LookupRequest& request) {
  const std::vector<FeatureInput> inputs = request.inputs();
  const std::vector<std::vector<int64_t>> shapes = activation_shapes(model, inputs);
  size_t bytes = 4 * sizeof(uint32_t);
  for (const std::vector<int64_t>& shape : shapes) {
    bytes +=
        2 * sizeof(uint32_t) + shape.size() * sizeof(int64_t) + elements(shape) * sizeof(float);
  }
  std::string out(bytes, '\0');
  size_t offset = 0;
  const auto append = [&out, &offset](const void* data, size_t size) {
    std::memcpy(out.data() + offset, data, size);
    offset += size;
  };
  const uint32_t header[4] = {kBinaryAnswerMagic, kBinaryVersion,
                              static_cast<uint32_t>(shapes.size()), 0};
  append(header, sizeof header);
  // Each feature's values are looked up into the answer: every field before them is a multiple
  // of 4 bytes long and the string's bytes are allocated aligned for any type, so they are
  // aligned floats.
  std::vector<std::span<float>> spans;
  spans.reserve(shapes.size());
  for (const std::vector<int64_t>& shape : shapes) {
    const uint32_t rank[2] = {static_cast<uint32_t>(shape.size()), 0};
    append(rank, sizeof rank);
    append(shape.data(), shape.size() * sizeof(int64_t));
    spans.emplace_back(reinterpret_cast<float*>(out.data() + offset), elements(shape));
    offset += elements(shape) * sizeof(float);
  }
  model.lookup(inputs, spans);
  return out;
}

std::vector<std::string> decode_json_instances(std::string_view body, int64_t max_examples) {
  const nlohmann::json json = parse_request_json(body, kMaxPredictDepth, 1);
  const nlohmann::json& instances = only_field(json, "instances", nlohmann::json::value_t::array,
                                               "a list of Criteo lines (strings)");
  const auto count = static_cast<int64_t>(instances.size());
  if (count < 1) throw InvalidArgument("\"instances\" is empty");
  if (count > max_examples) {
    throw InvalidArgument(std::to_string(count) + " instances, more than --max-examples " +
                          std::to_string(max_examples));
  }
  std::vector<std::string> lines;
  lines.reserve(instances.size());
  for (size_t i = 0; i < instances.size(); ++i) {
    if (!instances[i].is_string()) {
      throw InvalidArgument("instance " + std::to_string(i) +
                            ": not a string (a Criteo line), got " + describe(instances[i]));
    }
    lines.push_back(instances[i].get<std::string>());
  }
  return lines;
}

std::string encode_json_predictions(std::span<const float> probabilities) {
  std::string out = "{\"predictions\": [";
  for (size_t i = 0; i < probabilities.size(); ++i) {
    out += (i == 0 ? "" : ", ") + train::float_text(probabilities[i]);
  }
  out += "]}";
  return out;
}

}  // namespace recemb::serve
