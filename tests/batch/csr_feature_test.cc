#include "batch/csr_feature.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "recemb/error.h"

#include "batch/input_layout.h"
#include "support/thread_pool.h"
#include "testing/error_of.h"

namespace recemb::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// An independent model of one feature's input: rows (bags of the plain interpretation) in
// row-major order over bag_dims, each a list of (position, id, weight) with increasing positions.
struct Entry {
  int64_t position;
  int64_t id;
  float weight;
};

struct Model {
  std::vector<int64_t> bag_dims;  // the plain activation shape without dim
  int64_t width = 0;              // extent of the bag axis (dense N, sparse last dim)
  std::vector<std::vector<Entry>> rows;
};

enum class Kind { kDense, kDenseRank1, kRagged, kSparse };
enum class IdWidth { k32, k64 };  // of the ids; ragged row_splits get the other width
enum class Weights { kNone, kGiven };

// Owns the arrays of one input; view() lends them out.
struct Input {
  Kind kind = Kind::kRagged;
  bool wide_ids = true;
  bool wide_splits = true;
  std::vector<int64_t> ids;
  std::vector<int32_t> ids32;
  std::vector<int64_t> splits;
  std::vector<int32_t> splits32;
  std::vector<int64_t> indices;
  std::vector<int64_t> shape;  // dense shape or sparse dense_shape
  std::vector<float> weights;

  FeatureInput view() const {
    const IdSpan values =
        wide_ids ? IdSpan(std::span<const int64_t>(ids)) : IdSpan(std::span<const int32_t>(ids32));
    switch (kind) {
      case Kind::kDense:
      case Kind::kDenseRank1:
        return DenseIds{.ids = values, .shape = shape, .weights = weights};
      case Kind::kRagged:
        return RaggedIds{.values = values,
                         .row_splits = wide_splits ? IdSpan(std::span<const int64_t>(splits))
                                                   : IdSpan(std::span<const int32_t>(splits32)),
                         .weights = weights};
      case Kind::kSparse:
        break;
    }
    return SparseIds{
        .indices = indices, .values = values, .dense_shape = shape, .weights = weights};
  }
};

Input make_input(const Model& model, Kind kind, IdWidth width, Weights with_weights) {
  const bool weighted = with_weights == Weights::kGiven;
  Input input{
      .kind = kind, .wide_ids = width == IdWidth::k64, .wide_splits = width == IdWidth::k32};
  input.splits.push_back(0);
  for (size_t row = 0; row < model.rows.size(); ++row) {
    for (const Entry& entry : model.rows[row]) {
      input.ids.push_back(entry.id);
      input.ids32.push_back(static_cast<int32_t>(entry.id));
      if (weighted) input.weights.push_back(entry.weight);
      std::vector<int64_t> index(model.bag_dims.size());
      for (size_t d = index.size(), rest = row; d-- > 0; rest /= model.bag_dims[d]) {
        index[d] = static_cast<int64_t>(rest) % model.bag_dims[d];
      }
      input.indices.insert(input.indices.end(), index.begin(), index.end());
      input.indices.push_back(entry.position);
    }
    input.splits.push_back(static_cast<int64_t>(input.ids.size()));
  }
  input.splits32.assign(input.splits.begin(), input.splits.end());
  input.shape = model.bag_dims;
  if (kind != Kind::kDenseRank1) input.shape.push_back(model.width);
  return input;
}

struct Expected {
  std::vector<int64_t> shape;
  std::vector<int64_t> offsets{0};
  std::vector<int64_t> ids;
  std::vector<float> weights;
  std::vector<double> scales;
};

// The CSR form by definition, scales in long double summed back to front.
Expected expected_csr(const Model& model, Combiner combiner, Weights with_weights, int64_t length,
                      int64_t dim) {
  const bool weighted = with_weights == Weights::kGiven;
  std::vector<std::vector<Entry>> bags;
  Expected expected;
  if (length == 0) {
    bags = model.rows;
    expected.shape = model.bag_dims;
  } else {
    for (const std::vector<Entry>& row : model.rows) {
      for (int64_t p = 0; p < length; ++p) {
        bags.emplace_back();
        for (const Entry& entry : row) {
          if (entry.position == p) bags.back().push_back(entry);
        }
      }
    }
    expected.shape = {static_cast<int64_t>(model.rows.size()), length};
  }
  expected.shape.push_back(dim);
  for (const std::vector<Entry>& bag : bags) {
    long double sum = 0, sum_squares = 0;
    for (auto entry = bag.rbegin(); entry != bag.rend(); ++entry) {
      const long double weight = weighted ? entry->weight : 1.0L;
      sum += weight;
      sum_squares += weight * weight;
    }
    for (const Entry& entry : bag) {
      expected.ids.push_back(entry.id);
      if (weighted) expected.weights.push_back(entry.weight);
    }
    expected.offsets.push_back(static_cast<int64_t>(expected.ids.size()));
    long double scale = 1;
    if (combiner == Combiner::kMean) scale = sum == 0 ? 0 : 1 / sum;
    if (combiner == Combiner::kSqrtn) scale = sum_squares == 0 ? 0 : 1 / std::sqrt(sum_squares);
    expected.scales.push_back(static_cast<double>(scale));
  }
  return expected;
}

