// save_checkpoint (src/checkpoint/save.cc): the files it writes, keep-last-K, refusals, cleanup of
// interrupted saves, and a process killed (SIGKILL) at random points of many saves.
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <signal.h>
#include <span>
#include <string>
#include <sys/wait.h>
#include <system_error>
#include <thread>
#include <unistd.h>
#include <vector>

#include "recemb/checkpoint.h"
#include "recemb/error.h"

#include "checkpoint/checkpoint_fixtures.h"
#include "format/checksum.h"
#include "testing/fault_file_system.h"
#include "testing/files.h"
#include "testing/temporary_directory.h"

namespace recemb {
namespace {

namespace fs = std::filesystem;
using test::bitwise_equal;
using test::FaultPoint;
using test::make_fixture;
using test::snapshot;
using test::TemporaryDirectory;
using ::testing::HasSubstr;

std::set<std::string> entries(const fs::path& directory) {
  std::set<std::string> names;
  for (const fs::directory_entry& entry : fs::directory_iterator(directory)) {
    names.insert(entry.path().filename().string());
  }
  return names;
}

std::vector<std::byte> float_bytes(const std::vector<float>& values) {
  const std::span<const std::byte> bytes = std::as_bytes(std::span(values));
  return {bytes.begin(), bytes.end()};
}

TEST(SaveCheckpointTest, WritesEveryVariableAsRawFloatsAndAChecksummedManifest) {
  TemporaryDirectory directory;
  Embedding embedding = make_fixture(5);
  test::train_steps(embedding, 0, 3);
  const auto before = snapshot(embedding);
  const std::vector<float> dense = {1.0f, -2.5f, 3.25f};
  const fs::path saved = save_checkpoint(embedding, directory.path(),
                                         {.extra_arrays = {{.name = "dense", .values = dense}}});
  EXPECT_EQ(saved, directory.path() / "ckpt-000000000003");
  EXPECT_EQ(entries(directory.path()), std::set<std::string>{"ckpt-000000000003"});
  EXPECT_EQ(entries(saved),
            (std::set<std::string>{"manifest.json", "manifest.xxh3", "t0.parameters.f32",
                                   "t0.accumulators.f32", "t1.parameters.f32", "t1.momenta.f32",
                                   "t1.velocities.f32", "t2.parameters.f32", "t2.accumulators.f32",
                                   "x0.f32"}));
  EXPECT_EQ(test::read_bytes(saved / "t0.parameters.f32"),
            float_bytes(before.at("video/parameters")));
  EXPECT_EQ(test::read_bytes(saved / "t1.velocities.f32"),
            float_bytes(before.at("words/velocities")));
  EXPECT_EQ(test::read_bytes(saved / "t2.accumulators.f32"),
            float_bytes(before.at("tags/accumulators")));
  EXPECT_EQ(test::read_bytes(saved / "x0.f32"), float_bytes(dense));
  const std::vector<std::byte> manifest = test::read_bytes(saved / "manifest.json");
  EXPECT_EQ(test::read_text(saved / "manifest.xxh3"),
            format::checksum_to_hex(format::checksum(manifest)) + "\n");
  EXPECT_TRUE(bitwise_equal(snapshot(embedding), before));
}

TEST(SaveCheckpointTest, KeepsTheLastK) {
  TemporaryDirectory directory;
  Embedding embedding = make_fixture(5);
  for (int64_t step = 1; step <= 6; ++step) {
    embedding.set_step(step);
    save_checkpoint(embedding, directory.path(), {.keep_last = 3});
  }
  EXPECT_EQ(entries(directory.path()),
            (std::set<std::string>{"ckpt-000000000004", "ckpt-000000000005", "ckpt-000000000006"}));
  embedding.set_step(10);
  save_checkpoint(embedding, directory.path(), {.keep_last = 1});
  EXPECT_EQ(entries(directory.path()), std::set<std::string>{"ckpt-000000000010"});
  // An older step saved later is kept or dropped by step, not by time.
  embedding.set_step(2);
  save_checkpoint(embedding, directory.path(), {.keep_last = 1});
  EXPECT_EQ(entries(directory.path()), std::set<std::string>{"ckpt-000000000010"});
}

TEST(SaveCheckpointTest, RefusesAnExistingStepAndBadOptionsBeforeWriting) {
  TemporaryDirectory directory;
  Embedding embedding = make_fixture(5);
  const fs::path saved = save_checkpoint(embedding, directory.path());
  const std::vector<std::byte> manifest = test::read_bytes(saved / "manifest.json");
  try {
    save_checkpoint(embedding, directory.path());
    FAIL() << "saved the same step twice";
  } catch (const FailedPrecondition& error) {
    EXPECT_EQ(std::string(error.what()),
              "a checkpoint of step 0 already exists: '" + saved.string() + "'");
  }
  EXPECT_EQ(entries(directory.path()), std::set<std::string>{"ckpt-000000000000"});
  EXPECT_EQ(test::read_bytes(saved / "manifest.json"), manifest);

  const std::vector<float> values = {1.0f};
  struct Case {
    std::function<void(SaveOptions&)> change;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {[](SaveOptions& o) { o.keep_last = 0; }, "SaveOptions.keep_last must be >= 1, got 0"},
      {[](SaveOptions& o) { o.checksum_block_bytes = 0; },
       "SaveOptions.checksum_block_bytes must be a positive multiple of 4, got 0"},
      {[](SaveOptions& o) { o.checksum_block_bytes = 6; },
       "SaveOptions.checksum_block_bytes must be a positive multiple of 4, got 6"},
      {[&](SaveOptions& o) { o.extra_arrays = {{.name = "", .values = values}}; },
       "SaveOptions.extra_arrays[0]: empty name"},
      {[&](SaveOptions& o) {
         o.extra_arrays = {{.name = "a", .values = values}, {.name = "a", .values = values}};
       },
       "SaveOptions.extra_arrays: the name 'a' appears twice"},
  };
  const fs::path new_root = directory.path() / "new";
  for (const Case& c : cases) {
    SaveOptions options;
    c.change(options);
    try {
      save_checkpoint(embedding, new_root, options);
      ADD_FAILURE() << "no error: " << c.expected;
    } catch (const InvalidArgument& error) {
      EXPECT_EQ(std::string(error.what()), c.expected);
    }
    EXPECT_FALSE(fs::exists(new_root));
  }
}

TEST(SaveCheckpointTest, CreatesNestedRootsAndRemovesLeftoversOfInterruptedSaves) {
  TemporaryDirectory directory;
  const fs::path root = directory.path() / "a" / "b" / "c";
  Embedding embedding = make_fixture(5);
  save_checkpoint(embedding, root);
  // What a killed save leaves behind: ignored by readers, removed by the next save.
  const fs::path leftover = root / ".tmp-ckpt-000000000009-1-1";
  fs::create_directory(leftover);
  std::ofstream(leftover / "manifest.json") << "partial";
  EXPECT_EQ(latest_checkpoint(root), root / "ckpt-000000000000");
  embedding.set_step(1);
  save_checkpoint(embedding, root);
  EXPECT_EQ(entries(root), (std::set<std::string>{"ckpt-000000000000", "ckpt-000000000001"}));
}

// ------------------------------------------------------------------------------------------------
// SIGKILL during saves.

// The value of element i of variable v at step s: every saved step has distinct contents.
float value_at(int64_t step, size_t variable, size_t i) {
  const int64_t mixed =
      (step * 7919 + static_cast<int64_t>(variable) * 104729 + static_cast<int64_t>(i) * 31) %
      10007;
  return static_cast<float>(mixed) / 1024.0f;
}

Embedding saver_embedding() {
  return Embedding({{.name = "a", .vocabulary_size = 300, .dim = 16},
                    {.name = "b", .vocabulary_size = 100, .dim = 8, .optimizer = RowwiseAdagrad{}}},
                   {{.name = "fa", .table = "a"}, {.name = "fb", .table = "b"}},
                   {.optimizer = Adagrad{}, .num_threads = 1});
}

// Sets every variable to its values at `step`.
void fill(Embedding& embedding, int64_t step) {
  size_t index = 0;
  for (const TableConfig& table : embedding.tables()) {
    for (const std::string& variable : embedding.variable_names(table.name)) {
      const std::span<float> values = embedding.variable_data(table.name, variable);
      for (size_t i = 0; i < values.size(); ++i) values[i] = value_at(step, index, i);
      ++index;
    }
  }
}

std::vector<float> dense_at(int64_t step) {
  std::vector<float> dense(500);
  for (size_t i = 0; i < dense.size(); ++i) dense[i] = value_at(step, 99, i);
  return dense;
}

// The child process: resumes from the latest checkpoint, then saves step after step until killed.
[[noreturn]] void save_until_killed(const fs::path& root) {
  int status = 0;
  try {
    Embedding embedding = saver_embedding();
    if (const std::optional<fs::path> latest = latest_checkpoint(root)) {
      restore_checkpoint(embedding, *latest);
    }
    for (int i = 0; i < 100000; ++i) {
      const int64_t step = embedding.step() + 1;
      embedding.set_step(step);
      fill(embedding, step);
      const std::vector<float> dense = dense_at(step);
      save_checkpoint(embedding, root,
                      {.keep_last = 2,
                       .extra_arrays = {{.name = "dense", .values = dense}},
                       .metadata = {{"step", std::to_string(step)}},
                       .checksum_block_bytes = 4096});
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "saver: %s\n", error.what());
    status = 1;
  }
  _exit(status);
}

TEST(SaveCheckpointTest, SigkillDuringSavesAlwaysLeavesTheLatestCompleteCheckpointLoadable) {
  TemporaryDirectory directory;
  const fs::path root = directory.path() / "root";
  std::mt19937_64 rng(20240601);
  int64_t previous_step = 0;
  int interrupted_saves = 0;
  constexpr int kRounds = 16;
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const auto delay =
        std::chrono::microseconds(std::uniform_int_distribution<int64_t>(5000, 250000)(rng));
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) save_until_killed(root);
    std::this_thread::sleep_for(delay);
    ::kill(child, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "the saver stopped by itself (see its message above)";

    for (const fs::directory_entry& entry : fs::directory_iterator(root)) {
      if (entry.path().filename().string().starts_with(".tmp-")) {
        ++interrupted_saves;
        break;
      }
    }
    const std::optional<fs::path> latest = latest_checkpoint(root);
    if (!latest) continue;  // killed before its first save completed
    // Every published checkpoint verifies; at most keep_last + 1 (killed before pruning).
    size_t published = 0;
    for (const fs::directory_entry& entry : fs::directory_iterator(root)) {
      if (entry.path().filename().string().starts_with("ckpt-")) {
        ++published;
        const CheckpointInfo info = inspect_checkpoint(entry.path());
        EXPECT_TRUE(info.ok) << entry.path();
      }
    }
    EXPECT_LE(published, 3u);
    // The latest holds exactly the values of its step.
    Embedding restored = saver_embedding();
    const RestoredState state = restore_checkpoint(restored, *latest);
    EXPECT_GE(state.step, previous_step);
    previous_step = state.step;
    Embedding expected = saver_embedding();
    expected.set_step(state.step);
    fill(expected, state.step);
    EXPECT_TRUE(bitwise_equal(snapshot(restored), snapshot(expected)));
    EXPECT_EQ(state.extra_arrays.at("dense"), dense_at(state.step));
    EXPECT_EQ(state.metadata.at("step"), std::to_string(state.step));
    EXPECT_TRUE(
        bitwise_equal(snapshot(load_checkpoint(*latest, {.num_threads = 1})), snapshot(expected)));
  }
  // The kills landed inside saves, and the saves made progress across restarts (a save takes
  // tens of milliseconds, mostly fsync).
  EXPECT_GT(interrupted_saves, kRounds / 4);
  EXPECT_GE(previous_step, 4);
  std::printf("%d of %d kills interrupted a save; %lld checkpoints saved in all\n",
              interrupted_saves, kRounds, static_cast<long long>(previous_step));
}

// The two fault tests' setup: a checkpoint of step 2 (`previous`) saved under a fresh root, then
// the embedding trained to step 3 (`current`), to be saved under faults.
class SaveAfterACheckpoint {
 public:
  SaveAfterACheckpoint() {
    test::train_steps(embedding_, 0, 2);
    previous_ = snapshot(embedding_);
    save_checkpoint(embedding_, root(), {.checksum_block_bytes = 256});
    test::train_steps(embedding_, 2, 3);
    current_ = snapshot(embedding_);
  }

