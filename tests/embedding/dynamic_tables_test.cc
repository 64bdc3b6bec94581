// Dynamic tables end to end (src/embedding/dynamic_tables.cc and the step pipeline's key
// resolution): recemb::Embedding against the float64 dict-of-rows reference
// (tests/reference/reference_dynamic_table.h) over random steps, for combiners x optimizers x
// admission and eviction settings x thread counts x placements; stats, read/write, and errors.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "recemb/recemb.h"

#include "reference/reference_dynamic_table.h"
#include "storage/initializer.h"
#include "testing/error_of.h"

namespace recemb {
namespace {

using reference::ReferenceDynamicTable;
using ::testing::HasSubstr;

constexpr int64_t kDim = 4;
constexpr uint64_t kSeed = 17;

struct Setting {
  Combiner combiner;
  ReferenceDynamicTable::Optimizer optimizer;
  DynamicVocabulary vocabulary;
};

// A ragged batch of `bags` bags of 0-4 keys drawn from a vocabulary that moves over time (keys
// near `step * 3`), with weights.
struct Batch {
  std::vector<int64_t> keys;
  std::vector<int64_t> splits{0};
  std::vector<float> weights;
  std::vector<ReferenceDynamicTable::Bag> bags;
};

Batch random_batch(std::mt19937_64& random, int64_t step, int bags) {
  Batch batch;
  std::uniform_int_distribution<int> length(0, 4);
  std::uniform_int_distribution<int64_t> offset(0, 40);
  std::uniform_real_distribution<float> weight(0.25f, 2.0f);
  for (int b = 0; b < bags; ++b) {
    ReferenceDynamicTable::Bag bag;
    for (int j = length(random); j > 0; --j) {
      // Keys spread over int64 (negative, huge) by a fixed odd multiplier.
      const int64_t key = static_cast<int64_t>(static_cast<uint64_t>(step * 3 + offset(random)) *
                                               0x9e3779b97f4a7c15ULL);
      const float w = weight(random);
      batch.keys.push_back(key);
      batch.weights.push_back(w);
      bag.push_back({key, static_cast<double>(w)});
    }
    batch.splits.push_back(static_cast<int64_t>(batch.keys.size()));
    batch.bags.push_back(bag);
  }
  return batch;
}

FeatureInput input_of(const Batch& batch) {
  return RaggedIds{.values = std::span<const int64_t>(batch.keys),
                   .row_splits = std::span<const int64_t>(batch.splits),
                   .weights = batch.weights};
}

// The activations of `batch`: a training lookup kept in `kept`, or a pure lookup without it.
std::vector<float> activations_of(Embedding& layer, const Batch& batch, LookupBatch* kept) {
  const std::vector<FeatureInput> inputs{input_of(batch)};
  std::vector<float> activations(batch.bags.size() * kDim);
  const std::vector<std::span<float>> outputs{activations};
  if (kept == nullptr) {
    layer.lookup(inputs, outputs);
  } else {
    layer.lookup(inputs, outputs, *kept);
  }
  return activations;
}

// Whether `actual` ([bags, kDim]) is within 1e-5 of the reference's activations.
::testing::AssertionResult near_reference(const std::vector<float>& actual,
                                          const std::vector<std::vector<double>>& expected) {
  for (size_t b = 0; b < expected.size(); ++b) {
    for (size_t d = 0; d < static_cast<size_t>(kDim); ++d) {
      if (!(std::abs(actual[b * kDim + d] - expected[b][d]) <= 1e-5)) {
        return ::testing::AssertionFailure() << "bag " << b << " column " << d << ": "
                                             << actual[b * kDim + d] << " vs " << expected[b][d];
      }
    }
  }
  return ::testing::AssertionSuccess();
}

std::vector<double> initial_row(int64_t key) {
  std::vector<float> row(kDim);
  internal::initialize_rows(TruncatedNormal{}, internal::table_seed(kSeed, "items"), key, 1, kDim,
                            row);
  return {row.begin(), row.end()};
}

Embedding make_layer(const Setting& setting, int threads,
                     std::optional<PlacementOptions> placement) {
  Optimizer optimizer = Sgd{.learning_rate = 0.5f};
  if (setting.optimizer == ReferenceDynamicTable::Optimizer::kAdagrad) {
    optimizer = Adagrad{.learning_rate = 0.5f, .initial_accumulator_value = 0.1f};
  }
  return Embedding(
      {{.name = "items",
        .dim = kDim,
        .combiner = setting.combiner,
        .dynamic_vocabulary = setting.vocabulary}},
      {{.name = "clicked", .table = "items"}},
      {.optimizer = optimizer, .num_threads = threads, .seed = kSeed, .placement = placement});
}

// Runs `steps` random training steps on the layer and the reference and compares activations,
// the table's keys and rows, and the counters after each.
// Sets `final_stats` to the layer's stats at the end.
void expect_matches_reference(const Setting& setting, int threads,
                              std::optional<PlacementOptions> placement, int steps,
                              VocabularyStats* final_stats = nullptr) {
  SCOPED_TRACE("threads " + std::to_string(threads));
  Embedding layer = make_layer(setting, threads, placement);
  ReferenceDynamicTable model(kDim, setting.vocabulary, setting.combiner, setting.optimizer, 0.5,
                              0.1, initial_row);
  std::mt19937_64 random(5);
  std::normal_distribution<float> gradient_value(0.0f, 1.0f);
  for (int step = 0; step < steps; ++step) {
    const Batch batch = random_batch(random, step, 16);
    LookupBatch kept;
    const std::vector<float> activations = activations_of(layer, batch, &kept);
    ASSERT_TRUE(near_reference(activations, model.train_lookup(batch.bags))) << "step " << step;
    std::vector<float> gradients(activations.size());
    std::vector<std::vector<double>> model_gradients(batch.bags.size());
    for (size_t i = 0; i < gradients.size(); ++i) {
      gradients[i] = gradient_value(random);
      model_gradients[i / kDim].push_back(gradients[i]);
    }
    const std::vector<std::span<const float>> grads{gradients};
    layer.apply_gradients(kept, grads);
    model.apply(batch.bags, model_gradients);

    const DynamicTableContents contents = layer.read_dynamic_table("items");
    ASSERT_EQ(contents.keys.size(), model.rows().size()) << "step " << step;
    size_t i = 0;
    for (const auto& [key, row] : model.rows()) {
      ASSERT_EQ(contents.keys[i], key) << "step " << step;
      for (int64_t d = 0; d < kDim; ++d) {
        ASSERT_NEAR(contents.parameters[i * kDim + static_cast<size_t>(d)],
                    row.values[static_cast<size_t>(d)], 1e-5)
            << "step " << step << " key " << key;
      }
      ++i;
    }
    const VocabularyStats stats = layer.vocabulary_stats("items");
    EXPECT_EQ(stats.size, static_cast<int64_t>(model.rows().size()));
    EXPECT_EQ(stats.inserted, model.inserted());
    EXPECT_EQ(stats.evicted, model.evicted());
    EXPECT_EQ(stats.not_admitted_lookups, model.not_admitted_lookups());
  }
  // The pure lookup reads the same rows and changes nothing.
  const Batch batch = random_batch(random, steps, 16);
  const VocabularyStats before = layer.vocabulary_stats("items");
  EXPECT_TRUE(near_reference(activations_of(layer, batch, nullptr), model.lookup(batch.bags)));
  const VocabularyStats after = layer.vocabulary_stats("items");
  EXPECT_EQ(after.size, before.size);
  EXPECT_EQ(after.not_admitted_lookups, before.not_admitted_lookups);
  if (final_stats != nullptr) *final_stats = after;
}

TEST(DynamicTables, MatchTheDictReference) {
  using Optimizer = ReferenceDynamicTable::Optimizer;
  const std::vector<DynamicVocabulary> vocabularies = {
      {.capacity = 1000},                  // admits all, never full
      {.capacity = 1000, .min_count = 2},  // admission
      {.capacity = 1000, .ttl_steps = 3},  // TTL
      {.capacity = 40, .when_full = WhenFull::kEvictLeastRecent},
      {.capacity = 40, .min_count = 2, .ttl_steps = 5, .when_full = WhenFull::kEvictLeastFrequent},
  };
  for (const Combiner combiner : {Combiner::kSum, Combiner::kMean, Combiner::kSqrtn}) {
    for (const Optimizer optimizer : {Optimizer::kSgd, Optimizer::kAdagrad}) {
      for (const DynamicVocabulary& vocabulary : vocabularies) {
        SCOPED_TRACE(std::string(combiner_name(combiner)) + " capacity " +
                     std::to_string(vocabulary.capacity) + " min_count " +
                     std::to_string(vocabulary.min_count) + " when_full " +
                     std::string(when_full_name(vocabulary.when_full)));
        VocabularyStats stats;
        expect_matches_reference({combiner, optimizer, vocabulary}, 1, std::nullopt, 12, &stats);
        // Each setting exercises what it sets.
        EXPECT_GT(stats.inserted, 0);
        EXPECT_EQ(stats.evicted > 0, vocabulary.ttl_steps || vocabulary.capacity == 40);
        EXPECT_EQ(stats.not_admitted_lookups > 0, vocabulary.min_count > 1);
      }
    }
  }
}

TEST(DynamicTables, MatchTheReferenceOnTwoThreadsAndEveryInProcessPlacement) {
  const Setting setting{Combiner::kMean,
                        ReferenceDynamicTable::Optimizer::kAdagrad,
                        {.capacity = 1000, .min_count = 2, .ttl_steps = 4}};
  expect_matches_reference(setting, 2, std::nullopt, 10);
  for (const ShardingStrategy strategy :
       {ShardingStrategy::kRowWise, ShardingStrategy::kColumnWise, ShardingStrategy::kTableWise}) {
    SCOPED_TRACE(std::string(sharding_strategy_name(strategy)));
    expect_matches_reference(setting, 2, PlacementOptions{.num_shards = 2, .strategy = strategy},
                             10);
  }
}

TEST(DynamicTables, ResultsAreBitwiseTheSameOnAnyThreadCount) {
  const Setting setting{Combiner::kSqrtn,
                        ReferenceDynamicTable::Optimizer::kAdagrad,
                        {.capacity = 45, .min_count = 2, .ttl_steps = 6}};
  std::vector<DynamicTableContents> results;
  for (const int threads : {1, 2, 3}) {
    Embedding layer = make_layer(setting, threads, std::nullopt);
    std::mt19937_64 random(9);
    for (int step = 0; step < 8; ++step) {
      const Batch batch = random_batch(random, step, 64);
      LookupBatch kept;
      const std::vector<float> activations = activations_of(layer, batch, &kept);
      std::vector<float> gradients(activations.size());
      for (size_t i = 0; i < gradients.size(); ++i) gradients[i] = activations[i] - 0.25f;
      const std::vector<std::span<const float>> grads{gradients};
      layer.apply_gradients(kept, grads);
    }
    results.push_back(layer.read_dynamic_table("items"));
    EXPECT_GT(layer.vocabulary_stats("items").evicted, 0);
  }
  for (size_t r = 1; r < results.size(); ++r) {
    EXPECT_EQ(results[r].keys, results[0].keys);
    ASSERT_EQ(results[r].parameters.size(), results[0].parameters.size());
    EXPECT_EQ(0, std::memcmp(results[r].parameters.data(), results[0].parameters.data(),
                             results[0].parameters.size() * sizeof(float)));
  }
}

TEST(DynamicTables, KeyGetsTheStaticTablesInitialRow) {
  // The initial row of key k is row k of a static table of the same name and seed.
  Embedding dynamic(
      {{.name = "items", .dim = kDim, .dynamic_vocabulary = DynamicVocabulary{.capacity = 8}}},
      {{.name = "f", .table = "items"}}, {.optimizer = Sgd{}, .seed = kSeed});
  Embedding fixed({{.name = "items", .vocabulary_size = 10, .dim = kDim}},
                  {{.name = "f", .table = "items"}}, {.optimizer = Sgd{}, .seed = kSeed});
  const std::vector<int64_t> ids{7, 3};
  const std::vector<FeatureInput> inputs{
      DenseIds{.ids = std::span<const int64_t>(ids), .shape = {2}}};
  std::vector<float> from_dynamic(2 * kDim);
  std::vector<float> from_fixed(2 * kDim);
  LookupBatch batch;
  dynamic.lookup(inputs, std::vector<std::span<float>>{from_dynamic}, batch);
  fixed.lookup(inputs, std::vector<std::span<float>>{from_fixed});
  EXPECT_EQ(from_dynamic, from_fixed);
}

TEST(DynamicTables, AbsentKeysLookUpZeroRowsAndPureLookupsChangeNothing) {
  Embedding layer({{.name = "items",
                    .dim = kDim,
                    .combiner = Combiner::kMean,
                    .dynamic_vocabulary = DynamicVocabulary{.capacity = 8}}},
                  {{.name = "f", .table = "items"}}, {.optimizer = Sgd{}, .seed = kSeed});
  const std::vector<int64_t> ids{std::numeric_limits<int64_t>::min(), -1, 0,
                                 std::numeric_limits<int64_t>::max()};
  const std::vector<FeatureInput> inputs{
      DenseIds{.ids = std::span<const int64_t>(ids), .shape = {4}}};
  std::vector<float> activations(4 * kDim, 1.0f);
  layer.lookup(inputs, std::vector<std::span<float>>{activations});
  EXPECT_THAT(activations, ::testing::Each(0.0f));
  EXPECT_EQ(layer.vocabulary_stats("items").size, 0);
  EXPECT_EQ(layer.vocabulary_stats("items").not_admitted_lookups, 0);
}

TEST(DynamicTables, FullTableWithWhenFullErrorChangesNothing) {
  Embedding layer(
      {{.name = "items",
        .dim = kDim,
        .dynamic_vocabulary = DynamicVocabulary{.capacity = 3, .when_full = WhenFull::kError}}},
      {{.name = "f", .table = "items"}}, {.optimizer = Sgd{}, .seed = kSeed});
  auto train = [&](std::vector<int64_t> ids) {
    const std::vector<FeatureInput> inputs{DenseIds{.ids = std::span<const int64_t>(ids),
                                                    .shape = {static_cast<int64_t>(ids.size())}}};
    std::vector<float> activations(ids.size() * kDim);
    LookupBatch batch;
    layer.lookup(inputs, std::vector<std::span<float>>{activations}, batch);
    std::vector<float> gradients(activations.size(), 0.5f);
    layer.apply_gradients(batch, std::vector<std::span<const float>>{gradients});
  };
  train({1, 2, 3});
  const DynamicTableContents before = layer.read_dynamic_table("items");
  const std::string message = test::error_of<FailedPrecondition>([&] { train({4}); });
  EXPECT_THAT(message, HasSubstr("table 'items' is full"));
  EXPECT_THAT(message, HasSubstr("capacity of 3"));
  const DynamicTableContents after = layer.read_dynamic_table("items");
  EXPECT_EQ(after.keys, before.keys);
  EXPECT_EQ(after.parameters, before.parameters);
  EXPECT_EQ(layer.step(), 1);
  EXPECT_EQ(layer.vocabulary_stats("items").not_admitted_lookups, 0);
  train({2, 3});  // keys it holds still train
  EXPECT_EQ(layer.step(), 2);
}

TEST(DynamicTables, KeysOfAPendingBatchAreNeverEvicted) {
  Embedding layer(
      {{.name = "items", .dim = kDim, .dynamic_vocabulary = DynamicVocabulary{.capacity = 2}}},
      {{.name = "f", .table = "items"}}, {.optimizer = Sgd{}, .seed = kSeed});
  auto look_up = [&](std::vector<int64_t> ids, LookupBatch& batch) {
    const std::vector<FeatureInput> inputs{DenseIds{.ids = std::span<const int64_t>(ids),
                                                    .shape = {static_cast<int64_t>(ids.size())}}};
    std::vector<float> activations(ids.size() * kDim);
    layer.lookup(inputs, std::vector<std::span<float>>{activations}, batch);
  };
  LookupBatch first;
  look_up({1, 2}, first);
  LookupBatch second;
  EXPECT_THAT(test::error_of<FailedPrecondition>([&] { look_up({3}, second); }),
              HasSubstr("training lookups not applied yet"));
  std::vector<float> gradients(2 * kDim, 1.0f);
  layer.apply_gradients(first, std::vector<std::span<const float>>{gradients});
  look_up({3}, second);  // now 1 or 2 makes room
  EXPECT_EQ(layer.vocabulary_stats("items").evicted, 1);
}

TEST(DynamicTables, WriteThenReadRoundTripsAndValidates) {
  Embedding layer(
      {{.name = "items", .dim = 2, .dynamic_vocabulary = DynamicVocabulary{.capacity = 4}}},
      {{.name = "f", .table = "items"}},
      {.optimizer = Adagrad{.learning_rate = 0.1f},
       .seed = kSeed,
       .placement = PlacementOptions{.num_shards = 2, .strategy = ShardingStrategy::kRowWise}});
  DynamicTableContents contents{.keys = {-5, 0, 9},
                                .parameters = {1, 2, 3, 4, 5, 6},
                                .slots = {{"accumulators", {0.5f, 0.5f, 1, 1, 2, 2}}}};
  layer.write_dynamic_table("items", contents);
  const DynamicTableContents read = layer.read_dynamic_table("items");
  EXPECT_EQ(read.keys, contents.keys);
  EXPECT_EQ(read.parameters, contents.parameters);
  ASSERT_EQ(read.slots.size(), 1u);
  EXPECT_EQ(read.slots[0], contents.slots[0]);
  DynamicTableContents unsorted = contents;
  std::swap(unsorted.keys[0], unsorted.keys[1]);
  EXPECT_THAT(
      test::error_of<InvalidArgument>([&] { layer.write_dynamic_table("items", unsorted); }),
      HasSubstr("strictly increasing"));
  DynamicTableContents nan = contents;
  nan.parameters[3] = std::nanf("");
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { layer.write_dynamic_table("items", nan); }),
              HasSubstr("not finite"));
  EXPECT_EQ(layer.read_dynamic_table("items").parameters, contents.parameters);
  EXPECT_THAT(test::error_of<FailedPrecondition>([&] {
                std::vector<float> out(8);
                layer.read_variable("items", "parameters", out);
              }),
              HasSubstr("is dynamic"));
}

