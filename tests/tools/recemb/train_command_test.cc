#include "tools/recemb/train_command.h"

#include <filesystem>
#include <fstream>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <random>
#include <sstream>
#include <zlib.h>

#include "recemb/error.h"

#include "testing/criteo_lines.h"
#include "train/config/train_config.h"

namespace recemb::tools {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(TrainCommand, ShortcutsBecomeOverridesThatSetOptionsWin) {
  const TrainArguments args{.overrides = {"train.steps=9"},
                            .data = {"day \"0\".tsv"},
                            .preset = "criteo-kaggle",
                            .output = "out",
                            .steps = 5,
                            .threads = 0};
  EXPECT_THAT(
      train_overrides(args),
      ElementsAre("data.path=\"day \\\"0\\\".tsv\"", "data.preset=\"criteo-kaggle\"",
                  "output.dir=\"out\"", "train.steps=5", "embedding.threads=0", "train.steps=9"));
  EXPECT_TRUE(train_overrides({}).empty());
}

TEST(TrainCommand, SeveralDataFilesBecomeOneList) {
  const TrainArguments args{.data = {"day_0.gz", "day_*.gz"}};
  EXPECT_THAT(train_overrides(args), ElementsAre("data.path=[\"day_0.gz\", \"day_*.gz\"]"));
  const train::TrainConfig config = train::load_train_config("", train_overrides(args));
  EXPECT_THAT(config.data.paths, ElementsAre("day_0.gz", "day_*.gz"));
}

TEST(TrainCommand, PrintsConfigsWithoutTraining) {
  std::ostringstream out, log;
  EXPECT_EQ(
      run_train_command({.steps = 3, .print_config = true}, out, log, train::ProgressMode::kLines),
      0);
  EXPECT_THAT(out.str(), HasSubstr("steps = 3"));
  EXPECT_EQ(log.str(), "");
  std::ostringstream defaults;
  run_train_command({.print_default_config = true}, defaults, log, train::ProgressMode::kLines);
  EXPECT_THAT(defaults.str(), HasSubstr("# recemb train: every field with its default."));
}

TEST(TrainCommand, TrainsAndPrintsTheSummary) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "train_command_run";
  std::filesystem::remove_all(dir);
  std::ostringstream out, log;
  const TrainArguments args{
      .overrides = {"data.table_budget_mib=1", "data.eval_examples=1024", "model.embedding_dim=4",
                    "model.bottom_mlp=[4]", "model.top_mlp=[4]"},
      .output = dir.string(),
      .steps = 4,
      .batch_size = 64,
      .threads = 1};
  EXPECT_EQ(run_train_command(args, out, log, train::ProgressMode::kLines), 0);
  EXPECT_THAT(out.str(), AllOf(HasSubstr("trained steps 0..4"), HasSubstr("held-out AUC"),
                               HasSubstr("wrote " + dir.string())));
  EXPECT_THAT(log.str(), HasSubstr("4/4 steps"));
  EXPECT_THROW(
      run_train_command({.overrides = {"train.steps=0"}}, out, log, train::ProgressMode::kLines),
      InvalidArgument);
}

// A shortcut given is checked as its setting is: 0 and negative values are errors, not "not
// given".
TEST(TrainCommand, ShortcutsGivenAreCheckedLikeTheirSettings) {
  EXPECT_THAT(train_overrides({.steps = 0, .batch_size = 0, .threads = -5}),
              ElementsAre("train.steps=0", "train.batch_size=0", "embedding.threads=-5"));
  const auto error = [](const TrainArguments& args) {
    std::ostringstream out, log;
    try {
      run_train_command(args, out, log, train::ProgressMode::kLines);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(error({.steps = 0}), HasSubstr("train.steps must be >= 1, not 0"));
  EXPECT_THAT(error({.batch_size = 0}), HasSubstr("train.batch_size must be 1 to 1048576, not 0"));
  EXPECT_THAT(error({.threads = -5}),
              HasSubstr("embedding.threads must be in [0, 1024] (0: one per core), not -5"));
}

// --- Real files: gzip, several files, a glob, epochs, the tail held out; resumed exactly ------

// Criteo lines as people's files have them: trailing empty fields trimmed, some "\r\n", no final
// newline; gzip-compressed into `path`, or only its first `keep_share` of compressed bytes.
std::string write_real_gzip(const std::filesystem::path& path, uint64_t seed,
                            double keep_share = 1.0) {
  std::mt19937_64 random(seed);
  std::string text;
  for (int i = 0; i < 200; ++i) {
    std::string line = test::random_criteo_line(random);
    line.erase(line.find_last_not_of('\t') + 1);
    text += line + (i == 199 ? "" : i % 7 == 0 ? "\r\n" : "\n");
  }
  const std::filesystem::path whole = path.string() + ".whole";
  gzFile file = gzopen(whole.c_str(), "wb");
  EXPECT_EQ(gzwrite(file, text.data(), static_cast<unsigned>(text.size())),
            static_cast<int>(text.size()));
  EXPECT_EQ(gzclose(file), Z_OK);
  std::filesystem::copy_file(whole, path, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::resize_file(
      path,
      static_cast<uintmax_t>(static_cast<double>(std::filesystem::file_size(whole)) * keep_share));
  return text;
}

// The summary.json line of `name` of the run in `dir`.
std::string summary_field(const std::filesystem::path& dir, const std::string& name) {
  std::ifstream in(dir / "summary.json");
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"" + name + "\"") != std::string::npos) return line;
  }
  return "(none)";
}

