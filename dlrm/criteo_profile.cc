#include "dlrm/criteo_profile.h"

#include <algorithm>

#include "recemb/error.h"

namespace recemb::dlrm {

std::string categorical_feature_name(int feature) { return "C" + std::to_string(feature + 1); }

std::string dense_feature_name(int feature) { return "I" + std::to_string(feature + 1); }

void validate_vocabulary_sizes(std::span<const int64_t> vocabulary_sizes, std::string_view owner) {
  if (vocabulary_sizes.size() != kNumCategoricalFeatures) {
    throw InvalidArgument(std::string(owner) + ": vocabulary_sizes has " +
                          std::to_string(vocabulary_sizes.size()) + " sizes, expected " +
                          std::to_string(kNumCategoricalFeatures) + " (C1..C26)");
  }
  for (int f = 0; f < kNumCategoricalFeatures; ++f) {
    if (vocabulary_sizes[static_cast<size_t>(f)] < 1) {
      throw InvalidArgument(
          std::string(owner) + ": vocabulary size of " + categorical_feature_name(f) + " is " +
          std::to_string(vocabulary_sizes[static_cast<size_t>(f)]) + ", must be >= 1");
    }
  }
}

namespace {

// Whether sum_f min(card_f, cap) <= max_rows; stops adding once over, so it never overflows.
bool fits(std::span<const int64_t> cardinalities, int64_t cap, int64_t max_rows) {
  int64_t rows = 0;
  for (const int64_t cardinality : cardinalities) {
    rows += std::min(cardinality, cap);
    if (rows > max_rows) return false;
  }
  return true;
}

}  // namespace

std::vector<int64_t> fit_to_budget(std::span<const int64_t> cardinalities, TableBudget budget) {
  validate_vocabulary_sizes(cardinalities, "fit_to_budget: cardinalities");
  if (budget.dim < 1) {
    throw InvalidArgument("fit_to_budget: dim is " + std::to_string(budget.dim) + ", must be >= 1");
  }
  constexpr int64_t kBytesPerValue = sizeof(float);
  // Dividing first keeps every product below max_bytes.
  const int64_t max_rows =
      budget.max_bytes < kBytesPerValue ? 0 : budget.max_bytes / kBytesPerValue / budget.dim;
  if (max_rows < kNumCategoricalFeatures) {
    throw InvalidArgument("fit_to_budget: max_bytes " + std::to_string(budget.max_bytes) +
                          " holds " + std::to_string(max_rows) + " rows of dim " +
                          std::to_string(budget.dim) + ", fewer than one per feature (" +
                          std::to_string(kNumCategoricalFeatures) + ")");
  }
  // The largest cap in [1, max card] that fits: fits() is monotone in cap, and cap 1 fits.
  int64_t low = 1;
  int64_t high = *std::max_element(cardinalities.begin(), cardinalities.end());
  while (low < high) {
    const int64_t middle = low + (high - low + 1) / 2;
    if (fits(cardinalities, middle, max_rows)) {
      low = middle;
    } else {
      high = middle - 1;
    }
  }
  std::vector<int64_t> sizes(cardinalities.begin(), cardinalities.end());
  for (int64_t& size : sizes) size = std::min(size, low);
  return sizes;
}

std::vector<int64_t> preset_vocabulary_sizes(std::string_view preset) {
  if (preset == kPresetNames[0]) {
    return fit_to_budget(kCriteoKaggleCardinalities,
                         TableBudget{.dim = 16, .max_bytes = int64_t{64} << 20});
  }
  if (preset == kPresetNames[1]) {
    return {kCriteoKaggleCardinalities.begin(), kCriteoKaggleCardinalities.end()};
  }
  if (preset == kPresetNames[2]) {
    return {kCriteoTerabyteCardinalities.begin(), kCriteoTerabyteCardinalities.end()};
  }
  std::string valid;
  for (const std::string_view name : kPresetNames) {
    valid += (valid.empty() ? "" : ", ") + std::string(name);
  }
  throw InvalidArgument("unknown preset '" + std::string(preset) + "'; valid presets: " + valid);
}

}  // namespace recemb::dlrm