// What each optimizer's slots hold, written out here apart from optimizers/slot_spec.h: an
// accumulator or second moment whose root the update takes is > 0 (no epsilon: Adagrad, FTRL) or
// >= 0; momenta and linears are any finite value.
enum class Holds { kAnyFinite, kAtLeastZero, kAboveZero };

struct SlotRule {
  std::string optimizer;
  std::string slot;
  Holds holds;
};

TEST(DynamicTables, WriteRefusesSlotValuesTheOptimizerCannotHoldAndChangesNothing) {
  const std::vector<SlotRule> rules = {{"adagrad", "accumulators", Holds::kAboveZero},
                                       {"adagrad_momentum", "accumulators", Holds::kAtLeastZero},
                                       {"adagrad_momentum", "momenta", Holds::kAnyFinite},
                                       {"adam", "momenta", Holds::kAnyFinite},
                                       {"adam", "velocities", Holds::kAtLeastZero},
                                       {"ftrl", "accumulators", Holds::kAboveZero},
                                       {"ftrl", "linears", Holds::kAnyFinite},
                                       {"rowwise_adagrad", "accumulators", Holds::kAtLeastZero}};
  const float kInfinity = std::numeric_limits<float>::infinity();
  for (const SlotRule& rule : rules) {
    for (const float value : {-1.5f, -0.0f, 0.0f, std::numeric_limits<float>::denorm_min(), 2.0f,
                              std::nanf(""), kInfinity, -kInfinity}) {
      SCOPED_TRACE(rule.optimizer + " " + rule.slot + " " + std::to_string(value));
      Embedding layer(
          {{.name = "items", .dim = 2, .dynamic_vocabulary = DynamicVocabulary{.capacity = 4}}},
          {{.name = "f", .table = "items"}},
          {.optimizer = parse_optimizer(rule.optimizer), .seed = kSeed});
      const std::vector<std::string> names = layer.variable_names("items");
      DynamicTableContents contents{.keys = {-5, 9}, .parameters = {1, 2, 3, 4}};
      for (size_t v = 1; v < names.size(); ++v) {
        const size_t width = rule.optimizer == "rowwise_adagrad" ? 1 : 2;  // one value a row
        contents.slots.emplace_back(names[v], std::vector<float>(2 * width, 1.0f));
      }
      layer.write_dynamic_table("items", contents);
      DynamicTableContents written = contents;
      const auto slot = std::find_if(written.slots.begin(), written.slots.end(),
                                     [&](const auto& entry) { return entry.first == rule.slot; });
      ASSERT_NE(slot, written.slots.end());
      const size_t index = slot->second.size() / 2;  // key 9's first value
      slot->second[index] = value;
      const bool valid =
          std::isfinite(value) &&
          (rule.holds == Holds::kAnyFinite || (rule.holds == Holds::kAtLeastZero && value >= 0) ||
           (rule.holds == Holds::kAboveZero && value > 0));
      if (!valid) {
        const std::string message =
            test::error_of<InvalidArgument>([&] { layer.write_dynamic_table("items", written); });
        EXPECT_THAT(message, HasSubstr("write_dynamic_table: table 'items': '" + rule.slot +
                                       "': value " + std::to_string(value) + " at index " +
                                       std::to_string(index) + " (key 9)"));
        EXPECT_THAT(message, HasSubstr(std::isfinite(value) ? "is out of range: '" + rule.slot +
                                                                  "' must be finite and"
                                                            : std::string("is not finite")));
        const DynamicTableContents after = layer.read_dynamic_table("items");
        EXPECT_EQ(after.parameters, contents.parameters);
        EXPECT_EQ(after.slots, contents.slots);
        continue;
      }
      layer.write_dynamic_table("items", written);
      EXPECT_EQ(layer.read_dynamic_table("items").slots, written.slots);
      // A step from the written state leaves every row finite.
      const std::vector<int64_t> ids{-5, 9};
      const std::vector<FeatureInput> inputs{
          DenseIds{.ids = std::span<const int64_t>(ids), .shape = {2}}};
      std::vector<float> activations(4);
      LookupBatch batch;
      layer.lookup(inputs, std::vector<std::span<float>>{activations}, batch);
      const std::vector<float> gradients{0.5f, 0.0f, -0.25f, 0.0f};
      layer.apply_gradients(batch, std::vector<std::span<const float>>{gradients});
      for (const float row_value : layer.read_dynamic_table("items").parameters) {
        EXPECT_TRUE(std::isfinite(row_value)) << row_value;
      }
    }
  }
}