void expect_csr(const CsrFeature& actual, const Expected& expected) {
  EXPECT_EQ(actual.activation_shape, expected.shape);
  EXPECT_EQ(actual.offsets, expected.offsets);
  EXPECT_EQ(actual.ids, expected.ids);
  ASSERT_EQ(actual.weights.size(), expected.weights.size());
  for (size_t j = 0; j < expected.weights.size(); ++j) {
    EXPECT_EQ(actual.weights[j], expected.weights[j]) << "weight " << j;
  }
  ASSERT_EQ(actual.bag_scales.size(), expected.scales.size());
  for (size_t b = 0; b < expected.scales.size(); ++b) {
    EXPECT_NEAR(actual.bag_scales[b], expected.scales[b], 2e-7 * std::abs(expected.scales[b]))
        << "bag " << b;
  }
  EXPECT_EQ(actual.num_bags(), static_cast<int64_t>(expected.scales.size()));
}

// A random model for `kind` with 1 or 2 bag_dims (2 only for dense and sparse inputs).
Model random_model(std::mt19937_64& rng, Kind kind, int num_bag_dims, int64_t vocabulary_size) {
  const auto uniform = [&rng](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  Model model;
  model.bag_dims = {uniform(0, 6)};
  if (num_bag_dims == 2) model.bag_dims = {uniform(1, 3), uniform(0, 3)};
  if (kind == Kind::kDenseRank1) model.width = 1;
  if (kind == Kind::kDense) model.width = uniform(0, 4);
  if (kind == Kind::kSparse) model.width = uniform(1, 6);
  int64_t num_rows = 1;
  for (const int64_t d : model.bag_dims) num_rows *= d;
  for (int64_t row = 0; row < num_rows; ++row) {
    const int64_t length = kind == Kind::kRagged ? uniform(0, 5) : model.width;
    model.rows.emplace_back();
    for (int64_t p = 0; p < length; ++p) {
      // Sparse rows skip positions; weights are multiples of 1/4 so every sum is exact.
      if (kind == Kind::kSparse && uniform(0, 2) == 0) continue;
      model.rows.back().push_back(
          {p, uniform(0, vocabulary_size - 1), static_cast<float>(uniform(-8, 8)) / 4.0f});
    }
    if (kind == Kind::kRagged) model.width = std::max<int64_t>(model.width, length);
  }
  return model;
}

using CrossParam = std::tuple<Kind, IdWidth, Weights, Combiner>;

class CsrFeatureCrossTest : public ::testing::TestWithParam<CrossParam> {};

TEST_P(CsrFeatureCrossTest, MatchesReferenceOnRandomInputs) {
  const auto [kind, width, with_weights, combiner] = GetParam();
  const TableConfig table{.name = "t", .vocabulary_size = 7, .dim = 3, .combiner = combiner};
  CsrFeature out;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    const bool rank3 = (kind == Kind::kDense || kind == Kind::kSparse) && seed % 3 == 2;
    const Model model = random_model(rng, kind, rank3 ? 2 : 1, table.vocabulary_size);
    const Input input = make_input(model, kind, width, with_weights);
    for (const int64_t length : {0, 1, 2, 5}) {
      SCOPED_TRACE("max_sequence_length " + std::to_string(length));
      if (kind == Kind::kDenseRank1 && length > 0) continue;
      const FeatureConfig feature{.name = "f", .table = "t", .max_sequence_length = length};
      normalize_feature(feature, table, input.view(), out);
      // Rank-3 inputs ignore max_sequence_length, as TF does for sparse ones.
      const int64_t effective_length = rank3 ? 0 : length;
      expect_csr(out, expected_csr(model, combiner, with_weights, effective_length, table.dim));
      EXPECT_EQ(activation_shape(feature, table, input.view()), out.activation_shape);
    }
  }
}

std::string kind_name(Kind kind) {
  switch (kind) {
    case Kind::kDense:
      return "Dense";
    case Kind::kDenseRank1:
      return "DenseRank1";
    case Kind::kRagged:
      return "Ragged";
    case Kind::kSparse:
      return "Sparse";
  }
  return "";
}

std::string combiner_label(Combiner combiner) {
  switch (combiner) {
    case Combiner::kSum:
      return "Sum";
    case Combiner::kMean:
      return "Mean";
    case Combiner::kSqrtn:
      return "Sqrtn";
  }
  return "";
}

std::string cross_name(const ::testing::TestParamInfo<CrossParam>& param_info) {
  const auto [kind, width, with_weights, combiner] = param_info.param;
  return kind_name(kind) + (width == IdWidth::k64 ? "Int64" : "Int32") +
         (with_weights == Weights::kGiven ? "Weighted" : "Unweighted") + combiner_label(combiner);
}

INSTANTIATE_TEST_SUITE_P(AllInputs, CsrFeatureCrossTest,
                         ::testing::Combine(::testing::Values(Kind::kDense, Kind::kDenseRank1,
                                                              Kind::kRagged, Kind::kSparse),
                                            ::testing::Values(IdWidth::k32, IdWidth::k64),
                                            ::testing::Values(Weights::kNone, Weights::kGiven),
                                            ::testing::Values(Combiner::kSum, Combiner::kMean,
                                                              Combiner::kSqrtn)),
                         cross_name);

// The fast paths (dense [B], [B, 1] and [B, L] ids, and ragged ids, which check every entry before
// writing) on larger batches than the cross test, with ids at both ends of the vocabulary.
enum class FastShape { kRank1, kColumn, kMatrix, kRagged };

Kind kind_of(FastShape shape) {
  switch (shape) {
    case FastShape::kRank1:
      return Kind::kDenseRank1;
    case FastShape::kColumn:
    case FastShape::kMatrix:
      return Kind::kDense;
    case FastShape::kRagged:
      break;
  }
  return Kind::kRagged;
}

