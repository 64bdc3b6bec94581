#include "train/example_batch.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "recemb/error.h"

namespace recemb::train {

float dense_value(int64_t x) {
  return static_cast<float>(std::log1p(static_cast<double>(std::max<int64_t>(x, 0))));
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

}  // namespace recemb::train
