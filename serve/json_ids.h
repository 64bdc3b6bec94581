// The JSON rules of feature ids shared by `recemb lookup` (one example per line) and `recemb
// serve` (a batch of examples per request): how a feature's value becomes ids and weights, how
// requests are parsed safely, and how activations are printed (docs/serving.md, "recemb lookup"
// and "recemb serve"). nlohmann's library, included by the serving tools only.
#ifndef RECEMB_SERVE_JSON_IDS_H_
#define RECEMB_SERVE_JSON_IDS_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "recemb/config.h"

namespace recemb::serve {

// The first `max_length` bytes of `text`, with "..." when it was longer: how messages quote a
// request's text.
std::string truncated(std::string_view text, size_t max_length = 40);

// A short form of a request value for messages; never the whole of a long or nested value.
std::string describe(const nlohmann::json& value);

// Parses `text` as JSON, refusing (InvalidArgument, naming what) text that is not JSON (including
// numbers beyond double's range, such as 1e400), arrays and objects nested `max_depth` levels or
// deeper (before anything walks them recursively), and a repeated key of an object. Keys of the
// objects at depth `feature_depth` (the number of enclosing arrays and objects: 1 for the keys of
// the outermost object) are feature names; a repeated key elsewhere is named with the feature it
// is under.
nlohmann::json parse_request_json(std::string_view text, int max_depth, int feature_depth);

// Throws InvalidArgument naming the first key of the object `features_by_name` that is not the
// name of one of `features`.
void check_known_features(const nlohmann::json& features_by_name,
                          const std::vector<FeatureConfig>& features);

// Appends one example's ids and weights of feature `name` from its JSON value: one id, a list of
// ids (a bag) or {"ids": ..., "weights": [...]}. An id is an integer, or for a feature of a
// dynamic table (`dynamic`) also a string, whose key is recemb::string_key of its UTF-8 bytes.
// Throws InvalidArgument naming the feature and the value for anything else (an id beyond int64,
// a weight that is not a number or beyond float, an unknown field). Weights are appended as given:
// the caller checks that they match the ids.
void parse_feature_ids(const nlohmann::json& value, const std::string& name, bool dynamic,
                       std::vector<int64_t>& ids, std::vector<float>& weights);

// Appends `values` as nested JSON arrays of `shape` (row-major; an empty shape or one extent: a
// flat list), each float with 9 significant digits, which reads back as the same float32.
void append_values(std::span<const float> values, std::span<const int64_t> shape, std::string& out);

// A JSON string of `text`, whose bytes may be cut UTF-8 (a truncated quote of a request): bad
// bytes show as U+FFFD.
std::string json_string(std::string_view text);

}  // namespace recemb::serve

#endif  // RECEMB_SERVE_JSON_IDS_H_
