#include "serve/json_ids.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "recemb/string_key.h"

#include "support/json.h"

namespace recemb::serve {
namespace {

// Halfway between float's largest value and 2^128: a double rounds to a finite float iff its
// magnitude is below it (at it, the tie rounds to the even 2^128: infinity).
constexpr double kFloatOverflow = 0x1.ffffffp127;

int64_t saturating_add(int64_t a, int64_t b) {
  int64_t sum = 0;
  return __builtin_add_overflow(a, b, &sum) ? std::numeric_limits<int64_t>::max() : sum;
}

int64_t saturating_multiply(int64_t a, int64_t b) {
  int64_t product = 0;
  return __builtin_mul_overflow(a, b, &product) ? std::numeric_limits<int64_t>::max() : product;
}

// Decodes a lookup's JSON events straight into the ids, weights and offsets of each feature: a
// state machine over what may come next. Anything else throws at once, so the text's nesting is
// bounded by the layout (at most 5 levels), and the memory taken is that of the decoded arrays,
// counted against the budget as they grow.
class LookupDecoder final : public support::JsonEvents {
 public:
  LookupDecoder(const ServingModel& model, JsonLookupLayout layout, const RequestLimits& limits)
      : features_(model.features()), layout_(layout), limits_(limits) {
    for (size_t f = 0; f < features_.size(); ++f) {
      dynamic_.push_back(model.is_dynamic(features_[f].table));
      index_.emplace(features_[f].name, f);
    }
    request_.features.resize(features_.size());
    given_.assign(features_.size(), false);
    take(static_cast<int64_t>(features_.size() * sizeof(int64_t)));  // each row_splits' 0
  }

  // The request, once every event has come: every feature given, with as many examples as the
  // model's first.
  LookupRequest finish() {
    std::string missing;  // every missing feature named at once
    int64_t missing_count = 0;
    for (size_t f = 0; f < features_.size(); ++f) {
      if (given_[f]) continue;
      missing += (missing.empty() ? "'" : ", '") + support::excerpt(features_[f].name) + "'";
      ++missing_count;
    }
    if (missing_count == 1) throw InvalidArgument("feature " + missing + " is missing");
    if (missing_count > 1) {
      throw InvalidArgument(std::to_string(missing_count) + " features are missing: " + missing +
                            " (every feature of the model must be given)");
    }
    for (size_t f = 0; f < features_.size(); ++f) {
      const auto examples = static_cast<int64_t>(request_.features[f].row_splits.size()) - 1;
      if (f == 0) request_.examples = examples;
      if (examples != request_.examples) {
        throw InvalidArgument("feature '" + support::excerpt(features_[f].name) + "' has " +
                              std::to_string(examples) + " examples but feature '" +
                              support::excerpt(features_[0].name) + "' has " +
                              std::to_string(request_.examples) +
                              " (every feature needs one per example)");
      }
    }
    return std::move(request_);
  }

  bool start_object(size_t) override {
    switch (expect_) {
      case Expect::kBody:
        expect_ = layout_ == JsonLookupLayout::kBatch ? Expect::kBodyField : Expect::kFeature;
        return true;
      case Expect::kInputs:
        expect_ = Expect::kFeature;
        return true;
      case Expect::kExample:
        begin_example();
        expect_ = Expect::kExampleField;
        return true;
      default:
        misplaced("{...}");
    }
  }

  bool key(string_t& key) override {
    switch (expect_) {
      case Expect::kBodyField:
        if (key != "inputs") {
          throw InvalidArgument("unknown field '" + support::excerpt(key) +
                                "' (expected only \"inputs\")");
        }
        if (inputs_given_) throw InvalidArgument("field 'inputs' appears twice");
        inputs_given_ = true;
        expect_ = Expect::kInputs;
        return true;
      case Expect::kFeature: {
        const auto found = index_.find(key);
        if (found == index_.end())
          throw InvalidArgument("unknown feature '" + support::excerpt(key) + "'");
        if (given_[found->second]) {
          throw InvalidArgument("feature '" + support::excerpt(key) + "' appears twice");
        }
        begin_feature(found->second);
        return true;
      }
      case Expect::kExampleField: {
        const bool ids = key == "ids";
        if (!ids && key != "weights") {
          fail("unknown field '" + support::excerpt(key) + "' (expected ids, weights)");
        }
        if (ids ? ids_given_ : weights_given_) fail("field '" + key + "' appears twice");
        if (ids) {
          ids_given_ = true;
          expect_ = Expect::kIds;
        } else {
          weights_given_ = true;
          begin_weights();
          expect_ = Expect::kWeights;
        }
        return true;
      }
      default:  // the parser gives keys only in objects, whose key positions are the above
        misplaced("a key");
    }
  }

