#include "testing/reference_steps.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <iomanip>
#include <limits>

#include "testing/embedding_calls.h"

namespace recemb::test {

using reference::ReferenceEmbedding;

::testing::AssertionResult near_reference(std::span<const float> actual,
                                          std::span<const double> expected, double tolerance) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << "library has " << actual.size() << " values, reference " << expected.size();
  }
  size_t mismatches = 0;
  size_t first = 0;
  double worst = 0.0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double error = std::abs(static_cast<double>(actual[i]) - expected[i]) /
                         std::max(1.0, std::abs(expected[i]));
    if (!(error <= tolerance)) {
      if (mismatches++ == 0) first = i;
      worst = std::isnan(error) ? error : std::max(worst, error);
    }
  }
  if (mismatches == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << std::setprecision(10) << mismatches << " of " << actual.size()
         << " values differ; first at flat index " << first << ": library " << actual[first]
         << ", reference " << expected[first] << "; worst scaled error " << worst;
}

void expect_matches_reference(const Embedding& layer, const ReferenceEmbedding& reference,
                              double tolerance) {
  EXPECT_EQ(layer.step(), reference.step());
  EXPECT_EQ(layer.skipped_rows(), reference.skipped_rows());
  for (const TableConfig& table : layer.tables()) {
    const std::vector<std::string> names = layer.variable_names(table.name);
    ASSERT_EQ(names, reference.variable_names(table.name)) << "table " << table.name;
    for (const std::string& name : names) {
      EXPECT_EQ(layer.variable_shape(table.name, name), reference.variable_shape(table.name, name))
          << table.name << "/" << name;
      EXPECT_TRUE(near_reference(read(layer, table.name, name),
                                 reference.variable(table.name, name), tolerance))
          << table.name << "/" << name;
    }
  }
}

// Every activation starts as NaN, so a value the library does not write fails the comparison.
std::vector<std::vector<float>> lookup_both(Embedding& layer, ReferenceEmbedding& reference,
                                            const std::vector<OwnedInput>& inputs,
                                            BatchPair* batch) {
  const std::vector<FeatureInput> views = views_of(inputs);
  std::vector<std::vector<float>> activations;
  for (size_t f = 0; f < views.size(); ++f) {
    const std::vector<int64_t> shape = layer.activation_shape(f, views[f]);
    EXPECT_EQ(shape, reference.activation_shape(f, views[f])) << layer.features()[f].name;
    activations.emplace_back(static_cast<size_t>(product(shape)),
                             std::numeric_limits<float>::quiet_NaN());
  }
  std::vector<std::span<float>> spans(activations.begin(), activations.end());
  std::vector<std::vector<double>> expected;
  if (batch != nullptr) {
    layer.lookup(views, spans, batch->layer);
    EXPECT_TRUE(batch->layer.applicable());
    expected = reference.lookup(views, batch->reference);
  } else {
    layer.lookup(views, spans);
    expected = reference.lookup(views);
  }
  for (size_t f = 0; f < views.size(); ++f) {
    EXPECT_TRUE(near_reference(activations[f], expected[f])) << layer.features()[f].name;
  }
  return activations;
}

std::vector<std::vector<float>> lookup_both(Embedding& layer, ReferenceEmbedding& reference,
                                            const std::vector<OwnedInput>& inputs,
                                            BatchPair& batch) {
  return lookup_both(layer, reference, inputs, &batch);
}

std::vector<std::vector<float>> lookup_both(Embedding& layer, ReferenceEmbedding& reference,
                                            const std::vector<OwnedInput>& inputs) {
  return lookup_both(layer, reference, inputs, nullptr);
}

void apply_both(Embedding& layer, ReferenceEmbedding& reference, BatchPair& batch,
                const std::vector<std::vector<float>>& gradients) {
  const std::vector<std::span<const float>> spans(gradients.begin(), gradients.end());
  layer.apply_gradients(batch.layer, spans);
  EXPECT_FALSE(batch.layer.applicable()) << "an applied batch is applied at most once";
  reference.apply_gradients(batch.reference, spans);
}

std::vector<std::vector<float>> random_gradients(std::mt19937_64& rng,
                                                 const std::vector<std::vector<float>>& shapes) {
  std::vector<std::vector<float>> gradients;
  for (const auto& activation : shapes) {
    gradients.push_back(random_gradient(rng, activation.size()));
  }
  if (random_int(rng, 0, 9) == 0) {
    gradients[static_cast<size_t>(random_int(rng, 0, static_cast<int64_t>(shapes.size()) - 1))]
        .clear();
  }
  return gradients;
}

}  // namespace recemb::test
