// Tables and the features looked up in them (TF's TableConfig, FeatureConfig, QuantizationConfig).
//
// Configs are plain values, validated when an Embedding is built: an invalid config throws
// InvalidArgument naming the table or feature and the field.
#ifndef RECEMB_CONFIG_H_
#define RECEMB_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "recemb/combiner.h"
#include "recemb/export.h"
#include "recemb/initializer.h"
#include "recemb/optimizer.h"

namespace recemb {

// Simulated quantization of looked-up rows (forward only; the backward pass is straight-through
// and tables stay float32). Every gathered value x becomes, before the combiner,
//   x = clip(x, lower, upper);  q = (upper - lower) / (num_buckets - 1)
//   x = floor((x - lower) / q + 0.5) * q + lower
struct QuantizationConfig {
  int64_t num_buckets = 0;  // >= 2
  float lower = 0.0f;       // < upper
  float upper = 0.0f;
};

// The type a table's rows (its "parameters") are stored in (docs/semantics.md, "16-bit tables").
// Optimizer slots stay float32; lookups accumulate in float32 and updates compute in float32, then
// round the row back to the table's type as `Rounding` says.
enum class DType { kFloat32, kBFloat16, kFloat16 };
// "float32", "bfloat16", "float16".
RECEMB_EXPORT std::string_view dtype_name(DType value);
// The inverse of dtype_name; anything else throws InvalidArgument listing the valid names.
RECEMB_EXPORT DType parse_dtype(std::string_view name);
// The bytes of one value: 4 for float32, 2 for the 16-bit types.
inline constexpr int64_t dtype_bytes(DType dtype) { return dtype == DType::kFloat32 ? 4 : 2; }

// How an update rounds a 16-bit row's float32 result (docs/semantics.md, "16-bit tables").
enum class Rounding {
  // Up or down at random, with the probability that makes the rounding unbiased, from a
  // counter-based generator keyed by (table seed, step, row or key, column): the same bits for
  // any thread count, placement and number of ranks.
  kStochastic,
  kNearest,  // to nearest, ties to even (for comparison)
};
// "stochastic", "nearest".
RECEMB_EXPORT std::string_view rounding_name(Rounding value);
// The inverse of rounding_name; anything else throws InvalidArgument listing the valid names.
RECEMB_EXPORT Rounding parse_rounding(std::string_view name);

// What a dynamic table does when admitting a key would hold more than its capacity.
enum class WhenFull {
  kEvictLeastRecent,    // evict the key seen longest ago (ties: smaller count, then smaller key)
  kEvictLeastFrequent,  // evict the key with the smallest count (ties: seen longest ago, then
                        // smaller key)
  kError,               // the training lookup throws FailedPrecondition, changing nothing
};
// "evict_least_recent", "evict_least_frequent", "error".
RECEMB_EXPORT std::string_view when_full_name(WhenFull value);
// The inverse of when_full_name; anything else throws InvalidArgument listing the valid names.
RECEMB_EXPORT WhenFull parse_when_full(std::string_view name);

// The most keys a dynamic table holds (its index numbers slots in 32 bits).
inline constexpr int64_t kMaxDynamicCapacity = int64_t{1} << 31;

// A dynamic table: rows keyed by any int64 id, admitted and evicted as training sees them
// (docs/semantics.md, "Dynamic vocabularies"). In short: a key without a row looks up a zero row
// (its weight still counts in mean and sqrtn); each occurrence in a training lookup counts, and
// the training lookup in which a key's count reaches min_count gives it a row, initialised from
// (table seed, key) alone; pure lookups never insert, count or evict.
struct DynamicVocabulary {
  // Most keys held, all shards together (>= 1). A table split by rows into P parts holds at most
  // ceil(capacity / P) keys in each, and when_full applies per part. At most
  // kMaxDynamicCapacity.
  int64_t capacity = 0;
  int64_t min_count = 1;  // training-lookup occurrences before a key gets a row, >= 1
  // Unset: keys stay until evicted to make room. T >= 1: at the end of the apply_gradients that
  // completes step s, keys last seen in a training lookup for a step before s - T + 1 are removed.
  std::optional<int64_t> ttl_steps = {};
  WhenFull when_full = WhenFull::kEvictLeastRecent;
};

// Throws InvalidArgument naming `owner` (for example "table 'user'") and the field when capacity
// or min_count is < 1, ttl_steps is set and < 1, or when_full is not a WhenFull value. The
// Embedding's constructor checks every dynamic table so; bindings call it to check a config early.
RECEMB_EXPORT void validate_dynamic_vocabulary(const DynamicVocabulary& vocabulary,
                                               std::string_view owner);

struct TableConfig {
  std::string name = {};  // required, unique among the tables of an Embedding
  // Number of rows (>= 1): ids are rows [0, vocabulary_size). 0 for a dynamic table.
  int64_t vocabulary_size = 0;
  int64_t dim = 0;  // row width, >= 1
  Initializer initializer = TruncatedNormal{};
  // This table's optimizer; unset means the Embedding's global optimizer.
  std::optional<Optimizer> optimizer = {};
  Combiner combiner = Combiner::kMean;  // TF's default
  std::optional<QuantizationConfig> quantization_config = {};
  // Set: a dynamic table (vocabulary_size must be 0) whose initializer is not a callback.
  std::optional<DynamicVocabulary> dynamic_vocabulary = {};
  // The rows' type: 16-bit rows take half the memory of float32 ones (static tables only for
  // now: a dynamic table with a 16-bit dtype is an InvalidArgument).
  DType dtype = DType::kFloat32;
  // How updates round a 16-bit table's rows (ignored for float32).
  Rounding rounding = Rounding::kStochastic;
};

struct FeatureConfig {
  std::string name = {};   // required, unique among the features of an Embedding
  std::string table = {};  // name of the TableConfig this feature is looked up in
  // 0: the feature's bags are combined, activation [batch, dim] (or output_shape + [dim]).
  // L > 0: a sequence feature: activation [batch, L, dim], position p of example b holding that
  // id's row (times its weight for kSum), positions >= L dropped, missing positions zero.
  int64_t max_sequence_length = 0;
  // The activation shape without the trailing dim, as TF's output_shape. Empty: derived from the
  // input. Otherwise its product must equal the number of bags of the input (the activations are
  // reshaped), or be a multiple k * batch of the batch size for a ragged or 2-D input, which makes
  // it a sequence feature of length k.
  std::vector<int64_t> output_shape = {};
  // true: weights must be finite. Ids are always checked against the vocabulary (an id out of
  // range is an error, never a silent read outside the table).
  bool validate_weights_and_indices = true;
};

}  // namespace recemb

#endif  // RECEMB_CONFIG_H_
