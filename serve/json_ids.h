// The JSON rules of feature ids shared by `recemb lookup` (one example per line) and `recemb
// serve` (a batch of examples per request): how a request's features become ids and weights,
// decoded as the text streams past (no JSON tree is built, so a request takes the memory of its
// ids, and no more), and how activations are printed (docs/serving.md, "recemb lookup" and
// "recemb serve"), on support/json.h's events.
#ifndef RECEMB_SERVE_JSON_IDS_H_
#define RECEMB_SERVE_JSON_IDS_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "recemb/batch.h"
#include "recemb/error.h"
#include "recemb/serving.h"

namespace recemb::serve {

// A request that needs more memory than its budget (RequestLimits::max_request_memory): the
// server refuses it with 413 whatever else it is doing. An InvalidArgument, so that whoever
// refuses bad requests refuses it too.
class RequestTooLarge : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

// What one request may ask for; the messages of refusals name them by their `recemb serve` flags.
struct RequestLimits {
  int64_t max_examples = 4096;  // examples per request (--max-examples)
  // Bytes of a request's decoded ids, weights and offsets and of its answer, held at once
  // (--max-request-memory): a request beyond it is refused (RequestTooLarge) before the memory is
  // taken, as far as it can be foreseen (the answer's size is known from the decoded request).
  int64_t max_request_memory = int64_t{256} << 20;
};

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
  // A binary request: the feature fingerprint it was encoded against, verified to be the model's
  // (decode_binary_lookup), which its answer carries. 0 for a JSON request.
  uint64_t feature_fingerprint = 0;

  // Views of `features` for ServingModel::lookup, valid while this request is unchanged.
  std::vector<FeatureInput> inputs() const;
  // The bytes its ids, weights and offsets hold (their arrays' capacity), as counted against
  // max_request_memory.
  int64_t bytes() const;
};

// How a JSON lookup lays out its features' examples.
enum class JsonLookupLayout {
  kExample,  // `recemb lookup`: {"feature": example, ...}, one example per text
  kBatch,    // `recemb serve`: {"inputs": {"feature": [example, ...], ...}}
};

// Decodes a JSON lookup of `model`'s features laid out as `layout`. An example of a feature is one
// id, a list of ids (a bag, combined by the table's combiner; [] an empty bag) or {"ids": id or
// list, "weights": [...]}, one weight per id; in a feature where some examples have weights, an
// example without them weighs 1 per id. An id is an integer, or for a feature of a dynamic table
// also a string, whose key is recemb::string_key of its UTF-8 bytes. A weight is a number whose
// float32 rounding is finite, and not 0 unless it is 0. Every feature of the model is given, each
// once, with the same number of examples, 1 to limits.max_examples (kBatch).
//
// Throws InvalidArgument naming the feature, the example (kBatch), the field and the value for
// anything else: text that is not JSON, an unknown or repeated feature or field, a value of the
// wrong kind, an id beyond int64. Throws RequestTooLarge as soon as the decoded arrays would take
// more than limits.max_request_memory bytes. The ids themselves (their range) are checked by the
// lookup.
LookupRequest decode_json_lookup_ids(std::string_view text, const ServingModel& model,
                                     JsonLookupLayout layout, const RequestLimits& limits);

// Appends `values` as nested JSON arrays of `shape` (row-major; an empty shape or one extent: a
// flat list), each float with 9 significant digits, which reads back as the same float32.
void append_values(std::span<const float> values, std::span<const int64_t> shape, std::string& out);

// The most bytes append_values writes for values of `shape` (each float's text, its separator, and
// the brackets and separators of every list): an answer's size is known before it is written.
// Saturates at INT64_MAX.
int64_t values_text_bound(std::span<const int64_t> shape);

}  // namespace recemb::serve

#endif  // RECEMB_SERVE_JSON_IDS_H_
