// The checks of a lookup call besides each feature's input (normalize_feature): the number of
// inputs and activation buffers, and each buffer's size. Embedding::lookup and ServingModel::lookup
// share one contract and make them here, so that both reject a bad call with the same message.
#ifndef RECEMB_BATCH_LOOKUP_CHECKS_H_
#define RECEMB_BATCH_LOOKUP_CHECKS_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "recemb/config.h"

namespace recemb::internal {

// The number of values of an array of `shape` (1 for []). The extents must be >= 0 with a product
// that fits in int64_t, as normalize_feature guarantees for the activation shapes it returns.
int64_t num_values(std::span<const int64_t> shape);

// Throws InvalidArgument "<what>: expected one per feature (<num_features>), got <count>" unless
// count == num_features.
void check_feature_count(size_t num_features, size_t count, std::string_view what);

// Throws InvalidArgument "feature '<name>': activation buffer holds <size> floats, expected
// [3, 2, 4] = 24" unless size == num_values(activation_shape), the feature's activation shape
// (CsrFeature::activation_shape).
void check_activation_buffer(const FeatureConfig& feature,
                             std::span<const int64_t> activation_shape, size_t size);

}  // namespace recemb::internal

#endif  // RECEMB_BATCH_LOOKUP_CHECKS_H_
