#include "batch/lookup.h"

#include <algorithm>
#include <optional>
#include <string>

#include "recemb/error.h"

#include "batch/input_layout.h"
#include "util/check.h"
#include "util/checked_math.h"

namespace recemb::internal {

namespace {

// The product of the extents (>= 0), or nullopt when it does not fit in int64_t. A zero extent
// makes it 0 whatever the others.
std::optional<int64_t> checked_num_values(std::span<const int64_t> shape) {
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  std::optional<int64_t> product = 1;
  for (const int64_t extent : shape) {
    product = checked_multiply(*product, extent);
    if (!product) break;
  }
  return product;
}

}  // namespace

int64_t num_values(std::span<const int64_t> shape) {
  const std::optional<int64_t> values = checked_num_values(shape);
  RECEMB_CHECK(values.has_value());
  return *values;
}

void check_feature_count(size_t num_features, size_t count, std::string_view what) {
  if (count != num_features) {
    throw InvalidArgument(std::string(what) + ": expected one per feature (" +
                          std::to_string(num_features) + "), got " + std::to_string(count));
  }
}

void check_activation_buffer(const FeatureConfig& feature,
                             std::span<const int64_t> activation_shape, size_t size) {
  const std::optional<int64_t> expected = checked_num_values(activation_shape);
  if (!expected) {
    throw InvalidArgument("feature '" + feature.name + "': activation shape " +
                          shape_string(activation_shape) +
                          " has more values than an int64 counts; give fewer examples");
  }
  if (static_cast<int64_t>(size) != *expected) {
    throw InvalidArgument("feature '" + feature.name + "': activation buffer holds " +
                          std::to_string(size) + " floats, expected " +
                          shape_string(activation_shape) + " = " + std::to_string(*expected));
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
