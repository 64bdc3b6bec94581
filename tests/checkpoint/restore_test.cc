// restore_checkpoint and load_checkpoint (src/checkpoint/restore.cc): bitwise resumption of
// training, resizing, compatibility errors, and damaged checkpoints (every file, flipped bytes,
// truncation, deletion) refused with the file named and the embedding unchanged.
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "recemb/checkpoint.h"
#include "recemb/error.h"

#include "checkpoint/checkpoint_fixtures.h"
#include "testing/error_of.h"
#include "testing/files.h"
#include "testing/temporary_directory.h"

namespace recemb {
namespace {

namespace fs = std::filesystem;
using test::bitwise_equal;
using test::error_of;
using test::make_fixture;
using test::snapshot;
using test::TemporaryDirectory;
using test::train_steps;
using ::testing::HasSubstr;

using Snapshot = std::map<std::string, std::vector<float>>;

TEST(RestoreCheckpointTest, TrainingResumesExactlyAsIfUninterrupted) {
  constexpr int64_t kSteps = 12;
  for (const int64_t split : {0, 1, 5, 11}) {
    SCOPED_TRACE("restored after step " + std::to_string(split));
    TemporaryDirectory directory;
    Embedding straight = make_fixture(7);
    train_steps(straight, 0, kSteps);

    Embedding first = make_fixture(7);
    train_steps(first, 0, split);
    const fs::path saved = save_checkpoint(first, directory.path());
    // A new Embedding with a different seed: the restore must overwrite every value.
    Embedding resumed = make_fixture(8);
    const Snapshot before = snapshot(resumed);
    const RestoredState state = restore_checkpoint(resumed, saved);
    EXPECT_EQ(state.step, split);
    EXPECT_EQ(resumed.step(), split);
    EXPECT_TRUE(bitwise_equal(snapshot(resumed), snapshot(first)));
    EXPECT_FALSE(bitwise_equal(before, snapshot(first)));  // so the restore did overwrite
    train_steps(resumed, split, kSteps);
    EXPECT_TRUE(bitwise_equal(snapshot(resumed), snapshot(straight)));
  }
}

TEST(RestoreCheckpointTest, ARootMeansItsLatestCheckpoint) {
  TemporaryDirectory directory;
  Embedding embedding = make_fixture(1);
  save_checkpoint(embedding, directory.path());
  train_steps(embedding, 0, 2);
  save_checkpoint(embedding, directory.path());
  Embedding restored = make_fixture(2);
  EXPECT_EQ(restore_checkpoint(restored, directory.path()).step, 2);
  EXPECT_TRUE(bitwise_equal(snapshot(restored), snapshot(embedding)));

  const std::string error = error_of<std::system_error>(
      [&] { restore_checkpoint(restored, directory.path() / "nothing"); });
  EXPECT_THAT(error, HasSubstr("no checkpoint at '" + (directory.path() / "nothing").string()));
}

TEST(RestoreCheckpointTest, ExtraArraysAndMetadataComeBack) {
  TemporaryDirectory directory;
  Embedding embedding = make_fixture(3);
  std::mt19937_64 rng(5);
  std::vector<float> dense(1000);
  for (float& value : dense) value = std::normal_distribution<float>()(rng);
  const std::vector<float> empty;
  const fs::path saved = save_checkpoint(
      embedding, directory.path(),
      {.extra_arrays = {{.name = "dense/w", .values = dense}, {.name = "empty", .values = empty}},
       .metadata = {{"data_position", "file-3:1234"}, {"run", "a b\n\"c\""}},
       .checksum_block_bytes = 128});
  const RestoredState state = restore_checkpoint(embedding, saved);
  ASSERT_EQ(state.extra_arrays.size(), 2u);
  EXPECT_EQ(0, std::memcmp(state.extra_arrays.at("dense/w").data(), dense.data(), 4000));
  EXPECT_TRUE(state.extra_arrays.at("empty").empty());
  EXPECT_EQ(state.metadata, (std::map<std::string, std::string>{{"data_position", "file-3:1234"},
                                                                {"run", "a b\n\"c\""}}));
}

// tests/data/checkpoint-v1 was saved by format version 1 (the first release) and must keep
// loading: tables "video" [4, 3] (the global Adagrad, an ExponentialDecay learning rate) and "tags"
// [3, 2] (RowwiseAdagrad), step 7, variable v (in manifest order) element i = (v + 1) / 2 + i / 4,
// extra array "dense" = {1, -2, 0.5}, metadata {"run": "golden"}, checksum blocks of 16 bytes.
TEST(RestoreCheckpointTest, ReadsTheCheckedInVersion1Checkpoint) {
  const fs::path root = test::checked_in_data_dir() / "checkpoint-v1";
  const Embedding loaded = load_checkpoint(root, {.num_threads = 1});
  EXPECT_EQ(loaded.step(), 7);
  EXPECT_EQ(loaded.options().seed, 3u);
  ASSERT_EQ(loaded.tables().size(), 2u);
  EXPECT_EQ(std::get<Constant>(loaded.tables()[0].initializer).value, 0.5f);
  EXPECT_EQ(loaded.tables()[1].combiner, Combiner::kSum);
  EXPECT_EQ(std::get<RowwiseAdagrad>(*loaded.tables()[1].optimizer).initial_accumulator_value,
            0.125f);
  const auto& decay =
      std::get<ExponentialDecay>(std::get<Adagrad>(*loaded.options().optimizer).learning_rate);
  EXPECT_EQ(decay.initial_learning_rate, 0.5f);
  EXPECT_EQ(decay.decay_steps, 10);
  EXPECT_EQ(decay.decay_rate, 0.75f);
  EXPECT_TRUE(decay.staircase);
  EXPECT_EQ(loaded.features()[1].max_sequence_length, 2);
  const Snapshot values = snapshot(loaded);
  const std::vector<std::string> order = {"video/parameters", "video/accumulators",
                                          "tags/parameters", "tags/accumulators"};
  const std::vector<size_t> sizes = {12, 12, 6, 3};
  for (size_t v = 0; v < order.size(); ++v) {
    ASSERT_EQ(values.at(order[v]).size(), sizes[v]) << order[v];
    for (size_t i = 0; i < sizes[v]; ++i) {
      EXPECT_EQ(values.at(order[v])[i],
                static_cast<float>(v + 1) * 0.5f + static_cast<float>(i) * 0.25f)
          << order[v] << "[" << i << "]";
    }
  }
  Embedding target = load_checkpoint(root, {.tables_only = true, .num_threads = 1});
  const RestoredState state = restore_checkpoint(target, root);
  EXPECT_EQ(state.extra_arrays.at("dense"), (std::vector<float>{1.0f, -2.0f, 0.5f}));
  EXPECT_EQ(state.metadata, (std::map<std::string, std::string>{{"run", "golden"}}));
}

// ------------------------------------------------------------------------------------------------
// Resizing.

struct ResizeCase {
  test::FixtureSizes saved;
  test::FixtureSizes restored;
  VocabularyResize resize;
};

TEST(RestoreCheckpointTest, GrowingKeepsTheNewRowsInitializedAndShrinkingDropsRows) {
  const std::vector<ResizeCase> cases = {
      {{40, 30, 20}, {55, 30, 27}, VocabularyResize::kGrow},
      {{40, 30, 20}, {55, 30, 27}, VocabularyResize::kGrowOrShrink},
      {{40, 30, 20}, {25, 30, 9}, VocabularyResize::kGrowOrShrink},
      {{40, 30, 20}, {41, 29, 20}, VocabularyResize::kGrowOrShrink},
  };
  for (const ResizeCase& c : cases) {
    TemporaryDirectory directory;
    Embedding original = make_fixture(11, c.saved);
    train_steps(original, 0, 4);
    const fs::path saved = save_checkpoint(original, directory.path());
    Embedding resized = make_fixture(12, c.restored);
    const Snapshot fresh = snapshot(resized);
    restore_checkpoint(resized, saved, {.resize = c.resize});
    const Snapshot old_values = snapshot(original);
    const Snapshot restored = snapshot(resized);
    for (const TableConfig& table : resized.tables()) {
      const int64_t saved_rows = table.name == "video"   ? c.saved.video_rows
                                 : table.name == "words" ? c.saved.word_rows
                                                         : c.saved.tag_rows;
      for (const std::string& variable : resized.variable_names(table.name)) {
        const std::string key = table.name + "/" + variable;
        const size_t width = restored.at(key).size() / static_cast<size_t>(table.vocabulary_size);
        for (size_t i = 0; i < restored.at(key).size(); ++i) {
          const auto row = static_cast<int64_t>(i / width);
          const float expected = row < saved_rows ? old_values.at(key)[i] : fresh.at(key)[i];
          ASSERT_EQ(std::bit_cast<uint32_t>(restored.at(key)[i]), std::bit_cast<uint32_t>(expected))
              << key << " row " << row;
        }
      }
    }
    EXPECT_EQ(resized.step(), 4);
  }
}

TEST(RestoreCheckpointTest, ResizingWithoutPermissionIsAnErrorThatChangesNothing) {
  TemporaryDirectory directory;
  Embedding original = make_fixture(11);
  train_steps(original, 0, 3);
  const fs::path saved = save_checkpoint(original, directory.path());

  Embedding larger = make_fixture(12, {.video_rows = 50});
  const Snapshot larger_before = snapshot(larger);
  EXPECT_THAT(error_of<InvalidArgument>([&] { restore_checkpoint(larger, saved); }),
              HasSubstr("checkpoint '" + saved.string() +
                        "': table 'video': the checkpoint has vocabulary_size 40, the embedding "
                        "50; resize=\"grow\" restores the first 40 rows"));
  EXPECT_TRUE(bitwise_equal(snapshot(larger), larger_before));

  Embedding smaller = make_fixture(12, {.tag_rows = 19});
  const Snapshot smaller_before = snapshot(smaller);
  EXPECT_THAT(error_of<InvalidArgument>(
                  [&] { restore_checkpoint(smaller, saved, {.resize = VocabularyResize::kGrow}); }),
              HasSubstr("table 'tags': the checkpoint has vocabulary_size 20, the embedding 19; "
                        "resize=\"grow_or_shrink\" restores"));
  EXPECT_TRUE(bitwise_equal(snapshot(smaller), smaller_before));
}

// ------------------------------------------------------------------------------------------------
// Compatibility.

TEST(RestoreCheckpointTest, IncompatibleEmbeddingsAreRefusedNamingTheTable) {
  TemporaryDirectory directory;
  Embedding original = make_fixture(11);
  train_steps(original, 0, 2);
  const fs::path saved = save_checkpoint(original, directory.path());

  struct Case {
    std::vector<TableConfig> tables;
    std::vector<FeatureConfig> features;
    std::string expected;
  };
  std::vector<TableConfig> other_dim = test::fixture_tables();
  other_dim[1].dim = 5;
  std::vector<TableConfig> other_optimizer = test::fixture_tables();
  other_optimizer[2].optimizer = Adagrad{};
  std::vector<TableConfig> missing = test::fixture_tables();
  missing.pop_back();
  std::vector<FeatureConfig> missing_features = test::fixture_features();
  missing_features.pop_back();
  std::vector<TableConfig> extra = test::fixture_tables();
  extra.push_back({.name = "new", .vocabulary_size = 3, .dim = 2});
  std::vector<FeatureConfig> extra_features = test::fixture_features();
  extra_features.push_back({.name = "new_feature", .table = "new"});
  const std::vector<Case> cases = {
      {other_dim, test::fixture_features(),
       "table 'words': the checkpoint has dim 4, the embedding 5"},
      {other_optimizer, test::fixture_features(),
       "table 'tags': the checkpoint's optimizer is rowwise_adagrad, the embedding's is adagrad"},
      {missing, missing_features,
       "it has table 'tags', which the embedding does not have (its tables: 'video', 'words')"},
      {extra, extra_features,
       "table 'new': not in the checkpoint (its tables: 'video', 'words', 'tags')"},
  };
  for (const Case& c : cases) {
    Embedding embedding(c.tables, c.features, {.optimizer = Adagrad{}, .num_threads = 1});
    const Snapshot before = snapshot(embedding);
    EXPECT_THAT(error_of<InvalidArgument>([&] { restore_checkpoint(embedding, saved); }),
                HasSubstr(c.expected));
    EXPECT_TRUE(bitwise_equal(snapshot(embedding), before));
  }

  // A different global optimizer changes "video"'s slots.
  Embedding sgd(test::fixture_tables(), test::fixture_features(), {.optimizer = Sgd{}});
  EXPECT_THAT(error_of<InvalidArgument>([&] { restore_checkpoint(sgd, saved); }),
              HasSubstr("table 'video': the checkpoint's optimizer is adagrad, the embedding's is "
                        "sgd"));
}

TEST(RestoreCheckpointTest, FeaturesAndHyperparametersMayDifferAndLookupOnlyTablesTakeParameters) {
  TemporaryDirectory directory;
  Embedding original = make_fixture(11);
  train_steps(original, 0, 3);
  const fs::path saved = save_checkpoint(original, directory.path());
  const Snapshot saved_values = snapshot(original);

  // Other features, other hyperparameters, no optimizer for "video" (no global one).
  std::vector<TableConfig> tables = test::fixture_tables();
  tables[1].optimizer = Adam{.learning_rate = 0.5f, .beta_1 = 0.1f};
  Embedding lookup_only(tables, {{.name = "other", .table = "video"}}, {.num_threads = 1});
  restore_checkpoint(lookup_only, saved);
  Snapshot expected = saved_values;
  expected.erase("video/accumulators");
  EXPECT_TRUE(bitwise_equal(snapshot(lookup_only), expected));
}

TEST(LoadCheckpointTest, BuildsTheSavedEmbeddingWhichTrainsOnIdentically) {
  TemporaryDirectory directory;
  Embedding original(test::fixture_tables(), test::fixture_features(),
                     {.optimizer = Adagrad{.learning_rate = 0.2f},
                      .num_threads = 1,
                      .seed = 99,
                      .non_finite_gradients = NonFiniteGradients::kSkipRows});
  train_steps(original, 0, 3);
  const fs::path saved = save_checkpoint(original, directory.path());

  Embedding loaded = load_checkpoint(saved, {.num_threads = 2});
  EXPECT_EQ(loaded.options().seed, 99u);
  EXPECT_EQ(loaded.options().non_finite_gradients, NonFiniteGradients::kSkipRows);
  EXPECT_EQ(loaded.options().num_threads, 2);
  ASSERT_EQ(loaded.features().size(), 4u);
  EXPECT_EQ(loaded.features()[1].name, "liked");
  EXPECT_TRUE(bitwise_equal(snapshot(loaded), snapshot(original)));
  // The optimizers and schedules came back: training on gives the same values.
  train_steps(original, 3, 6);
  train_steps(loaded, 3, 6);
  EXPECT_TRUE(bitwise_equal(snapshot(loaded), snapshot(original)));

  const Embedding tables_only = load_checkpoint(directory.path(), {.tables_only = true});
  EXPECT_FALSE(tables_only.options().optimizer.has_value());
  for (const TableConfig& table : tables_only.tables()) {
    EXPECT_FALSE(table.optimizer.has_value());
    EXPECT_EQ(tables_only.variable_names(table.name), std::vector<std::string>{"parameters"});
  }
  EXPECT_EQ(tables_only.step(), 3);
}

TEST(LoadCheckpointTest, ACallbackLearningRateLoadsOnlyAsTables) {
  TemporaryDirectory directory;
  std::vector<TableConfig> tables = test::fixture_tables();
  tables[2].optimizer = Sgd{.learning_rate = LearningRateCallback([](int64_t) { return 0.1f; })};
  tables[0].initializer =
      InitializerCallback([](int64_t, int64_t, int64_t, std::span<float> values) {
        std::fill(values.begin(), values.end(), 0.5f);
      });
  Embedding original(tables, test::fixture_features(), {.optimizer = Adagrad{}, .num_threads = 1});
  train_steps(original, 0, 2);
  const fs::path saved = save_checkpoint(original, directory.path());
  EXPECT_THAT(error_of<InvalidArgument>([&] { load_checkpoint(saved); }),
              HasSubstr("checkpoint '" + saved.string() +
                        "': table 'tags': optimizer: learning_rate: a callback"));
  const Embedding loaded = load_checkpoint(saved, {.tables_only = true, .num_threads = 1});
  Snapshot expected = snapshot(original);
  std::erase_if(expected, [](const auto& item) {
    return item.first != "step" && !item.first.ends_with("/parameters");
  });
  EXPECT_TRUE(bitwise_equal(snapshot(loaded), expected));
  // restore_checkpoint into the Embedding built in code works with the callback.
  Embedding rebuilt(tables, test::fixture_features(), {.optimizer = Adagrad{}, .num_threads = 1});
  restore_checkpoint(rebuilt, saved);
  EXPECT_TRUE(bitwise_equal(snapshot(rebuilt), snapshot(original)));
}

// ------------------------------------------------------------------------------------------------
// Damaged checkpoints.

class DamagedCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Embedding original = make_fixture(21);
    train_steps(original, 0, 2);
    const std::vector<float> dense(300, 0.25f);
    // Small blocks: every data file has several.
    checkpoint_ = save_checkpoint(
        original, directory_.path(),
        {.extra_arrays = {{.name = "dense", .values = dense}}, .checksum_block_bytes = 256});
    train_steps(target_, 0, 1);  // different values and step from the checkpoint's
    before_ = snapshot(target_);
  }

