// recemb::Embedding's variable API: names, shapes and initial slots of every optimizer; reading,
// writing and training from written state; variable_data as the storage itself.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "recemb/embedding.h"
#include "recemb/recemb.h"

#include "reference/reference_embedding.h"
#include "testing/embedding_calls.h"
#include "testing/error_of.h"
#include "testing/random_batches.h"
#include "testing/reference_steps.h"

namespace recemb {
namespace {

using reference::ReferenceEmbedding;
using test::apply_both;
using test::BatchPair;
using test::bitwise_equal;
using test::error_of;
using test::expect_floats_eq;
using test::expect_matches_reference;
using test::look_up;
using test::lookup_both;
using test::OwnedInput;
using test::product;
using test::random_gradients;
using test::read;
using test::Snapshot;
using test::snapshot_of;
using test::train;
using test::unchanged;
using ::testing::HasSubstr;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// The variable API.

Embedding one_table_per_optimizer() {
  const std::vector<std::pair<std::string, std::optional<Optimizer>>> optimizers = {
      {"sgd", Sgd{.learning_rate = 0.1f}},
      {"adagrad", Adagrad{.learning_rate = 0.1f, .initial_accumulator_value = 0.3f}},
      {"momentum", AdagradMomentum{.learning_rate = 0.1f, .epsilon = 1e-3f}},
      {"adam", Adam{.learning_rate = 0.1f}},
      // Not TF's lr 0.001: FTRL divides (n'^p - n^p) by lr, which would amplify float32
      // cancellation 1000x beyond the tolerance.
      {"ftrl", Ftrl{.learning_rate = 0.1f, .initial_accumulator_value = 0.2f}},
      {"rowwise", RowwiseAdagrad{.learning_rate = 0.1f, .initial_accumulator_value = 0.4f}},
      {"global", std::nullopt}};
  std::vector<TableConfig> tables;
  std::vector<FeatureConfig> features;
  for (const auto& [name, optimizer] : optimizers) {
    tables.push_back({.name = name, .vocabulary_size = 7, .dim = 3, .optimizer = optimizer});
    features.push_back({.name = "f_" + name, .table = name});
  }
  return Embedding(tables, features,
                   {.optimizer = Adagrad{.learning_rate = 0.5f, .initial_accumulator_value = 0.6f},
                    .num_threads = 1});
}

TEST(EmbeddingVariables, NamesShapesAndInitialSlots) {
  const Embedding layer = one_table_per_optimizer();
  using Names = std::vector<std::string>;
  EXPECT_EQ(layer.variable_names("sgd"), (Names{"parameters"}));
  EXPECT_EQ(layer.variable_names("adagrad"), (Names{"parameters", "accumulators"}));
  EXPECT_EQ(layer.variable_names("momentum"), (Names{"parameters", "accumulators", "momenta"}));
  EXPECT_EQ(layer.variable_names("adam"), (Names{"parameters", "momenta", "velocities"}));
  EXPECT_EQ(layer.variable_names("ftrl"), (Names{"parameters", "accumulators", "linears"}));
  EXPECT_EQ(layer.variable_names("rowwise"), (Names{"parameters", "accumulators"}));
  EXPECT_EQ(layer.variable_names("global"), (Names{"parameters", "accumulators"}));
  using Shape = std::vector<int64_t>;
  EXPECT_EQ(layer.variable_shape("adam", "velocities"), (Shape{7, 3}));
  EXPECT_EQ(layer.variable_shape("rowwise", "accumulators"), (Shape{7}));
  EXPECT_EQ(layer.variable_shape("rowwise", "parameters"), (Shape{7, 3}));
  const std::map<std::string, float> initial = {
      {"adagrad/accumulators", 0.3f}, {"momentum/accumulators", 0.0f},
      {"momentum/momenta", 0.0f},     {"adam/momenta", 0.0f},
      {"adam/velocities", 0.0f},      {"ftrl/accumulators", 0.2f},
      {"ftrl/linears", 0.0f},         {"rowwise/accumulators", 0.4f},
      {"global/accumulators", 0.6f}};
  const Snapshot snapshot = snapshot_of(layer);
  for (const auto& [name, value] : initial) {
    for (float element : snapshot.variables.at(name)) EXPECT_EQ(element, value) << name;
  }
}

TEST(EmbeddingVariables, WriteReadRoundTripAndTrainingFromWrittenState) {
  Embedding layer = one_table_per_optimizer();
  std::mt19937_64 rng(99);
  for (const TableConfig& table : layer.tables()) {
    for (const std::string& name : layer.variable_names(table.name)) {
      std::vector<float> values = test::random_gradient(
          rng, static_cast<size_t>(product(layer.variable_shape(table.name, name))));
      if (name != "parameters" && name != "linears" && name != "momenta") {
        for (float& value : values) value = std::abs(value);  // accumulators are >= 0
      }
      layer.write_variable(table.name, name, values);
      EXPECT_TRUE(bitwise_equal(read(layer, table.name, name), values))
          << table.name << "/" << name;
    }
  }
  // The reference starts from the written state and trains alongside.
  ReferenceEmbedding reference = ReferenceEmbedding::like(layer);
  const Snapshot written = snapshot_of(layer);
  for (const auto& [key, values] : written.variables) {
    const size_t slash = key.find('/');
    reference.set_variable(key.substr(0, slash), key.substr(slash + 1), values);
  }
  BatchPair batch;
  for (int step = 0; step < 5; ++step) {
    std::vector<OwnedInput> inputs;
    for (size_t f = 0; f < layer.features().size(); ++f) {
      inputs.push_back(test::random_two_dim_input(rng, 4, 7, 3));
    }
    const auto activations = lookup_both(layer, reference, inputs, batch);
    apply_both(layer, reference, batch, random_gradients(rng, activations));
  }
  expect_matches_reference(layer, reference);
}

TEST(EmbeddingVariables, WrittenParametersAreLookedUp) {
  Embedding layer = one_table_per_optimizer();
  std::vector<float> values(21);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f;
  layer.write_variable("sgd", "parameters", values);
  std::vector<OwnedInput> inputs;
  for (size_t f = 0; f < layer.features().size(); ++f)
    inputs.push_back(OwnedInput::dense({2, 6}, {2}));
  const auto activations = look_up(layer, inputs);
  expect_floats_eq(activations[0], {3.0f, 3.5f, 4.0f, 9.0f, 9.5f, 10.0f}, "sgd rows 2 and 6");
}

TEST(EmbeddingVariables, UnknownNamesAndWrongSizesAreRejected) {
  Embedding layer = one_table_per_optimizer();
  const Snapshot before = snapshot_of(layer);
  std::vector<float> buffer(21, 1.0f);
  std::vector<float> short_buffer(20, 1.0f);
  std::vector<float> rowwise_buffer(7, 1.0f);
  EXPECT_THAT(
      error_of<InvalidArgument>([&] { layer.read_variable("music", "parameters", buffer); }),
      HasSubstr("music"));
  EXPECT_THAT(error_of<InvalidArgument>([&] { layer.variable_names("music"); }),
              HasSubstr("music"));
  EXPECT_THAT(error_of<InvalidArgument>([&] { layer.variable_shape("adagrad", "momenta"); }),
              HasSubstr("momenta"));
  EXPECT_THAT(
      error_of<InvalidArgument>([&] { layer.read_variable("sgd", "accumulators", buffer); }),
      HasSubstr("accumulators"));
  EXPECT_THAT(
      error_of<InvalidArgument>([&] { layer.read_variable("adam", "parameters", short_buffer); }),
      HasSubstr("20"));
  error_of<InvalidArgument>([&] { layer.read_variable("rowwise", "accumulators", buffer); });
  layer.read_variable("rowwise", "accumulators", rowwise_buffer);
  EXPECT_THAT(
      error_of<InvalidArgument>([&] { layer.write_variable("adam", "momenta", short_buffer); }),
      HasSubstr("20"));
  error_of<InvalidArgument>([&] { layer.write_variable("rowwise", "accumulators", buffer); });
  error_of<InvalidArgument>([&] { layer.write_variable("adam", "velocity", buffer); });
  std::vector<float> with_nan = buffer;
  with_nan[20] = kNaN;
  error_of<InvalidArgument>([&] { layer.write_variable("ftrl", "linears", with_nan); });
  with_nan[20] = kInf;
  error_of<InvalidArgument>([&] { layer.write_variable("sgd", "parameters", with_nan); });
  EXPECT_TRUE(unchanged(before, layer));
}

TEST(EmbeddingVariables, SlotValuesTheOptimizerCannotHoldAreRejected) {
  // Accumulators and second moments (whose root the update takes) must be >= 0, or > 0 where the
  // update has no epsilon (Adagrad, FTRL); momenta and linears take any finite value.
  Embedding layer = one_table_per_optimizer();
  const Snapshot before = snapshot_of(layer);
  struct Write {
    std::string table;
    std::string slot;
    float value;
  };
  const std::vector<Write> refused = {
      {"adagrad", "accumulators", 0.0f},   {"adagrad", "accumulators", -1.0f},
      {"global", "accumulators", 0.0f},    {"ftrl", "accumulators", 0.0f},
      {"momentum", "accumulators", -1.0f}, {"adam", "velocities", -1.0f},
      {"rowwise", "accumulators", -1.0f}};
  for (const Write& write : refused) {
    const std::string& table = write.table;
    const std::string& slot = write.slot;
    const float value = write.value;
    std::vector<float> values(static_cast<size_t>(product(layer.variable_shape(table, slot))),
                              1.0f);
    const size_t row_wise = values.size() == 7 ? 1 : 3;
    values[4 * row_wise] = value;  // row 4
    EXPECT_THAT(error_of<InvalidArgument>([&] { layer.write_variable(table, slot, values); }),
                HasSubstr("table '" + table + "' variable '" + slot + "': value " +
                          std::to_string(value) + " at index " + std::to_string(4 * row_wise) +
                          " (row 4) is out of range: '" + slot + "' must be finite and"))
        << table;
  }
  EXPECT_TRUE(unchanged(before, layer));
  const std::vector<Write> taken = {
      {"momentum", "accumulators", 0.0f}, {"adam", "velocities", 0.0f},
      {"rowwise", "accumulators", 0.0f},  {"adam", "momenta", -1.0f},
      {"ftrl", "linears", -1.0f},         {"momentum", "momenta", -1.0f}};
  for (const Write& write : taken) {
    std::vector<float> values(
        static_cast<size_t>(product(layer.variable_shape(write.table, write.slot))), write.value);
    layer.write_variable(write.table, write.slot, values);
    EXPECT_TRUE(bitwise_equal(read(layer, write.table, write.slot), values))
        << write.table << "/" << write.slot;
  }
}

TEST(EmbeddingVariables, VariableDataIsTheStorageItself) {
  Embedding layer = one_table_per_optimizer();
  std::mt19937_64 rng(7);
  std::vector<std::pair<const float*, const float*>> ranges;
  for (const TableConfig& table : layer.tables()) {
    for (const std::string& name : layer.variable_names(table.name)) {
      SCOPED_TRACE(table.name + "/" + name);
      const std::span<float> data = layer.variable_data(table.name, name);
      ASSERT_EQ(static_cast<int64_t>(data.size()), product(layer.variable_shape(table.name, name)));
      EXPECT_EQ(layer.variable_data(table.name, name).data(), data.data()) << "a stable view";
      const Embedding& const_layer = layer;
      EXPECT_EQ(const_layer.variable_data(table.name, name).data(), data.data()) << "const view";
      EXPECT_EQ(const_layer.variable_data(table.name, name).size(), data.size());
      EXPECT_TRUE(bitwise_equal(std::vector<float>(data.begin(), data.end()),
                                read(layer, table.name, name)));
      ranges.emplace_back(data.data(), data.data() + data.size());
      // A write through the view is what read_variable returns; write_variable shows through it.
      std::vector<float> values = test::random_gradient(rng, data.size());
      for (float& value : values) value = std::abs(value);  // valid for every slot
      std::copy(values.begin(), values.end(), data.begin());
      EXPECT_TRUE(bitwise_equal(read(layer, table.name, name), values));
      for (float& value : values) value *= 2.0f;
      layer.write_variable(table.name, name, values);
      EXPECT_TRUE(bitwise_equal(std::vector<float>(data.begin(), data.end()), values));
    }
  }
  // Every variable has memory of its own.
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    EXPECT_LE(ranges[i - 1].second, ranges[i].first) << "variables " << i - 1 << " and " << i;
  }
  EXPECT_EQ(layer.variable_data("rowwise", "accumulators").size(), 7u);
  EXPECT_EQ(layer.variable_data("adam", "velocities").size(), 21u);
  EXPECT_THAT(error_of<InvalidArgument>([&] { layer.variable_data("music", "parameters"); }),
              HasSubstr("music"));
  EXPECT_THAT(error_of<InvalidArgument>([&] { layer.variable_data("sgd", "accumulators"); }),
              HasSubstr("accumulators"));
  const Embedding& const_layer = layer;
  EXPECT_THAT(error_of<InvalidArgument>([&] { const_layer.variable_data("music", "parameters"); }),
              HasSubstr("music"));
}

TEST(EmbeddingVariables, VariableDataIsLookedUpTrainedAndMovedWithTheLayer) {
  Embedding layer = one_table_per_optimizer();
  const std::span<float> parameters = layer.variable_data("sgd", "parameters");
  const std::span<float> accumulators = layer.variable_data("global", "accumulators");
  for (size_t i = 0; i < parameters.size(); ++i) parameters[i] = static_cast<float>(i) * 0.5f;
  std::vector<OwnedInput> inputs;
  for (size_t f = 0; f < layer.features().size(); ++f) {
    inputs.push_back(OwnedInput::dense({2, 6}, {2}));
  }
  LookupBatch batch;
  const auto activations = look_up(layer, inputs, batch);
  expect_floats_eq(activations[0], {3.0f, 3.5f, 4.0f, 9.0f, 9.5f, 10.0f}, "sgd rows 2 and 6");
  // apply_gradients updates the memory the views show (SGD lr 0.1, gradient 1: rows 2, 6 - 0.1).
  std::vector<std::vector<float>> ones;
  for (const auto& activation : activations) ones.emplace_back(activation.size(), 1.0f);
  train(layer, batch, ones);
  for (size_t i = 0; i < parameters.size(); ++i) {
    const size_t row = i / 3;
    const float expected = static_cast<float>(i) * 0.5f - (row == 2 || row == 6 ? 0.1f : 0.0f);
    EXPECT_FLOAT_EQ(parameters[i], expected) << i;
  }
  EXPECT_TRUE(bitwise_equal(std::vector<float>(parameters.begin(), parameters.end()),
                            read(layer, "sgd", "parameters")));
  EXPECT_TRUE(bitwise_equal(std::vector<float>(accumulators.begin(), accumulators.end()),
                            read(layer, "global", "accumulators")));
  EXPECT_FLOAT_EQ(accumulators[2 * 3], 0.6f + 1.0f);  // Adagrad: 0.6 + g^2
  // The views stay valid in the Embedding the layer is moved into, and alias its storage.
  Embedding moved = std::move(layer);
  EXPECT_EQ(moved.variable_data("sgd", "parameters").data(), parameters.data());
  parameters[6] = 42.0f;  // row 2
  EXPECT_EQ(read(moved, "sgd", "parameters")[6], 42.0f);
  EXPECT_EQ(look_up(moved, inputs)[0][0], 42.0f);
}

}  // namespace
}  // namespace recemb
