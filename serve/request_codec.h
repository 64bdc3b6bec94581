// Request and answer bodies of `recemb serve` (docs/serving.md, "recemb serve"): lookups as JSON
// or in the compact binary layout, predictions as JSON, decoded into the inputs of
// ServingModel::lookup and Predictor::predict and encoded from their results. Every decoder
// validates its whole body before anything is looked up, and throws InvalidArgument naming what
// is wrong (the feature, the example, the field, the byte offset); every request is held to its
// RequestLimits (serve/json_ids.h) before the memory is taken.
#ifndef RECEMB_SERVE_REQUEST_CODEC_H_
#define RECEMB_SERVE_REQUEST_CODEC_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "recemb/error.h"
#include "recemb/serving.h"

#include "dlrm/criteo_reader.h"
#include "serve/json_ids.h"

namespace recemb::serve {

// The binary layout's magic numbers (the bytes "REBQ" and "REBA" little-endian) and version.
// Version 1 (without the feature fingerprint) is refused: its requests were read in whatever
// feature order the model had when they arrived.
inline constexpr uint32_t kBinaryRequestMagic = 0x51424552;
inline constexpr uint32_t kBinaryAnswerMagic = 0x41424552;
inline constexpr uint32_t kBinaryVersion = 2;

// A binary request encoded against other features, or another order of them, than the served
// model's (as after a hot swap to a version whose features differ): the server refuses it with
// 409, and the client reads the model's description again and encodes the request anew.
class FeatureOrderConflict : public FailedPrecondition {
 public:
  using FailedPrecondition::FailedPrecondition;
};

// The fingerprint of what a binary request's positional layout depends on: XXH3-64
// (recemb::string_key) of the bytes of, per feature in the model's order, its name's length (u64
// little-endian), its name, and one byte, 1 when its table is dynamic (its ids are keys) and 0
// otherwise (docs/serving.md, "Lookup, binary").
uint64_t feature_fingerprint(const ServingModel& model);

// A fingerprint as GET /v1/models/NAME gives it: 16 lowercase hexadecimal digits.
std::string fingerprint_text(uint64_t fingerprint);

// {"inputs": {"feature": [example, ...], ...}}: decode_json_lookup_ids of the kBatch layout.
LookupRequest decode_json_lookup(std::string_view body, const ServingModel& model,
                                 const RequestLimits& limits);

// The binary request layout (docs/serving.md, "Lookup, binary"), with the same rules. Throws
// FeatureOrderConflict when the body's feature fingerprint is not `model_fingerprint`, the
// model's feature_fingerprint (computed once per model by the caller: it hashes every feature's
// name and looks up its table).
LookupRequest decode_binary_lookup(std::string_view body, const ServingModel& model,
                                   uint64_t model_fingerprint, const RequestLimits& limits);

// Looks `request` up in `model` (ServingModel::lookup: throws InvalidArgument for an id out of
// range, naming the feature and the example) into the JSON answer {"outputs": {"feature":
// [activation of example 0, ...], ...}}, floats printed round-trippable. Throws RequestTooLarge,
// before looking anything up, when the request and its answer (the activations and their text,
// at its bound values_text_bound) would take more than limits.max_request_memory bytes.
std::string look_up_json(const ServingModel& model, const LookupRequest& request,
                         const RequestLimits& limits);

// Looks `request` up as look_up_json does, into the binary answer layout (docs/serving.md,
// "Lookup, binary"), with request.feature_fingerprint in its header: the activations are written
// in place there, not copied; the budget counts them once.
std::string look_up_binary(const ServingModel& model, const LookupRequest& request,
                           const RequestLimits& limits);

// A :predict request: its Criteo lines, and whether they carry their label (docs/serving.md,
// "Predict").
struct PredictRequest {
  std::vector<std::string> lines;
  // "labels": "yes" kPresent, "no" kAbsent; not given: kFromFieldCount (40 fields: labelled, 39:
  // refused as ambiguous).
  dlrm::CriteoLabel labels = dlrm::CriteoLabel::kFromFieldCount;
};

// {"instances": ["<Criteo line>", ...], "labels": "yes" | "no"}: 1 to `max_examples` strings;
// "labels" optional.
PredictRequest decode_json_instances(std::string_view body, int64_t max_examples);

// {"predictions": [p, ...]}, each the shortest text that reads back as the same float.
std::string encode_json_predictions(std::span<const float> probabilities);

}  // namespace recemb::serve

#endif  // RECEMB_SERVE_REQUEST_CODEC_H_
