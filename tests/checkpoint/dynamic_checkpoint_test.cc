// Checkpoints of dynamic tables (src/checkpoint/dynamic_checkpoint.cc, with save.cc and
// restore.cc): a restored run continues bit for bit as the uninterrupted one (admission, TTL and
// when_full evictions active), restores into every in-process placement, refuses a shrunk
// capacity or a static <-> dynamic mismatch without changing anything, and converts a static
// table explicitly.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "recemb/checkpoint.h"
#include "recemb/communicator.h"
#include "recemb/error.h"

#include "checkpoint/data_file.h"
#include "checkpoint/layout.h"
#include "checkpoint/manifest.h"
#include "placement/partition.h"
#include "testing/error_of.h"
#include "testing/files.h"
#include "testing/temporary_directory.h"

namespace recemb {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::TemporaryDirectory;
using ::testing::HasSubstr;

constexpr uint64_t kSeed = 23;

// "items" (dynamic, dim 4, the global Adagrad), "users" (dynamic, dim 3, RowwiseAdagrad: a [n]
// slot) and "video" (static, 20 rows, dim 2).
std::vector<TableConfig> tables(const DynamicVocabulary& items, const DynamicVocabulary& users) {
  return {{.name = "items", .dim = 4, .combiner = Combiner::kMean, .dynamic_vocabulary = items},
          {.name = "users",
           .dim = 3,
           .optimizer = RowwiseAdagrad{.learning_rate = 0.3f, .initial_accumulator_value = 0.2f},
           .combiner = Combiner::kSum,
           .dynamic_vocabulary = users},
          {.name = "video", .vocabulary_size = 20, .dim = 2}};
}

// Admission (min_count 2), TTL and when_full evictions all active over the steps trained.
const DynamicVocabulary kItems{
    .capacity = 30, .min_count = 2, .ttl_steps = 4, .when_full = WhenFull::kEvictLeastRecent};
const DynamicVocabulary kUsers{
    .capacity = 24, .min_count = 2, .ttl_steps = 5, .when_full = WhenFull::kEvictLeastFrequent};

Embedding make_layer(std::optional<PlacementOptions> placement = std::nullopt,
                     const DynamicVocabulary& items = kItems,
                     const DynamicVocabulary& users = kUsers, uint64_t seed = kSeed) {
  return Embedding(tables(items, users),
                   {{.name = "clicked", .table = "items"},
                    {.name = "user", .table = "users"},
                    {.name = "watched", .table = "video"}},
                   {.optimizer = Adagrad{.learning_rate = 0.5f, .initial_accumulator_value = 0.1f},
                    .num_threads = 2,
                    .seed = seed,
                    .placement = placement});
}

// 12 bags of 0-4 ids: keys near step * `drift` (a vocabulary that moves, so that keys expire),
// spread over int64 by an odd multiplier; for the static table rows below 20.
struct Ids {
  std::vector<int64_t> values;
  std::vector<int64_t> splits{0};
};

Ids random_ids(std::mt19937_64& random, int64_t step, int64_t drift, bool keyed) {
  Ids ids;
  std::uniform_int_distribution<int> length(0, 4);
  std::uniform_int_distribution<int64_t> offset(0, 30);
  for (int bag = 0; bag < 12; ++bag) {
    for (int j = length(random); j > 0; --j) {
      const int64_t near = step * drift + offset(random);
      ids.values.push_back(
          keyed ? static_cast<int64_t>(static_cast<uint64_t>(near) * 0x9e3779b97f4a7c15ULL)
                : near % 20);
    }
    ids.splits.push_back(static_cast<int64_t>(ids.values.size()));
  }
  return ids;
}

// Trains steps [first, last); the ids and gradients of step s depend only on s. Of several ranks,
// rank r of W takes bags [12 r / W, 12 (r + 1) / W) of each step's 12.
void train(Embedding& layer, int64_t first, int64_t last) {
  const size_t begin =
      static_cast<size_t>(layer.rank()) * 12 / static_cast<size_t>(layer.world_size());
  const size_t end =
      static_cast<size_t>(layer.rank() + 1) * 12 / static_cast<size_t>(layer.world_size());
  for (int64_t step = first; step < last; ++step) {
    std::mt19937_64 random(100 + static_cast<uint64_t>(step));
    std::vector<Ids> ids = {random_ids(random, step, 2, true), random_ids(random, step, 3, true),
                            random_ids(random, step, 1, false)};
    std::vector<FeatureInput> inputs;
    std::vector<std::vector<float>> activations;
    for (size_t f = 0; f < ids.size(); ++f) {
      Ids& share = ids[f];
      share.values = std::vector<int64_t>(share.values.begin() + share.splits[begin],
                                          share.values.begin() + share.splits[end]);
      std::vector<int64_t> splits(share.splits.begin() + static_cast<std::ptrdiff_t>(begin),
                                  share.splits.begin() + static_cast<std::ptrdiff_t>(end) + 1);
      for (int64_t& split : splits) split -= share.splits[begin];
      share.splits = std::move(splits);
      inputs.push_back(RaggedIds{.values = std::span<const int64_t>(share.values),
                                 .row_splits = std::span<const int64_t>(share.splits)});
      activations.emplace_back((end - begin) * static_cast<size_t>(layer.tables()[f].dim));
    }
    const std::vector<std::span<float>> outputs(activations.begin(), activations.end());
    LookupBatch batch;
    layer.lookup(inputs, outputs, batch);
    std::normal_distribution<float> gradient(0.0f, 1.0f);
    std::vector<std::vector<float>> gradients;
    for (size_t f = 0; f < ids.size(); ++f) {
      const auto dim = static_cast<size_t>(layer.tables()[f].dim);
      std::vector<float> all(12 * dim);
      for (float& value : all) value = gradient(random);
      gradients.emplace_back(all.begin() + static_cast<std::ptrdiff_t>(begin * dim),
                             all.begin() + static_cast<std::ptrdiff_t>(end * dim));
    }
    const std::vector<std::span<const float>> spans(gradients.begin(), gradients.end());
    layer.apply_gradients(batch, spans);
  }
}

// Everything a run's continuation depends on that the API shows.
struct State {
  std::map<std::string, DynamicTableContents> dynamic;
  std::map<std::string, VocabularyStats> stats;
  std::vector<float> video;
  int64_t step = 0;
};

State state_of(const Embedding& layer) {
  State state{.video = std::vector<float>(40), .step = layer.step()};
  for (const std::string table : {"items", "users"}) {
    state.dynamic[table] = layer.read_dynamic_table(table);
    state.stats[table] = layer.vocabulary_stats(table);
  }
  layer.read_variable("video", "parameters", state.video);
  return state;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

::testing::AssertionResult bitwise_equal(const State& a, const State& b) {
  if (a.step != b.step) return ::testing::AssertionFailure() << "steps differ";
  if (!same_bits(a.video, b.video)) return ::testing::AssertionFailure() << "video differs";
  for (const auto& [table, contents] : a.dynamic) {
    const DynamicTableContents& other = b.dynamic.at(table);
    if (contents.keys != other.keys) return ::testing::AssertionFailure() << table << " keys";
    if (!same_bits(contents.parameters, other.parameters)) {
      return ::testing::AssertionFailure() << table << " parameters";
    }
    if (contents.slots.size() != other.slots.size()) {
      return ::testing::AssertionFailure() << table << " slots";
    }
    for (size_t s = 0; s < contents.slots.size(); ++s) {
      if (contents.slots[s].first != other.slots[s].first ||
          !same_bits(contents.slots[s].second, other.slots[s].second)) {
        return ::testing::AssertionFailure() << table << " slot " << contents.slots[s].first;
      }
    }
    const VocabularyStats& x = a.stats.at(table);
    const VocabularyStats& y = b.stats.at(table);
    if (x.size != y.size || x.inserted != y.inserted || x.evicted != y.evicted ||
        x.not_admitted_lookups != y.not_admitted_lookups) {
      return ::testing::AssertionFailure() << table << " stats";
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(DynamicCheckpointTest, RestoredRunContinuesExactlyAsTheUninterruptedOne) {
  constexpr int64_t kSteps = 16;
  for (const int64_t split : {1, 7, 10}) {
    SCOPED_TRACE("saved after step " + std::to_string(split));
    TemporaryDirectory directory;
    Embedding straight = make_layer();
    train(straight, 0, kSteps);

    Embedding first = make_layer();
    train(first, 0, split);
    const fs::path saved = save_checkpoint(first, directory.path());
    // Some training of its own: the restore must replace everything.
    Embedding resumed = make_layer();
    train(resumed, 0, 3);
    restore_checkpoint(resumed, saved);
    EXPECT_TRUE(bitwise_equal(state_of(resumed), state_of(first)));
    train(resumed, split, kSteps);
    EXPECT_TRUE(bitwise_equal(state_of(resumed), state_of(straight)));
  }
  // Every mechanism was at work.
  Embedding layer = make_layer();
  train(layer, 0, kSteps);
  for (const std::string table : {"items", "users"}) {
    const VocabularyStats stats = layer.vocabulary_stats(table);
    EXPECT_GT(stats.evicted, 0) << table;
    EXPECT_GT(stats.not_admitted_lookups, 0) << table;
  }
}

TEST(DynamicCheckpointTest, ManifestRecordsKeysCountsAndCounters) {
  TemporaryDirectory directory;
  Embedding layer = make_layer();
  train(layer, 0, 6);
  const fs::path saved = save_checkpoint(layer, directory.path());
  const internal::Manifest manifest = internal::read_manifest(saved).manifest;
  ASSERT_TRUE(manifest.tables[0].dynamic);
  EXPECT_FALSE(manifest.tables[2].dynamic);
  const internal::DynamicEntry& items = *manifest.tables[0].dynamic;
  const VocabularyStats stats = layer.vocabulary_stats("items");
  EXPECT_EQ(items.num_keys(), stats.size);
  EXPECT_GT(items.num_pending(), 0);
  EXPECT_EQ(items.counters.inserted, stats.inserted);
  EXPECT_EQ(items.counters.evicted, stats.evicted);
  EXPECT_EQ(items.counters.not_admitted_lookups, stats.not_admitted_lookups);
  EXPECT_FALSE(items.pending_sketch_in_use);
  EXPECT_EQ(manifest.tables[0].variables[0].shape, (std::vector<int64_t>{stats.size, 4}));
  EXPECT_EQ(manifest.tables[1].variables[1].shape,
            (std::vector<int64_t>{layer.vocabulary_stats("users").size}));

  // The keys file holds the table's keys in (bucket, key) order.
  const std::string bytes = test::read_text(saved / items.arrays[internal::kKeys].data.file);
  std::vector<int64_t> keys(bytes.size() / sizeof(int64_t));
  std::memcpy(keys.data(), bytes.data(), bytes.size());
  std::vector<int64_t> sorted = keys;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, layer.read_dynamic_table("items").keys);
  EXPECT_TRUE(std::is_sorted(keys.begin(), keys.end(), [](int64_t a, int64_t b) {
    return std::pair(internal::key_bucket(a), a) < std::pair(internal::key_bucket(b), b);
  }));
  const CheckpointInfo info = inspect_checkpoint(saved);
  EXPECT_TRUE(info.ok);
  EXPECT_EQ(info.format_version, 2);
  EXPECT_TRUE(info.tables[0].dynamic);
  EXPECT_EQ(info.tables[0].num_keys, stats.size);
  EXPECT_FALSE(info.tables[2].dynamic);
  // The manifest and every data file, the key arrays included.
  EXPECT_EQ(info.files.size(), 1 + (2 + 5) + (2 + 5) + 2u);
}

// Placements that hold the tables as one part, or split them by keys (2 or 3 parts, each a range
// of buckets) or by columns.
std::vector<std::optional<PlacementOptions>> placements() {
  return {std::nullopt, PlacementOptions{.num_shards = 2, .strategy = ShardingStrategy::kRowWise},
          PlacementOptions{.num_shards = 3, .strategy = ShardingStrategy::kRowWise},
          PlacementOptions{.num_shards = 2, .strategy = ShardingStrategy::kTableWise}};
}

std::string name_of(const std::optional<PlacementOptions>& placement) {
  if (!placement) return "one part";
  return std::string(sharding_strategy_name(placement->strategy)) + " x" +
         std::to_string(placement->num_shards);
}

// Vocabularies large enough that no part fills whatever the placement (so that placements agree
// to float rounding), still admitting and evicting.
constexpr DynamicVocabulary kRoomyItems{.capacity = 600, .min_count = 2, .ttl_steps = 4};
constexpr DynamicVocabulary kRoomyUsers{.capacity = 600, .min_count = 2, .ttl_steps = 5};

// Any placement saves the same files (they hold whole logical tables) and restores into any other
// bit for bit; training on continues as on one part to float rounding (no part is full).
TEST(DynamicCheckpointTest, RestoresIntoEveryInProcessPlacement) {
  TemporaryDirectory directory;
  Embedding source = make_layer(std::nullopt, kRoomyItems, kRoomyUsers);
  train(source, 0, 8);
  const fs::path saved = save_checkpoint(source, directory.path() / "source");
  const State expected = state_of(source);
  train(source, 8, 14);
  const State continued = state_of(source);

  for (const auto& placement : placements()) {
    SCOPED_TRACE(name_of(placement));
    Embedding restored = make_layer(placement, kRoomyItems, kRoomyUsers);
    train(restored, 0, 2);
    restore_checkpoint(restored, saved);
    EXPECT_TRUE(bitwise_equal(state_of(restored), expected));

    // Saved again from this placement: the same data files, byte for byte.
    const fs::path again = save_checkpoint(restored, directory.path() / name_of(placement));
    const internal::Manifest manifest = internal::read_manifest(saved).manifest;
    for (const internal::TableEntry& table : manifest.tables) {
      for (const internal::ArrayEntry* array : table.arrays()) {
        EXPECT_EQ(test::read_text(again / array->data.file),
                  test::read_text(saved / array->data.file))
            << array->data.file;
      }
    }

    train(restored, 8, 14);
    const State state = state_of(restored);
    for (const auto& [table, contents] : continued.dynamic) {
      EXPECT_EQ(state.dynamic.at(table).keys, contents.keys) << table;
      ASSERT_EQ(state.dynamic.at(table).parameters.size(), contents.parameters.size());
      for (size_t i = 0; i < contents.parameters.size(); ++i) {
        ASSERT_NEAR(state.dynamic.at(table).parameters[i], contents.parameters[i], 1e-5) << table;
      }
      EXPECT_EQ(state.stats.at(table).inserted, continued.stats.at(table).inserted);
      EXPECT_EQ(state.stats.at(table).evicted, continued.stats.at(table).evicted);
    }
  }

  // And back: saved by three parts split by keys, restored into one part.
  Embedding split = make_layer(placements()[2], kRoomyItems, kRoomyUsers);
  restore_checkpoint(split, saved);
  const fs::path from_split = save_checkpoint(split, directory.path() / "split");
  Embedding whole = make_layer(std::nullopt, kRoomyItems, kRoomyUsers);
  restore_checkpoint(whole, from_split);
  EXPECT_TRUE(bitwise_equal(state_of(whole), expected));
}

// Several ranks (threads joined by in_process_communicators) restore a checkpoint, each rank its
// parts' keys, and save it again: the same files, byte for byte, which one process restores bit
// for bit.
TEST(DynamicCheckpointTest, SeveralRanksRestoreAndSaveTheSameFiles) {
  TemporaryDirectory directory;
  Embedding source = make_layer(std::nullopt, kRoomyItems, kRoomyUsers);
  train(source, 0, 8);
  const fs::path saved = save_checkpoint(source, directory.path() / "source");
  const internal::Manifest manifest = internal::read_manifest(saved).manifest;
  struct Setup {
    int ranks;
    PlacementOptions placement;
  };
  for (const Setup& setup :
       {Setup{2, {.num_shards = 2, .strategy = ShardingStrategy::kRowWise}},
        Setup{3, {.num_shards = 3, .strategy = ShardingStrategy::kRowWise}},
        Setup{2, {.num_shards = 4, .strategy = ShardingStrategy::kRowWise}},
        Setup{2, {.num_shards = 2, .strategy = ShardingStrategy::kTableWise}},
        Setup{2, {.num_shards = 2, .strategy = ShardingStrategy::kReplicated}}}) {
    const std::string name = std::to_string(setup.ranks) + " ranks " + name_of(setup.placement);
    SCOPED_TRACE(name);
    const fs::path root = directory.path() / name;
    std::vector<std::string> errors(static_cast<size_t>(setup.ranks));
    std::vector<std::thread> threads;
    const std::vector<std::shared_ptr<Communicator>> communicators =
        in_process_communicators(setup.ranks);
    for (int r = 0; r < setup.ranks; ++r) {
      threads.emplace_back([&, r] {
        try {
          Embedding layer(tables(kRoomyItems, kRoomyUsers), source.features(),
                          {.optimizer = source.options().optimizer,
                           .num_threads = 1,
                           .seed = kSeed,
                           .placement = setup.placement,
                           .communicator = communicators[static_cast<size_t>(r)]});
          restore_checkpoint(layer, saved);
          save_checkpoint(layer, root);
        } catch (const std::exception& error) {
          errors[static_cast<size_t>(r)] = error.what();
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    for (const std::string& error : errors) EXPECT_EQ(error, "");
    const fs::path again = root / saved.filename();
    for (const internal::TableEntry& table : manifest.tables) {
      for (const internal::ArrayEntry* array : table.arrays()) {
        EXPECT_EQ(test::read_text(again / array->data.file),
                  test::read_text(saved / array->data.file))
            << array->data.file;
      }
    }
    Embedding whole = make_layer(std::nullopt, kRoomyItems, kRoomyUsers);
    restore_checkpoint(whole, again);
    EXPECT_TRUE(bitwise_equal(state_of(whole), state_of(source)));
  }
}

// Ranks that train a table split by keys, save, and resume from the checkpoint in new Embeddings
// end where the uninterrupted ranks end: the same files, byte for byte.
TEST(DynamicCheckpointTest, SeveralRanksResumeExactlyAsTheUninterruptedRanks) {
  TemporaryDirectory directory;
  for (const int ranks : {2, 3}) {
    SCOPED_TRACE(std::to_string(ranks) + " ranks");
    const fs::path root = directory.path() / std::to_string(ranks);
    std::vector<std::string> errors(static_cast<size_t>(ranks));
    std::vector<std::thread> threads;
    const std::vector<std::shared_ptr<Communicator>> communicators =
        in_process_communicators(ranks);
    for (int r = 0; r < ranks; ++r) {
      threads.emplace_back([&, r] {
        try {
          const auto make = [&] {
            // Room for the keys of one lookup in every part; evictions by TTL and when full.
            DynamicVocabulary items = kItems;
            DynamicVocabulary users = kUsers;
            items.capacity = 20 * ranks;
            users.capacity = 16 * ranks;
            return Embedding(tables(items, users), make_layer().features(),
                             {.optimizer = make_layer().options().optimizer,
                              .num_threads = 1,
                              .seed = kSeed,
                              .placement = PlacementOptions{.num_shards = ranks,
                                                            .strategy = ShardingStrategy::kRowWise},
                              .communicator = communicators[static_cast<size_t>(r)]});
          };
          Embedding straight = make();
          train(straight, 0, 14);
          save_checkpoint(straight, root / "straight");
          Embedding first = make();
          train(first, 0, 6);
          const fs::path saved = save_checkpoint(first, root / "first");
          Embedding resumed = make();
          train(resumed, 0, 2);
          restore_checkpoint(resumed, saved);
          train(resumed, 6, 14);
          save_checkpoint(resumed, root / "resumed");
        } catch (const std::exception& error) {
          errors[static_cast<size_t>(r)] = error.what();
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    for (const std::string& error : errors) ASSERT_EQ(error, "");
    const fs::path straight = root / "straight" / "ckpt-000000000014";
    const fs::path resumed = root / "resumed" / "ckpt-000000000014";
    EXPECT_EQ(test::read_text(resumed / internal::kManifestFile),
              test::read_text(straight / internal::kManifestFile));
    const internal::Manifest manifest = internal::read_manifest(straight).manifest;
    for (const internal::TableEntry& table : manifest.tables) {
      for (const internal::ArrayEntry* array : table.arrays()) {
        EXPECT_EQ(test::read_text(resumed / array->data.file),
                  test::read_text(straight / array->data.file))
            << array->data.file;
      }
    }
    EXPECT_GT(manifest.tables[0].dynamic->counters.evicted, 0);
    EXPECT_GT(manifest.tables[0].dynamic->num_pending(), 0);
  }
}

TEST(DynamicCheckpointTest, ColumnWisePartsRestoreTheirColumns) {
  // Column-wise placement splits no table with a row-wise slot: "items" alone, with Adagrad.
  const auto make = [](std::optional<PlacementOptions> placement, uint64_t seed) {
    return Embedding(
        {{.name = "items",
          .dim = 4,
          .dynamic_vocabulary =
              DynamicVocabulary{.capacity = 600, .min_count = 2, .ttl_steps = 4}}},
        {{.name = "clicked", .table = "items"}},
        {.optimizer = Adagrad{.learning_rate = 0.5f}, .seed = seed, .placement = placement});
  };
  TemporaryDirectory directory;
  Embedding source = make(std::nullopt, kSeed);
  std::mt19937_64 random(3);
  for (int64_t step = 0; step < 6; ++step) {
    const Ids ids = random_ids(random, step, 2, true);
    const std::vector<FeatureInput> inputs{
        RaggedIds{.values = std::span<const int64_t>(ids.values),
                  .row_splits = std::span<const int64_t>(ids.splits)}};
    std::vector<float> activations(12 * 4);
    LookupBatch batch;
    source.lookup(inputs, std::vector<std::span<float>>{activations}, batch);
    for (float& value : activations) value = value * 0.5f - 0.25f;
    source.apply_gradients(batch, std::vector<std::span<const float>>{activations});
  }
  const fs::path saved = save_checkpoint(source, directory.path() / "one");
  Embedding columns =
      make(PlacementOptions{.num_shards = 2, .strategy = ShardingStrategy::kColumnWise}, kSeed);
  restore_checkpoint(columns, saved);
  const DynamicTableContents expected = source.read_dynamic_table("items");
  const DynamicTableContents got = columns.read_dynamic_table("items");
  EXPECT_EQ(got.keys, expected.keys);
  EXPECT_TRUE(same_bits(got.parameters, expected.parameters));
  EXPECT_TRUE(same_bits(got.slots.at(0).second, expected.slots.at(0).second));
  const fs::path again = save_checkpoint(columns, directory.path() / "columns");
  for (const std::string file : {"t0.parameters.f32", "t0.accumulators.f32", "t0.keys.i64",
                                 "t0.last_seen.i64", "t0.count.i64", "t0.pending_keys.i64"}) {
    EXPECT_EQ(test::read_text(again / file), test::read_text(saved / file)) << file;
  }
}

TEST(DynamicCheckpointTest, MoreKeysThanAPartHoldsAreRefusedWithNothingChanged) {
  TemporaryDirectory directory;
  Embedding source = make_layer();
  train(source, 0, 6);
  const int64_t keys = source.vocabulary_stats("items").size;
  ASSERT_GT(keys, 10);
  const fs::path saved = save_checkpoint(source, directory.path());

  Embedding small = make_layer(std::nullopt, {.capacity = keys - 1, .min_count = 2}, kUsers);
  train(small, 0, 2);
  const State before = state_of(small);
  EXPECT_THAT(error_of<InvalidArgument>([&] { restore_checkpoint(small, saved); }),
              HasSubstr("table 'items': " + std::to_string(keys) + " of the checkpoint's " +
                        std::to_string(keys) + " keys belong to a part that holds at most " +
                        std::to_string(keys - 1)));
  EXPECT_TRUE(bitwise_equal(state_of(small), before));

  // Split into 2 parts of ceil(capacity / 2) keys each: one of them gets too many.
  Embedding split =
      make_layer(PlacementOptions{.num_shards = 2, .strategy = ShardingStrategy::kRowWise},
                 {.capacity = keys / 2, .min_count = 2}, kUsers);
  EXPECT_THAT(error_of<InvalidArgument>([&] { restore_checkpoint(split, saved); }),
              HasSubstr("table 'items': "));
  // Exactly enough room restores.
  Embedding exact = make_layer(std::nullopt, {.capacity = keys, .min_count = 2}, kUsers);
  restore_checkpoint(exact, saved);
  EXPECT_EQ(exact.read_dynamic_table("items").keys, source.read_dynamic_table("items").keys);
}

TEST(DynamicCheckpointTest, StaticAndDynamicTablesDoNotRestoreIntoEachOther) {
  TemporaryDirectory directory;
  const auto static_layer = [](uint64_t seed) {
    return Embedding(
        {{.name = "items", .vocabulary_size = 50, .dim = 4}},
        {{.name = "clicked", .table = "items"}},
        {.optimizer = Adagrad{.learning_rate = 0.5f, .initial_accumulator_value = 0.1f},
         .seed = seed});
  };
  const auto dynamic_layer = [](uint64_t seed) {
    return Embedding(
        {{.name = "items", .dim = 4, .dynamic_vocabulary = DynamicVocabulary{.capacity = 60}}},
        {{.name = "clicked", .table = "items"}},
        {.optimizer = Adagrad{.learning_rate = 0.5f, .initial_accumulator_value = 0.1f},
         .seed = seed});
  };
  // A static table trained on ids 0..49.
  Embedding fixed = static_layer(kSeed);
  std::vector<int64_t> ids(50);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i * 7 % 50);
  const std::vector<FeatureInput> inputs{
      DenseIds{.ids = std::span<const int64_t>(ids), .shape = {50}}};
  std::vector<float> activations(50 * 4);
  LookupBatch batch;
  fixed.lookup(inputs, std::vector<std::span<float>>{activations}, batch);
  for (size_t i = 0; i < activations.size(); ++i) activations[i] = static_cast<float>(i % 7) - 3.0f;
  fixed.apply_gradients(batch, std::vector<std::span<const float>>{activations});
  const fs::path static_checkpoint = save_checkpoint(fixed, directory.path() / "static");

  Embedding keyed = dynamic_layer(kSeed);
  keyed.lookup(inputs, std::vector<std::span<float>>{activations}, batch);
  keyed.apply_gradients(batch, std::vector<std::span<const float>>{activations});
  const fs::path dynamic_checkpoint = save_checkpoint(keyed, directory.path() / "dynamic");

  const DynamicTableContents keyed_before = keyed.read_dynamic_table("items");
  EXPECT_THAT(error_of<InvalidArgument>([&] { restore_checkpoint(keyed, static_checkpoint); }),
              HasSubstr("table 'items': the checkpoint holds a static table (vocabulary_size 50), "
                        "the embedding a dynamic one: convert it with "
                        "read_static_table_as_dynamic"));
  EXPECT_EQ(keyed.read_dynamic_table("items").keys, keyed_before.keys);
  std::vector<float> fixed_before(200);
  fixed.read_variable("items", "parameters", fixed_before);
  EXPECT_THAT(error_of<InvalidArgument>([&] { restore_checkpoint(fixed, dynamic_checkpoint); }),
              HasSubstr("table 'items': the checkpoint holds a dynamic table (50 keys), the "
                        "embedding a static one (vocabulary_size 50)"));
  std::vector<float> fixed_after(200);
  fixed.read_variable("items", "parameters", fixed_after);
  EXPECT_TRUE(same_bits(fixed_after, fixed_before));

  // The explicit conversion: row r becomes key r, with its slots.
  const DynamicTableContents converted =
      read_static_table_as_dynamic(directory.path() / "static", "items");
  std::vector<int64_t> rows(50);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(i);
  EXPECT_EQ(converted.keys, rows);
  EXPECT_TRUE(same_bits(converted.parameters, fixed_before));
  std::vector<float> accumulators(200);
  fixed.read_variable("items", "accumulators", accumulators);
  ASSERT_EQ(converted.slots.size(), 1u);
  EXPECT_EQ(converted.slots[0].first, "accumulators");
  EXPECT_TRUE(same_bits(converted.slots[0].second, accumulators));
  Embedding target = dynamic_layer(kSeed);
  target.write_dynamic_table("items", converted);
  // Looked up and trained alike from here.
  std::vector<float> from_static(200);
  std::vector<float> from_dynamic(200);
  fixed.lookup(inputs, std::vector<std::span<float>>{from_static}, batch);
  LookupBatch dynamic_batch;
  target.lookup(inputs, std::vector<std::span<float>>{from_dynamic}, dynamic_batch);
  EXPECT_TRUE(same_bits(from_dynamic, from_static));
  fixed.apply_gradients(batch, std::vector<std::span<const float>>{activations});
  target.apply_gradients(dynamic_batch, std::vector<std::span<const float>>{activations});
  std::vector<float> trained(200);
  fixed.read_variable("items", "parameters", trained);
  EXPECT_TRUE(same_bits(target.read_dynamic_table("items").parameters, trained));

  EXPECT_THAT(
      error_of<InvalidArgument>([&] { read_static_table_as_dynamic(dynamic_checkpoint, "items"); }),
      HasSubstr("table 'items' is dynamic already"));
  EXPECT_THAT(
      error_of<InvalidArgument>([&] { read_static_table_as_dynamic(static_checkpoint, "nope"); }),
      HasSubstr("table 'nope': not in the checkpoint"));
}

TEST(DynamicCheckpointTest, ADynamicTableNeedsTheCheckpointsSeed) {
  TemporaryDirectory directory;
  Embedding layer = make_layer();
  train(layer, 0, 3);
  const fs::path saved = save_checkpoint(layer, directory.path());
  Embedding other = make_layer(std::nullopt, kItems, kUsers, kSeed + 1);
  train(other, 0, 2);
  const State before = state_of(other);
  EXPECT_THAT(error_of<InvalidArgument>([&] { restore_checkpoint(other, saved); }),
              HasSubstr("table 'items': a dynamic table needs the checkpoint's seed, 23"));
  EXPECT_TRUE(bitwise_equal(state_of(other), before));
}

TEST(DynamicCheckpointTest, RestoreWaitsForPendingTrainingLookups) {
  TemporaryDirectory directory;
  Embedding layer = make_layer();
  train(layer, 0, 3);
  const fs::path saved = save_checkpoint(layer, directory.path());
  std::vector<int64_t> ids{5, 6};
  const std::vector<FeatureInput> inputs{
      DenseIds{.ids = std::span<const int64_t>(ids), .shape = {2}},
      DenseIds{.ids = std::span<const int64_t>(ids), .shape = {2}},
      DenseIds{.ids = std::span<const int64_t>(ids), .shape = {2}}};
  std::vector<float> a(8), b(6), c(4);
  LookupBatch batch;
  layer.lookup(inputs, std::vector<std::span<float>>{a, b, c}, batch);
  const State before = state_of(layer);
  EXPECT_THAT(error_of<FailedPrecondition>([&] { restore_checkpoint(layer, saved); }),
              HasSubstr("table 'items': a training lookup is not applied yet"));
  EXPECT_TRUE(bitwise_equal(state_of(layer), before));
}

// Beyond the exact pending counts (as many keys as a part holds, at least 2^16) a sketch counts;
// its counts are not saved: the manifest says so, and a restored run admits such keys later.
TEST(DynamicCheckpointTest, PendingCountsInTheSketchAreNotSaved) {
  const auto make = [] {
    return Embedding({{.name = "items",
                       .dim = 2,
                       .dynamic_vocabulary = DynamicVocabulary{.capacity = 10, .min_count = 2}}},
                     {{.name = "clicked", .table = "items"}},
                     {.optimizer = Sgd{.learning_rate = 0.1f}, .seed = kSeed});
  };
  const auto train_on = [](Embedding& layer, const std::vector<int64_t>& ids) {
    const std::vector<FeatureInput> inputs{DenseIds{.ids = std::span<const int64_t>(ids),
                                                    .shape = {static_cast<int64_t>(ids.size())}}};
    std::vector<float> activations(ids.size() * 2);
    LookupBatch batch;
    layer.lookup(inputs, std::vector<std::span<float>>{activations}, batch);
    layer.apply_gradients(batch, std::vector<std::span<const float>>{activations});
  };
  constexpr int64_t kExact = int64_t{1} << 16;
  std::vector<int64_t> once(kExact + 1000);
  for (size_t i = 0; i < once.size(); ++i) once[i] = static_cast<int64_t>(i);
  TemporaryDirectory directory;
  Embedding straight = make();
  train_on(straight, once);  // keys in order of first occurrence: the last 1000 in the sketch
  const fs::path saved = save_checkpoint(straight, directory.path());
  const internal::DynamicEntry dynamic = *internal::read_manifest(saved).manifest.tables[0].dynamic;
  EXPECT_TRUE(dynamic.pending_sketch_in_use);
  EXPECT_EQ(dynamic.num_pending(), kExact);
  Embedding restored = make();
  restore_checkpoint(restored, saved);
  // Key 5 was counted exactly, key kExact + 5 in the sketch.
  const std::vector<int64_t> again{5, kExact + 5};
  train_on(straight, again);
  train_on(restored, again);
  EXPECT_EQ(straight.read_dynamic_table("items").keys, again);
  EXPECT_EQ(restored.read_dynamic_table("items").keys, std::vector<int64_t>{5});
}

// Rewrites the key array `array` of table 0 of `checkpoint` by `change`, with valid checksums.
void rewrite_key_array(const fs::path& checkpoint, internal::DynamicArray array,
                       const std::function<void(std::vector<int64_t>&)>& change) {
  internal::Manifest manifest = internal::read_manifest(checkpoint).manifest;
  internal::DataFile& data = manifest.tables[0].dynamic->arrays[array].data;
  const std::string bytes = test::read_text(checkpoint / data.file);
  std::vector<int64_t> values(bytes.size() / sizeof(int64_t));
  std::memcpy(values.data(), bytes.data(), bytes.size());
  change(values);
  fs::remove(checkpoint / data.file);
  data = internal::write_data_file(checkpoint / data.file, std::as_bytes(std::span(values)),
                                   manifest.checksum_block_bytes);
  internal::write_manifest(checkpoint, manifest);
}

TEST(DynamicCheckpointTest, InconsistentKeyArraysAreDataLossWithNothingChanged) {
  struct Damage {
    internal::DynamicArray array;
    std::function<void(std::vector<int64_t>&)> change;
    std::string message;
  };
  const std::vector<Damage> damages = {
      {internal::kKeys, [](auto& keys) { std::swap(keys[1], keys[2]); },
       "out of (bucket, key) order"},
      {internal::kKeys, [](auto& keys) { keys[2] = keys[1]; }, "out of (bucket, key) order"},
      {internal::kLastSeen, [](auto& steps) { steps[3] = 8; }, "value 8 at index 3 is outside"},
      {internal::kCounts, [](auto& counts) { counts[0] = -1; }, "value -1 at index 0 is outside"},
      {internal::kPendingCounts, [](auto& counts) { counts[0] = 0; },
       "value 0 at index 0 is outside [1, "},
  };
  for (const Damage& damage : damages) {
    SCOPED_TRACE(damage.message);
    TemporaryDirectory directory;
    Embedding layer = make_layer();
    train(layer, 0, 6);
    const fs::path saved = save_checkpoint(layer, directory.path());
    rewrite_key_array(saved, damage.array, damage.change);
    Embedding target = make_layer();
    train(target, 0, 2);
    const State before = state_of(target);
    const std::string error = error_of<DataLoss>([&] { restore_checkpoint(target, saved); });
    EXPECT_THAT(error, HasSubstr(damage.message));
    EXPECT_THAT(error, HasSubstr("(table 'items' array '" +
                                 std::string(internal::kDynamicArrayNames[damage.array]) +
                                 "') is damaged: "));
    EXPECT_TRUE(bitwise_equal(state_of(target), before));
  }
}

// tests/data/checkpoint-v2 was saved by format version 2, the first with dynamic tables, and must
// keep loading. Seed 3, the global Adagrad (learning rate 0.5, initial accumulator 0.125), step 6:
//   "users": dynamic, dim 2, Constant 0.5, capacity 8, min_count 3, ttl_steps 3; keys -7, 3, 2^62
//            (write_dynamic_table at step 5: last seen 5, count 1), parameters 0.25, 0.5, ... 1.5
//            and accumulators 1.5, 1.75, ... 2.75 in key order; then a training lookup for step 6
//            of keys 11, 11, 12 (not admitted: pending counts 2 and 1, not_admitted_lookups 3);
//   "video": static [3, 2], parameters 0.25, accumulators 0.125 (zero gradients).
// Checksum blocks of 16 bytes.
TEST(DynamicCheckpointTest, ReadsTheCheckedInVersion2Checkpoint) {
  const fs::path root = test::checked_in_data_dir() / "checkpoint-v2";
  Embedding loaded = load_checkpoint(root, {.num_threads = 1});
  EXPECT_EQ(loaded.step(), 6);
  ASSERT_TRUE(loaded.tables()[0].dynamic_vocabulary);
  EXPECT_EQ(loaded.tables()[0].dynamic_vocabulary->ttl_steps, 3);
  const DynamicTableContents users = loaded.read_dynamic_table("users");
  EXPECT_EQ(users.keys, (std::vector<int64_t>{-7, 3, int64_t{1} << 62}));
  EXPECT_EQ(users.parameters, (std::vector<float>{0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f}));
  ASSERT_EQ(users.slots.size(), 1u);
  EXPECT_EQ(users.slots[0].second, (std::vector<float>{1.5f, 1.75f, 2.0f, 2.25f, 2.5f, 2.75f}));
  const VocabularyStats stats = loaded.vocabulary_stats("users");
  EXPECT_EQ(stats.size, 3);
  EXPECT_EQ(stats.inserted, 0);
  EXPECT_EQ(stats.not_admitted_lookups, 3);
  std::vector<float> video(6);
  loaded.read_variable("video", "parameters", video);
  EXPECT_EQ(video, std::vector<float>(6, 0.25f));

  // Key 11 reaches min_count 3 with one more occurrence, keys 12 and 13 do not; at the end of step
  // 8 the TTL removes the keys last seen at step 5.
  const auto step = [&loaded](std::vector<int64_t> user_ids) {
    std::vector<int64_t> video_ids{0};
    const std::vector<FeatureInput> inputs{
        DenseIds{.ids = std::span<const int64_t>(user_ids),
                 .shape = {static_cast<int64_t>(user_ids.size())}},
        DenseIds{.ids = std::span<const int64_t>(video_ids), .shape = {1}}};
    std::vector<float> a(user_ids.size() * 2);
    std::vector<float> b(2);
    LookupBatch batch;
    loaded.lookup(inputs, std::vector<std::span<float>>{a, b}, batch);
    std::fill(a.begin(), a.end(), 0.0f);
    std::fill(b.begin(), b.end(), 0.0f);
    loaded.apply_gradients(batch, std::vector<std::span<const float>>{a, b});
  };
  step({11, 12});
  EXPECT_EQ(loaded.read_dynamic_table("users").keys,
            (std::vector<int64_t>{-7, 3, 11, int64_t{1} << 62}));
  step({13});
  EXPECT_EQ(loaded.read_dynamic_table("users").keys, (std::vector<int64_t>{11}));
}

// tests/data/checkpoint-v3 was saved by format version 3, the first with 16-bit tables, and must
// keep loading. Seed 3, the global Adagrad (learning rate 0.5, initial accumulator 0.125), step 4:
//   "users": dynamic float16, dim 2, Constant 0.5, capacity 8; keys -7, 3, 2^62
//   (write_dynamic_table:
//            last seen 4, count 1), parameters 0.25, 0.5, ... 1.5 and accumulators 1.5, 1.75, ...
//            2.75 in key order;
//   "video": static bfloat16 [3, 2], parameters 0.25, -1.5, 3, 0.125, -0.75, 2.5, accumulators
//            0.125.
// Every value is exact in its type; the rows are stored in 2 bytes each (t0.parameters.f16,
// t1.parameters.bf16).
TEST(DynamicCheckpointTest, ReadsTheCheckedInVersion3Checkpoint) {
  const fs::path root = test::checked_in_data_dir() / "checkpoint-v3";
  EXPECT_EQ(inspect_checkpoint(root).format_version, 3);
  Embedding loaded = load_checkpoint(root, {.num_threads = 1});
  EXPECT_EQ(loaded.step(), 4);
  EXPECT_EQ(loaded.tables()[0].dtype, DType::kFloat16);
  EXPECT_EQ(loaded.tables()[1].dtype, DType::kBFloat16);
  const DynamicTableContents users = loaded.read_dynamic_table("users");
  EXPECT_EQ(users.keys, (std::vector<int64_t>{-7, 3, int64_t{1} << 62}));
  EXPECT_EQ(users.parameters, (std::vector<float>{0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f}));
  ASSERT_EQ(users.slots.size(), 1u);
  EXPECT_EQ(users.slots[0].second, (std::vector<float>{1.5f, 1.75f, 2.0f, 2.25f, 2.5f, 2.75f}));
  std::vector<float> video(6);
  loaded.read_variable("video", "parameters", video);
  EXPECT_EQ(video, (std::vector<float>{0.25f, -1.5f, 3.0f, 0.125f, -0.75f, 2.5f}));
  loaded.read_variable("video", "accumulators", video);
  EXPECT_EQ(video, std::vector<float>(6, 0.125f));
}

TEST(DynamicCheckpointTest, LoadCheckpointRebuildsDynamicTables) {
  TemporaryDirectory directory;
  Embedding layer = make_layer();
  train(layer, 0, 5);
  const fs::path saved = save_checkpoint(layer, directory.path());
  const Embedding loaded = load_checkpoint(saved, {.num_threads = 1});
  ASSERT_TRUE(loaded.tables()[0].dynamic_vocabulary);
  EXPECT_EQ(loaded.tables()[0].dynamic_vocabulary->min_count, 2);
  EXPECT_TRUE(bitwise_equal(state_of(loaded), state_of(layer)));
  const Embedding tables_only = load_checkpoint(saved, {.tables_only = true, .num_threads = 1});
  EXPECT_EQ(tables_only.read_dynamic_table("items").keys, layer.read_dynamic_table("items").keys);
  EXPECT_TRUE(same_bits(tables_only.read_dynamic_table("items").parameters,
                        layer.read_dynamic_table("items").parameters));
}

}  // namespace
}  // namespace recemb
