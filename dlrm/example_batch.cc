#include "dlrm/example_batch.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "recemb/error.h"

namespace recemb::dlrm {

namespace {

// dense_value of the counts below kTabulatedCounts, computed once: Criteo's integer features are
// mostly small, and a double log1p per value was a third of the reader's parsing time.
constexpr int64_t kTabulatedCounts = 4096;

float log1p_of_count(int64_t x) { return static_cast<float>(std::log1p(static_cast<double>(x))); }

const std::array<float, kTabulatedCounts>& tabulated_counts() {
  static const std::array<float, kTabulatedCounts> table = [] {
    std::array<float, kTabulatedCounts> values;
    for (int64_t x = 0; x < kTabulatedCounts; ++x)
      values[static_cast<size_t>(x)] = log1p_of_count(x);
    return values;
  }();
  return table;
}

}  // namespace

float dense_value(int64_t x) {
  if (x < 0) x = 0;
  if (x < kTabulatedCounts) return tabulated_counts()[static_cast<size_t>(x)];
  return log1p_of_count(x);
}

void begin_batch(ExampleBatch& batch, int64_t capacity) {
  if (capacity < 1) {
    throw InvalidArgument("ExampleSource::next: max_examples is " + std::to_string(capacity) +
                          ", must be >= 1");
  }
  const auto n = static_cast<size_t>(capacity);
  batch.size = 0;
  batch.labels.resize(n);
  batch.dense.resize(n * kNumDenseFeatures);
  batch.categorical.resize(n * kNumCategoricalFeatures);
}

void finish_batch(ExampleBatch& batch, int64_t capacity, int64_t size) {
  const auto n = static_cast<size_t>(size);
  const auto stride = static_cast<size_t>(capacity);
  if (n < stride) {
    // Feature f moves from offset f * capacity to f * size: a lower address, so feature by feature
    // in increasing order never overwrites ids not moved yet (std::copy handles the overlap of a
    // feature with itself because the destination starts before the source).
    for (size_t f = 1; f < kNumCategoricalFeatures; ++f) {
      const auto source = batch.categorical.begin() + static_cast<std::ptrdiff_t>(f * stride);
      std::copy(source, source + static_cast<std::ptrdiff_t>(n),
                batch.categorical.begin() + static_cast<std::ptrdiff_t>(f * n));
    }
  }
  batch.size = size;
  batch.labels.resize(n);
  batch.dense.resize(n * kNumDenseFeatures);
  batch.categorical.resize(n * kNumCategoricalFeatures);
}

}  // namespace recemb::dlrm
