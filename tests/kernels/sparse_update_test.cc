#include "kernels/sparse_update.h"

#include <algorithm>
#include <cmath>
#include <gtest/gtest.h>
#include <limits>
#include <map>
#include <random>
#include <tuple>
#include <vector>

#include "reference/half_grid.h"

namespace recemb::internal {
namespace {

// A row size that makes RowGrouping::build list the single contributions apart at any density.
constexpr int64_t kSinglesApart = int64_t{1} << 30;

// An order-sensitive stand-in for an optimizer pipeline: w = 0.5 * w - g, and slot 0 (width 1)
// counts the updates. Applying g1 then g2 differs from applying g1 + g2, so the test sees whether
// contributions were accumulated and in which order. With a clip_scale other than 1 it stands for
// a pipeline that clips: apply scales g in place first, as RowPipeline's clip changes it.
struct CountingPipeline {
  float clip_scale = 1.0f;

  bool clips_gradients() const { return clip_scale != 1.0f; }
  void apply(float* w, float* const* slots, float* g, float* scratch, int64_t dim) const {
    for (int64_t d = 0; d < dim; ++d) g[d] *= clip_scale;
    apply_unclipped(w, slots, g, scratch, dim);
  }
  void apply_unclipped(float* w, float* const* slots, const float* g, float* scratch,
                       int64_t dim) const {
    for (int64_t d = 0; d < dim; ++d) {
      scratch[d] = g[d];
      w[d] = 0.5f * w[d] - g[d];
    }
    slots[0][0] += 1.0f;
  }
};

// A thread's scratch for the kernels.
struct Scratch {
  std::vector<float> floats;
  explicit Scratch(int64_t dim) : floats(static_cast<size_t>(update_scratch_floats(dim))) {}
  UpdateScratch view(int64_t dim) { return update_scratch(floats.data(), dim); }
};

struct Fixture {
  int64_t vocabulary;
  int64_t dim;
  std::vector<float> parameters, counters;
  std::vector<int64_t> rows;
  std::vector<float> gains;
  std::vector<std::vector<float>> gradients;  // one per contribution
  std::vector<const float*> sources;
  RowGrouping grouping;
  // gains and sources in the grouping's order, as the kernel takes them.
  std::vector<float> sorted_gains;
  std::vector<const float*> sorted_sources;

  // 300 contributions over 40 rows fit one chunk of update_touched_rows; 3000 over 1000 rows take
  // several.
  explicit Fixture(uint64_t seed, int64_t vocabulary_size = 40, int contributions = 300,
                   int64_t row_bytes = kSinglesApart, int64_t row_width = 5)
      : vocabulary(vocabulary_size), dim(row_width) {
    std::mt19937_64 random(seed);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    std::uniform_int_distribution<int64_t> row(0, vocabulary - 1);
    parameters.resize(static_cast<size_t>(vocabulary * dim));
    for (float& x : parameters) x = value(random);
    counters.assign(static_cast<size_t>(vocabulary), 0.0f);
    for (int i = 0; i < contributions; ++i) {
      rows.push_back(row(random));
      gains.push_back(value(random));
      gradients.emplace_back(static_cast<size_t>(dim));
      for (float& x : gradients.back()) x = value(random);
    }
    for (const auto& g : gradients) sources.push_back(g.data());
    grouping.build(rows, vocabulary, row_bytes);
    sort_contributions();
  }

  // Makes every third gain exactly 1: the rows of those contributions that have no other are
  // updated straight from their gradient (update_single_rows).
  void make_every_third_gain_one() {
    for (size_t i = 0; i < gains.size(); i += 3) gains[i] = 1.0f;
    sort_contributions();
  }

  void sort_contributions() {
    sorted_gains.clear();
    sorted_sources.clear();
    for (const uint32_t i : grouping.order()) {
      sorted_gains.push_back(gains[i]);
      sorted_sources.push_back(sources[i]);
    }
  }

