#include "config/validate.h"

#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <string_view>
#include <thread>

#include "recemb/error.h"

#include "kernels/half_precision.h"

namespace recemb {

void validate_dynamic_vocabulary(const DynamicVocabulary& vocabulary, std::string_view owner) {
  const std::string field = std::string(owner) + ": dynamic_vocabulary.";
  if (vocabulary.capacity < 1 || vocabulary.capacity > kMaxDynamicCapacity) {
    throw InvalidArgument(field + "capacity must be in [1, " + std::to_string(kMaxDynamicCapacity) +
                          "], got " + std::to_string(vocabulary.capacity));
  }
  if (vocabulary.min_count < 1) {
    throw InvalidArgument(field + "min_count must be >= 1, got " +
                          std::to_string(vocabulary.min_count));
  }
  if (vocabulary.ttl_steps && *vocabulary.ttl_steps < 1) {
    throw InvalidArgument(field + "ttl_steps must be >= 1 (or unset: no TTL), got " +
                          std::to_string(*vocabulary.ttl_steps));
  }
  when_full_name(vocabulary.when_full);  // throws for a non-enumerator
}

}  // namespace recemb

namespace recemb::internal {
namespace {

std::string quoted(const std::string& name) { return "'" + name + "'"; }

void validate_table(const TableConfig& table) {
  const std::string owner = "table " + quoted(table.name);
  if (table.dynamic_vocabulary) {
    if (table.vocabulary_size != 0) {
      throw InvalidArgument(owner +
                            ": a dynamic table has no vocabulary_size (keys are any int64); give "
                            "either vocabulary_size or dynamic_vocabulary, got vocabulary_size " +
                            std::to_string(table.vocabulary_size));
    }
    validate_dynamic_vocabulary(*table.dynamic_vocabulary, owner);
    if (std::holds_alternative<InitializerCallback>(table.initializer)) {
      throw InvalidArgument(owner +
                            ": a dynamic table's rows are initialised from (seed, key) as keys "
                            "arrive: use TruncatedNormal, Constant or RowId, not a callback");
    }
  } else if (table.vocabulary_size < 1) {
    throw InvalidArgument(owner + ": vocabulary_size must be >= 1, got " +
                          std::to_string(table.vocabulary_size));
  }
  if (table.dim < 1) {
    throw InvalidArgument(owner + ": dim must be >= 1, got " + std::to_string(table.dim));
  }
  if (table_rows(table) > std::numeric_limits<int64_t>::max() / table.dim) {
    throw InvalidArgument(
        owner + (table.dynamic_vocabulary ? ": dynamic_vocabulary.capacity" : ": vocabulary_size") +
        " * dim overflows");
  }
  switch (table.combiner) {
    case Combiner::kSum:
    case Combiner::kMean:
    case Combiner::kSqrtn:
      break;
    default:
      throw InvalidArgument(owner + ": combiner must be one of 'sum', 'mean', 'sqrtn', got value " +
                            std::to_string(static_cast<int>(table.combiner)));
  }
  if (table.quantization_config) {
    const QuantizationConfig& q = *table.quantization_config;
    if (q.num_buckets < 2) {
      throw InvalidArgument(owner + ": quantization_config.num_buckets must be >= 2, got " +
                            std::to_string(q.num_buckets));
    }
    if (!std::isfinite(q.lower) || !std::isfinite(q.upper) || !(q.lower < q.upper)) {
      throw InvalidArgument(owner + ": quantization_config needs finite lower < upper, got lower " +
                            std::to_string(q.lower) + ", upper " + std::to_string(q.upper));
    }
  }
  if (const auto* callback = std::get_if<InitializerCallback>(&table.initializer)) {
    if (!*callback) throw InvalidArgument(owner + ": initializer callback is empty");
  }
  // A table's initial values are finite, as every value written into it later must be
  // (docs/semantics.md, section 1).
  if (const auto* normal = std::get_if<TruncatedNormal>(&table.initializer)) {
    if (!std::isfinite(normal->mean) || !std::isfinite(normal->stddev) || normal->stddev < 0) {
      throw InvalidArgument(
          owner + ": TruncatedNormal needs a finite mean and stddev >= 0, got mean " +
          std::to_string(normal->mean) + ", stddev " + std::to_string(normal->stddev));
    }
    // Values lie within mean +- 2 stddev (redrawn beyond): all of them must fit in a float.
    if (std::abs(double{normal->mean}) + 2.0 * normal->stddev >
        double{std::numeric_limits<float>::max()}) {
      throw InvalidArgument(
          owner + ": TruncatedNormal mean +- 2 stddev overflows float32, got mean " +
          std::to_string(normal->mean) + ", stddev " + std::to_string(normal->stddev));
    }
  }
  if (const auto* constant = std::get_if<Constant>(&table.initializer)) {
    if (!std::isfinite(constant->value)) {
      throw InvalidArgument(owner + ": Constant initializer value must be finite, got " +
                            std::to_string(constant->value));
    }
  }
  if (const auto* row_id = std::get_if<RowId>(&table.initializer)) {
    if (!std::isfinite(row_id->offset)) {
      throw InvalidArgument(owner + ": RowId initializer offset must be finite, got " +
                            std::to_string(row_id->offset));
    }
  }
  dtype_name(table.dtype);        // throws for a non-enumerator
  rounding_name(table.rounding);  // likewise
  if (table.dtype == DType::kFloat16 && table.dynamic_vocabulary) {
    // A dynamic table initialises a key's row when the key is admitted, inside a lookup (which
    // does not fail then): its initializer must stay within float16's range for any key.
    const auto* normal = std::get_if<TruncatedNormal>(&table.initializer);
    const auto* constant = std::get_if<Constant>(&table.initializer);
    const bool fits =
        (normal != nullptr &&
         internal::fits_float16(std::fabs(normal->mean) + 2.0f * std::fabs(normal->stddev))) ||
        (constant != nullptr && internal::fits_float16(constant->value));
    if (!fits) {
      throw InvalidArgument(owner +
                            ": a dynamic float16 table needs an initializer whose values stay "
                            "below 65520 in magnitude for any key: TruncatedNormal with |mean| + "
                            "2 stddev below it, or such a Constant");
    }
  }
  if (table.optimizer) validate_optimizer(*table.optimizer, owner);
}

}  // namespace

void validate_configs(const std::vector<TableConfig>& tables,
                      const std::vector<FeatureConfig>& features, const EmbeddingOptions& options) {
  if (options.num_threads < 0 || options.num_threads > kMaxNumThreads) {
    throw InvalidArgument("EmbeddingOptions.num_threads must be in [0, " +
                          std::to_string(kMaxNumThreads) +
                          "] (0 = one per core; this machine has " +
                          std::to_string(std::thread::hardware_concurrency()) + "), got " +
                          std::to_string(options.num_threads));
  }
  if (options.executor) {
    if (options.num_threads != 0) {
      throw InvalidArgument(
          "EmbeddingOptions.num_threads must be 0 when an executor is set (the "
          "loops run on the executor's threads), got " +
          std::to_string(options.num_threads));
    }
    const int threads = options.executor->max_threads();
    if (threads < 1 || threads > kMaxNumThreads) {
      throw InvalidArgument("EmbeddingOptions.executor->max_threads() must be in [1, " +
                            std::to_string(kMaxNumThreads) + "], got " + std::to_string(threads));
    }
  }
  if (options.optimizer) validate_optimizer(*options.optimizer, "the global optimizer");
  if (features.empty()) throw InvalidArgument("an Embedding needs at least one feature");

  std::set<std::string> table_names;
  for (size_t t = 0; t < tables.size(); ++t) {
    if (tables[t].name.empty()) {
      throw InvalidArgument("table #" + std::to_string(t) + ": name must not be empty");
    }
    if (!table_names.insert(tables[t].name).second) {
      throw InvalidArgument("tables must have unique names: " + quoted(tables[t].name) +
                            " is used more than once");
    }
    validate_table(tables[t]);
  }
  std::set<std::string> feature_names;
  for (size_t f = 0; f < features.size(); ++f) {
    const FeatureConfig& feature = features[f];
    if (feature.name.empty()) {
      throw InvalidArgument("feature #" + std::to_string(f) + ": name must not be empty");
    }
    const std::string owner = "feature " + quoted(feature.name);
    if (!feature_names.insert(feature.name).second) {
      throw InvalidArgument("features must have unique names: " + quoted(feature.name) +
                            " is used more than once");
    }
    if (!table_names.contains(feature.table)) {
      throw InvalidArgument(owner + ": table " + quoted(feature.table) +
                            " is not one of the Embedding's tables");
    }
    if (feature.max_sequence_length < 0) {
      throw InvalidArgument(owner + ": max_sequence_length must be >= 0, got " +
                            std::to_string(feature.max_sequence_length));
    }
    for (const int64_t extent : feature.output_shape) {
      if (extent < 1) {
        throw InvalidArgument(owner + ": output_shape entries must be >= 1, got " +
                              std::to_string(extent));
      }
    }
  }
}

}  // namespace recemb::internal
