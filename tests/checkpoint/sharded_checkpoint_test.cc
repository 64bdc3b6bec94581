// save_checkpoint / restore_checkpoint by several ranks together and with tables split into parts
// (src/checkpoint/save.cc, restore.cc): a checkpoint saved under one placement and rank count
// restores under any other (1 <-> 4 shards; row-, column-, table-wise, replicated; one process,
// 2 and 3 ranks) with tables, slots and step bit for bit, and training continues as if it had not
// stopped. Ranks are threads connected by in_process_communicators, so these run under the
// sanitizers. Errors (a damaged file, an existing step, bad options) fail every rank alike and
// change nothing.
#include <cerrno>
#include <cmath>
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
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "recemb/checkpoint.h"
#include "recemb/communicator.h"
#include "recemb/error.h"

#include "checkpoint/checkpoint_fixtures.h"
#include "testing/embedding_calls.h"
#include "testing/fault_file_system.h"
#include "testing/files.h"
#include "testing/temporary_directory.h"

namespace recemb {
namespace {

namespace fs = std::filesystem;
using test::bitwise_equal;
using test::snapshot;
using test::TemporaryDirectory;
using ::testing::HasSubstr;

using Snapshot = std::map<std::string, std::vector<float>>;

// The global batch of every step has kBatch examples; rank r of W takes [r * kBatch / W, (r + 1)
// * kBatch / W), so 1, 2 and 3 ranks train on the same global batches.
constexpr int64_t kBatch = 6;

struct RankSetup {
  std::string name;
  int ranks = 1;
  std::optional<PlacementOptions> placement;  // unset: the default (whole tables in one process)
};

PlacementOptions plan(int num_shards, ShardingStrategy strategy) {
  PlacementOptions options{.num_shards = num_shards, .strategy = strategy};
  // RowwiseAdagrad keeps one slot value per row, which column ranges cannot share.
  if (strategy == ShardingStrategy::kColumnWise) {
    options.table_strategies["tags"] = ShardingStrategy::kRowWise;
  }
  return options;
}

Embedding make_layer(const RankSetup& setup, uint64_t seed,
                     std::shared_ptr<Communicator> communicator,
                     const test::FixtureSizes& sizes = {}) {
  return Embedding(test::fixture_tables(sizes), test::fixture_features(),
                   {.optimizer = Adagrad{.learning_rate = 0.2f},
                    .num_threads = 1,
                    .seed = seed,
                    .placement = setup.placement,
                    .communicator = std::move(communicator)});
}

// Trains steps [first, last) on this rank's share of each step's global batch
// (testing/embedding_calls.h).
void train(Embedding& layer, int64_t first, int64_t last) {
  test::train_rank_share(layer, first, last, kBatch, 1000,
                         [](const TableConfig& table) { return table.vocabulary_size; });
}

// Runs body(communicator) on `ranks` threads (one rank alone: the null, local communicator) and
// returns each rank's result or the message of what it threw.
struct RankResult {
  Snapshot values;
  std::string error;
  std::string error_type;  // "DataLoss", ..., "system_error <errno>"
};
std::vector<RankResult> on_ranks(
    int ranks, const std::function<Snapshot(std::shared_ptr<Communicator>)>& body) {
  std::vector<RankResult> results(static_cast<size_t>(ranks));
  auto run = [&](size_t r, std::shared_ptr<Communicator> communicator) {
    try {
      results[r].values = body(std::move(communicator));
    } catch (const InvalidArgument& error) {
      results[r] = {{}, error.what(), "InvalidArgument"};
    } catch (const FailedPrecondition& error) {
      results[r] = {{}, error.what(), "FailedPrecondition"};
    } catch (const DataLoss& error) {
      results[r] = {{}, error.what(), "DataLoss"};
    } catch (const std::system_error& error) {
      results[r] = {{}, error.what(), "system_error " + std::to_string(error.code().value())};
    } catch (const std::exception& error) {
      results[r] = {{}, error.what(), "other"};
    }
  };
  if (ranks == 1) {
    run(0, nullptr);
    return results;
  }
  std::vector<std::shared_ptr<Communicator>> communicators = in_process_communicators(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back(run, static_cast<size_t>(r), communicators[static_cast<size_t>(r)]);
  }
  for (std::thread& thread : threads) thread.join();
  return results;
}

// Every rank succeeded with the same values; returns them.
Snapshot agreed(const std::vector<RankResult>& results) {
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_EQ(results[r].error, "") << "rank " << r;
    EXPECT_TRUE(bitwise_equal(results[r].values, results[0].values)) << "rank " << r;
  }
  return results[0].values;
}

// |a - b| <= 1e-5 * max(1, |b|) everywhere: row-wise parts sum a bag's partial sums in another
// order than whole tables do.
::testing::AssertionResult near(const Snapshot& actual, const Snapshot& expected) {
  for (const auto& [name, values] : expected) {
    const std::vector<float>& other = actual.at(name);
    if (other.size() != values.size()) return ::testing::AssertionFailure() << name << " size";
    for (size_t i = 0; i < values.size(); ++i) {
      if (std::abs(double{other[i]} - values[i]) >
          1e-5 * std::max(1.0, std::abs(double{values[i]}))) {
        return ::testing::AssertionFailure()
               << name << "[" << i << "]: " << other[i] << " vs " << values[i];
      }
    }
  }
  return ::testing::AssertionSuccess();
}

constexpr int64_t kSavedAt = 5;
constexpr int64_t kSteps = 9;

class ReshardingTest : public ::testing::TestWithParam<std::pair<RankSetup, RankSetup>> {};

TEST_P(ReshardingTest, RestoresBitForBitAndTrainingContinues) {
  const auto& [saved_setup, restored_setup] = GetParam();
  TemporaryDirectory directory;
  const Snapshot saved = agreed(on_ranks(saved_setup.ranks, [&](auto communicator) {
    Embedding layer = make_layer(saved_setup, 1, communicator);
    train(layer, 0, kSavedAt);
    const fs::path path = save_checkpoint(layer, directory.path(), {.checksum_block_bytes = 256});
    EXPECT_EQ(path, directory / "ckpt-000000000005");
    return snapshot(layer);
  }));
  // Any placement wrote the same whole tables: one process reads them back verified.
  EXPECT_TRUE(inspect_checkpoint(directory.path()).ok);
  EXPECT_TRUE(bitwise_equal(snapshot(load_checkpoint(directory.path())), saved));
  EXPECT_EQ(directory.entries(), std::vector<std::string>{"ckpt-000000000005"});

  Snapshot restored;
  const Snapshot resumed = agreed(on_ranks(restored_setup.ranks, [&](auto communicator) {
    Embedding layer = make_layer(restored_setup, 2, communicator);  // other initial values
    EXPECT_EQ(restore_checkpoint(layer, directory.path()).step, kSavedAt);
    const Snapshot values = snapshot(layer);
    if (layer.rank() == 0) restored = values;
    train(layer, kSavedAt, kSteps);
    return snapshot(layer);
  }));
  EXPECT_TRUE(bitwise_equal(restored, saved));

  // Uninterrupted training: under the saving placement for the first steps, then the restoring
  // one, it is the resumed run; each placement alone is within rounding of it.
  const Snapshot straight = agreed(on_ranks(restored_setup.ranks, [&](auto communicator) {
    Embedding layer = make_layer(restored_setup, 1, communicator);
    train(layer, 0, kSteps);
    return snapshot(layer);
  }));
  EXPECT_TRUE(near(resumed, straight));
}

const RankSetup kWhole{"whole", 1, std::nullopt};

INSTANTIATE_TEST_SUITE_P(
    Placements, ReshardingTest,
    ::testing::Values(
        std::pair{kWhole, RankSetup{"rows4_on2", 2, plan(4, ShardingStrategy::kRowWise)}},
        std::pair{RankSetup{"rows4_on2", 2, plan(4, ShardingStrategy::kRowWise)}, kWhole},
        std::pair{RankSetup{"rows4_in1", 1, plan(4, ShardingStrategy::kRowWise)},
                  RankSetup{"columns3_on3", 3, plan(3, ShardingStrategy::kColumnWise)}},
        std::pair{RankSetup{"columns3_on3", 3, plan(3, ShardingStrategy::kColumnWise)},
                  RankSetup{"tables2_on2", 2, plan(2, ShardingStrategy::kTableWise)}},
        std::pair{RankSetup{"replicated_on2", 2, plan(2, ShardingStrategy::kReplicated)},
                  RankSetup{"rows3_on3", 3, plan(3, ShardingStrategy::kRowWise)}},
        std::pair{RankSetup{"rows3_on3", 3, plan(3, ShardingStrategy::kRowWise)},
                  RankSetup{"replicated_on2", 2, plan(2, ShardingStrategy::kReplicated)}},
        std::pair{RankSetup{"tables4_on2", 2, plan(4, ShardingStrategy::kTableWise)},
                  RankSetup{"columns4_in1", 1, plan(4, ShardingStrategy::kColumnWise)}},
        std::pair{RankSetup{"columns4_in1", 1, plan(4, ShardingStrategy::kColumnWise)},
                  RankSetup{"auto_on3", 3, std::nullopt}},
        std::pair{kWhole, RankSetup{"replicated_on3", 3, plan(3, ShardingStrategy::kReplicated)}}),
    [](const auto& test_info) {
      return test_info.param.first.name + "_to_" + test_info.param.second.name;
    });

TEST(ShardedCheckpointTest, TheSamePlacementResumesBitwise) {
  const RankSetup setup{"rows4_on2", 2, plan(4, ShardingStrategy::kRowWise)};
  TemporaryDirectory directory;
  const Snapshot straight = agreed(on_ranks(2, [&](auto communicator) {
    Embedding layer = make_layer(setup, 1, communicator);
    train(layer, 0, kSteps);
    return snapshot(layer);
  }));
  agreed(on_ranks(2, [&](auto communicator) {
    Embedding layer = make_layer(setup, 1, communicator);
    train(layer, 0, kSavedAt);
    save_checkpoint(layer, directory.path());
    return Snapshot{};
  }));
  const Snapshot resumed = agreed(on_ranks(2, [&](auto communicator) {
    Embedding layer = make_layer(setup, 3, communicator);
    restore_checkpoint(layer, directory.path());
    train(layer, kSavedAt, kSteps);
    return snapshot(layer);
  }));
  EXPECT_TRUE(bitwise_equal(resumed, straight));
}

TEST(ShardedCheckpointTest, TheFilesEqualThoseOfOneProcess) {
  const RankSetup sharded{"columns3_on3", 3, plan(3, ShardingStrategy::kColumnWise)};
  TemporaryDirectory directory;
  agreed(on_ranks(3, [&](auto communicator) {
    Embedding layer = make_layer(sharded, 1, communicator);
    train(layer, 0, kSavedAt);
    save_checkpoint(layer, directory / "sharded", {.checksum_block_bytes = 64});
    return Snapshot{};
  }));
  Embedding layer = make_layer(kWhole, 1, nullptr);  // the seed is in the manifest
  restore_checkpoint(layer, directory / "sharded");
  save_checkpoint(layer, directory / "single", {.checksum_block_bytes = 64});
  const fs::path a = directory / "sharded" / "ckpt-000000000005";
  const fs::path b = directory / "single" / "ckpt-000000000005";
  for (const fs::directory_entry& entry : fs::directory_iterator(b)) {
    const std::string name = entry.path().filename().string();
    EXPECT_EQ(test::read_bytes(a / name), test::read_bytes(entry.path())) << name;
  }
}

TEST(ShardedCheckpointTest, ExtraArraysAndMetadataComeBackOnEveryRank) {
  const RankSetup setup{"rows2_on2", 2, plan(2, ShardingStrategy::kRowWise)};
  TemporaryDirectory directory;
  const std::vector<float> dense = {1.5f, -2.0f, 3.25f};
  agreed(on_ranks(2, [&](auto communicator) {
    Embedding layer = make_layer(setup, 1, communicator);
    train(layer, 0, 2);
    const std::vector<float> other = {9.0f};  // other ranks' arrays are not saved
    save_checkpoint(
        layer, directory.path(),
        {.extra_arrays = {{.name = "dense",
                           .values = layer.rank() == 0 ? std::span(dense) : std::span(other)}},
         .metadata = {{"run", "a"}}});
    return Snapshot{};
  }));
  const std::vector<RankResult> results = on_ranks(2, [&](auto communicator) {
    Embedding layer = make_layer(setup, 1, communicator);
    const RestoredState state = restore_checkpoint(layer, directory.path());
    EXPECT_EQ(state.step, 2);
    EXPECT_EQ(state.metadata, (std::map<std::string, std::string>{{"run", "a"}}));
    return Snapshot{{"dense", state.extra_arrays.at("dense")}};
  });
  EXPECT_EQ(agreed(results).at("dense"), dense);
}

TEST(ShardedCheckpointTest, ADamagedFileFailsEveryRankNamingItAndChangesNothing) {
  TemporaryDirectory directory;
  Embedding saved = make_layer(kWhole, 1, nullptr);
  train(saved, 0, kSavedAt);
  const fs::path checkpoint =
      save_checkpoint(saved, directory.path(), {.checksum_block_bytes = 64});
  for (const std::string file : {"t0.parameters.f32", "t1.momenta.f32", "t2.accumulators.f32"}) {
    SCOPED_TRACE(file);
    std::vector<std::byte> bytes = test::read_bytes(checkpoint / file);
    bytes[bytes.size() / 2] ^= std::byte{0x10};
    test::write_bytes(checkpoint / file, bytes);
    const RankSetup setup{"rows4_on2", 2, plan(4, ShardingStrategy::kRowWise)};
    const std::vector<RankResult> results = on_ranks(2, [&](auto communicator) {
      Embedding layer = make_layer(setup, 2, communicator);
      train(layer, 0, 1);
      const Snapshot before = snapshot(layer);
      try {
        restore_checkpoint(layer, checkpoint);
      } catch (const DataLoss&) {
        EXPECT_TRUE(bitwise_equal(snapshot(layer), before));
        throw;
      }
      return Snapshot{};
    });
    for (const RankResult& result : results) {
      EXPECT_THAT(result.error, HasSubstr(file));
      EXPECT_THAT(result.error, HasSubstr("is damaged"));
      EXPECT_EQ(result.error, results[0].error);
    }
    bytes[bytes.size() / 2] ^= std::byte{0x10};
    test::write_bytes(checkpoint / file, bytes);
  }
}

TEST(ShardedCheckpointTest, SaveErrorsFailEveryRankAndLeaveNothingBehind) {
  const RankSetup setup{"replicated_on2", 2, plan(2, ShardingStrategy::kReplicated)};
  TemporaryDirectory directory;
  std::vector<RankResult> results = on_ranks(2, [&](auto communicator) {
    Embedding layer = make_layer(setup, 1, communicator);
    save_checkpoint(layer, directory.path());
    save_checkpoint(layer, directory.path());  // the same step again
    return Snapshot{};
  });
  for (const RankResult& result : results) {
    EXPECT_THAT(result.error, HasSubstr("rank 0: a checkpoint of step 0 already exists"));
  }
  results = on_ranks(2, [&](auto communicator) {
    Embedding layer = make_layer(setup, 1, communicator);
    train(layer, 0, 1);
    // Only rank 1's options are bad: every rank throws rank 1's error.
    save_checkpoint(layer, directory.path(), {.keep_last = layer.rank() == 1 ? 0 : 1});
    return Snapshot{};
  });
  for (const RankResult& result : results) {
    EXPECT_THAT(result.error, HasSubstr("rank 1: SaveOptions.keep_last must be >= 1, got 0"));
  }
  EXPECT_EQ(directory.entries(), std::vector<std::string>{"ckpt-000000000000"});
}

TEST(ShardedCheckpointTest, KeepsTheLastKAndGrowsTablesAsOneProcessDoes) {
  const RankSetup setup{"rows3_on3", 3, plan(3, ShardingStrategy::kRowWise)};
  TemporaryDirectory directory;
  agreed(on_ranks(3, [&](auto communicator) {
    Embedding layer = make_layer(setup, 1, communicator);
    for (int64_t step = 0; step < 4; ++step) {
      train(layer, step, step + 1);
      save_checkpoint(layer, directory.path(), {.keep_last = 2});
    }
    return Snapshot{};
  }));
  EXPECT_EQ(directory.entries(),
            (std::vector<std::string>{"ckpt-000000000003", "ckpt-000000000004"}));
  const test::FixtureSizes grown{.video_rows = 45, .word_rows = 31, .tag_rows = 29};
  Embedding single = make_layer(kWhole, 5, nullptr, grown);
  restore_checkpoint(single, directory.path(), {.resize = VocabularyResize::kGrow});
  const Snapshot sharded = agreed(on_ranks(3, [&](auto communicator) {
    Embedding layer = make_layer(setup, 5, communicator, grown);
    const std::string error = [&] {
      try {
        restore_checkpoint(layer, directory.path());
      } catch (const InvalidArgument& e) {
        return std::string(e.what());
      }
      return std::string();
    }();
    EXPECT_THAT(error, HasSubstr("vocabulary_size 40, the embedding 45"));
    restore_checkpoint(layer, directory.path(), {.resize = VocabularyResize::kGrow});
    return snapshot(layer);
  }));
  EXPECT_TRUE(bitwise_equal(sharded, snapshot(single)));
}

// Each error has the same type on 1, 2 and 4 ranks (recemb/error.h), on every rank: a damaged
// file DataLoss, a missing checkpoint std::system_error ENOENT, bad options InvalidArgument, an
// existing step FailedPrecondition, a root that is a file ENOTDIR, and an injected EIO at a
// file's fsync or ENOSPC at a write EIO/ENOSPC; a failed save leaves the previous checkpoint the
// latest.
TEST(ShardedCheckpointTest, ErrorTypesAreTheSameOnOneTwoAndFourRanks) {
  TemporaryDirectory directory;
  Embedding saved = make_layer(kWhole, 1, nullptr);
  train(saved, 0, kSavedAt);
  const fs::path damaged =
      save_checkpoint(saved, directory / "damaged", {.checksum_block_bytes = 64});
  std::vector<std::byte> bytes = test::read_bytes(damaged / "t1.momenta.f32");
  bytes[bytes.size() / 3] ^= std::byte{0x04};
  test::write_bytes(damaged / "t1.momenta.f32", bytes);
  test::write_bytes(directory / "a_file", bytes);

  for (const int ranks : {1, 2, 4}) {
    SCOPED_TRACE(std::to_string(ranks) + " ranks");
    const RankSetup setup{"rows", ranks, plan(ranks, ShardingStrategy::kRowWise)};
    const auto expect_on_every_rank = [&](const std::string& type, const std::string& fragment,
                                          const std::function<void(Embedding&)>& call) {
      SCOPED_TRACE(type);
      const std::vector<RankResult> results = on_ranks(ranks, [&](auto communicator) {
        Embedding layer = make_layer(setup, 2, communicator);
        call(layer);
        return Snapshot{};
      });
      for (const RankResult& result : results) {
        EXPECT_EQ(result.error_type, type) << result.error;
        EXPECT_THAT(result.error, HasSubstr(fragment));
        EXPECT_EQ(result.error, results[0].error);
      }
    };
    expect_on_every_rank("DataLoss", "is damaged",
                         [&](Embedding& layer) { restore_checkpoint(layer, damaged); });
    expect_on_every_rank("system_error " + std::to_string(ENOENT), "no checkpoint at",
                         [&](Embedding& layer) { restore_checkpoint(layer, directory / "none"); });
    const fs::path root = directory / ("root" + std::to_string(ranks));
    expect_on_every_rank("InvalidArgument", "keep_last",
                         [&](Embedding& layer) { save_checkpoint(layer, root, {.keep_last = 0}); });
    expect_on_every_rank("FailedPrecondition", "already exists", [&](Embedding& layer) {
      save_checkpoint(layer, root);
      save_checkpoint(layer, root);
    });
    expect_on_every_rank("system_error " + std::to_string(ENOTDIR), "a_file",
                         [&](Embedding& layer) { save_checkpoint(layer, directory / "a_file"); });
    for (const auto& [point, error_number] : std::vector<std::pair<test::FaultPoint, int>>{
             {test::FaultPoint::kSync, EIO}, {test::FaultPoint::kWrite, ENOSPC}}) {
      test::FaultFileSystem file_system;
      file_system.fail(point, 2, error_number);
      expect_on_every_rank("system_error " + std::to_string(error_number), "(injected)",
                           [&](Embedding& layer) {
                             train(layer, 0, 1);
                             save_checkpoint(layer, root);
                           });
      EXPECT_EQ(latest_checkpoint(root), root / "ckpt-000000000000");
    }
  }
}

}  // namespace
}  // namespace recemb
