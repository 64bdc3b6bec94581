// Request and answer bodies of `recemb serve` (docs/serving.md, "recemb serve"): lookups as JSON
// or in the compact binary layout, predictions as JSON, decoded into the inputs of
// ServingModel::lookup and Predictor::predict and encoded from their results. Every decoder
// validates its whole body before anything is looked up, and throws InvalidArgument naming what
// is wrong (the feature, the example, the field, the byte offset).
#ifndef RECEMB_SERVE_REQUEST_CODEC_H_
#define RECEMB_SERVE_REQUEST_CODEC_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "recemb/batch.h"
#include "recemb/serving.h"

namespace recemb::serve {

// The binary layout's magic numbers (the bytes "REBQ" and "REBA" little-endian) and version.
inline constexpr uint32_t kBinaryRequestMagic = 0x51424552;
inline constexpr uint32_t kBinaryAnswerMagic = 0x41424552;
inline constexpr uint32_t kBinaryVersion = 1;

// One feature's ids for a batch of examples, as RaggedIds views them.
struct FeatureIds {
  std::vector<int64_t> ids = {};
  std::vector<int64_t> row_splits = {0};  // examples + 1 offsets into ids
  std::vector<float> weights = {};        // empty, or one per id
};

// A lookup request: every feature of the model, in the model's feature order, for `examples`
// examples.
struct LookupRequest {
  int64_t examples = 0;
  std::vector<FeatureIds> features = {};

  // Views of `features` for ServingModel::lookup, valid while this request is unchanged.
  std::vector<FeatureInput> inputs() const;
};

// The activations of a lookup: per feature, its shape (activation_shape) and values.
struct Activations {
  std::vector<std::vector<int64_t>> shapes = {};
  std::vector<std::vector<float>> values = {};
};

// {"inputs": {"feature": [example, ...], ...}}, every feature of `model` with the same number of
// examples, 1 to `max_examples`; an example is what parse_feature_ids takes (one id, a bag, or
// ids and weights). An example without weights among examples with weights weighs 1 per id.
LookupRequest decode_json_lookup(std::string_view body, const ServingModel& model,
                                 int64_t max_examples);

// The binary request layout (docs/serving.md, "Binary bodies"), with the same rules.
LookupRequest decode_binary_lookup(std::string_view body, const ServingModel& model,
                                   int64_t max_examples);

// Looks `request` up in `model` (ServingModel::lookup: throws InvalidArgument for an id out of
// range, naming the feature and the example).
Activations look_up(const ServingModel& model, const LookupRequest& request);

// Looks `request` up as look_up does, into the binary answer layout (docs/serving.md, "Binary
// bodies"): the activations are written in place there, not copied.
std::string look_up_binary(const ServingModel& model, const LookupRequest& request);

// {"outputs": {"feature": [activation of example 0, ...], ...}}, floats printed round-trippable.
std::string encode_json_activations(const ServingModel& model, const Activations& activations);

// {"instances": ["<Criteo line>", ...]}: 1 to `max_examples` strings.
std::vector<std::string> decode_json_instances(std::string_view body, int64_t max_examples);

// {"predictions": [p, ...]}, each the shortest text that reads back as the same float.
std::string encode_json_predictions(std::span<const float> probabilities);

}  // namespace recemb::serve

#endif  // RECEMB_SERVE_REQUEST_CODEC_H_