  Contributions contributions() const {
    return {.rows = rows.data(),
            .gains = gains.data(),
            .sources = sources.data(),
            .sorted_gains = sorted_gains.data(),
            .sorted_sources = sorted_sources.data()};
  }

  // The shared rows, then the single ones, in calls of `range` rows each as the engine's tasks
  // split them; returns the rows skipped.
  int64_t update_touched_rows(UpdateMode mode, int64_t range,
                              CountingPipeline pipeline = CountingPipeline{}) {
    Scratch scratch(dim);
    int64_t skipped = 0;
    const auto shared = static_cast<int64_t>(grouping.shared_rows().size());
    for (int64_t first = 0; first < shared; first += range) {
      skipped += update_shared_rows(pipeline, variables(), grouping, contributions(), mode, first,
                                    std::min(shared, first + range), scratch.view(dim));
    }
    const auto singles = static_cast<int64_t>(grouping.single_contributions().size());
    for (int64_t first = 0; first < singles; first += range) {
      skipped += update_single_rows(pipeline, variables(), grouping, contributions(), mode, first,
                                    std::min(singles, first + range), scratch.view(dim));
    }
    return skipped;
  }

  // A 16-bit table instead of `parameters` (make_half).
  std::vector<uint16_t> halves;
  DType dtype = DType::kFloat32;
  Rounding rounding = Rounding::kStochastic;
  static constexpr uint64_t kStepStream = 0x5eed;

  // Turns the table into a 16-bit one: its rows rounded to nearest, and `parameters` their values
  // (the float32 twin's start).
  void make_half(DType type, Rounding mode) {
    dtype = type;
    rounding = mode;
    halves.resize(parameters.size());
    encode_half_values_nearest(dtype, parameters.data(), static_cast<int64_t>(parameters.size()),
                               halves.data());
    decode_half_values(dtype, halves.data(), static_cast<int64_t>(halves.size()),
                       parameters.data());
  }

  RowVariables variables() {
    RowVariables v{
        .parameters = halves.empty() ? parameters.data() : nullptr, .dim = dim, .num_slots = 1};
    v.slot_bases[0] = counters.data();
    v.slot_widths[0] = 1;
    if (!halves.empty()) {
      v.halves = halves.data();
      v.dtype = dtype;
      v.rounding = rounding;
      v.step_stream = kStepStream;
    }
    return v;
  }

