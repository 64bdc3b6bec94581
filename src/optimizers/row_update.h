// The fused per-row update: gradient clip, optimizer step, decoupled weight decay, weight clip.
//
// Each optimizer has an update class (sgd.h, adagrad.h, ...) built once per step and table:
//   class XUpdate {
//    public:
//     XUpdate(const X& hyperparameters, float learning_rate, int64_t step);
//     // w: the row (dim floats); slots[i]: row i of slot i (SlotSpec::width floats);
//     // g: the row's accumulated, clipped gradient (dim floats). None of them overlap, so the
//     // update marks them __restrict (RowPipeline::apply says why it must). Never throws, never
//     // allocates.
//     void operator()(float* w, float* const* slots, const float* g, int64_t dim) const;
//   };
// RowPipeline wraps one of them with the steps every optimizer shares (optimizer.h).
#ifndef RECEMB_OPTIMIZERS_ROW_UPDATE_H_
#define RECEMB_OPTIMIZERS_ROW_UPDATE_H_

#include <algorithm>
#include <cstdint>
#include <limits>

#include "recemb/optimizer.h"

#include "optimizers/adagrad.h"
#include "optimizers/adagrad_momentum.h"
#include "optimizers/adam.h"
#include "optimizers/ftrl.h"
#include "optimizers/rowwise_adagrad.h"
#include "optimizers/sgd.h"

namespace recemb::internal {

template <class Update>
class RowPipeline {
 public:
  RowPipeline(const CommonHyperparameters& common, const Update& update, float learning_rate)
      : update_(update),
        clip_gradient_min_(common.clip_gradient_min),
        clip_gradient_max_(common.clip_gradient_max),
        clip_weight_min_(common.clip_weight_min),
        clip_weight_max_(common.clip_weight_max),
        weight_decay_(common.multiply_weight_decay_factor_by_learning_rate
                          ? common.weight_decay_factor * learning_rate
                          : common.weight_decay_factor) {}

  // Updates row w and its slots with gradient g (clipped in place). scratch: dim floats the
  // pipeline may overwrite. Never throws, never allocates.
  void apply(float* w, float* const* slots, float* g, float* scratch, int64_t dim) const {
    // The local copy and __restrict as in apply_unclipped (below): the clip is one of the loops.
    const RowPipeline local = *this;
    local.clip_gradient(g, dim);
    local.apply_to_row(w, slots, g, scratch, dim);
  }

  // Whether apply changes g: a caller whose gradient is another row's (a bag's gradient, read
  // straight) may pass it to apply_unclipped only when this is false.
  bool clips_gradients() const { return clips_gradients_; }

  // apply without the gradient clip, g left as it is.
  void apply_unclipped(float* w, float* const* slots, const float* g, float* scratch,
                       int64_t dim) const {
    // A loop of a constant width of 16 or less is fully unrolled before vectorisation, and the
    // straight-line vectoriser that follows needs to know that no store through a row pointer
    // reaches another row or a member of the pipeline: hence __restrict rows (either alone left
    // width-16 Adagrad scalar, 2x slower) and a local copy of *this.
    const RowPipeline local = *this;
    local.apply_to_row(w, slots, g, scratch, dim);
  }

 private:
  void clip_gradient(float* __restrict g, int64_t dim) const {
    if (!clips_gradients_) return;
    for (int64_t d = 0; d < dim; ++d)
      g[d] = std::clamp(g[d], clip_gradient_min_, clip_gradient_max_);
  }

  void apply_to_row(float* __restrict w, float* const* slots, const float* __restrict g,
                    float* __restrict scratch, int64_t dim) const {
    if (weight_decay_ != 0.0f) std::copy(w, w + dim, scratch);
    update_(w, slots, g, dim);
    if (weight_decay_ != 0.0f) {
      for (int64_t d = 0; d < dim; ++d) w[d] -= weight_decay_ * scratch[d];
    }
    if (clips_weights_) {
      for (int64_t d = 0; d < dim; ++d) {
        w[d] = std::clamp(w[d], clip_weight_min_, clip_weight_max_);
      }
    }
  }

  Update update_;
  float clip_gradient_min_;
  float clip_gradient_max_;
  float clip_weight_min_;
  float clip_weight_max_;
  float weight_decay_;
  // Clamping to [-inf, inf] changes no value (NaN included), so the default bounds skip the loop.
  bool clips_gradients_ = is_bounded(clip_gradient_min_, clip_gradient_max_);
  bool clips_weights_ = is_bounded(clip_weight_min_, clip_weight_max_);

  static bool is_bounded(float min, float max) {
    return min != -std::numeric_limits<float>::infinity() ||
           max != std::numeric_limits<float>::infinity();
  }
};

// The update class of each optimizer type (declarations only, used through decltype).
SgdUpdate update_class_of(const Sgd&);
AdagradUpdate update_class_of(const Adagrad&);
AdagradMomentumUpdate update_class_of(const AdagradMomentum&);
AdamUpdate update_class_of(const Adam&);
FtrlUpdate update_class_of(const Ftrl&);
RowwiseAdagradUpdate update_class_of(const RowwiseAdagrad&);

// Calls fn(pipeline) with the RowPipeline of `optimizer` for this step: one visit per table and
// step, so the per-row loop inside fn is compiled for the concrete optimizer (no per-row dispatch).
template <class Fn>
void visit_row_pipeline(const Optimizer& optimizer, float learning_rate, int64_t step, Fn&& fn) {
  std::visit(
      [&](const auto& hyperparameters) {
        using Update = decltype(update_class_of(hyperparameters));
        const RowPipeline<Update> pipeline(
            hyperparameters.common, Update(hyperparameters, learning_rate, step), learning_rate);
        fn(pipeline);
      },
      optimizer);
}

}  // namespace recemb::internal

#endif  // RECEMB_OPTIMIZERS_ROW_UPDATE_H_