// Rows in [min_rows, max_rows].
Model fast_model(std::mt19937_64& rng, FastShape shape, int64_t vocabulary_size,
                 int64_t min_rows = 0, int64_t max_rows = 300) {
  const auto uniform = [&rng](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  Model model{.bag_dims = {uniform(min_rows, max_rows)},
              .width = shape == FastShape::kMatrix ? uniform(0, 8) : 1};
  int64_t widest = 0;
  for (int64_t row = 0; row < model.bag_dims[0]; ++row) {
    const int64_t length = shape == FastShape::kRagged ? uniform(0, 6) : model.width;
    widest = std::max(widest, length);
    model.rows.emplace_back();
    for (int64_t p = 0; p < length; ++p) {
      const int64_t pick = uniform(0, 7);
      const int64_t id = pick == 0   ? 0
                         : pick == 1 ? vocabulary_size - 1
                                     : uniform(0, vocabulary_size - 1);
      model.rows.back().push_back({p, id, static_cast<float>(uniform(-8, 8)) / 4.0f});
    }
  }
  if (shape == FastShape::kRagged) model.width = widest;
  return model;
}

using FastParam = std::tuple<FastShape, IdWidth, Weights, Combiner>;

class CsrFeatureFastPathTest : public ::testing::TestWithParam<FastParam> {};

// Batches large enough that a pool checks and copies their ids on several threads (at least
// 16,384 ids with one id a row).
constexpr int64_t kPooledRows = 17'000;

TEST_P(CsrFeatureFastPathTest, MatchesReferenceOnRandomInputs) {
  const auto [shape, width, with_weights, combiner] = GetParam();
  const TableConfig table{.name = "t", .vocabulary_size = 100'003, .dim = 8, .combiner = combiner};
  const FeatureConfig feature{.name = "f", .table = "t"};
  support::ThreadPool pool(3);
  CsrFeature out;
  for (uint64_t seed = 100; seed < 122; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    // The last seeds: large batches, on the pool.
    const bool pooled = seed >= 120;
    const Model model =
        pooled ? fast_model(rng, shape, table.vocabulary_size, kPooledRows, kPooledRows + 1000)
               : fast_model(rng, shape, table.vocabulary_size);
    normalize_feature(feature, table, make_input(model, kind_of(shape), width, with_weights).view(),
                      out, pooled ? &pool : nullptr);
    expect_csr(out, expected_csr(model, combiner, with_weights, 0, table.dim));
    if (combiner == Combiner::kSum) {
      EXPECT_THAT(out.bag_scales, ::testing::Each(1.0f));
    } else if (with_weights == Weights::kNone) {
      // The scale depends on the id count only: bags of one count share it bit for bit.
      std::map<size_t, float> scale_of_count;
      for (size_t b = 0; b < model.rows.size(); ++b) {
        const auto [known, added] = scale_of_count.emplace(model.rows[b].size(), out.bag_scales[b]);
        EXPECT_EQ(out.bag_scales[b], known->second) << "bag " << b;
      }
    }
  }
}

// A bad id (too large, or negative) or a non-finite weight at a random entry, sometimes followed
// by a second bad id: the error names the first, on the calling thread or on a pool.
TEST_P(CsrFeatureFastPathTest, ErrorsNameTheFirstBadEntry) {
  const auto [shape, width, with_weights, combiner] = GetParam();
  const TableConfig table{.name = "t", .vocabulary_size = 1000, .dim = 4, .combiner = combiner};
  support::ThreadPool pool(3);
  int num_checked = 0;
  for (uint64_t seed = 200; seed < 242; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    const auto uniform = [&rng](int64_t lo, int64_t hi) {
      return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
    };
    const bool pooled = seed >= 240;
    Model model =
        pooled ? fast_model(rng, shape, table.vocabulary_size, kPooledRows, kPooledRows + 1000)
               : fast_model(rng, shape, table.vocabulary_size);
    std::vector<Entry*> entries;  // storage order
    std::vector<int64_t> rows;
    for (size_t row = 0; row < model.rows.size(); ++row) {
      for (Entry& entry : model.rows[row]) {
        entries.push_back(&entry);
        rows.push_back(static_cast<int64_t>(row));
      }
    }
    if (entries.empty()) continue;
    const auto bad = static_cast<size_t>(uniform(0, static_cast<int64_t>(entries.size()) - 1));
    const int64_t what = uniform(0, with_weights == Weights::kGiven ? 3 : 1);
    std::string detail;
    if (what == 0) {
      entries[bad]->id = table.vocabulary_size + uniform(0, 5);
    } else if (what == 1) {
      entries[bad]->id = -uniform(1, 3);
    } else {
      entries[bad]->weight = what == 2 ? std::numeric_limits<float>::quiet_NaN()
                                       : -std::numeric_limits<float>::infinity();
      detail = what == 2 ? "weight nan" : "weight -inf";
      detail += " is not finite (validate_weights_and_indices is set)";
    }
    if (what <= 1) {
      detail = "id " + std::to_string(entries[bad]->id) + " is out of range [0, 1000)";
    }
    if (bad + 1 < entries.size() && uniform(0, 1) == 1) {
      entries[static_cast<size_t>(
                  uniform(static_cast<int64_t>(bad) + 1, static_cast<int64_t>(entries.size()) - 1))]
          ->id = -1;
    }
    const std::string location = shape == FastShape::kRank1
                                     ? "example " + std::to_string(rows[bad])
                                     : "example " + std::to_string(rows[bad]) + ", position " +
                                           std::to_string(entries[bad]->position);
    const Input input = make_input(model, kind_of(shape), width, with_weights);
    // Dense [B, N] and ragged sequences check the same way, positions they drop included.
    for (const int64_t length : {0, 1}) {
      if (shape == FastShape::kRank1 && length > 0) continue;
      SCOPED_TRACE("max_sequence_length " + std::to_string(length));
      const FeatureConfig feature{.name = "f", .table = "t", .max_sequence_length = length};
      CsrFeature out;
      try {
        normalize_feature(feature, table, input.view(), out, pooled ? &pool : nullptr);
        ADD_FAILURE() << "normalize_feature did not throw";
      } catch (const InvalidArgument& error) {
        EXPECT_EQ(std::string(error.what()),
                  "feature 'f' (table 't'): " + location + ": " + detail);
      }
      ++num_checked;
    }
  }
  EXPECT_GE(num_checked, 32);
}

std::string fast_name(const ::testing::TestParamInfo<FastParam>& param_info) {
  const auto [shape, width, with_weights, combiner] = param_info.param;
  const char* shape_names[] = {"Rank1", "Column", "Matrix", "Ragged"};
  return shape_names[static_cast<int>(shape)] +
         std::string(width == IdWidth::k64 ? "Int64" : "Int32") +
         (with_weights == Weights::kGiven ? "Weighted" : "Unweighted") + combiner_label(combiner);
}

INSTANTIATE_TEST_SUITE_P(
    FastPaths, CsrFeatureFastPathTest,
    ::testing::Combine(::testing::Values(FastShape::kRank1, FastShape::kColumn, FastShape::kMatrix,
                                         FastShape::kRagged),
                       ::testing::Values(IdWidth::k32, IdWidth::k64),
                       ::testing::Values(Weights::kNone, Weights::kGiven),
                       ::testing::Values(Combiner::kSum, Combiner::kMean, Combiner::kSqrtn)),
    fast_name);

// Table of TF's fixture: row r of a dim-d table is [d*r, d*r + 1, ..., d*r + d - 1].
std::vector<std::vector<double>> fixture_activations(const CsrFeature& csr, int64_t dim) {
  std::vector<std::vector<double>> activations;
  for (int64_t b = 0; b < csr.num_bags(); ++b) {
    std::vector<double> activation(static_cast<size_t>(dim));
    for (int64_t j = csr.offsets[b]; j < csr.offsets[b + 1]; ++j) {
      const double weight = csr.weights.empty() ? 1.0 : csr.weights[j];
      for (int64_t k = 0; k < dim; ++k) {
        activation[k] += csr.bag_scales[b] * weight * static_cast<double>(dim * csr.ids[j] + k);
      }
    }
    activations.push_back(activation);
  }
  return activations;
}

Model fixture_model(const std::vector<std::vector<int64_t>>& rows) {
  Model model{.bag_dims = {static_cast<int64_t>(rows.size())}, .width = 3};
  for (const std::vector<int64_t>& ids : rows) {
    model.rows.emplace_back();
    for (size_t p = 0; p < ids.size(); ++p) {
      model.rows.back().push_back({static_cast<int64_t>(p), ids[p], 1.0f});
    }
  }
  return model;
}

TEST(CsrFeatureTest, TfFixtureSparseAndRagged) {
  const TableConfig video{
      .name = "video", .vocabulary_size = 8, .dim = 4, .combiner = Combiner::kSum};
  const TableConfig user{
      .name = "user", .vocabulary_size = 16, .dim = 2, .combiner = Combiner::kMean};
  const Model watched = fixture_model({{0}, {0, 1}, {0, 1}, {1}});
  const Model favorited = fixture_model({{0, 1}, {1}, {0}, {0, 1}});
  const Model friends = fixture_model({{3}, {0, 1, 2}, {3}, {0, 1, 2}});
  for (const Kind kind : {Kind::kSparse, Kind::kRagged}) {
    SCOPED_TRACE(kind_name(kind));
    CsrFeature out;
    normalize_feature({.name = "watched", .table = "video"}, video,
                      make_input(watched, kind, IdWidth::k32, Weights::kNone).view(), out);
    EXPECT_THAT(out.activation_shape, ElementsAre(4, 4));
    EXPECT_THAT(out.offsets, ElementsAre(0, 1, 3, 5, 6));
    EXPECT_THAT(fixture_activations(out, 4),
                ElementsAre(ElementsAre(0, 1, 2, 3), ElementsAre(4, 6, 8, 10),
                            ElementsAre(4, 6, 8, 10), ElementsAre(4, 5, 6, 7)));
    normalize_feature({.name = "favorited", .table = "video"}, video,
                      make_input(favorited, kind, IdWidth::k64, Weights::kNone).view(), out);
    EXPECT_THAT(fixture_activations(out, 4)[1], ElementsAre(4, 5, 6, 7));
    normalize_feature({.name = "friends", .table = "user"}, user,
                      make_input(friends, kind, IdWidth::k64, Weights::kNone).view(), out);
    EXPECT_THAT(out.bag_scales, ElementsAre(1.0f, 1.0f / 3.0f, 1.0f, 1.0f / 3.0f));
    EXPECT_THAT(fixture_activations(out, 2)[0], ElementsAre(6, 7));
    EXPECT_NEAR(fixture_activations(out, 2)[1][0], 2.0, 1e-6);

    // TF's sequence test: lengths 2 and 3 give the masks [[1, 0], [1, 1]] and [[1, 0, 0], [1, 1,
    // 1]].
    normalize_feature({.name = "watched", .table = "video", .max_sequence_length = 2}, video,
                      make_input(watched, kind, IdWidth::k64, Weights::kNone).view(), out);
    EXPECT_THAT(out.activation_shape, ElementsAre(4, 2, 4));
    EXPECT_THAT(out.offsets, ElementsAre(0, 1, 1, 2, 3, 4, 5, 6, 6));
    normalize_feature({.name = "friends", .table = "user", .max_sequence_length = 3}, user,
                      make_input(friends, kind, IdWidth::k32, Weights::kNone).view(), out);
    EXPECT_THAT(out.activation_shape, ElementsAre(4, 3, 2));
    EXPECT_THAT(out.offsets, ElementsAre(0, 1, 1, 1, 2, 3, 4, 5, 5, 5, 6, 7, 8));
    EXPECT_THAT(out.bag_scales, ElementsAre(1, 0, 0, 1, 1, 1, 1, 0, 0, 1, 1, 1));
  }
}

TEST(CsrFeatureTest, TfFixtureDenseAndHighDimensional) {
  const TableConfig video{
      .name = "video", .vocabulary_size = 8, .dim = 4, .combiner = Combiner::kSum};
  const std::vector<int32_t> watched = {0, 0, 1, 0};
  CsrFeature out;
  normalize_feature({.name = "watched", .table = "video"}, video,
                    DenseIds{.ids = std::span<const int32_t>(watched), .shape = {4}}, out);
  EXPECT_THAT(out.activation_shape, ElementsAre(4, 4));
  EXPECT_THAT(out.offsets, ElementsAre(0, 1, 2, 3, 4));
  EXPECT_THAT(out.ids, ElementsAre(0, 0, 1, 0));
  EXPECT_TRUE(out.weights.empty());

  // The sparse fixture stacked 4x along a new leading axis; max_sequence_length is ignored.
  Model stacked{.bag_dims = {4, 4}, .width = 2};
  for (int copy = 0; copy < 4; ++copy) {
    for (const auto& ids : std::vector<std::vector<int64_t>>{{0}, {0, 1}, {0, 1}, {1}}) {
      stacked.rows.emplace_back();
      for (size_t p = 0; p < ids.size(); ++p) {
        stacked.rows.back().push_back({static_cast<int64_t>(p), ids[p], 1.0f});
      }
    }
  }
  const FeatureConfig feature{.name = "watched", .table = "video", .max_sequence_length = 2};
  normalize_feature(feature, video,
                    make_input(stacked, Kind::kSparse, IdWidth::k64, Weights::kNone).view(), out);
  expect_csr(out, expected_csr(stacked, Combiner::kSum, Weights::kNone, 0, 4));
  EXPECT_THAT(out.activation_shape, ElementsAre(4, 4, 4));
}

TEST(CsrFeatureTest, EmptyBagsAndDuplicateIds) {
  const std::vector<int64_t> values = {2, 2, 5};
  const std::vector<int64_t> splits = {0, 0, 2, 2, 3};
  const RaggedIds input{.values = values, .row_splits = std::span<const int64_t>(splits)};
  CsrFeature out;
  for (const Combiner combiner : {Combiner::kSum, Combiner::kMean, Combiner::kSqrtn}) {
    normalize_feature({.name = "f", .table = "t"},
                      {.name = "t", .vocabulary_size = 6, .dim = 1, .combiner = combiner}, input,
                      out);
    EXPECT_THAT(out.offsets, ElementsAre(0, 0, 2, 2, 3));
    EXPECT_THAT(out.ids, ElementsAre(2, 2, 5));
    const float pair = combiner == Combiner::kSum    ? 1.0f
                       : combiner == Combiner::kMean ? 0.5f
                                                     : static_cast<float>(1.0 / std::sqrt(2.0));
    const float empty = combiner == Combiner::kSum ? 1.0f : 0.0f;
    EXPECT_THAT(out.bag_scales, ElementsAre(empty, pair, empty, 1.0f));
  }
}

TEST(CsrFeatureTest, ZeroWeightSumsGiveZeroScale) {
  const std::vector<int32_t> ids = {1, 2, 3, 4, 5, 6};
  const std::vector<float> weights = {0.5f, -0.5f, 0.0f, 0.0f, 3.0f, -4.0f};
  const DenseIds input{.ids = std::span<const int32_t>(ids), .shape = {3, 2}, .weights = weights};
  CsrFeature out;
  const FeatureConfig feature{.name = "f", .table = "t"};
  normalize_feature(feature, {.name = "t", .vocabulary_size = 7, .dim = 1}, input, out);
  EXPECT_THAT(out.bag_scales, ElementsAre(0.0f, 0.0f, -1.0f));
  EXPECT_THAT(out.weights, ElementsAreArray(weights));
  normalize_feature(feature,
                    {.name = "t", .vocabulary_size = 7, .dim = 1, .combiner = Combiner::kSqrtn},
                    input, out);
  EXPECT_THAT(out.bag_scales, ElementsAre(static_cast<float>(1 / std::sqrt(0.5)), 0.0f, 0.2f));
}

TEST(CsrFeatureTest, SequenceBagsOfOneFollowTheCombiner) {
  // Each (example, position) is a bag of one: sum w*e, mean e, sqrtn sign(w)*e, zero for w = 0.
  const std::vector<int64_t> values = {1, 2, 3};
  const std::vector<int32_t> splits = {0, 3};
  const std::vector<float> weights = {-2.0f, 0.0f, 4.0f};
  const RaggedIds input{
      .values = values, .row_splits = std::span<const int32_t>(splits), .weights = weights};
  const FeatureConfig feature{.name = "f", .table = "t", .max_sequence_length = 4};
  CsrFeature out;
  const std::vector<std::pair<Combiner, std::vector<float>>> cases = {
      {Combiner::kSum, {1, 1, 1, 1}},
      {Combiner::kMean, {-0.5f, 0, 0.25f, 0}},
      {Combiner::kSqrtn, {0.5f, 0, 0.25f, 0}}};
  for (const auto& [combiner, scales] : cases) {
    normalize_feature(feature, {.name = "t", .vocabulary_size = 4, .dim = 2, .combiner = combiner},
                      input, out);
    EXPECT_THAT(out.activation_shape, ElementsAre(1, 4, 2));
    EXPECT_THAT(out.offsets, ElementsAre(0, 1, 2, 3, 3));
    EXPECT_THAT(out.bag_scales, ElementsAreArray(scales));
  }
}

TEST(CsrFeatureTest, SequenceTruncatesAndPadsEveryInputKind) {
  const TableConfig table{.name = "t", .vocabulary_size = 10, .dim = 2, .combiner = Combiner::kSum};
  const FeatureConfig feature{.name = "f", .table = "t", .max_sequence_length = 2};
  CsrFeature out;
  // Ragged [[1, 2, 3], [4]]: position 2 is dropped, (1, 1) is padding.
  const std::vector<int64_t> ragged_values = {1, 2, 3, 4};
  const std::vector<int64_t> splits = {0, 3, 4};
  normalize_feature(
      feature, table,
      RaggedIds{.values = ragged_values, .row_splits = std::span<const int64_t>(splits)}, out);
  EXPECT_THAT(out.offsets, ElementsAre(0, 1, 2, 3, 3));
  EXPECT_THAT(out.ids, ElementsAre(1, 2, 4));
  // Sparse with a gap: (0, 1) and (1, 0) are padding, (0, 2) is dropped.
  const std::vector<int64_t> indices = {0, 0, 0, 2, 1, 1};
  const std::vector<int32_t> sparse_values = {5, 6, 7};
  normalize_feature(feature, table,
                    SparseIds{.indices = indices,
                              .values = std::span<const int32_t>(sparse_values),
                              .dense_shape = {2, 3}},
                    out);
  EXPECT_THAT(out.offsets, ElementsAre(0, 1, 1, 1, 2));
  EXPECT_THAT(out.ids, ElementsAre(5, 7));
  // Dense [2, 1] with L = 2: the second position of every example is padding.
  const std::vector<int64_t> dense_values = {8, 9};
  normalize_feature(feature, table, DenseIds{.ids = dense_values, .shape = {2, 1}}, out);
  EXPECT_THAT(out.activation_shape, ElementsAre(2, 2, 2));
  EXPECT_THAT(out.offsets, ElementsAre(0, 1, 1, 2, 2));
  EXPECT_THAT(out.ids, ElementsAre(8, 9));
}

TEST(CsrFeatureTest, OutputShapeReshapesOrMakesASequence) {
  const TableConfig table{.name = "t", .vocabulary_size = 10, .dim = 3, .combiner = Combiner::kSum};
  const std::vector<int64_t> values = {1, 2, 3, 4, 5};
  const std::vector<int64_t> splits = {0, 1, 3, 3, 5};
  const RaggedIds ragged{.values = values, .row_splits = std::span<const int64_t>(splits)};
  CsrFeature out;
  // The product equals the 4 bags: a plain reshape; max_sequence_length is then ignored.
  const FeatureConfig reshaped{
      .name = "f", .table = "t", .max_sequence_length = 7, .output_shape = {2, 2}};
  normalize_feature(reshaped, table, ragged, out);
  EXPECT_THAT(out.activation_shape, ElementsAre(2, 2, 3));
  EXPECT_THAT(out.offsets, ElementsAre(0, 1, 3, 3, 5));
  // 8 = 2 * batch 4: a sequence of length 2.
  normalize_feature({.name = "f", .table = "t", .output_shape = {2, 4}}, table, ragged, out);
  EXPECT_THAT(out.activation_shape, ElementsAre(2, 4, 3));
  EXPECT_THAT(out.offsets, ElementsAre(0, 1, 1, 2, 3, 3, 3, 4, 5));
  EXPECT_EQ(activation_shape({.name = "f", .table = "t", .output_shape = {12}}, table, ragged),
            (std::vector<int64_t>{12, 3}));

  const std::vector<int64_t> dense_values = {1, 2, 3, 4, 5, 6};
  const DenseIds dense{.ids = dense_values, .shape = {2, 3}};
  normalize_feature({.name = "f", .table = "t", .output_shape = {4}}, table, dense, out);
  EXPECT_THAT(out.activation_shape, ElementsAre(4, 3));
  EXPECT_THAT(out.offsets, ElementsAre(0, 1, 2, 3, 4));
  EXPECT_THAT(out.ids, ElementsAre(1, 2, 4, 5));
  const DenseIds rank1{.ids = dense_values, .shape = {6}};
  normalize_feature({.name = "f", .table = "t", .output_shape = {3, 2}}, table, rank1, out);
  EXPECT_THAT(out.activation_shape, ElementsAre(3, 2, 3));
  EXPECT_EQ(out.num_bags(), 6);

  // Rank-3 sparse: a reshape of its 4 bags, never a sequence.
  const std::vector<int64_t> indices = {0, 0, 0, 1, 1, 2};
  const std::vector<int64_t> sparse_values = {1, 2};
  const SparseIds sparse{.indices = indices, .values = sparse_values, .dense_shape = {2, 2, 3}};
  normalize_feature({.name = "f", .table = "t", .output_shape = {4}}, table, sparse, out);
  EXPECT_THAT(out.activation_shape, ElementsAre(4, 3));
  EXPECT_THAT(out.offsets, ElementsAre(0, 1, 1, 1, 2));
}

// The message of the InvalidArgument normalize_feature throws for `input`.
std::string normalize_error(const FeatureConfig& feature, const TableConfig& table,
                            const FeatureInput& input) {
  CsrFeature out;
  return test::error_of<InvalidArgument>([&] { normalize_feature(feature, table, input, out); });
}

TEST(CsrFeatureErrorTest, IdsOutOfRangeNameFeatureExampleAndValue) {
  const TableConfig video{.name = "video", .vocabulary_size = 1000, .dim = 4};
  const FeatureConfig watched{.name = "watched", .table = "video"};
  for (const IdWidth width : {IdWidth::k32, IdWidth::k64}) {
    SCOPED_TRACE(width == IdWidth::k64 ? "int64 ids" : "int32 ids");
    const Model rows = fixture_model({{1}, {2}, {3}, {4, 1200}});
    const std::string ragged = normalize_error(
        watched, video, make_input(rows, Kind::kRagged, width, Weights::kNone).view());
    EXPECT_THAT(ragged, HasSubstr("feature 'watched' (table 'video')"));
    EXPECT_THAT(ragged, HasSubstr("example 3, position 1: id 1200 is out of range [0, 1000)"));
    EXPECT_THAT(normalize_error(watched, video,
                                make_input(rows, Kind::kSparse, width, Weights::kNone).view()),
                HasSubstr("entry [3, 1]: id 1200 is out of range"));

    Input dense =
        make_input(fixture_model({{1, 2, 3}, {4, 5, -1}}), Kind::kDense, width, Weights::kNone);
    EXPECT_THAT(normalize_error(watched, video, dense.view()),
                HasSubstr("example 1, position 2: id -1 "));
    dense.shape = {1, 2, 3};
    EXPECT_THAT(normalize_error(watched, video, dense.view()),
                HasSubstr("example [0, 1], position 2: id -1 "));
    dense.shape = {6};
    EXPECT_THAT(normalize_error(watched, video, dense.view()), HasSubstr("example 5: id -1 "));
  }
  // Ids are checked even without weight validation and at positions a sequence drops.
  const Model truncated = fixture_model({{1, 2, 1000}});
  EXPECT_THAT(normalize_error(
                  {.name = "watched",
                   .table = "video",
                   .max_sequence_length = 2,
                   .validate_weights_and_indices = false},
                  video, make_input(truncated, Kind::kRagged, IdWidth::k64, Weights::kNone).view()),
              HasSubstr("example 0, position 2: id 1000 is out of range"));
}

TEST(CsrFeatureErrorTest, Weights) {
  const TableConfig table{.name = "t", .vocabulary_size = 10, .dim = 4};
  Input input = make_input(fixture_model({{1, 2, 3}, {4, 5, 6}}), Kind::kRagged, IdWidth::k64,
                           Weights::kGiven);
  input.weights.pop_back();
  EXPECT_THAT(normalize_error({.name = "f", .table = "t"}, table, input.view()),
              HasSubstr("feature 'f' (table 't'): 5 weights for 6 ids"));
  input.weights = {1, 1, 1, 1, std::numeric_limits<float>::quiet_NaN(), 1};
  EXPECT_THAT(
      normalize_error({.name = "f", .table = "t"}, table, input.view()),
      HasSubstr("feature 'f' (table 't'): example 1, position 1: weight nan is not finite"));
  input.weights[4] = -std::numeric_limits<float>::infinity();
  EXPECT_THAT(normalize_error({.name = "f", .table = "t"}, table, input.view()),
              HasSubstr("example 1, position 1: weight -inf is not finite"));
  CsrFeature out;
  normalize_feature({.name = "f", .table = "t", .validate_weights_and_indices = false}, table,
                    input.view(), out);
  EXPECT_TRUE(std::isinf(out.weights[4]));
}

TEST(CsrFeatureErrorTest, Shapes) {
  const TableConfig table{.name = "t", .vocabulary_size = 10, .dim = 4};
  const FeatureConfig feature{.name = "f", .table = "t"};
  const std::vector<int64_t> ids = {1, 2, 3, 4, 5, 6};
  EXPECT_THAT(normalize_error(feature, table, DenseIds{.ids = ids, .shape = {}}),
              HasSubstr("feature 'f' (table 't'): dense ids have an empty shape"));
  EXPECT_THAT(normalize_error(feature, table, DenseIds{.ids = ids, .shape = {-2, -3}}),
              HasSubstr("dense shape [-2, -3] has a negative dimension"));
  EXPECT_THAT(normalize_error(feature, table, DenseIds{.ids = ids, .shape = {2, 2}}),
              HasSubstr("dense shape [2, 2] needs 4 ids but 6 were given"));
  EXPECT_THAT(normalize_error(
                  feature, table,
                  DenseIds{.ids = std::span<const int64_t>(), .shape = {int64_t{1} << 62, 8, 0}}),
              HasSubstr("dense shape [4611686018427387904, 8, 0] is too large"));
  EXPECT_THAT(normalize_error({.name = "f", .table = "t", .max_sequence_length = 3}, table,
                              DenseIds{.ids = ids, .shape = {6}}),
              HasSubstr("feature 'f' (table 't') is a sequence feature (max_sequence_length 3)"));
  EXPECT_THAT(normalize_error({.name = "f", .table = "t", .max_sequence_length = -1}, table,
                              DenseIds{.ids = ids, .shape = {6}}),
              HasSubstr("max_sequence_length -1 is negative"));

  const auto ragged_error = [&](std::vector<int32_t> splits) {
    return normalize_error(
        feature, table, RaggedIds{.values = ids, .row_splits = std::span<const int32_t>(splits)});
  };
  EXPECT_THAT(ragged_error({}), HasSubstr("row_splits is empty"));
  EXPECT_THAT(ragged_error({1, 6}), HasSubstr("row_splits[0] = 1 must be 0"));
  EXPECT_THAT(ragged_error({0, 4, 3, 6}),
              HasSubstr("row_splits[2] = 3 is less than row_splits[1] = 4"));
  EXPECT_THAT(ragged_error({0, 2, 5}),
              HasSubstr("row_splits[2] = 5 must equal the number of values 6"));

  const auto sparse_error = [&](std::vector<int64_t> indices, std::vector<int64_t> dense_shape) {
    return normalize_error(
        feature, table,
        SparseIds{.indices = indices,
                  .values = std::span<const int64_t>(ids).first(indices.size() / 2),
                  .dense_shape = dense_shape});
  };
  EXPECT_THAT(sparse_error({0, 0}, {4}), HasSubstr("sparse dense_shape [4] has rank 1"));
  EXPECT_THAT(sparse_error({0, 0}, {4, -1}), HasSubstr("dense_shape [4, -1] has a negative"));
  EXPECT_THAT(normalize_error(feature, table,
                              SparseIds{.indices = ids, .values = ids, .dense_shape = {4, 4}}),
              HasSubstr("sparse indices hold 6 values but 6 entries of rank 2 need 12"));
  EXPECT_THAT(sparse_error({0, 0, 4, 0}, {4, 2}),
              HasSubstr("entry [4, 0] is outside dense_shape [4, 2]"));
  EXPECT_THAT(sparse_error({0, -1}, {4, 2}), HasSubstr("entry [0, -1] is outside dense_shape"));
  EXPECT_THAT(sparse_error({1, 2}, {4, 2}), HasSubstr("entry [1, 2] is outside dense_shape"));
  EXPECT_THAT(sparse_error({1, 1, 1, 0}, {4, 2}),
              HasSubstr("entry [1, 0] follows entry [1, 1]; indices must be in canonical"));
  EXPECT_THAT(sparse_error({1, 1, 1, 1}, {4, 2}), HasSubstr("entry [1, 1] follows entry [1, 1]"));
  EXPECT_THAT(sparse_error({2, 0, 1, 1}, {4, 2}), HasSubstr("entry [1, 1] follows entry [2, 0]"));
}

TEST(CsrFeatureErrorTest, OutputShape) {
  const TableConfig table{.name = "t", .vocabulary_size = 10, .dim = 4};
  const std::vector<int64_t> ids = {1, 2, 3, 4};
  const std::vector<int64_t> splits = {0, 1, 2, 3, 4};
  const RaggedIds ragged{.values = ids, .row_splits = std::span<const int64_t>(splits)};
  const std::string error =
      normalize_error({.name = "f", .table = "t", .output_shape = {3}}, table, ragged);
  EXPECT_THAT(error, HasSubstr("feature 'f' (table 't'): output_shape [3] (3 bags)"));
  EXPECT_THAT(error, HasSubstr("the input's 4 bags nor a multiple of its batch size"));
  EXPECT_THAT(normalize_error({.name = "f", .table = "t", .output_shape = {2, 0}}, table, ragged),
              HasSubstr("output_shape [2, 0] has a dimension < 1"));
  EXPECT_THAT(activation_shape({.name = "f", .table = "t", .output_shape = {8}}, table, ragged),
              ElementsAre(8, 4));
  // Rank-1 dense and rank-3 sparse inputs cannot become sequences.
  EXPECT_THAT(normalize_error({.name = "f", .table = "t", .output_shape = {8}}, table,
                              DenseIds{.ids = ids, .shape = {4}}),
              HasSubstr("matches neither the input's 4 bags (only ragged and rank-2 inputs"));
  const std::vector<int64_t> indices = {0, 0, 0};
  EXPECT_THAT(normalize_error({.name = "f", .table = "t", .output_shape = {4}}, table,
                              SparseIds{.indices = indices,
                                        .values = std::span<const int64_t>(ids).first(1),
                                        .dense_shape = {1, 2, 3}}),
              HasSubstr("output_shape [4] (4 bags) matches neither the input's 2 bags"));
}

TEST(CsrFeatureTest, ReusesCapacity) {
  const TableConfig table{
      .name = "t", .vocabulary_size = 1000, .dim = 8, .combiner = Combiner::kSqrtn};
  for (const int64_t length : {0, 20}) {
    SCOPED_TRACE("max_sequence_length " + std::to_string(length) + ", seed 7");
    const FeatureConfig feature{.name = "f", .table = "t", .max_sequence_length = length};
    std::mt19937_64 rng(7);
    std::uniform_int_distribution<int64_t> id(0, 999);
    std::vector<int64_t> ids(4096 * 20);
    std::vector<float> weights(ids.size(), 0.5f);
    const DenseIds input{.ids = ids, .shape = {4096, 20}, .weights = weights};
    CsrFeature out;
    for (int64_t& value : ids) value = id(rng);
    normalize_feature(feature, table, input, out);
    const auto pointers = std::make_tuple(out.offsets.data(), out.ids.data(), out.weights.data(),
                                          out.bag_scales.data(), out.activation_shape.data());
    const auto capacities =
        std::make_tuple(out.offsets.capacity(), out.ids.capacity(), out.weights.capacity(),
                        out.bag_scales.capacity(), out.activation_shape.capacity());
    for (int64_t& value : ids) value = id(rng);
    normalize_feature(feature, table, input, out);
    EXPECT_EQ(std::make_tuple(out.offsets.data(), out.ids.data(), out.weights.data(),
                              out.bag_scales.data(), out.activation_shape.data()),
              pointers);
    EXPECT_EQ(std::make_tuple(out.offsets.capacity(), out.ids.capacity(), out.weights.capacity(),
                              out.bag_scales.capacity(), out.activation_shape.capacity()),
              capacities);
    EXPECT_EQ(out.ids, ids);
  }
}

}  // namespace
}  // namespace recemb::internal