  bool end_object() override {
    switch (expect_) {
      case Expect::kBodyField:
        if (!inputs_given_) {
          throw InvalidArgument("no \"inputs\" (an object of features, each a list of examples)");
        }
        expect_ = Expect::kDone;
        return true;
      case Expect::kFeature:
        expect_ = layout_ == JsonLookupLayout::kBatch ? Expect::kBodyField : Expect::kDone;
        return true;
      case Expect::kExampleField:
        if (!ids_given_) fail("no \"ids\"");
        end_example();
        return true;
      default:
        misplaced("the end of an object");
    }
  }

  bool start_array(size_t) override {
    switch (expect_) {
      case Expect::kExampleList:
        expect_ = Expect::kExample;
        return true;
      case Expect::kExample:
        begin_example();
        ids_in_field_ = false;
        expect_ = Expect::kBagId;
        return true;
      case Expect::kIds:
        ids_in_field_ = true;
        expect_ = Expect::kBagId;
        return true;
      case Expect::kWeights:
        expect_ = Expect::kWeight;
        return true;
      default:
        misplaced("[...]");
    }
  }

  bool end_array() override {
    switch (expect_) {
      case Expect::kExample:  // the end of a feature's list of examples
        end_examples();
        return true;
      case Expect::kBagId:
        if (ids_in_field_) {
          expect_ = Expect::kExampleField;
        } else {
          end_example();
        }
        return true;
      case Expect::kWeight:
        expect_ = Expect::kExampleField;
        return true;
      default:
        misplaced("the end of a list");
    }
  }

 private:
  // What may come next.
  enum class Expect {
    kBody,          // the body's value: an object
    kBodyField,     // kBatch: a key of the body ("inputs") or its end
    kInputs,        // the value of "inputs": an object of features
    kFeature,       // a feature's name or the end of the features
    kExampleList,   // kBatch: a feature's list of examples
    kExample,       // an example (one id, a bag, an object); kBatch: or the end of the list
    kBagId,         // an id of a list of ids, or its end
    kExampleField,  // a key of an example's object ("ids", "weights") or its end
    kIds,           // the value of "ids": an id or a list of them
    kWeights,       // the value of "weights": a list
    kWeight,        // a weight of that list, or its end
    kDone,
  };

  FeatureIds& ids() { return request_.features[feature_]; }
  bool dynamic() const { return dynamic_[feature_]; }

  // Throws InvalidArgument("[example E: ]feature 'F': `message`").
  [[noreturn]] void fail(const std::string& message) const {
    throw InvalidArgument((layout_ == JsonLookupLayout::kBatch && in_example_
                               ? "example " + std::to_string(example_) + ": "
                               : "") +
                          "feature '" + support::excerpt(features_[feature_].name) +
                          "': " + message);
  }

  // What an id of the feature being read may be.
  std::string id_kinds() const { return dynamic() ? "an integer or a string" : "an integer"; }

  // A value (`what`: its short form) where it cannot be.
  [[noreturn]] void misplaced(const std::string& what) const {
    switch (expect_) {
      case Expect::kBody:
        throw InvalidArgument(layout_ == JsonLookupLayout::kBatch
                                  ? "the body must be a JSON object {\"inputs\": an object of "
                                    "features, each a list of examples}, got " +
                                        what
                                  : "expected an object of features, got " + what);
      case Expect::kInputs:
        throw InvalidArgument(
            "\"inputs\" must be an object of features, each a list of examples, "
            "got " +
            what);
      case Expect::kExampleList:
        throw InvalidArgument("feature '" + support::excerpt(features_[feature_].name) +
                              "' must be a list of examples, got " + what);
      case Expect::kExample:
      case Expect::kIds:
        fail("ids must be " + id_kinds() + " or an array of them, got " + what);
      case Expect::kBagId:
        fail("id " + what + " is not " + id_kinds());
      case Expect::kWeights:
        fail("weights must be an array of numbers, got " + what);
      case Expect::kWeight:
        fail("weight " + what + " is not a number");
      default:
        throw InvalidArgument("unexpected " + what);  // not reached: the parser checks JSON
    }
  }