  std::vector<fs::path> files() const {
    std::vector<fs::path> paths;
    for (const fs::directory_entry& entry : fs::directory_iterator(checkpoint_)) {
      paths.push_back(entry.path());
    }
    std::sort(paths.begin(), paths.end());
    return paths;
  }

  // The message of the error that restoring the checkpoint throws: DataLoss for a damaged file (a
  // data file or the manifest), a std::system_error ENOENT for a missing one.
  template <class Call>
  static std::string refusal_of(const fs::path& file, Call&& call) {
    if (fs::exists(file)) return error_of<DataLoss>(call);
    return error_of<std::system_error>(call);
  }

  // restore_checkpoint and load_checkpoint throw an error naming `file`, and change nothing.
  void expect_refused(const fs::path& file, const std::string& what) {
    SCOPED_TRACE(what);
    const std::string error = refusal_of(file, [&] { restore_checkpoint(target_, checkpoint_); });
    EXPECT_THAT(error, HasSubstr(file.filename().string()));
    EXPECT_THAT(error, HasSubstr(checkpoint_.string()));
    EXPECT_TRUE(bitwise_equal(snapshot(target_), before_));
    EXPECT_THAT(refusal_of(file, [&] { load_checkpoint(checkpoint_); }),
                HasSubstr(file.filename().string()));
  }

