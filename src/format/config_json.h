// JSON forms of the configs (TableConfig, FeatureConfig, Optimizer), shared by the checkpoint
// manifest and the serving model's manifest.
//
// Each struct becomes an object with one key per field, named as the C++ field; nested structs
// (CommonHyperparameters as "common", QuantizationConfig) become nested objects. Values:
//   float        a JSON number that reads back as exactly the same float (its shortest decimal
//                form, 0.001 for 0.001f, where that survives the double; else the exact double), or
//                the string "inf", "-inf" or "nan" for a non-finite value (the clip bounds default
//                to +-inf, which JSON numbers cannot hold)
//   int64, bool  a JSON integer, true/false;  Combiner  "sum" | "mean" | "sqrtn"
//   Initializer  {"kind": "truncated_normal", "mean", "stddev"} | {"kind": "constant", "value"} |
//                {"kind": "row_id", "offset"} | {"kind": "callback"}
//   LearningRate a number | {"kind": "exponential_decay", "initial_learning_rate",
//                "decay_steps", "decay_rate", "staircase"} | {"kind": "piecewise_constant",
//                "boundaries", "values"} | {"kind": "linear_warmup", "target_learning_rate",
//                "warmup_steps", "initial_learning_rate"} | {"kind": "callback"}
//   Optimizer    {"name": optimizer_name(...), "learning_rate", <hyperparameters>, "common"}
//   optional     the key is absent when unset (TableConfig.optimizer, quantization_config)
//
// The readers take absent keys as the field's default (so hand-written configs may be short),
// except the required ones: TableConfig name, vocabulary_size, dim; FeatureConfig name, table;
// Optimizer name. They reject unknown keys and wrong types with the document's exception (see
// support/json.h) naming the field's path, e.g. "manifest.json: tables[0].config.optimizer.
// common.clip_weight_min: expected a number or "inf", "-inf", "nan", got true". They check JSON
// structure only; value ranges are validated where an Embedding is built.
#ifndef RECEMB_FORMAT_CONFIG_JSON_H_
#define RECEMB_FORMAT_CONFIG_JSON_H_

#include <cstdint>

#include "recemb/config.h"
#include "recemb/optimizer.h"

#include "support/json.h"

namespace recemb::format {

// An InitializerCallback is written as {"kind": "callback"} (the function itself is not data).
support::Json table_to_json(const TableConfig& table);
// An initializer {"kind": "callback"} becomes the default (TruncatedNormal{}): a table read back
// is used for its values, which a checkpoint restores, not for its initial values.
TableConfig table_from_json(const support::JsonReader& json);

support::Json feature_to_json(const FeatureConfig& feature);
FeatureConfig feature_from_json(const support::JsonReader& json);

// A LearningRateCallback is written as {"kind": "callback"}.
support::Json optimizer_to_json(const Optimizer& optimizer);
// Throws for a learning rate {"kind": "callback"}: a callback cannot be rebuilt
// from JSON, and silently replacing it would train with a different learning rate.
Optimizer optimizer_from_json(const support::JsonReader& json);

// A checksum of either manifest, written as 16 lowercase hex digits (format/checksum.h).
uint64_t checksum_from_json(const support::JsonReader& json);

}  // namespace recemb::format

#endif  // RECEMB_FORMAT_CONFIG_JSON_H_