  // Whether `value` is an id of the feature being read, or a value of another kind, which then
  // cannot be a list of ids either.
  bool is_id_like(const support::JsonScalar& value) const {
    return value.is_number() || (dynamic() && value.kind == support::JsonScalar::Kind::kString);
  }

  bool scalar(const support::JsonScalar& value) override {
    switch (expect_) {
      case Expect::kExample:  // one id
        if (!is_id_like(value)) misplaced(value.describe());
        begin_example();
        add_id(value);
        end_example();
        return true;
      case Expect::kIds:
        if (!is_id_like(value)) misplaced(value.describe());
        add_id(value);
        expect_ = Expect::kExampleField;
        return true;
      case Expect::kBagId:
        add_id(value);
        return true;
      case Expect::kWeight:
        add_weight(value);
        return true;
      default:
        misplaced(value.describe());
    }
  }

  // Makes room in `values` for `more` values: its capacity doubles (from 16) until they fit, and
  // the bytes it grows by are counted against the budget first, so that the budget bounds the
  // memory the arrays hold, not only the values in them.
  template <typename T>
  void grow(std::vector<T>& values, size_t more) {
    const size_t needed = values.size() + more;
    if (needed <= values.capacity()) return;
    size_t capacity = std::max<size_t>(values.capacity(), 16);
    while (capacity < needed) capacity *= 2;
    take(static_cast<int64_t>((capacity - values.capacity()) * sizeof(T)));
    values.reserve(capacity);
  }

  // Counts `bytes` more of decoded arrays against the budget.
  void take(int64_t bytes) {
    bytes_ += bytes;
    if (bytes_ > limits_.max_request_memory) {
      throw RequestTooLarge(
          "the request's ids, weights and offsets would hold more than "
          "--max-request-memory " +
          std::to_string(limits_.max_request_memory) +
          " bytes: send fewer ids a request (or raise --max-request-memory)");
    }
  }

  void begin_feature(size_t feature) {
    feature_ = feature;
    given_[feature] = true;
    example_ = 0;
    feature_weighted_ = false;
    expect_ = layout_ == JsonLookupLayout::kBatch ? Expect::kExampleList : Expect::kExample;
  }

  void begin_example() {
    in_example_ = true;
    example_first_id_ = ids().ids.size();
    example_weighted_ = false;
    ids_given_ = false;
    weights_given_ = false;
  }

  void begin_weights() {
    if (!feature_weighted_) {  // the examples before weighed 1 per id
      grow(ids().weights, example_first_id_);
      ids().weights.assign(example_first_id_, 1.0f);
      feature_weighted_ = true;
    }
    example_weighted_ = true;
  }

  void end_example() {
    FeatureIds& feature = ids();
    const size_t given_ids = feature.ids.size() - example_first_id_;
    if (example_weighted_) {
      const size_t given_weights = feature.weights.size() - example_first_id_;
      if (given_weights != given_ids) {
        fail(std::to_string(given_ids) + " ids but " + std::to_string(given_weights) + " weights");
      }
    } else if (feature_weighted_) {
      grow(feature.weights, given_ids);
      feature.weights.insert(feature.weights.end(), given_ids, 1.0f);
    }
    grow(feature.row_splits, 1);
    feature.row_splits.push_back(static_cast<int64_t>(feature.ids.size()));
    in_example_ = false;
    ++example_;
    expect_ = layout_ == JsonLookupLayout::kBatch ? Expect::kExample : Expect::kFeature;
  }

  void end_examples() {
    const std::string& name = features_[feature_].name;
    if (example_ < 1)
      throw InvalidArgument("feature '" + support::excerpt(name) + "': no examples");
    if (example_ > limits_.max_examples) {
      throw InvalidArgument(
          "feature '" + support::excerpt(name) + "': " + std::to_string(example_) +
          " examples, more than --max-examples " + std::to_string(limits_.max_examples));
    }
    expect_ = Expect::kFeature;
  }

  void add_id(const support::JsonScalar& id) {
    int64_t value = 0;
    if (id.kind == support::JsonScalar::Kind::kInteger) {
      value = id.integer;
    } else if (id.kind == support::JsonScalar::Kind::kUnsigned) {
      if (id.unsigned_value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail("id " + id.describe() + " is beyond the 64-bit integer range");
      }
      value = static_cast<int64_t>(id.unsigned_value);
    } else if (id.kind == support::JsonScalar::Kind::kString && dynamic()) {
      value = string_key(id.text);
    } else {
      fail("id " + id.describe() + " is not " + id_kinds());
    }
    grow(ids().ids, 1);
    ids().ids.push_back(value);
  }

