#include "serve/request_codec.h"

#include <bit>
#include <cstring>
#include <limits>

#include "recemb/string_key.h"

#include "support/json.h"
#include "support/number_text.h"

namespace recemb::serve {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the binary bodies are read and written in the machine's byte order");

// The binary layouts' header: magic, version, feature count, a reserved word, the fingerprint.
constexpr size_t kBinaryHeaderBytes = 4 * sizeof(uint32_t) + sizeof(uint64_t);

void check_examples(int64_t examples, int64_t max_examples, const std::string& feature) {
  if (examples < 1)
    throw InvalidArgument("feature '" + support::excerpt(feature) + "': no examples");
  if (examples > max_examples) {
    throw InvalidArgument("feature '" + support::excerpt(feature) +
                          "': " + std::to_string(examples) +
                          " examples, more than --max-examples " + std::to_string(max_examples));
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
    return "feature " + std::to_string(feature_) + " ('" +
           support::excerpt(features_[feature_].name) + "')";
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

int64_t saturating_add(int64_t a, int64_t b) {
  int64_t sum = 0;
  return __builtin_add_overflow(a, b, &sum) ? std::numeric_limits<int64_t>::max() : sum;
}

// The number of values of an activation of shape `shape` (saturating at INT64_MAX).
int64_t elements(const std::vector<int64_t>& shape) {
  int64_t count = 1;
  for (int64_t extent : shape) {
    if (__builtin_mul_overflow(count, extent, &count)) return std::numeric_limits<int64_t>::max();
  }
  return count;
}

// ServingModel::activation_shape of each input (InvalidArgument for one the model refuses).
std::vector<std::vector<int64_t>> activation_shapes(const ServingModel& model,
                                                    const std::vector<FeatureInput>& inputs) {
  std::vector<std::vector<int64_t>> shapes(inputs.size());
  for (size_t f = 0; f < inputs.size(); ++f) shapes[f] = model.activation_shape(f, inputs[f]);
  return shapes;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    text += (i == 0 ? "" : ", ") + std::to_string(shape[i]);
  }
  return text + "]";
}

enum class AnswerEncoding { kJson, kBinary };

// The bytes of an answer of activations of `shapes`: the binary layout's, or a JSON answer's
// activations plus its text's bound (both are held at once). Throws RequestTooLarge, naming the
// largest activation, when they and the request's decoded arrays exceed the budget.
int64_t check_answer_memory(const ServingModel& model, const LookupRequest& request,
                            const std::vector<std::vector<int64_t>>& shapes,
                            AnswerEncoding encoding, const RequestLimits& limits) {
  int64_t answer = static_cast<int64_t>(kBinaryHeaderBytes);
  size_t largest = 0;
  for (size_t f = 0; f < shapes.size(); ++f) {
    const int64_t values = elements(shapes[f]);
    const int64_t floats = values > std::numeric_limits<int64_t>::max() / 4
                               ? std::numeric_limits<int64_t>::max()
                               : values * static_cast<int64_t>(sizeof(float));
    int64_t bytes = saturating_add(floats, static_cast<int64_t>((1 + shapes[f].size()) * 8));
    if (encoding == AnswerEncoding::kJson) {
      bytes = saturating_add(saturating_add(floats, values_text_bound(shapes[f])),
                             static_cast<int64_t>(model.features()[f].name.size() * 6 + 4));
    }
    answer = saturating_add(answer, bytes);
    if (values > elements(shapes[largest])) largest = f;
  }
  if (saturating_add(answer, request.bytes()) > limits.max_request_memory) {
    throw RequestTooLarge(
        "the answer would take " + std::to_string(answer) + " bytes (" +
        (encoding == AnswerEncoding::kJson ? "as JSON, with the floats it prints; "
                                             "binary answers take 4 bytes a float"
                                           : "4 bytes a float") +
        "; the largest, feature '" + support::excerpt(model.features()[largest].name) +
        "', has shape " + shape_text(shapes[largest]) + "), which with the request's " +
        std::to_string(request.bytes()) + " is more than --max-request-memory " +
        std::to_string(limits.max_request_memory) +
        " bytes: ask for fewer examples a request (or raise --max-request-memory)");
  }
  return answer;
}

// Decodes {"instances": ["line", ...], "labels": "yes" | "no"} as its events come: lines beyond
// max_examples are counted, not kept.
class InstancesDecoder final : public support::JsonEvents {
 public:
  explicit InstancesDecoder(int64_t max_examples) : max_examples_(max_examples) {}

  PredictRequest finish() {
    if (count_ > max_examples_) {
      throw InvalidArgument(std::to_string(count_) + " instances, more than --max-examples " +
                            std::to_string(max_examples_));
    }
    return {.lines = std::move(lines_), .labels = labels_};
  }

  bool scalar(const support::JsonScalar& value) override {
    if (expect_ == Expect::kLabels) {
      if (value.kind != support::JsonScalar::Kind::kString ||
          (value.text != "yes" && value.text != "no")) {
        throw InvalidArgument(
            "\"labels\" must be \"yes\" (every line starts with its label) or "
            "\"no\" (no line has one), got " +
            value.describe());
      }
      labels_ = value.text == "yes" ? dlrm::CriteoLabel::kPresent : dlrm::CriteoLabel::kAbsent;
      expect_ = Expect::kField;
      return true;
    }
    if (expect_ != Expect::kLine || value.kind != support::JsonScalar::Kind::kString) {
      misplaced(value.describe());
    }
    if (count_++ < max_examples_) lines_.emplace_back(value.text);
    return true;
  }
  bool start_object(size_t) override {
    if (expect_ != Expect::kBody) misplaced("{...}");
    expect_ = Expect::kField;
    return true;
  }
  bool key(string_t& key) override {
    if (key == "labels") {
      if (labels_given_) throw InvalidArgument("field 'labels' appears twice");
      labels_given_ = true;
      expect_ = Expect::kLabels;
      return true;
    }
    if (key != "instances") {
      throw InvalidArgument("unknown field '" + support::excerpt(key) +
                            "' (expected \"instances\" and, optionally, \"labels\")");
    }
    if (given_) throw InvalidArgument("field 'instances' appears twice");
    given_ = true;
    expect_ = Expect::kList;
    return true;
  }
  bool end_object() override {
    if (!given_) throw InvalidArgument("no \"instances\" (a list of Criteo lines, strings)");
    return true;
  }
  bool start_array(size_t) override {
    if (expect_ != Expect::kList) misplaced("[...]");
    expect_ = Expect::kLine;
    return true;
  }
  bool end_array() override {
    if (count_ == 0) throw InvalidArgument("\"instances\" is empty");
    expect_ = Expect::kField;
    return true;
  }

 private:
  enum class Expect { kBody, kField, kList, kLine, kLabels };

  [[noreturn]] void misplaced(const std::string& what) const {
    if (expect_ == Expect::kLine) {
      throw InvalidArgument("instance " + std::to_string(count_) +
                            ": not a string (a Criteo line), got " + what);
    }
    if (expect_ == Expect::kList) {
      throw InvalidArgument("\"instances\" must be a list of Criteo lines (strings), got " + what);
    }
    if (expect_ == Expect::kLabels) {
      throw InvalidArgument("\"labels\" must be \"yes\" or \"no\", got " + what);
    }
    throw InvalidArgument(
        "the body must be a JSON object {\"instances\": a list of Criteo lines (strings)}, got " +
        what);
  }

  const int64_t max_examples_;
  std::vector<std::string> lines_;
  int64_t count_ = 0;
  bool given_ = false;
  bool labels_given_ = false;
  dlrm::CriteoLabel labels_ = dlrm::CriteoLabel::kFromFieldCount;
  Expect expect_ = Expect::kBody;
};

}  // namespace

uint64_t feature_fingerprint(const ServingModel& model) {
  std::string layout;
  for (const FeatureConfig& feature : model.features()) {
    const uint64_t length = feature.name.size();
    layout.append(reinterpret_cast<const char*>(&length), sizeof length);
    layout += feature.name;
    layout += model.is_dynamic(feature.table) ? '\1' : '\0';
  }
  return static_cast<uint64_t>(string_key(layout));
}

std::string fingerprint_text(uint64_t fingerprint) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string text(16, '0');
  for (int digit = 15; digit >= 0; --digit, fingerprint >>= 4) {
    text[static_cast<size_t>(digit)] = kHex[fingerprint & 15];
  }
  return text;
}

