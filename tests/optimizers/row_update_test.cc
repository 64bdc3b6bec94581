// RowPipeline and visit_row_pipeline (optimizers/row_update.h): the steps every optimizer shares,
// in optimizer.h's order: gradient clip, update, decoupled weight decay, weight clip.
#include "optimizers/row_update.h"

#include <gtest/gtest.h>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "recemb/optimizer.h"

#include "optimizers/slot_spec.h"

namespace recemb::internal {
namespace {

TEST(RowPipelineTest, ClipsGradientInPlaceBeforeUpdate) {
  Sgd sgd;
  sgd.common.clip_gradient_min = -0.5f;
  sgd.common.clip_gradient_max = 0.25f;
  std::vector<float> w(4, 1.0f);
  std::vector<float> g = {-2.0f, -0.1f, 0.1f, 3.0f};
  std::vector<float> scratch(4);
  RowPipeline(sgd.common, SgdUpdate(sgd, 0.1f, 0), 0.1f)
      .apply(w.data(), nullptr, g.data(), scratch.data(), 4);
  EXPECT_EQ(g, (std::vector<float>{-0.5f, -0.1f, 0.1f, 0.25f}));
  EXPECT_FLOAT_EQ(w[0], 1.05f);
  EXPECT_FLOAT_EQ(w[1], 1.01f);
  EXPECT_FLOAT_EQ(w[2], 0.99f);
  EXPECT_FLOAT_EQ(w[3], 0.975f);
}

// The slots see the clipped gradient too: Adagrad's a = 0.1 + clip(g)^2.
TEST(RowPipelineTest, SlotsSeeClippedGradient) {
  Adagrad adagrad;
  adagrad.common.clip_gradient_min = -1.0f;
  adagrad.common.clip_gradient_max = 1.0f;
  std::vector<float> w(2, 0.0f);
  std::vector<float> accumulator(2, 0.1f);
  std::vector<float> g = {-3.0f, 0.5f};
  std::vector<float> scratch(2);
  float* slots[] = {accumulator.data()};
  RowPipeline(adagrad.common, AdagradUpdate(adagrad, 0.1f, 0), 0.1f)
      .apply(w.data(), slots, g.data(), scratch.data(), 2);
  EXPECT_FLOAT_EQ(accumulator[0], 1.1f);
  EXPECT_FLOAT_EQ(accumulator[1], 0.35f);
}

// For SGD the decoupled decay is w (1 - wd_eff) - lr g (docs/semantics.md §4): w = 1, g = 0.5, lr =
// 0.1, wd = 0.2 gives 0.75, and 0.93 with wd_eff = wd * lr = 0.02.
TEST(RowPipelineTest, SgdWeightDecay) {
  for (const bool multiply : {false, true}) {
    SCOPED_TRACE(multiply ? "wd * lr" : "wd");
    Sgd sgd;
    sgd.common.weight_decay_factor = 0.2f;
    sgd.common.multiply_weight_decay_factor_by_learning_rate = multiply;
    std::vector<float> w = {1.0f};
    std::vector<float> g = {0.5f};
    std::vector<float> scratch(1);
    RowPipeline(sgd.common, SgdUpdate(sgd, 0.1f, 0), 0.1f)
        .apply(w.data(), nullptr, g.data(), scratch.data(), 1);
    EXPECT_FLOAT_EQ(w[0], multiply ? 0.93f : 0.75f);
  }
}

// w_new = Update(w_old, g) - wd_eff * w_old, shown on FTRL, whose update depends on w_old (so
// decaying before the update would differ); the slots are the plain update's.
TEST(RowPipelineTest, DecoupledWeightDecayUsesWeightsBeforeUpdate) {
  for (const bool multiply : {false, true}) {
    SCOPED_TRACE(multiply ? "wd * lr" : "wd");
    Ftrl ftrl;
    ftrl.l1_regularization_strength = 0.05f;
    ftrl.common.weight_decay_factor = 0.2f;
    ftrl.common.multiply_weight_decay_factor_by_learning_rate = multiply;
    const float lr = 0.5f;
    const float decay = multiply ? 0.2f * lr : 0.2f;
    const std::vector<float> w_before = {0.5f, -1.0f, 2.0f};
    const std::vector<float> g = {0.4f, -0.7f, 1.1f};

    std::vector<float> w_expected = w_before;
    std::vector<float> n_expected = {0.1f, 0.5f, 1.0f};
    std::vector<float> z_expected = {0.3f, -0.2f, 1.0f};
    float* expected_slots[] = {n_expected.data(), z_expected.data()};
    FtrlUpdate(ftrl, lr, 0)(w_expected.data(), expected_slots, g.data(), 3);
    for (int d = 0; d < 3; ++d) w_expected[d] -= decay * w_before[d];

    std::vector<float> w = w_before;
    std::vector<float> n = {0.1f, 0.5f, 1.0f};
    std::vector<float> z = {0.3f, -0.2f, 1.0f};
    std::vector<float> gradient = g;
    std::vector<float> scratch(3);
    float* slots[] = {n.data(), z.data()};
    RowPipeline(ftrl.common, FtrlUpdate(ftrl, lr, 0), lr)
        .apply(w.data(), slots, gradient.data(), scratch.data(), 3);
    for (int d = 0; d < 3; ++d) EXPECT_FLOAT_EQ(w[d], w_expected[d]) << "w[" << d << "]";
    EXPECT_EQ(n, n_expected);
    EXPECT_EQ(z, z_expected);
  }
}

// The weight clip comes last: w = 1, g = 0, wd = 0.5 decays to 0.5, then clips to 0.2 (clipping
// before the decay would give 0.2 - 0.5 = -0.3). The update's own result is clipped too.
TEST(RowPipelineTest, ClipsWeightsAfterUpdateAndDecay) {
  Sgd sgd;
  sgd.common.clip_weight_min = -0.1f;
  sgd.common.clip_weight_max = 0.2f;
  sgd.common.weight_decay_factor = 0.5f;
  std::vector<float> w = {1.0f, 0.0f, 0.0f, 0.1f};
  std::vector<float> g = {0.0f, -10.0f, 10.0f, 0.1f};
  std::vector<float> scratch(4);
  RowPipeline(sgd.common, SgdUpdate(sgd, 1.0f, 0), 1.0f)
      .apply(w.data(), nullptr, g.data(), scratch.data(), 4);
  EXPECT_FLOAT_EQ(w[0], 0.2f);
  EXPECT_FLOAT_EQ(w[1], 0.2f);
  EXPECT_FLOAT_EQ(w[2], -0.1f);
  EXPECT_FLOAT_EQ(w[3], -0.05f);  // 0.1 - 0.1 - 0.5 * 0.1, inside the bounds
}

// Slot rows for `optimizer` at their initial values, and the pointer array the updates take.
struct Slots {
  Slots(const Optimizer& optimizer, int64_t dim) {
    for (const SlotSpec& spec : slot_specs(optimizer, dim)) {
      values.emplace_back(spec.width, spec.initial_value + 0.25f);
    }
    for (std::vector<float>& slot : values) pointers.push_back(slot.data());
  }
  std::vector<std::vector<float>> values;
  std::vector<float*> pointers;
};

// visit_row_pipeline hands fn the RowPipeline of the optimizer's update class, built with the
// step's learning rate and step: with the default common hyperparameters its result equals the
// update class applied directly (bitwise).
TEST(VisitRowPipelineTest, DispatchesToUpdateClassWithLearningRateAndStep) {
  constexpr float kLearningRate = 0.03f;
  constexpr int64_t kStep = 3;
  constexpr int64_t kDim = 5;
  const std::vector<Optimizer> optimizers = {
      Sgd{},
      Adagrad{},
      AdagradMomentum{.momentum = 0.9f, .use_nesterov = true, .exponent = 3.0f, .common = {}},
      Adam{.bias_correction = true, .common = {}},
      Ftrl{.l1_regularization_strength = 0.01f, .common = {}},
      RowwiseAdagrad{}};
  ASSERT_EQ(optimizers.size(), std::variant_size_v<Optimizer>);
  for (const Optimizer& optimizer : optimizers) {
    SCOPED_TRACE(optimizer_name(optimizer));
    const std::vector<float> w_before = {0.5f, -0.25f, 1.0f, -2.0f, 0.125f};
    const std::vector<float> g = {0.3f, -0.6f, 1.2f, -0.05f, 2.0f};
    std::visit(
        [&](const auto& hyperparameters) {
          using Update = decltype(update_class_of(hyperparameters));
          std::vector<float> w_direct = w_before;
          Slots slots_direct(optimizer, kDim);
          Update(hyperparameters, kLearningRate, kStep)(
              w_direct.data(), slots_direct.pointers.data(), g.data(), kDim);

          std::vector<float> w = w_before;
          Slots slots(optimizer, kDim);
          std::vector<float> gradient = g;
          std::vector<float> scratch(kDim);
          int calls = 0;
          visit_row_pipeline(optimizer, kLearningRate, kStep, [&](const auto& pipeline) {
            ++calls;
            EXPECT_TRUE((std::is_same_v<std::decay_t<decltype(pipeline)>, RowPipeline<Update>>));
            pipeline.apply(w.data(), slots.pointers.data(), gradient.data(), scratch.data(), kDim);
          });
          EXPECT_EQ(calls, 1);
          EXPECT_EQ(w, w_direct);
          EXPECT_EQ(slots.values, slots_direct.values);
        },
        optimizer);
  }
}

}  // namespace
}  // namespace recemb::internal
