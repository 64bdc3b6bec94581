// The buffers one batch flows through between the trainer's data and recemb: the Embedding's
// inputs (views of an ExampleBatch's ids), the activations it fills, and the gradients the dense
// model writes for them. Grown once to the largest batch; binding allocates nothing after that.
#ifndef RECEMB_DLRM_BATCH_BUFFERS_H_
#define RECEMB_DLRM_BATCH_BUFFERS_H_

#include <cstdint>
#include <span>
#include <vector>

#include "recemb/batch.h"

#include "dlrm/example_batch.h"

namespace recemb::dlrm {

class BatchBuffers {
 public:
  // Buffers for rows of `dim` floats.
  explicit BatchBuffers(int64_t dim);

  // Points the inputs at examples [begin, begin + count) of `batch` (which must outlive the use of
  // inputs()) and sizes activations and gradients to count rows per feature.
  void bind(const ExampleBatch& batch, int64_t begin, int64_t count);

  std::span<const FeatureInput> inputs() const { return inputs_; }
  std::span<const std::span<float>> activations() const { return activation_spans_; }
  std::span<const std::span<const float>> activation_views() const { return activation_views_; }
  std::span<const std::span<float>> gradients() const { return gradient_spans_; }
  std::span<const std::span<const float>> gradient_views() const { return gradient_views_; }

 private:
  int64_t dim_;
  std::vector<FeatureInput> inputs_;
  std::vector<std::vector<float>> activations_, gradients_;
  std::vector<std::span<float>> activation_spans_, gradient_spans_;
  std::vector<std::span<const float>> activation_views_, gradient_views_;
};

}  // namespace recemb::dlrm

#endif  // RECEMB_DLRM_BATCH_BUFFERS_H_