  TemporaryDirectory directory_;
  fs::path checkpoint_;
  Embedding target_ = make_fixture(22);
  Snapshot before_;
};

TEST_F(DamagedCheckpointTest, EveryFlippedByteIsDetected) {
  std::mt19937_64 rng(31);
  const std::vector<fs::path> paths = files();
  ASSERT_EQ(paths.size(), 2u + 7u + 1u);  // manifest, its checksum, 7 variables, 1 extra array
  for (const fs::path& path : paths) {
    const std::vector<std::byte> original = test::read_bytes(path);
    ASSERT_FALSE(original.empty()) << path;
    std::vector<size_t> positions = {0, original.size() - 1};
    for (int i = 0; i < 6; ++i) {
      positions.push_back(std::uniform_int_distribution<size_t>(0, original.size() - 1)(rng));
    }
    for (const size_t position : positions) {
      std::vector<std::byte> damaged = original;
      damaged[position] ^=
          static_cast<std::byte>(1 << std::uniform_int_distribution<int>(0, 7)(rng));
      test::write_bytes(path, damaged);
      expect_refused(path, path.filename().string() + " byte " + std::to_string(position));
    }
    test::write_bytes(path, original);
  }
  // Undamaged again: the restore works.
  restore_checkpoint(target_, checkpoint_);
  EXPECT_EQ(target_.step(), 2);
}