  void add_weight(const support::JsonScalar& weight) {
    if (!weight.is_number()) misplaced(weight.describe());
    const double value = weight.as_double();
    if (!(std::abs(value) < kFloatOverflow)) {
      fail("weight " + weight.describe() + " is outside the float range (it rounds to infinity)");
    }
    // Between float's largest value and kFloatOverflow a double rounds to the largest value.
    constexpr float kMax = std::numeric_limits<float>::max();
    const float rounded = value > kMax ? kMax : value < -kMax ? -kMax : static_cast<float>(value);
    if (rounded == 0.0f && value != 0.0) {
      fail("weight " + weight.describe() +
           " rounds to 0 as a float (the smallest non-zero float is 1.4e-45)");
    }
    grow(ids().weights, 1);
    ids().weights.push_back(rounded);
  }

  const std::vector<FeatureConfig>& features_;
  const JsonLookupLayout layout_;
  const RequestLimits limits_;
  std::vector<bool> dynamic_;                           // per feature: its table is dynamic
  std::unordered_map<std::string_view, size_t> index_;  // feature name -> index
  std::vector<bool> given_;                             // per feature: its key has come
  LookupRequest request_;
  int64_t bytes_ = 0;  // the capacity of the decoded arrays
  Expect expect_ = Expect::kBody;
  bool inputs_given_ = false;
  size_t feature_ = 0;   // the feature being read
  int64_t example_ = 0;  // the example being read, of that feature
  bool in_example_ = false;
  bool feature_weighted_ = false;  // an example of the feature gave weights
  size_t example_first_id_ = 0;    // where the example's ids start
  bool example_weighted_ = false;  // the example gave weights
  bool ids_given_ = false;         // in an example's object
  bool weights_given_ = false;
  bool ids_in_field_ = false;  // the list of ids read is "ids" of an object (not the example)
};

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

int64_t LookupRequest::bytes() const {
  size_t total = 0;
  for (const FeatureIds& feature : features) {
    total += feature.ids.capacity() * sizeof(int64_t) +
             feature.row_splits.capacity() * sizeof(int64_t) +
             feature.weights.capacity() * sizeof(float);
  }
  return static_cast<int64_t>(total);
}

LookupRequest decode_json_lookup_ids(std::string_view text, const ServingModel& model,
                                     JsonLookupLayout layout, const RequestLimits& limits) {
  LookupDecoder decoder(model, layout, limits);
  decoder.parse(text);
  return decoder.finish();
}

void append_values(std::span<const float> values, std::span<const int64_t> shape,
                   std::string& out) {
  out += '[';
  if (shape.size() <= 1) {
    for (size_t i = 0; i < values.size(); ++i) {
      // As printf's "%.9g" (the standard says so), several times faster.
      char number[32];
      const char* end = std::to_chars(number, number + sizeof number,
                                      static_cast<double>(values[i]), std::chars_format::general, 9)
                            .ptr;
      if (i > 0) out += ", ";
      out.append(number, static_cast<size_t>(end - number));
    }
  } else {
    const size_t rows = static_cast<size_t>(shape[0]);
    const size_t inner = rows == 0 ? 0 : values.size() / rows;
    for (size_t row = 0; row < rows; ++row) {
      if (row > 0) out += ", ";
      append_values(values.subspan(row * inner, inner), shape.subspan(1), out);
    }
  }
  out += ']';
}

int64_t values_text_bound(std::span<const int64_t> shape) {
  // A float's "%.9g" is at most 15 bytes ("-1.17549435e-38"), its separator ", " 2; each list
  // "[" and "]" and the separator after it.
  constexpr int64_t kValueBytes = 15 + 2;
  constexpr int64_t kListBytes = 2 + 2;
  int64_t lists = 1;
  int64_t bytes = kListBytes;
  for (size_t level = 0; level + 1 < shape.size(); ++level) {
    lists = saturating_multiply(lists, shape[level]);
    bytes = saturating_add(bytes, saturating_multiply(lists, kListBytes));
  }
  const int64_t values = shape.empty() ? 0 : saturating_multiply(lists, shape.back());
  return saturating_add(bytes, saturating_multiply(values, kValueBytes));
}

}  // namespace recemb::serve
