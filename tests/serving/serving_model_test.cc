// ServingModel (src/serving/serving_model.cc) lookups: exported models against the Embedding they
// came from (bitwise, over the values the file stores) and against the float64 reference of its
// float32 tables (within the documented float16 / int8 bounds); input validation identical to
// Embedding::lookup; sharing and threads. Opening, verifying and damaged files are in
// serving_model_files_test.cc.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "recemb/embedding.h"
#include "recemb/error.h"
#include "recemb/serving.h"

#include "batch/csr_feature.h"
#include "reference/reference_embedding.h"
#include "serving/model_file.h"
#include "serving/serving_scenario.h"
#include "testing/embedding_calls.h"
#include "testing/error_of.h"
#include "testing/files.h"
#include "testing/random_batches.h"
#include "testing/temporary_directory.h"

namespace recemb {
namespace {

using test::bitwise_equal;
using test::error_of;
using test::IdWidth;
using test::kDtypes;
using test::lookup_activations;
using test::make_layer;
using test::make_scenario;
using test::ModelFile;
using test::OwnedInput;
using test::product;
using test::random_inputs;
using test::Scenario;
using test::TemporaryDirectory;
using ::testing::HasSubstr;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr Combiner kCombiners[] = {Combiner::kSum, Combiner::kMean, Combiner::kSqrtn};

std::vector<float> parameters(const Embedding& layer, const std::string& table) {
  std::vector<float> values(
      static_cast<size_t>(product(layer.variable_shape(table, "parameters"))));
  layer.read_variable(table, "parameters", values);
  return values;
}

std::string dtype_case_name(ServingDtype dtype, Combiner combiner) {
  return std::string(serving_dtype_name(dtype)) + "_" + std::string(combiner_name(combiner));
}

// ------------------------------------------------------------------------------------------------
// Lookups equal the Embedding's, bitwise, over the values the file stores.

class ServingLookupTest : public ::testing::TestWithParam<std::tuple<ServingDtype, Combiner>> {};

// The model is looked up exactly as an Embedding whose tables hold the values the file stores
// (decoded by the test from the bytes, as docs/serving.md defines them): same validation, same
// bags, same pooling order, same float32 arithmetic. For float32 that Embedding is the exported
// one itself. A table with simulated quantization is part of the model.
TEST_P(ServingLookupTest, EqualsEmbeddingLookupOfTheStoredValuesBitwise) {
  const auto [dtype, combiner] = GetParam();
  const uint64_t seed = 97 + 10 * static_cast<uint64_t>(dtype) + static_cast<uint64_t>(combiner);
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const Scenario scenario = make_scenario(combiner, true);
  Embedding layer = make_layer(scenario, seed);
  const TemporaryDirectory directory;
  const std::filesystem::path path = directory / "model.recemb";
  export_serving_model(layer, path, {.dtype = dtype});
  const ServingModel model = ServingModel::open(path);

  EXPECT_EQ(model.dtype(), dtype);
  EXPECT_EQ(model.path(), path);
  ASSERT_EQ(model.tables().size(), scenario.tables.size());
  for (size_t t = 0; t < scenario.tables.size(); ++t) {
    const TableConfig& table = model.tables()[t];
    EXPECT_EQ(table.name, scenario.tables[t].name);
    EXPECT_EQ(table.vocabulary_size, scenario.tables[t].vocabulary_size);
    EXPECT_EQ(table.dim, scenario.tables[t].dim);
    EXPECT_EQ(table.combiner, scenario.tables[t].combiner);
    EXPECT_EQ(table.quantization_config.has_value(),
              scenario.tables[t].quantization_config.has_value());
    EXPECT_FALSE(table.optimizer.has_value()) << table.name;
  }
  ASSERT_EQ(model.features().size(), scenario.features.size());
  for (size_t f = 0; f < scenario.features.size(); ++f) {
    EXPECT_EQ(model.features()[f].name, scenario.features[f].name);
    EXPECT_EQ(model.features()[f].table, scenario.features[f].table);
    EXPECT_EQ(model.features()[f].output_shape, scenario.features[f].output_shape);
    EXPECT_EQ(model.features()[f].max_sequence_length, scenario.features[f].max_sequence_length);
  }

  const ModelFile file = ModelFile::read(path);
  std::optional<Embedding> decoded;
  if (dtype != ServingDtype::kFloat32) decoded.emplace(make_layer(scenario, seed + 1));
  for (size_t t = 0; t < scenario.tables.size(); ++t) {
    const std::vector<float> stored = file.decode(t);
    if (decoded) {
      decoded->write_variable(scenario.tables[t].name, "parameters", stored);
    } else {
      EXPECT_TRUE(bitwise_equal(stored, parameters(layer, scenario.tables[t].name)));
    }
  }
  Embedding& expected_layer = decoded ? *decoded : layer;

  std::mt19937_64 rng(seed);
  for (int batch = 0; batch < 8; ++batch) {
    const std::vector<OwnedInput> inputs = random_inputs(rng, scenario);
    const std::vector<FeatureInput> views = test::views_of(inputs);
    const auto actual = lookup_activations(model, views);
    const auto expected = lookup_activations(expected_layer, views);
    for (size_t f = 0; f < views.size(); ++f) {
      EXPECT_EQ(model.activation_shape(f, views[f]), expected_layer.activation_shape(f, views[f]));
      EXPECT_TRUE(bitwise_equal(actual[f], expected[f]))
          << "batch " << batch << " feature " << scenario.features[f].name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllDtypesAndCombiners, ServingLookupTest,
                         ::testing::Combine(::testing::ValuesIn(kDtypes),
                                            ::testing::ValuesIn(kCombiners)),
                         [](const auto& test_info) {
                           return dtype_case_name(std::get<0>(test_info.param),
                                                  std::get<1>(test_info.param));
                         });

// ------------------------------------------------------------------------------------------------
// float16 and int8 activations within the documented bound of the float32 ones.

// docs/serving.md: the stored value x^ of a float32 table value x, in a row whose values span
// [low, high], satisfies |x^ - x| <= e(x) with
//   float16: e(x) = max(2^-11 |x|, 2^-25)
//   int8:    e(x) = (high - low) / 255 / 2 + 2^-20 max(|low|, |high|)
std::vector<double> value_bounds(ServingDtype dtype, const std::vector<float>& table, int64_t dim) {
  std::vector<double> bounds(table.size());
  for (size_t row = 0; row < table.size() / static_cast<size_t>(dim); ++row) {
    const auto first = table.begin() + static_cast<std::ptrdiff_t>(row * dim);
    const double low = *std::min_element(first, first + dim);
    const double high = *std::max_element(first, first + dim);
    for (int64_t d = 0; d < dim; ++d) {
      const size_t i = row * static_cast<size_t>(dim) + static_cast<size_t>(d);
      bounds[i] =
          dtype == ServingDtype::kFloat16
              ? std::max(std::ldexp(std::abs(double{table[i]}), -11), 0x1p-25)
              : (high - low) / 255 / 2 + std::ldexp(std::max(std::abs(low), std::abs(high)), -20);
    }
  }
  return bounds;
}

class ServingErrorBoundTest : public ::testing::TestWithParam<std::tuple<ServingDtype, Combiner>> {
};

// Each activation is a_b = s_b sum_j w_j x_j (s_b the combiner's scale of bag b). The documented
// bound for the served one is |s_b| sum_j |w_j| e(x_j), plus float32 rounding of the sum, at most
// (n_b + 2) 2^-24 |s_b| sum_j |w_j| (|x_j| + e(x_j)) for a bag of n_b ids. The expected values come
// from the float64 reference over the float32 tables; the bags (only used to size the bound) from
// the library's normalisation.
TEST_P(ServingErrorBoundTest, StoredValuesAndActivationsWithinTheDocumentedBounds) {
  const auto [dtype, combiner] = GetParam();
  const uint64_t seed = 311 + 10 * static_cast<uint64_t>(dtype) + static_cast<uint64_t>(combiner);
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const Scenario scenario = make_scenario(combiner, false);
  const Embedding layer = make_layer(scenario, seed);
  reference::ReferenceEmbedding reference = reference::ReferenceEmbedding::like(layer);
  const TemporaryDirectory directory;
  export_serving_model(layer, directory / "model.recemb", {.dtype = dtype});
  const ServingModel model = ServingModel::open(directory / "model.recemb");
  const ModelFile file = ModelFile::read(directory / "model.recemb");

  std::vector<std::vector<float>> tables;
  std::vector<std::vector<double>> bounds;
  double worst_value = 0.0;  // the largest error as a share of its bound
  for (size_t t = 0; t < scenario.tables.size(); ++t) {
    tables.push_back(parameters(layer, scenario.tables[t].name));
    bounds.push_back(value_bounds(dtype, tables[t], scenario.tables[t].dim));
    const std::vector<float> stored = file.decode(t);
    for (size_t i = 0; i < stored.size(); ++i) {
      const double error = std::abs(double{stored[i]} - tables[t][i]);
      EXPECT_LE(error, bounds[t][i]) << scenario.tables[t].name << " value " << i;
      worst_value = std::max(worst_value, error / bounds[t][i]);
    }
  }
  EXPECT_GT(worst_value, 0.5) << "the stored values are not (or hardly) rounded";

  double worst_activation = 0.0;
  std::mt19937_64 rng(seed);
  for (int batch = 0; batch < 8; ++batch) {
    const std::vector<OwnedInput> inputs = random_inputs(rng, scenario);
    const std::vector<FeatureInput> views = test::views_of(inputs);
    const auto actual = lookup_activations(model, views);
    const auto expected = reference.lookup(views);
    for (size_t f = 0; f < views.size(); ++f) {
      const FeatureConfig& feature = scenario.features[f];
      size_t t = 0;
      while (scenario.tables[t].name != feature.table) ++t;
      const int64_t dim = scenario.tables[t].dim;
      internal::CsrFeature csr;
      internal::normalize_feature(feature, model.tables()[t], views[f], csr);
      ASSERT_EQ(actual[f].size(), expected[f].size());
      ASSERT_EQ(static_cast<int64_t>(actual[f].size()), csr.num_bags() * dim);
      for (int64_t b = 0; b < csr.num_bags(); ++b) {
        const double scale = std::abs(double{csr.bag_scales[b]});
        for (int64_t d = 0; d < dim; ++d) {
          double quantization = 0.0, magnitude = 0.0;
          for (int64_t j = csr.offsets[b]; j < csr.offsets[b + 1]; ++j) {
            const double weight = csr.weights.empty() ? 1.0 : std::abs(double{csr.weights[j]});
            const size_t i = static_cast<size_t>(csr.ids[j] * dim + d);
            quantization += weight * bounds[t][i];
            magnitude += weight * (std::abs(double{tables[t][i]}) + bounds[t][i]);
          }
          const double rounding = static_cast<double>(csr.offsets[b + 1] - csr.offsets[b] + 2) *
                                  0x1p-24 * scale * magnitude;
          const size_t k = static_cast<size_t>(b * dim + d);
          const double error = std::abs(double{actual[f][k]} - expected[f][k]);
          EXPECT_LE(error, scale * quantization + rounding)
              << "batch " << batch << " feature " << feature.name << " bag " << b << " column " << d
              << ": served " << actual[f][k] << ", float64 " << expected[f][k];
          if (quantization > 0) {
            worst_activation = std::max(worst_activation, error / (scale * quantization));
          }
        }
      }
    }
  }
  EXPECT_GT(worst_activation, 0.1) << "the activations do not use the stored values";
}

INSTANTIATE_TEST_SUITE_P(ReducedPrecision, ServingErrorBoundTest,
                         ::testing::Combine(::testing::Values(ServingDtype::kFloat16,
                                                              ServingDtype::kInt8),
                                            ::testing::ValuesIn(kCombiners)),
                         [](const auto& test_info) {
                           return dtype_case_name(std::get<0>(test_info.param),
                                                  std::get<1>(test_info.param));
                         });

// ------------------------------------------------------------------------------------------------
// Bad input: the Embedding's exception and message, no activation written.

class ServingInputErrorTest : public ::testing::Test {
 protected:
  static constexpr int64_t kBatch = 3;

  void SetUp() override {
    export_serving_model(layer_, directory_ / "model.recemb", {.dtype = ServingDtype::kInt8});
    model_.emplace(ServingModel::open(directory_ / "model.recemb"));
  }

  // clicks: ragged {1, 5, 5} {} {7, 19}, weighted; views: dense [3] int32; friends: sparse [3, 4],
  // weighted; history: ragged sequence {3, 4, 5} {6} {} (truncated at 2).
  static std::vector<OwnedInput> valid_inputs() {
    std::vector<OwnedInput> inputs;
    inputs.push_back(OwnedInput::ragged(
        {{{1, 5, 5}, {1.0f, 0.5f, 2.0f}}, {{}, {}}, {{7, 19}, {1.0f, 1.0f}}}, true));
    inputs.push_back(OwnedInput::dense({2, 0, 19}, {kBatch}, {}, IdWidth::kInt32));
    inputs.push_back(
        OwnedInput::sparse({0, 0, 0, 2, 1, 1}, {4, 9, 0}, {kBatch, 4}, {1.0f, 2.0f, 0.5f}));
    inputs.push_back(
        OwnedInput::ragged({{{3, 4, 5}, {}}, {{6}, {}}, {{}, {}}}, false, IdWidth::kInt32));
    return inputs;
  }

  // Buffers of the valid activation sizes, filled with a sentinel.
  static std::vector<std::vector<float>> buffers() {
    return {std::vector<float>(kBatch * 4, -5.0f), std::vector<float>(kBatch * 4, -5.0f),
            std::vector<float>(kBatch * 2, -5.0f), std::vector<float>(kBatch * 2 * 4, -5.0f)};
  }

  // Looks `views` up into `buffers` in the Embedding and in the model: both throw
  // InvalidArgument with the same message, which contains `fragment`, and the model writes no
  // activation.
  void expect_same_rejection(const std::vector<FeatureInput>& views,
                             std::vector<std::vector<float>> activations,
                             const std::string& fragment) {
    const std::vector<std::vector<float>> before = activations;
    const std::vector<std::span<float>> spans(activations.begin(), activations.end());
    const std::string trained = error_of<InvalidArgument>([&] { layer_.lookup(views, spans); });
    activations = before;
    const std::vector<std::span<float>> served_spans(activations.begin(), activations.end());
    const std::string served =
        error_of<InvalidArgument>([&] { model_->lookup(views, served_spans); });
    EXPECT_EQ(served, trained);
    EXPECT_THAT(served, HasSubstr(fragment));
    EXPECT_EQ(activations, before) << "a rejected lookup wrote activations";
  }

  // A valid input with one change, rejected as the Embedding rejects it.
  void expect_input_rejected(const std::function<void(std::vector<OwnedInput>&)>& corrupt,
                             const std::string& fragment) {
    std::vector<OwnedInput> inputs = valid_inputs();
    corrupt(inputs);
    expect_same_rejection(test::views_of(inputs), buffers(), fragment);
  }

  Embedding layer_{
      std::vector<TableConfig>{
          {.name = "items", .vocabulary_size = 20, .dim = 4, .combiner = Combiner::kMean},
          {.name = "users", .vocabulary_size = 10, .dim = 2, .combiner = Combiner::kSqrtn}},
      std::vector<FeatureConfig>{{.name = "clicks", .table = "items"},
                                 {.name = "views", .table = "items"},
                                 {.name = "friends", .table = "users"},
                                 {.name = "history", .table = "items", .max_sequence_length = 2}},
      EmbeddingOptions{.num_threads = 1, .seed = 5}};
  TemporaryDirectory directory_;
  std::optional<ServingModel> model_;
};

TEST_F(ServingInputErrorTest, ValidInputsLookUp) {
  const std::vector<OwnedInput> inputs = valid_inputs();
  const std::vector<FeatureInput> views = test::views_of(inputs);
  const auto activations = lookup_activations(*model_, views);
  for (const auto& activation : activations) {
    for (const float value : activation) EXPECT_FALSE(std::isnan(value));
  }
}

TEST_F(ServingInputErrorTest, BadInputsAreRejectedAsByTheEmbedding) {
  expect_input_rejected([](auto& in) { in[0].ids64()[4] = 20; }, "id 20 is out of range");
  expect_input_rejected([](auto& in) { in[1].ids32()[1] = -1; }, "id -1");
  expect_input_rejected([](auto& in) { in[2].weights().resize(2); }, "2 weights for 3 ids");
  expect_input_rejected([](auto& in) { in[0].weights()[1] = kNaN; }, "not finite");
  expect_input_rejected([](auto& in) { in[0].splits64().back() = 4; }, "row_splits[3]");
  expect_input_rejected([](auto& in) { in[2].indices()[1] = 7; }, "outside dense_shape");
  expect_input_rejected(
      [](auto& in) {
        std::swap(in[2].indices()[0], in[2].indices()[2]);
        std::swap(in[2].indices()[1], in[2].indices()[3]);
      },
      "canonical");
  expect_input_rejected([](auto& in) { in[1].shape() = {4}; }, "dense shape [4]");
  expect_input_rejected([](auto& in) { in[3].ids32()[3] = 99; }, "feature 'history'");
}

TEST_F(ServingInputErrorTest, WrongCountsAndBufferSizesAreRejectedAsByTheEmbedding) {
  const std::vector<OwnedInput> inputs = valid_inputs();
  std::vector<FeatureInput> views = test::views_of(inputs);
  views.pop_back();
  expect_same_rejection(views, buffers(), "lookup inputs: expected one per feature (4), got 3");
  std::vector<std::vector<float>> three = buffers();
  three.pop_back();
  expect_same_rejection(test::views_of(inputs), three, "lookup activations");
  std::vector<std::vector<float>> wrong = buffers();
  wrong[3].resize(7, -5.0f);
  expect_same_rejection(test::views_of(inputs), wrong,
                        "feature 'history': activation buffer holds 7 floats, expected [3, 2, 4]");
}

// A batch of 2^40 examples without ids: the buffer is checked against the input's shape before
// anything of the batch's size is allocated (as the Embedding does).
TEST_F(ServingInputErrorTest, AHugeBatchIsRefusedBeforeAnythingIsSized) {
  const std::vector<OwnedInput> inputs = valid_inputs();
  std::vector<FeatureInput> views = test::views_of(inputs);
  const std::vector<int64_t> no_ids;
  views[0] = DenseIds{.ids = no_ids, .shape = {int64_t{1} << 40, 0}};
  expect_same_rejection(views, buffers(),
                        "feature 'clicks': activation buffer holds 12 floats, expected "
                        "[1099511627776, 4] = 4398046511104");
}

TEST_F(ServingInputErrorTest, ActivationShapeAsTheEmbedding) {
  std::vector<OwnedInput> inputs = valid_inputs();
  const std::vector<FeatureInput> views = test::views_of(inputs);
  for (size_t f = 0; f < views.size(); ++f) {
    EXPECT_EQ(model_->activation_shape(f, views[f]), layer_.activation_shape(f, views[f]));
  }
  EXPECT_EQ(error_of<InvalidArgument>([&] { model_->activation_shape(4, views[0]); }),
            error_of<InvalidArgument>([&] { layer_.activation_shape(4, views[0]); }));
  inputs[1].shape() = {2, 2};
  const FeatureInput bad = inputs[1].view();
  EXPECT_EQ(error_of<InvalidArgument>([&] { model_->activation_shape(1, bad); }),
            error_of<InvalidArgument>([&] { layer_.activation_shape(1, bad); }));
}

// ------------------------------------------------------------------------------------------------
// Sharing and threads.

class ServingSharingTest : public ::testing::Test {
 protected:
  void SetUp() override { export_serving_model(layer_, path_, {.dtype = ServingDtype::kFloat16}); }

  std::vector<std::vector<OwnedInput>> batches(uint64_t seed, int count) const {
    std::mt19937_64 rng(seed);
    std::vector<std::vector<OwnedInput>> result;
    for (int i = 0; i < count; ++i) result.push_back(random_inputs(rng, scenario_));
    return result;
  }

  Scenario scenario_ = make_scenario(Combiner::kMean, true, 8);
  Embedding layer_ = make_layer(scenario_, 77);
  TemporaryDirectory directory_;
  std::filesystem::path path_ = directory_ / "model.recemb";
};

TEST_F(ServingSharingTest, CopiesAndMovesShareTheMappingAndOutliveTheOriginal) {
  const auto inputs = batches(1, 1)[0];
  const std::vector<FeatureInput> views = test::views_of(inputs);
  std::optional<ServingModel> original(ServingModel::open(path_));
  const auto expected = lookup_activations(*original, views);
  const ServingModel copy = *original;  // NOLINT: the copy is the point
  ServingModel moved = std::move(*original);
  original.reset();
  EXPECT_EQ(lookup_activations(copy, views), expected);
  EXPECT_EQ(lookup_activations(moved, views), expected);
  ServingModel assigned = ServingModel::open(path_, {.verify = false});
  assigned = copy;
  EXPECT_EQ(lookup_activations(assigned, views), expected);
  EXPECT_EQ(&assigned.tables(), &copy.tables()) << "copies share one state";
}

TEST_F(ServingSharingTest, ConcurrentLookupsEqualSerialOnes) {
  const ServingModel model = ServingModel::open(path_);
  const auto all = batches(2, 12);
  std::vector<std::vector<std::vector<float>>> serial;
  for (const auto& inputs : all)
    serial.push_back(lookup_activations(model, test::views_of(inputs)));
  constexpr int kThreads = 4;
  std::vector<std::vector<std::vector<std::vector<float>>>> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int repeat = 0; repeat < 3; ++repeat) {
        for (size_t k = 0; k < all.size(); ++k) {
          const size_t i = (k + static_cast<size_t>(t)) % all.size();  // different orders
          if (repeat == 0) results[t].resize(all.size());
          results[t][i] = lookup_activations(model, test::views_of(all[i]));
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(results[t], serial) << "thread " << t;
}

TEST_F(ServingSharingTest, ReplacingTheFileKeepsOpenModelsOnTheOldOne) {
  const auto inputs = batches(3, 1)[0];
  const std::vector<FeatureInput> views = test::views_of(inputs);
  const ServingModel old_model = ServingModel::open(path_, {.verify = false});
  const auto before = lookup_activations(old_model, views);
  Embedding other = make_layer(scenario_, 78);
  export_serving_model(other, path_, {.dtype = ServingDtype::kFloat32});
  EXPECT_EQ(lookup_activations(old_model, views), before);
  const ServingModel new_model = ServingModel::open(path_);
  EXPECT_EQ(new_model.dtype(), ServingDtype::kFloat32);
  const auto after = lookup_activations(new_model, views);
  EXPECT_EQ(after, lookup_activations(other, views));
  EXPECT_NE(after, before);
}

}  // namespace
}  // namespace recemb