  // Float64 reference of the whole step, contributions in index order per row; the pipeline's
  // clip scales each gradient it applies by clip_scale.
  std::pair<std::vector<double>, std::vector<double>> reference(bool accumulate, bool all_rows,
                                                                double clip_scale = 1.0) {
    std::vector<double> w(parameters.begin(), parameters.end());
    std::vector<double> count(static_cast<size_t>(vocabulary), 0.0);
    std::map<int64_t, std::vector<size_t>> by_row;
    for (size_t i = 0; i < rows.size(); ++i) by_row[rows[i]].push_back(i);
    auto apply = [&](int64_t r, const std::vector<double>& g) {
      for (int64_t d = 0; d < dim; ++d) {
        double& x = w[static_cast<size_t>(r * dim + d)];
        x = 0.5 * x - clip_scale * g[static_cast<size_t>(d)];
      }
      count[static_cast<size_t>(r)] += 1;
    };
    for (int64_t r = 0; r < vocabulary; ++r) {
      const auto it = by_row.find(r);
      if (it == by_row.end()) {
        if (all_rows) apply(r, std::vector<double>(static_cast<size_t>(dim), 0.0));
        continue;
      }
      std::vector<double> sum(static_cast<size_t>(dim), 0.0);
      for (const size_t i : it->second) {
        std::vector<double> g(static_cast<size_t>(dim));
        for (int64_t d = 0; d < dim; ++d) {
          g[static_cast<size_t>(d)] = double{gains[i]} * gradients[i][static_cast<size_t>(d)];
          sum[static_cast<size_t>(d)] += g[static_cast<size_t>(d)];
        }
        if (!accumulate) apply(r, g);
      }
      if (accumulate) apply(r, sum);
    }
    return {w, count};
  }
};

void expect_near(const std::vector<float>& actual, const std::vector<double>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_NEAR(actual[i], expected[i], 1e-5 * (1.0 + std::abs(expected[i]))) << "index " << i;
  }
}

class SparseUpdateTest : public ::testing::TestWithParam<bool> {};

// With the single rows apart, and in a dense table (row_bytes 0) with every row shared; with
// gains of 1 among the others (single rows updated straight from their gradient unless the
// pipeline clips), and with a pipeline that clips (the gradients given stay as they were).
TEST_P(SparseUpdateTest, TouchedRowsMatchReferenceInRanges) {
  const bool accumulate = GetParam();
  for (const bool unit_gains : {false, true}) {
    for (const float clip_scale : {1.0f, 0.5f}) {
      for (const int64_t row_bytes : {kSinglesApart, int64_t{0}}) {
        for (const auto& [vocabulary, contributions, range] :
             {std::tuple{40, 300, 6}, std::tuple{1000, 3000, 300}, std::tuple{5000, 3000, 70}}) {
          SCOPED_TRACE(::testing::Message()
                       << "row bytes " << row_bytes << " vocabulary " << vocabulary
                       << " unit gains " << unit_gains << " clip scale " << clip_scale);
          Fixture f(7, vocabulary, contributions, row_bytes);
          if (unit_gains) f.make_every_third_gain_one();
          const std::vector<std::vector<float>> gradients_before = f.gradients;
          const auto [w, count] = f.reference(accumulate, false, clip_scale);
          if (vocabulary == 1000) {
            ASSERT_GT(range, update_chunk_rows(f.dim));  // ranges of several chunks
          }
          if (row_bytes == 0) {
            ASSERT_TRUE(f.grouping.single_contributions().empty());
          } else if (vocabulary == 5000) {  // mostly rows with one contribution
            ASSERT_GT(f.grouping.single_contributions().size(),
                      2 * f.grouping.shared_rows().size());
          }
          EXPECT_EQ(f.update_touched_rows({.accumulate = accumulate}, range,
                                          CountingPipeline{.clip_scale = clip_scale}),
                    0);
          expect_near(f.parameters, w);
          expect_near(f.counters, count);
          EXPECT_EQ(f.gradients, gradients_before);
        }
      }
    }
  }
}

TEST_P(SparseUpdateTest, AllRowsUpdatesUntouchedRowsWithZeroGradient) {
  const bool accumulate = GetParam();
  Fixture f(8);
  const auto [w, count] = f.reference(accumulate, true);
  Scratch scratch(f.dim);
  for (int64_t first = 0; first < f.vocabulary; first += 7) {
    update_all_rows(CountingPipeline{}, f.variables(), f.grouping, f.contributions(),
                    {.accumulate = accumulate}, first, std::min(f.vocabulary, first + 7),
                    scratch.view(f.dim));
  }
  expect_near(f.parameters, w);
  expect_near(f.counters, count);
}

INSTANTIATE_TEST_SUITE_P(Accumulate, SparseUpdateTest, ::testing::Bool());

// The bad row has several contributions at 40 and 1000 rows, one at 100000: with a gain of 1, the
// one is read straight from its gradient.
TEST(SparseUpdateTest, SkipsRowsWithNonFiniteGradient) {
  for (const bool accumulate : {true, false}) {
    for (const bool unit_gains : {false, true}) {
      for (const int64_t vocabulary : {40, 1000, 100000}) {
        SCOPED_TRACE(::testing::Message()
                     << "vocabulary " << vocabulary << " unit gains " << unit_gains);
        Fixture f(9, vocabulary, 3000);
        if (unit_gains) f.make_every_third_gain_one();
        const size_t bad = unit_gains ? 6 : 5;  // a gain of 1 (updated straight), or not
        const int64_t bad_row = f.rows[bad];
        const auto singles = f.grouping.single_contributions();
        ASSERT_EQ(std::find(singles.begin(), singles.end(), bad) != singles.end(),
                  vocabulary == 100000);
        f.gradients[bad][2] = std::numeric_limits<float>::quiet_NaN();
        const std::vector<float> before = f.parameters;
        const auto [w, count] = f.reference(accumulate, false);
        const int64_t skipped =
            f.update_touched_rows({.accumulate = accumulate, .skip_non_finite = true}, 1000);
        EXPECT_EQ(skipped, 1);
        EXPECT_EQ(f.counters[static_cast<size_t>(bad_row)], 0.0f);
        for (int64_t r = 0; r < f.vocabulary; ++r) {
          for (int64_t d = 0; d < f.dim; ++d) {
            const auto i = static_cast<size_t>(r * f.dim + d);
            if (r == bad_row) {
              EXPECT_EQ(f.parameters[i], before[i]);
            } else {  // every other row updated as without the bad one
              EXPECT_NEAR(f.parameters[i], w[i], 1e-5 * (1.0 + std::abs(w[i]))) << "row " << r;
            }
          }
        }
      }
    }
  }
}

// A 16-bit table's rows are updated in blocks (kernels/sparse_update.h): every touched row is its
// float32 twin's update rounded as documented (the reference grids and random bits), untouched
// rows keep their values, whatever the ranges, kinds of rows, gains, clipping and row width (at
// width 100 a chunk of shared rows, 81, is no multiple of a block: a block left at a chunk's end
// is updated before the next chunk's gradients take the scratch).
TEST(SparseUpdateHalfTest, RowsAreTheFloat32UpdateRounded) {
  for (const DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    for (const Rounding rounding : {Rounding::kStochastic, Rounding::kNearest}) {
      for (const bool unit_gains : {false, true}) {
        for (const float clip_scale : {1.0f, 0.5f}) {
          for (const auto& [vocabulary, contributions, range, row_bytes, width] :
               {std::tuple{40, 300, 6, kSinglesApart, 5},
                std::tuple{5000, 3000, 70, kSinglesApart, 5},
                std::tuple{5000, 3000, 1000, kSinglesApart, 64},
                std::tuple{1000, 3000, 1000, int64_t{0}, 100}}) {
            SCOPED_TRACE(::testing::Message()
                         << dtype_name(dtype) << " rounding " << static_cast<int>(rounding)
                         << " vocabulary " << vocabulary << " width " << width << " unit gains "
                         << unit_gains << " clip scale " << clip_scale);
            Fixture half(12, vocabulary, contributions, row_bytes, width);
            if (unit_gains) half.make_every_third_gain_one();
            half.make_half(dtype, rounding);
            Fixture twin = half;  // float32 rows holding the 16-bit rows' values
            twin.halves.clear();
            const CountingPipeline pipeline{.clip_scale = clip_scale};
            ASSERT_EQ(twin.update_touched_rows({}, range, pipeline), 0);
            ASSERT_EQ(half.update_touched_rows({}, range, pipeline), 0);
            EXPECT_EQ(half.counters, twin.counters);
            std::vector<bool> touched(static_cast<size_t>(vocabulary), false);
            for (const int64_t row : half.rows) touched[static_cast<size_t>(row)] = true;
            for (int64_t r = 0; r < vocabulary; ++r) {
              const uint64_t stream = rounding_row_stream(Fixture::kStepStream, r);
              for (int64_t d = 0; d < width; ++d) {
                const auto i = static_cast<size_t>(r * width + d);
                const float x = twin.parameters[i];
                const double expected = !touched[static_cast<size_t>(r)] ? double{x}
                                        : rounding == Rounding::kNearest
                                            ? reference::round_to_nearest(dtype, x)
                                            : reference::round_stochastically(
                                                  dtype, x, reference::rounding_bits(stream, d));
                ASSERT_EQ(reference::value_of(dtype, half.halves[i]), expected)
                    << "row " << r << " column " << d;
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace recemb::internal
