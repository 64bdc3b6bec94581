// The SGD row update (docs/semantics.md §5).
#ifndef RECEMB_OPTIMIZERS_SGD_H_
#define RECEMB_OPTIMIZERS_SGD_H_

#include <cstdint>

#include "recemb/optimizer.h"

namespace recemb::internal {

// w -= lr * g. No slots.
class SgdUpdate {
 public:
  SgdUpdate(const Sgd& /*hyperparameters*/, float learning_rate, int64_t /*step*/)
      : learning_rate_(learning_rate) {}

  void operator()(float* __restrict w, float* const* /*slots*/, const float* __restrict g,
                  int64_t dim) const {
    for (int64_t d = 0; d < dim; ++d) w[d] -= learning_rate_ * g[d];
  }

 private:
  float learning_rate_;
};

}  // namespace recemb::internal

#endif  // RECEMB_OPTIMIZERS_SGD_H_
