// Tables and the features looked up in them (TF's TableConfig, FeatureConfig, QuantizationConfig).
//
// Configs are plain values, validated when an Embedding is built: an invalid config throws
// InvalidArgument naming the table or feature and the field.
#ifndef RECEMB_CONFIG_H_
#define RECEMB_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "recemb/combiner.h"
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

struct TableConfig {
  std::string name = {};        // required, unique among the tables of an Embedding
  int64_t vocabulary_size = 0;  // number of rows, >= 1
  int64_t dim = 0;              // row width, >= 1
  Initializer initializer = TruncatedNormal{};
  // This table's optimizer; unset means the Embedding's global optimizer.
  std::optional<Optimizer> optimizer = {};
  Combiner combiner = Combiner::kMean;  // TF's default
  std::optional<QuantizationConfig> quantization_config = {};
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