TEST_F(DamagedCheckpointTest, TruncatedExtendedAndMissingFilesAreDetected) {
  for (const fs::path& path : files()) {
    const std::vector<std::byte> original = test::read_bytes(path);
    for (const size_t size : {size_t{0}, original.size() / 2, original.size() - 1}) {
      test::write_bytes(path, std::span(original).first(size));
      expect_refused(path, path.filename().string() + " truncated to " + std::to_string(size));
    }
    std::vector<std::byte> extended = original;
    extended.push_back(std::byte{0});
    test::write_bytes(path, extended);
    expect_refused(path, path.filename().string() + " extended");
    fs::remove(path);
    expect_refused(path, path.filename().string() + " deleted");
    test::write_bytes(path, original);
  }
  restore_checkpoint(target_, checkpoint_);
  EXPECT_EQ(target_.step(), 2);
}

TEST_F(DamagedCheckpointTest, DataErrorsNameTheTableVariableAndBlock) {
  const fs::path path = checkpoint_ / "t0.accumulators.f32";
  std::vector<std::byte> bytes = test::read_bytes(path);
  bytes[600] ^= std::byte{0x40};
  test::write_bytes(path, bytes);
  EXPECT_THAT(error_of<DataLoss>([&] { restore_checkpoint(target_, checkpoint_); }),
              HasSubstr("checkpoint file '" + path.string() +
                        "' (table 'video' variable 'accumulators') is damaged: block 2 of 5 "
                        "(bytes 512..768) does not match its checksum"));
}

}  // namespace
}  // namespace recemb
