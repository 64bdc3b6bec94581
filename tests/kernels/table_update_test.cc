// The dispatched table update (kernels/table_update.h): on every SIMD target this CPU runs, bit for
// bit the same variables as on every other, matching the generic templates compiled here and, for
// Adagrad, a float64 reference written out with plain loops.
#include "kernels/table_update.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <gtest/gtest.h>
#include <random>
#include <string>
#include <vector>

#include "recemb/optimizer.h"

#include "kernels/simd_target.h"
#include "optimizers/row_update.h"
#include "optimizers/slot_spec.h"

namespace recemb::internal {
namespace {

// A row size that makes RowGrouping::build list the single contributions apart at any density.
constexpr int64_t kSinglesApart = int64_t{1} << 30;

struct Case {
  std::string name;
  Optimizer optimizer;
  UpdateMode mode;
};

std::vector<Case> cases() {
  Sgd clipped_sgd;
  clipped_sgd.common.clip_gradient_min = -0.3f;
  clipped_sgd.common.clip_gradient_max = 0.2f;
  clipped_sgd.common.clip_weight_min = -0.4f;
  clipped_sgd.common.clip_weight_max = 0.45f;
  clipped_sgd.common.weight_decay_factor = 0.01f;
  Adagrad one_by_one;
  one_by_one.common.use_gradient_accumulation = false;
  AdagradMomentum nesterov;
  nesterov.momentum = 0.9f;
  nesterov.use_nesterov = true;
  nesterov.beta2 = 0.99f;
  Adam dense_adam;
  dense_adam.lazy_adam = false;
  dense_adam.bias_correction = true;
  Ftrl ftrl;
  ftrl.l1_regularization_strength = 0.01f;
  ftrl.l2_regularization_strength = 0.02f;
  ftrl.beta = 0.1f;
  return {{"sgd", Sgd{}, {}},
          {"clipped_sgd", clipped_sgd, {}},
          {"adagrad", Adagrad{}, {}},
          {"adagrad_skipping_non_finite", Adagrad{}, {.skip_non_finite = true}},
          {"adagrad_one_by_one", one_by_one, {.accumulate = false}},
          {"adagrad_momentum", nesterov, {}},
          {"adam", Adam{}, {}},
          {"dense_adam", dense_adam, {}},
          {"ftrl", ftrl, {}},
          {"rowwise_adagrad", RowwiseAdagrad{}, {}}};
}

// One table's step: random variables, 600 contributions over 150 rows (many repeated, some
// single), one of them non-finite when the mode skips such rows.
struct Problem {
  int64_t vocabulary = 150;
  int64_t dim;
  std::vector<std::vector<float>> variables;  // parameters, then each slot
  std::vector<int64_t> rows;
  std::vector<float> gains;
  std::vector<float> gradients;  // one row of dim per contribution
  std::vector<const float*> sources;
  RowGrouping grouping;
  std::vector<float> sorted_gains;
  std::vector<const float*> sorted_sources;

  Problem(const Case& c, int64_t dimension, uint64_t seed) : dim(dimension) {
    std::mt19937_64 random(seed);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    std::uniform_real_distribution<float> positive(0.0f, 0.5f);
    std::uniform_int_distribution<int64_t> row(0, vocabulary - 1);
    variables.emplace_back(static_cast<size_t>(vocabulary * dim));
    for (float& x : variables.back()) x = 0.5f * value(random);
    for (const SlotSpec& spec : slot_specs(c.optimizer, dim)) {
      variables.emplace_back(static_cast<size_t>(vocabulary * spec.width));
      for (float& x : variables.back()) x = spec.initial_value + positive(random);
    }
    for (int i = 0; i < 600; ++i) {
      rows.push_back(row(random) % (i % 3 == 0 ? 10 : vocabulary));  // rows < 10 are hot
      gains.push_back(value(random));
    }
    gradients.resize(rows.size() * static_cast<size_t>(dim));
    for (float& x : gradients) x = value(random);
    if (c.mode.skip_non_finite) gradients[7 * static_cast<size_t>(dim)] = INFINITY;
    for (size_t i = 0; i < rows.size(); ++i) {
      sources.push_back(gradients.data() + i * static_cast<size_t>(dim));
    }
    grouping.build(rows, vocabulary, kSinglesApart);
    for (const uint32_t i : grouping.order()) {
      sorted_gains.push_back(gains[i]);
      sorted_sources.push_back(sources[i]);
    }
  }

