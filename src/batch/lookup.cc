#include "batch/lookup.h"

#include <functional>
#include <numeric>
#include <string>

#include "recemb/error.h"

namespace recemb::internal {

int64_t num_values(std::span<const int64_t> shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

void check_feature_count(size_t num_features, size_t count, std::string_view what) {
  if (count != num_features) {
    throw InvalidArgument(std::string(what) + ": expected one per feature (" +
                          std::to_string(num_features) + "), got " + std::to_string(count));
  }
}

void check_activation_buffer(const FeatureConfig& feature,
                             std::span<const int64_t> activation_shape, size_t size) {
  const int64_t expected = num_values(activation_shape);
  if (static_cast<int64_t>(size) != expected) {
    throw InvalidArgument("feature '" + feature.name + "': activation buffer holds " +
                          std::to_string(size) + " floats, expected " +
                          shape_string(activation_shape) + " = " + std::to_string(expected));
  }
}

PoolInput pool_input(const CsrFeature& csr, const TableConfig& table, TableRows rows) {
  return {.table = rows,
          .dim = table.dim,
          .offsets = csr.offsets.data(),
          .ids = csr.ids.data(),
          .weights = csr.weights.empty() ? nullptr : csr.weights.data(),
          .bag_scales = csr.bag_scales.data(),
          .quantization = table.quantization_config ? &*table.quantization_config : nullptr};
}

}  // namespace recemb::internal