TEST(DynamicTables, ConfigErrorsNameTheTableAndField) {
  auto error = [](TableConfig table) {
    return test::error_of<InvalidArgument>(
        [&] { Embedding({table}, {{.name = "f", .table = table.name}}, {.optimizer = Sgd{}}); });
  };
  const TableConfig good{
      .name = "user", .dim = 2, .dynamic_vocabulary = DynamicVocabulary{.capacity = 5}};
  TableConfig both = good;
  both.vocabulary_size = 10;
  EXPECT_THAT(error(both), HasSubstr("table 'user': a dynamic table has no vocabulary_size"));
  TableConfig capacity = good;
  capacity.dynamic_vocabulary->capacity = 0;
  EXPECT_THAT(error(capacity),
              HasSubstr("dynamic_vocabulary.capacity must be in [1, 2147483648], got 0"));
  TableConfig min_count = good;
  min_count.dynamic_vocabulary->min_count = 0;
  EXPECT_THAT(error(min_count), HasSubstr("dynamic_vocabulary.min_count must be >= 1"));
  TableConfig ttl = good;
  ttl.dynamic_vocabulary->ttl_steps = -2;
  EXPECT_THAT(error(ttl), HasSubstr("dynamic_vocabulary.ttl_steps must be >= 1"));
  TableConfig callback = good;
  callback.initializer = InitializerCallback([](int64_t, int64_t, int64_t, std::span<float>) {});
  EXPECT_THAT(error(callback), HasSubstr("not a callback"));
}

}  // namespace
}  // namespace recemb
