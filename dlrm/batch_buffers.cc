#include "dlrm/batch_buffers.h"

#include <variant>

namespace recemb::dlrm {

BatchBuffers::BatchBuffers(int64_t dim) : dim_(dim) {
  inputs_.resize(kNumCategoricalFeatures, DenseIds{.shape = {0}});
  activations_.resize(kNumCategoricalFeatures);
  gradients_.resize(kNumCategoricalFeatures);
}

void BatchBuffers::bind(const ExampleBatch& batch, int64_t begin, int64_t count) {
  for (int f = 0; f < kNumCategoricalFeatures; ++f) {
    // In place: a new DenseIds would allocate its shape vector on every step.
    DenseIds& input = std::get<DenseIds>(inputs_[f]);
    input.ids = batch.categorical_ids(f).subspan(begin, count);
    input.shape[0] = count;
    activations_[f].resize(static_cast<size_t>(count * dim_));
    gradients_[f].resize(static_cast<size_t>(count * dim_));
  }
  activation_spans_.assign(activations_.begin(), activations_.end());
  activation_views_.assign(activations_.begin(), activations_.end());
  gradient_spans_.assign(gradients_.begin(), gradients_.end());
  gradient_views_.assign(gradients_.begin(), gradients_.end());
}

}  // namespace recemb::dlrm
