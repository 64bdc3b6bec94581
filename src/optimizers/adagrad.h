// The Adagrad row update (docs/semantics.md §5).
#ifndef RECEMB_OPTIMIZERS_ADAGRAD_H_
#define RECEMB_OPTIMIZERS_ADAGRAD_H_

#include <cmath>
#include <cstdint>

#include "recemb/optimizer.h"

namespace recemb::internal {

// slots[0] = accumulators a (dim floats, > 0 by validation):
//   a += g^2;  w -= lr * g / sqrt(a)
// There is no epsilon, as in TF: a >= initial_accumulator_value > 0.
class AdagradUpdate {
 public:
  AdagradUpdate(const Adagrad& /*hyperparameters*/, float learning_rate, int64_t /*step*/)
      : learning_rate_(learning_rate) {}

  void operator()(float* __restrict w, float* const* slots, const float* __restrict g,
                  int64_t dim) const {
    float* __restrict a = slots[0];
    for (int64_t d = 0; d < dim; ++d) {
      a[d] += g[d] * g[d];
      w[d] -= learning_rate_ * g[d] / std::sqrt(a[d]);
    }
  }

 private:
  float learning_rate_;
};

}  // namespace recemb::internal

#endif  // RECEMB_OPTIMIZERS_ADAGRAD_H_