LookupRequest decode_json_lookup(std::string_view body, const ServingModel& model,
                                 const RequestLimits& limits) {
  return decode_json_lookup_ids(body, model, JsonLookupLayout::kBatch, limits);
}

LookupRequest decode_binary_lookup(std::string_view body, const ServingModel& model,
                                   uint64_t model_fingerprint, const RequestLimits& limits) {
  const auto& features = model.features();
  BinaryReader reader(body, features);
  const auto magic = reader.value<uint32_t>("the magic number");
  if (magic != kBinaryRequestMagic) {
    throw InvalidArgument("binary body: not a lookup request (its first 4 bytes are not \"REBQ\")");
  }
  const auto version = reader.value<uint32_t>("the version");
  if (version != kBinaryVersion) {
    throw InvalidArgument(
        "binary body: version " + std::to_string(version) + ", this server reads version " +
        std::to_string(kBinaryVersion) +
        (version == 1 ? " (version 1 carried no feature fingerprint: a request could be read in "
                        "another feature order than it was written in; version 2 adds the "
                        "model's \"feature_fingerprint\" of GET /v1/models/NAME after the header, "
                        "docs/serving.md)"
                      : ""));
  }
  const auto feature_count = reader.value<uint32_t>("the number of features");
  if (reader.value<uint32_t>("the reserved header word") != 0) {
    throw InvalidArgument("binary body: the reserved header word (bytes 12-15) must be 0");
  }
  const auto fingerprint = reader.value<uint64_t>("the feature fingerprint");
  if (const uint64_t expected = model_fingerprint; fingerprint != expected) {
    throw FeatureOrderConflict(
        "binary body: encoded for the feature fingerprint " + fingerprint_text(fingerprint) +
        ", but the model's features are now " + std::to_string(features.size()) +
        " with fingerprint " + fingerprint_text(expected) +
        " (a version with other features, or another order of them, is served): read the "
        "model's description again (GET /v1/models/NAME) and encode the request in its order");
  }
  if (feature_count != features.size()) {
    throw InvalidArgument("binary body: " + std::to_string(feature_count) +
                          " features, the model has " + std::to_string(features.size()) +
                          " (all of them, in the model's order: GET /v1/models/NAME)");
  }
  LookupRequest request;
  request.feature_fingerprint = fingerprint;
  request.features.resize(features.size());
  for (size_t f = 0; f < features.size(); ++f) {
    const std::string& name = features[f].name;
    reader.start_feature(f);
    const auto examples = reader.value<int64_t>("examples");
    const auto total_ids = reader.value<int64_t>("total ids");
    const auto has_weights = reader.value<uint32_t>("has weights");
    const auto reserved = reader.value<uint32_t>("reserved word");
    check_examples(examples, limits.max_examples, name);
    if (f == 0) request.examples = examples;
    if (examples != request.examples) {
      throw InvalidArgument(
          "feature '" + support::excerpt(name) + "' has " + std::to_string(examples) +
          " examples but feature '" + support::excerpt(features[0].name) + "' has " +
          std::to_string(request.examples) + " (every feature needs one per example)");
    }
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
  // The arrays are copies of the body's bytes, so no larger than it: counted once they exist.
  if (request.bytes() > limits.max_request_memory) {
    throw RequestTooLarge("the request's ids, weights and offsets take " +
                          std::to_string(request.bytes()) + " bytes, more than " +
                          "--max-request-memory " + std::to_string(limits.max_request_memory) +
                          ": send fewer ids a request (or raise --max-request-memory)");
  }
  return request;
}

std::string look_up_json(const ServingModel& model, const LookupRequest& request,
                         const RequestLimits& limits) {
  const std::vector<FeatureInput> inputs = request.inputs();
  const std::vector<std::vector<int64_t>> shapes = activation_shapes(model, inputs);
  const int64_t bytes = check_answer_memory(model, request, shapes, AnswerEncoding::kJson, limits);
  std::vector<std::vector<float>> values(inputs.size());
  std::vector<std::span<float>> spans(inputs.size());
  for (size_t f = 0; f < inputs.size(); ++f) {
    values[f].resize(static_cast<size_t>(elements(shapes[f])));
    spans[f] = values[f];
  }
  model.lookup(inputs, spans);
  const auto& features = model.features();
  support::JsonWriter json;
  json.reserve(static_cast<size_t>(bytes));  // the bound: never grown
  json.begin_object().key("outputs").begin_object();
  for (size_t f = 0; f < features.size(); ++f) {
    append_values(values[f], shapes[f], json.key(features[f].name).raw_value());
  }
  return json.end_object().end_object().take();
}

std::string look_up_binary(const ServingModel& model, const LookupRequest& request,
                           const RequestLimits& limits) {
  const std::vector<FeatureInput> inputs = request.inputs();
  const std::vector<std::vector<int64_t>> shapes = activation_shapes(model, inputs);
  std::string out(static_cast<size_t>(
                      check_answer_memory(model, request, shapes, AnswerEncoding::kBinary, limits)),
                  '\0');
  size_t offset = 0;
  const auto append = [&out, &offset](const void* data, size_t size) {
    std::memcpy(out.data() + offset, data, size);
    offset += size;
  };
  const uint32_t header[4] = {kBinaryAnswerMagic, kBinaryVersion,
                              static_cast<uint32_t>(shapes.size()), 0};
  append(header, sizeof header);
  append(&request.feature_fingerprint, sizeof request.feature_fingerprint);
  // Each feature's values are looked up into the answer: every field before them is a multiple
  // of 4 bytes long and the string's bytes are allocated aligned for any type, so they are
  // aligned floats.
  std::vector<std::span<float>> spans;
  spans.reserve(shapes.size());
  for (const std::vector<int64_t>& shape : shapes) {
    const uint32_t rank[2] = {static_cast<uint32_t>(shape.size()), 0};
    append(rank, sizeof rank);
    append(shape.data(), shape.size() * sizeof(int64_t));
    const auto count = static_cast<size_t>(elements(shape));
    spans.emplace_back(reinterpret_cast<float*>(out.data() + offset), count);
    offset += count * sizeof(float);
  }
  model.lookup(inputs, spans);
  return out;
}

PredictRequest decode_json_instances(std::string_view body, int64_t max_examples) {
  InstancesDecoder decoder(max_examples);
  decoder.parse(body);
  return decoder.finish();
}

std::string encode_json_predictions(std::span<const float> probabilities) {
  support::JsonWriter json;
  json.begin_object().key("predictions").begin_array();
  for (const float probability : probabilities) json.number(probability);
  return json.end_array().end_object().take();
}

}  // namespace recemb::serve