// 600 lines in 3 files, 60 held out (the tail, or with `head_held_out` the head).
TrainArguments real_files_run(const std::filesystem::path& data, const std::filesystem::path& out,
                              int64_t steps, bool head_held_out = false) {
  return TrainArguments{
      .overrides = {"data.table_budget_mib=1", "model.embedding_dim=4", "model.bottom_mlp=[4]",
                    "model.top_mlp=[4]", "train.epochs=3",
                    head_held_out ? "data.eval_examples=60" : "data.eval_fraction=0.1",
                    "checkpoint.every=3", "train.eval_every=0"},
      .data = {(data / "day_*.gz").string()},
      .output = out.string(),
      .steps = steps,
      .batch_size = 64,
      .threads = 1};
}

TEST(TrainCommand, TrainsOnGzipFilesAGlobAndEpochsAndResumesExactly) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "train_command_real_files";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "data");
  for (int f = 0; f < 3; ++f) {
    write_real_gzip(dir / "data" / ("day_" + std::to_string(f) + ".gz"), 100 + f);
  }
  // 600 lines, 60 held out: 540 a epoch, 3 epochs: 25 steps of 64; 20 asked.
  std::ostringstream out, log;
  ASSERT_EQ(run_train_command(real_files_run(dir / "data", dir / "whole", 20), out, log,
                              train::ProgressMode::kLines),
            0);
  EXPECT_THAT(out.str(), AllOf(HasSubstr("trained steps 0..20"), HasSubstr("short input lines")));
  EXPECT_THAT(summary_field(dir / "whole", "malformed_lines"), HasSubstr(": 0"));
  EXPECT_THAT(summary_field(dir / "whole", "short_lines"), ::testing::Not(HasSubstr(": 0,")));
  // Stopped at step 10 (in the second epoch), then resumed to 20: the same model.
  ASSERT_EQ(run_train_command(real_files_run(dir / "data", dir / "resumed", 10), out, log,
                              train::ProgressMode::kLines),
            0);
  TrainArguments resume = real_files_run(dir / "data", dir / "resumed", 20);
  resume.resume = true;
  ASSERT_EQ(run_train_command(resume, out, log, train::ProgressMode::kLines), 0);
  for (const char* name : {"final_auc", "final_log_loss"}) {
    EXPECT_EQ(summary_field(dir / "resumed", name), summary_field(dir / "whole", name)) << name;
  }
}

TEST(TrainCommand, ATruncatedGzipFileStopsTheRunNamingItAndResumesOnceRepaired) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "train_command_truncated";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "data");
  for (int f = 0; f < 3; ++f) {
    write_real_gzip(dir / "data" / ("day_" + std::to_string(f) + ".gz"), 200 + f);
  }
  std::ostringstream out, log;
  ASSERT_EQ(run_train_command(real_files_run(dir / "data", dir / "whole", 20, true), out, log,
                              train::ProgressMode::kLines),
            0);
  // day_1.gz cut in the middle: the run fails at its damage, after checkpoints of its first steps.
  const std::filesystem::path damaged = dir / "data" / "day_1.gz";
  write_real_gzip(damaged, 201, 0.5);
  try {
    run_train_command(real_files_run(dir / "data", dir / "run", 20, true), out, log,
                      train::ProgressMode::kLines);
    FAIL() << "no error";
  } catch (const DataLoss& error) {
    EXPECT_THAT(error.what(), AllOf(HasSubstr(damaged.string() + ":"), HasSubstr("truncated")));
  }
  EXPECT_FALSE(std::filesystem::is_empty(dir / "run" / "checkpoints"));
  // Repaired, the run resumes from its last checkpoint to the same model.
  std::filesystem::copy_file(damaged.string() + ".whole", damaged,
                             std::filesystem::copy_options::overwrite_existing);
  TrainArguments resume = real_files_run(dir / "data", dir / "run", 20, true);
  resume.resume = true;
  ASSERT_EQ(run_train_command(resume, out, log, train::ProgressMode::kLines), 0);
  EXPECT_THAT(summary_field(dir / "run", "first_step"), ::testing::Not(HasSubstr(": 0,")));
  for (const char* name : {"final_auc", "final_log_loss"}) {
    EXPECT_EQ(summary_field(dir / "run", name), summary_field(dir / "whole", name)) << name;
  }
}

}  // namespace
}  // namespace recemb::tools