  RowVariables row_variables(std::vector<std::vector<float>>& state) const {
    RowVariables v{.parameters = state[0].data(), .dim = dim};
    v.num_slots = static_cast<int>(state.size()) - 1;
    for (int i = 0; i < v.num_slots; ++i) {
      v.slot_bases[static_cast<size_t>(i)] = state[static_cast<size_t>(i) + 1].data();
      v.slot_widths[static_cast<size_t>(i)] =
          static_cast<int64_t>(state[static_cast<size_t>(i) + 1].size()) / vocabulary;
    }
    return v;
  }
};

constexpr float kLearningRate = 0.05f;
constexpr int64_t kStep = 3;
constexpr int64_t kRange = 37;  // rows per call, as the engine's tasks split them

bool updates_all_rows(const Optimizer& optimizer) {
  const Adam* adam = std::get_if<Adam>(&optimizer);
  return adam != nullptr && !adam->lazy_adam;
}

// The rows of the step, whole: every row for non-lazy Adam, else the shared and the single rows.
std::vector<UpdateRange> whole_ranges(const Case& c, const Problem& p) {
  if (updates_all_rows(c.optimizer)) return {{UpdateRows::kAll, 0, p.vocabulary}};
  return {{UpdateRows::kShared, 0, static_cast<int64_t>(p.grouping.shared_rows().size())},
          {UpdateRows::kSingle, 0, static_cast<int64_t>(p.grouping.single_contributions().size())}};
}

Contributions contributions_of(const Problem& p) {
  return {.rows = p.rows.data(),
          .gains = p.gains.data(),
          .sources = p.sources.data(),
          .sorted_gains = p.sorted_gains.data(),
          .sorted_sources = p.sorted_sources.data()};
}

// The step through the dispatched entry points, in ranges of kRange rows; returns the variables
// after it.
std::vector<std::vector<float>> dispatched_step(const Case& c, const Problem& p, int64_t* skipped) {
  std::vector<std::vector<float>> state = p.variables;
  const TableUpdate update{.optimizer = &c.optimizer,
                           .learning_rate = kLearningRate,
                           .step = kStep,
                           .variables = p.row_variables(state),
                           .grouping = &p.grouping,
                           .contributions = contributions_of(p),
                           .mode = c.mode};
  std::vector<float> scratch(static_cast<size_t>(update_scratch_floats(p.dim)));
  const UpdateScratch view = update_scratch(scratch.data(), p.dim);
  *skipped = 0;
  for (const UpdateRange whole : whole_ranges(c, p)) {
    for (int64_t first = 0; first < whole.last; first += kRange) {
      *skipped +=
          update_rows(update, {whole.rows, first, std::min(whole.last, first + kRange)}, view);
    }
  }
  return state;
}

// The same step through the generic templates, compiled for this file's baseline.
std::vector<std::vector<float>> template_step(const Case& c, const Problem& p) {
  std::vector<std::vector<float>> state = p.variables;
  const RowVariables variables = p.row_variables(state);
  const Contributions contributions = contributions_of(p);
  std::vector<float> scratch(static_cast<size_t>(update_scratch_floats(p.dim)));
  const UpdateScratch view = update_scratch(scratch.data(), p.dim);
  visit_row_pipeline(c.optimizer, kLearningRate, kStep, [&](const auto& pipeline) {
    for (const UpdateRange whole : whole_ranges(c, p)) {
      switch (whole.rows) {
        case UpdateRows::kAll:
          update_all_rows(pipeline, variables, p.grouping, contributions, c.mode, 0, whole.last,
                          view);
          break;
        case UpdateRows::kShared:
          update_shared_rows(pipeline, variables, p.grouping, contributions, c.mode, 0, whole.last,
                             view);
          break;
        case UpdateRows::kSingle:
          update_single_rows(pipeline, variables, p.grouping, contributions, c.mode, 0, whole.last,
                             view);
          break;
      }
    }
  });
  return state;
}

class TableUpdateTest : public ::testing::TestWithParam<Case> {};

TEST_P(TableUpdateTest, EveryTargetGivesTheSameBitsAsTheTemplates) {
  const Case& c = GetParam();
  // 16, 32, 64 and 128 run the kernels compiled for a constant width (table_update.cc).
  for (const int64_t dim : {1, 7, 16, 32, 64, 128, 129}) {
    const Problem p(c, dim, 17 + static_cast<uint64_t>(dim));
    ASSERT_FALSE(p.grouping.shared_rows().empty());
    ASSERT_FALSE(p.grouping.single_contributions().empty());
    const std::vector<std::vector<float>> expected = template_step(c, p);
    std::vector<std::vector<float>> first_target;
    for (const SimdTarget target : supported_simd_targets()) {
      const ScopedSimdTarget scope(target);
      SCOPED_TRACE(simd_target_name(target) + " dim " + std::to_string(dim));
      int64_t skipped = 0;
      const std::vector<std::vector<float>> actual = dispatched_step(c, p, &skipped);
      EXPECT_EQ(skipped, c.mode.skip_non_finite ? 1 : 0);
      ASSERT_EQ(actual.size(), expected.size());
      for (size_t v = 0; v < actual.size(); ++v) {
        ASSERT_NE(actual[v], p.variables[v]) << "variable " << v << " unchanged";
        for (size_t i = 0; i < actual[v].size(); ++i) {
          ASSERT_NEAR(actual[v][i], expected[v][i], 1e-6f * (1.0f + std::abs(expected[v][i])))
              << "variable " << v << " index " << i;
        }
      }
      if (first_target.empty()) {
        first_target = actual;
      } else {
        for (size_t v = 0; v < actual.size(); ++v) {
          ASSERT_EQ(0, std::memcmp(actual[v].data(), first_target[v].data(),
                                   actual[v].size() * sizeof(float)))
              << "variable " << v << " differs from "
              << simd_target_name(supported_simd_targets()[0]);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Optimizers, TableUpdateTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& param) {
                           return param.param.name;
                         });

// Adagrad against float64 plain loops: per row, g = sum of gain * gradient in contribution order,
// a += g^2, w -= lr * g / sqrt(a).
TEST(TableUpdateTest, AdagradMatchesFloat64Reference) {
  const Case c{"adagrad", Adagrad{}, {}};
  const Problem p(c, 24, 5);
  std::vector<double> w(p.variables[0].begin(), p.variables[0].end());
  std::vector<double> a(p.variables[1].begin(), p.variables[1].end());
  for (int64_t r = 0; r < p.vocabulary; ++r) {
    std::vector<double> g(static_cast<size_t>(p.dim), 0.0);
    bool touched = false;
    for (size_t i = 0; i < p.rows.size(); ++i) {
      if (p.rows[i] != r) continue;
      touched = true;
      for (int64_t d = 0; d < p.dim; ++d) {
        g[static_cast<size_t>(d)] +=
            double{p.gains[i]} *
            p.gradients[i * static_cast<size_t>(p.dim) + static_cast<size_t>(d)];
      }
    }
    if (!touched) continue;
    for (int64_t d = 0; d < p.dim; ++d) {
      const auto k = static_cast<size_t>(r * p.dim + d);
      a[k] += g[static_cast<size_t>(d)] * g[static_cast<size_t>(d)];
      w[k] -= kLearningRate * g[static_cast<size_t>(d)] / std::sqrt(a[k]);
    }
  }
  int64_t skipped = 0;
  const std::vector<std::vector<float>> actual = dispatched_step(c, p, &skipped);
  for (size_t k = 0; k < w.size(); ++k) {
    EXPECT_NEAR(actual[0][k], w[k], 1e-5 * (1.0 + std::abs(w[k]))) << "parameter " << k;
    EXPECT_NEAR(actual[1][k], a[k], 1e-5 * (1.0 + std::abs(a[k]))) << "accumulator " << k;
  }
}

}  // namespace
}  // namespace recemb::internal
