#include "testing/embedding_calls.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <span>

namespace recemb::test {

int64_t product(const std::vector<int64_t>& shape) {
  int64_t result = 1;
  for (int64_t value : shape) result *= value;
  return result;
}

std::vector<float> read(const Embedding& layer, const std::string& table, const std::string& name) {
  std::vector<float> values(static_cast<size_t>(product(layer.variable_shape(table, name))));
  layer.read_variable(table, name, values);
  return values;
}

void expect_floats_eq(const std::vector<float>& actual, const std::vector<float>& expected,
                      const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_NEAR(actual[i], expected[i], 1e-5) << what << " [" << i << "]";
  }
}

std::vector<std::vector<float>> look_up(Embedding& layer, const std::vector<OwnedInput>& inputs,
                                        LookupBatch* batch) {
  const std::vector<FeatureInput> views = views_of(inputs);
  std::vector<std::vector<float>> activations;
  for (size_t f = 0; f < views.size(); ++f) {
    activations.emplace_back(static_cast<size_t>(product(layer.activation_shape(f, views[f]))));
  }
  std::vector<std::span<float>> spans(activations.begin(), activations.end());
  if (batch != nullptr) {
    layer.lookup(views, spans, *batch);
  } else {
    layer.lookup(views, spans);
  }
  return activations;
}

std::vector<std::vector<float>> look_up(Embedding& layer, const std::vector<OwnedInput>& inputs,
                                        LookupBatch& batch) {
  return look_up(layer, inputs, &batch);
}

void train(Embedding& layer, LookupBatch& batch, const std::vector<std::vector<float>>& gradients) {
  const std::vector<std::span<const float>> spans(gradients.begin(), gradients.end());
  layer.apply_gradients(batch, spans);
}

void train_rank_share(Embedding& layer, int64_t first, int64_t last, int64_t batch_size,
                      uint64_t seed, const std::function<int64_t(const TableConfig&)>& ids_of) {
  const int64_t begin = layer.rank() * batch_size / layer.world_size();
  const int64_t end = (layer.rank() + 1) * batch_size / layer.world_size();
  for (int64_t step = first; step < last; ++step) {
    std::mt19937_64 rng(seed + static_cast<uint64_t>(step));
    std::vector<OwnedInput> inputs;
    std::vector<std::vector<float>> gradients;
    for (const FeatureConfig& feature : layer.features()) {
      const auto table =
          std::find_if(layer.tables().begin(), layer.tables().end(),
                       [&](const TableConfig& t) { return t.name == feature.table; });
      const std::vector<Bag> bags =
          random_bags(rng, batch_size, {.vocabulary_size = ids_of(*table), .max_length = 4});
      const std::vector<float> gradient =
          random_gradient(rng, static_cast<size_t>(batch_size * table->dim));
      inputs.push_back(OwnedInput::ragged({bags.begin() + begin, bags.begin() + end}, true));
      gradients.emplace_back(gradient.begin() + begin * table->dim,
                             gradient.begin() + end * table->dim);
    }
    LookupBatch batch;
    look_up(layer, inputs, batch);
    train(layer, batch, gradients);
  }
}

Snapshot snapshot_of(const Embedding& layer) {
  Snapshot snapshot;
  for (const TableConfig& table : layer.tables()) {
    for (const std::string& name : layer.variable_names(table.name)) {
      snapshot.variables[table.name + "/" + name] = read(layer, table.name, name);
    }
  }
  snapshot.step = layer.step();
  snapshot.skipped_rows = layer.skipped_rows();
  return snapshot;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

::testing::AssertionResult unchanged(const Snapshot& before, const Embedding& layer) {
  const Snapshot after = snapshot_of(layer);
  if (before.step != after.step) {
    return ::testing::AssertionFailure() << "step " << before.step << " -> " << after.step;
  }
  if (before.skipped_rows != after.skipped_rows) {
    return ::testing::AssertionFailure() << "skipped_rows changed";
  }
  for (const auto& [name, values] : before.variables) {
    if (!bitwise_equal(values, after.variables.at(name))) {
      return ::testing::AssertionFailure() << name << " changed";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace recemb::test
