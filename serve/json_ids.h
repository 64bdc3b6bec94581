// The JSON rules of feature ids shared by `recemb lookup` (one example per line) and `recemb
// serve` (a batch of examples per request): how a request's features become ids and weights,
// decoded as the text streams past (no JSON tree is built, so a request takes the memory of its
// ids, and no more), and how activations are printed (docs/serving.md, "recemb lookup" and
// "recemb serve"). nlohmann's library, included by the serving tools only.
#ifndef RECEMB_SERVE_JSON_IDS_H_
#define RECEMB_SERVE_JSON_IDS_H_

#include <cstdint>
#include <nlohmann/json.hpp>
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

// A scalar value of a request, as the parser gives it.
struct JsonScalar {
  enum class Kind { kNull, kBoolean, kInteger, kUnsigned, kFloat, kString };
  Kind kind = Kind::kNull;
  bool boolean = false;         // kBoolean
  int64_t integer = 0;          // kInteger (a negative integer)
  uint64_t unsigned_value = 0;  // kUnsigned (a non-negative integer)
  double number = 0;            // kFloat
  std::string_view text = {};   // kFloat: as written; kString: the string (valid in the event)

  bool is_number() const;
  double as_double() const;  // a number's value
  // As written in the request, for messages: a string quoted, cut and escaped by excerpt.
  std::string describe() const;
};

// A SAX handler of nlohmann's parser for the decoders of request bodies: every scalar comes to
// scalar(); text that is not JSON (including numbers beyond double's range, such as 1e400) throws
// InvalidArgument("not JSON: ..."), and so does a binary value (which JSON text never has).
class JsonEvents : public nlohmann::json_sax<nlohmann::json> {
 public:
  // Feeds the events of `text` to this handler, which throws to refuse them.
  void parse(std::string_view text);

  virtual bool scalar(const JsonScalar& value) = 0;

  bool null() final;
  bool boolean(bool value) final;
  bool number_integer(number_integer_t value) final;
  bool number_unsigned(number_unsigned_t value) final;
  bool number_float(number_float_t value, const string_t& text) final;
  bool string(string_t& value) final;
  bool binary(binary_t& value) final;
  bool parse_error(size_t position, const std::string& last_token,
                   const nlohmann::detail::exception& error) final;
};

// `text` as messages quote a request's text and names: its first `max_length` bytes, then "..."
// when it was longer, each byte below 0x20 and 0x7f written \xNN (a NUL would end the message,
// which is a C string, and other control bytes would garble a terminal).
std::string excerpt(std::string_view text, size_t max_length = 40);

// Appends `values` as nested JSON arrays of `shape` (row-major; an empty shape or one extent: a
// flat list), each float with 9 significant digits, which reads back as the same float32.
void append_values(std::span<const float> values, std::span<const int64_t> shape, std::string& out);

// The most bytes append_values writes for values of `shape` (each float's text, its separator, and
// the brackets and separators of every list): an answer's size is known before it is written.
// Saturates at INT64_MAX.
int64_t values_text_bound(std::span<const int64_t> shape);

// A JSON string of `text`, whose bytes may be cut UTF-8 (a truncated quote of a request): bad
// bytes show as U+FFFD.
std::string json_string(std::string_view text);

}  // namespace recemb::serve

#endif  // RECEMB_SERVE_JSON_IDS_H_
