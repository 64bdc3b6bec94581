// What Embedding::lookup and ServingModel::lookup share besides normalize_feature: the checks of a
// call's inputs and activation buffers (one contract, so that both reject a bad call with the same
// message), and the pooling kernel's input for a normalised feature.
#ifndef RECEMB_BATCH_LOOKUP_H_
#define RECEMB_BATCH_LOOKUP_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "recemb/config.h"

#include "batch/csr_feature.h"
#include "kernels/pool.h"

namespace recemb::internal {

// The number of values of an array of `shape` (1 for []). The extents must be >= 0 with a product
// that fits in int64_t (aborts otherwise), as they do for a shape check_activation_buffer passed.
int64_t num_values(std::span<const int64_t> shape);

// Throws InvalidArgument "<what>: expected one per feature (<num_features>), got <count>" unless
// count == num_features.
void check_feature_count(size_t num_features, size_t count, std::string_view what);

// Throws InvalidArgument "feature '<name>': activation buffer holds <size> floats, expected
// [3, 2, 4] = 24" unless size == num_values(activation_shape), the feature's activation shape
// (CsrFeature::activation_shape). An activation shape whose product overflows int64_t (possible
// for ids of shape [2^62, 0]) throws InvalidArgument too.
void check_activation_buffer(const FeatureConfig& feature,
                             std::span<const int64_t> activation_shape, size_t size);

// The kernel input that pools `csr`'s bags over `rows`, the rows of `table` (with its dim and
// simulated quantization). Borrows csr's arrays and table's QuantizationConfig.
PoolInput pool_input(const CsrFeature& csr, const TableConfig& table, TableRows rows);

}  // namespace recemb::internal

#endif  // RECEMB_BATCH_LOOKUP_H_