  const fs::path& root() const { return directory_.path(); }

  // The second save, of step 3, keeping one checkpoint.
  void save() {
    save_checkpoint(embedding_, root(), {.keep_last = 1, .checksum_block_bytes = 256});
  }

  // The embedding is unchanged by the save.
  bool embedding_unchanged() const { return bitwise_equal(snapshot(embedding_), current_); }

  // Restores `checkpoint` into a fresh embedding and checks that it is step 2 or 3 and equals that
  // step's snapshot bitwise; returns its step.
  int64_t expect_restores(const fs::path& checkpoint) const {
    Embedding restored = make_fixture(9);
    const int64_t step = restore_checkpoint(restored, checkpoint).step;
    EXPECT_TRUE(step == 2 || step == 3) << step;
    EXPECT_TRUE(bitwise_equal(snapshot(restored), step == 2 ? previous_ : current_));
    return step;
  }

 private:
  TemporaryDirectory directory_;
  Embedding embedding_ = make_fixture(5);
  std::map<std::string, std::vector<float>> previous_, current_;
};

// Every call of a save that can fail (each write, fsync, rename and directory fsync) fails in
// turn, with ENOSPC, EIO, or a short write then ENOSPC: the save throws std::system_error with
// that errno, the embedding is unchanged, and the root's latest checkpoint is a complete one (the
// previous, or the new one when only the pruning after publication failed) that restores bitwise.
TEST(SaveCheckpointFaultTest, EveryFailingCallLeavesACompleteLatestCheckpoint) {
  struct Fault {
    int error;
    bool short_write;
  };
  int injected = 0;
  for (const FaultPoint point : test::kFaultPoints) {
    for (const Fault fault : {Fault{ENOSPC, false}, Fault{EIO, false}, Fault{ENOSPC, true}}) {
      if (fault.short_write && point != FaultPoint::kWrite) continue;
      for (int nth = 1;; ++nth) {
        SCOPED_TRACE(test::fault_point_name(point) + " number " + std::to_string(nth) +
                     " fails with errno " + std::to_string(fault.error) +
                     (fault.short_write ? " after a short write" : ""));
        SaveAfterACheckpoint saves;
        test::FaultFileSystem file_system;
        file_system.fail(point, nth, fault.error, fault.short_write);
        bool failed = false;
        try {
          saves.save();
        } catch (const std::system_error& error) {
          failed = true;
          EXPECT_EQ(error.code().value(), fault.error) << error.what();
        }
        if (!failed) {  // nth is past the last call of that kind
          EXPECT_GT(nth, 1);
          break;
        }
        ++injected;
        EXPECT_TRUE(saves.embedding_unchanged());
        const std::optional<fs::path> latest = latest_checkpoint(saves.root());
        ASSERT_TRUE(latest.has_value());
        saves.expect_restores(*latest);
      }
    }
  }
  EXPECT_GT(injected, 20);
}

// The machine crashes at every call of a save that changes anything, in turn, and loses what was
// not synced: the latest checkpoint is then the previous one or the new one, complete, and every
// checkpoint directory under the root restores.
TEST(SaveCheckpointFaultTest, ACrashAnywhereLeavesOnlyCompleteCheckpoints) {
  bool saw_previous = false;
  bool saw_new = false;
  for (int nth = 1;; ++nth) {
    SCOPED_TRACE("crash at change " + std::to_string(nth));
    SaveAfterACheckpoint saves;
    test::FaultFileSystem file_system;
    file_system.crash_at(nth);
    bool crashed = false;
    try {
      saves.save();
    } catch (const test::SimulatedCrash&) {
      crashed = true;
    }
    file_system.drop_unsynced();
    const std::optional<fs::path> latest = latest_checkpoint(saves.root());
    ASSERT_TRUE(latest.has_value());
    for (const fs::directory_entry& entry : fs::directory_iterator(saves.root())) {
      if (!entry.path().filename().string().starts_with("ckpt-")) continue;
      const int64_t step = saves.expect_restores(entry.path());
      if (entry.path() == *latest) (step == 2 ? saw_previous : saw_new) = true;
    }
    if (!crashed) break;  // nth is past the save's last change
  }
  EXPECT_TRUE(saw_previous);
  EXPECT_TRUE(saw_new);
}

}  // namespace
}  // namespace recemb
