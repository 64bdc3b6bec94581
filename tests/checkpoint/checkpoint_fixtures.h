// Shared by the checkpoint tests: a small Embedding with three tables (one shared by two features)
// and three optimizers, deterministic training, and snapshots of every variable.
#ifndef RECEMB_TESTS_CHECKPOINT_CHECKPOINT_FIXTURES_H_
#define RECEMB_TESTS_CHECKPOINT_CHECKPOINT_FIXTURES_H_

#include <cstdint>
#include <cstring>
#include <gtest/gtest.h>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "recemb/embedding.h"

#include "testing/random_batches.h"

namespace recemb::test {

struct FixtureSizes {
  int64_t video_rows = 40;
  int64_t word_rows = 30;
  int64_t tag_rows = 20;
};

// "video" (the global Adagrad; features "watched" and "liked"), "words" (Adam with bias
// correction and a decaying learning rate, which depend on the step; feature "query") and "tags"
// (RowwiseAdagrad, a [V] slot; feature "tag").
inline std::vector<TableConfig> fixture_tables(const FixtureSizes& sizes = {}) {
  return {
      {.name = "video", .vocabulary_size = sizes.video_rows, .dim = 8},
      {.name = "words",
       .vocabulary_size = sizes.word_rows,
       .dim = 4,
       .optimizer = Adam{.learning_rate = ExponentialDecay{.initial_learning_rate = 0.05f,
                                                           .decay_steps = 3,
                                                           .decay_rate = 0.7f},
                         .bias_correction = true},
       .combiner = Combiner::kSum},
      {.name = "tags",
       .vocabulary_size = sizes.tag_rows,
       .dim = 3,
       .optimizer = RowwiseAdagrad{.learning_rate = 0.1f, .initial_accumulator_value = 0.2f},
       .combiner = Combiner::kSqrtn},
  };
}

inline std::vector<FeatureConfig> fixture_features() {
  return {{.name = "watched", .table = "video"},
          {.name = "liked", .table = "video"},
          {.name = "query", .table = "words"},
          {.name = "tag", .table = "tags"}};
}

inline Embedding make_fixture(uint64_t seed, const FixtureSizes& sizes = {}) {
  return Embedding(fixture_tables(sizes), fixture_features(),
                   {.optimizer = Adagrad{.learning_rate = 0.2f}, .num_threads = 1, .seed = seed});
}

// Trains steps [first, last): the batch and gradients of step s depend only on s, so any split
// of the steps gives the same inputs.
inline void train_steps(Embedding& embedding, int64_t first, int64_t last) {
  for (int64_t step = first; step < last; ++step) {
    std::mt19937_64 rng(1000 + static_cast<uint64_t>(step));
    std::vector<OwnedInput> inputs;
    for (const FeatureConfig& feature : embedding.features()) {
      int64_t rows = 0;
      for (const TableConfig& table : embedding.tables()) {
        if (table.name == feature.table) rows = table.vocabulary_size;
      }
      inputs.push_back(random_two_dim_input(rng, 6, rows, 4));
    }
    const std::vector<FeatureInput> views = views_of(inputs);
    std::vector<std::vector<float>> activations;
    for (size_t f = 0; f < views.size(); ++f) {
      int64_t size = 1;
      for (int64_t extent : embedding.activation_shape(f, views[f])) size *= extent;
      activations.emplace_back(static_cast<size_t>(size));
    }
    std::vector<std::span<float>> activation_spans(activations.begin(), activations.end());
    LookupBatch batch;
    embedding.lookup(views, activation_spans, batch);
    std::vector<std::vector<float>> gradients;
    for (const std::vector<float>& activation : activations) {
      gradients.push_back(random_gradient(rng, activation.size()));
    }
    std::vector<std::span<const float>> gradient_spans(gradients.begin(), gradients.end());
    embedding.apply_gradients(batch, gradient_spans);
  }
}

// Every variable of every table, keyed "table/variable", plus the step under "step".
inline std::map<std::string, std::vector<float>> snapshot(const Embedding& embedding) {
  std::map<std::string, std::vector<float>> values;
  for (const TableConfig& table : embedding.tables()) {
    for (const std::string& variable : embedding.variable_names(table.name)) {
      int64_t size = 1;
      for (int64_t extent : embedding.variable_shape(table.name, variable)) size *= extent;
      std::vector<float>& out = values[table.name + "/" + variable];
      out.resize(static_cast<size_t>(size));
      embedding.read_variable(table.name, variable, out);
    }
  }
  values["step"] = {static_cast<float>(embedding.step())};
  return values;
}

// Bitwise equality of two snapshots (so that 0.0 and -0.0 differ).
inline ::testing::AssertionResult bitwise_equal(
    const std::map<std::string, std::vector<float>>& a,
    const std::map<std::string, std::vector<float>>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "different variables";
  for (const auto& [name, values] : a) {
    const auto other = b.find(name);
    if (other == b.end()) return ::testing::AssertionFailure() << "no " << name;
    if (values.size() != other->second.size() ||
        std::memcmp(values.data(), other->second.data(), values.size() * sizeof(float)) != 0) {
      return ::testing::AssertionFailure() << name << " differs";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace recemb::test

#endif  // RECEMB_TESTS_CHECKPOINT_CHECKPOINT_FIXTURES_H_
