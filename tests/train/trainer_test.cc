#include "train/trainer.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <random>
#include <sstream>

#include "recemb/error.h"

namespace recemb::train {
namespace {

using ::testing::HasSubstr;

std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / ("trainer_" + name);
  std::filesystem::remove_all(dir);
  return dir;
}

std::string read(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A small model on small tables: trains in a few seconds even under the sanitizers.
TrainConfig small_config(const std::filesystem::path& dir, std::vector<std::string> extra = {}) {
  std::vector<std::string> overrides = {
      "data.table_budget_mib=1",  "data.eval_examples=4096",
      "model.embedding_dim=8",    "model.bottom_mlp=[16,8]",
      "model.top_mlp=[16]",       "train.batch_size=256",
      "train.steps=120",          "train.eval_every=40",
      "train.log_every=10",       "checkpoint.every=50",
      "embedding.threads=2",      "embedding.learning_rate=1.0",
      "dense.learning_rate=0.01", "output.dir=\"" + dir.string() + "\""};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return load_train_config("", overrides);
}

TEST(Trainer, LearnsThePlantedSignalAndWritesItsOutputs) {
  const auto dir = fresh_dir("learns");
  std::ostringstream log;
  const TrainSummary summary = run_training(small_config(dir), {.log = &log});
  // An untrained model ranks at chance; a broken gradient (sign, scale, wrong rows) cannot reach
  // the trained AUC on this data.
  EXPECT_NEAR(summary.initial_auc, 0.5, 0.05);
  EXPECT_GT(summary.final_auc, 0.6) << log.str();
  // The planted model's AUC is the ceiling (docs/training.md ("Training data"): about 0.77).
  EXPECT_GT(summary.best_auc, 0.74);
  EXPECT_LT(summary.final_auc, summary.best_auc);
  EXPECT_THAT(format_summary(summary), HasSubstr("best possible on these synthetic data"));
  EXPECT_LT(summary.final_log_loss, 0.69);
  EXPECT_EQ(summary.steps, 120);
  EXPECT_EQ(summary.examples, 120 * 256);
  EXPECT_GT(summary.lookup_seconds, 0);
  EXPECT_GT(summary.dense_seconds, 0);
  EXPECT_GT(summary.update_seconds, 0);
  EXPECT_GT(summary.peak_resident_bytes, summary.embedding_bytes);

  const std::string metrics = read(dir / "metrics.jsonl");
  EXPECT_EQ(std::count(metrics.begin(), metrics.end(), '\n'), 12 + 4);  // 12 losses, 4 evals
  EXPECT_THAT(metrics, HasSubstr("{\"step\": 0, \"eval_auc\": "));
  EXPECT_THAT(metrics, HasSubstr("{\"step\": 120, \"eval_auc\": "));
  EXPECT_THAT(read(dir / "training.svg"), HasSubstr("<polyline"));
  EXPECT_THAT(read(dir / "summary.json"), HasSubstr("\"final_auc\": "));
  EXPECT_THAT(read(dir / "config.toml"), HasSubstr("table_budget_mib = 1"));
  EXPECT_TRUE(std::filesystem::exists(dir / "checkpoints"));
  EXPECT_THAT(log.str(), HasSubstr("eval at step 120"));
  EXPECT_THAT(format_summary(summary), HasSubstr("held-out AUC"));
}

TEST(Trainer, ResumeContinuesExactlyAsAnUninterruptedRun) {
  // The first part ends at step 75: inside a loss window (log_every 10) and off the evaluation
  // schedule (eval_every 40), so its final records must not survive the resume.
  const auto straight_dir = fresh_dir("straight");
  const auto resumed_dir = fresh_dir("resumed");
  const std::vector<std::string> schedule = {"train.log_every=10", "checkpoint.every=25"};
  std::ostringstream log;
  const TrainSummary straight = run_training(small_config(straight_dir, schedule), {.log = &log});

  std::vector<std::string> first_part = schedule;
  first_part.push_back("train.steps=75");
  run_training(small_config(resumed_dir, first_part), {.log = &log});
  const TrainSummary resumed =
      run_training(small_config(resumed_dir, schedule), {.resume = true, .log = &log});

  EXPECT_EQ(resumed.first_step, 75);
  EXPECT_EQ(resumed.steps, 120);
  EXPECT_EQ(resumed.final_auc, straight.final_auc);  // bitwise: the same computation
  EXPECT_EQ(resumed.final_log_loss, straight.final_log_loss);
  EXPECT_EQ(read(resumed_dir / "metrics.jsonl"), read(straight_dir / "metrics.jsonl"));
  EXPECT_THAT(log.str(), HasSubstr("resumed from "));
}

TEST(Trainer, ResumeWithoutACheckpointStartsFromScratch) {
  const auto dir = fresh_dir("resume_empty");
  std::ostringstream log;
  const TrainSummary summary =
      run_training(small_config(dir, {"train.steps=5"}), {.resume = true, .log = &log});
  EXPECT_EQ(summary.first_step, 0);
  EXPECT_EQ(summary.steps, 5);
  EXPECT_THAT(log.str(), HasSubstr("no checkpoint"));

  // A new run never overwrites an earlier run's checkpoints.
  const std::string metrics = read(dir / "metrics.jsonl");
  try {
    run_training(small_config(dir, {"train.steps=5"}), {.log = &log});
    FAIL() << "no error";
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), AllOf(HasSubstr("ckpt-000000000005"), HasSubstr("--resume")));
  }
  EXPECT_EQ(read(dir / "metrics.jsonl"), metrics);
  // Resuming a finished run with the same steps does nothing new and saves nothing twice.
  const TrainSummary again =
      run_training(small_config(dir, {"train.steps=5"}), {.resume = true, .log = &log});
  EXPECT_EQ(again.first_step, 5);
  EXPECT_EQ(again.examples, 0);
}

// Criteo lines: label, 13 integers, 26 hex values; some fields empty.
void write_criteo(const std::filesystem::path& path, int lines, int malformed, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::ofstream out(path);
  for (int i = 0; i < lines; ++i) {
    if (i % 97 == 5 && malformed-- > 0) {
      out << "1\tnot-a-number\n";
      continue;
    }
    const uint64_t hot = rng() % 8;
    out << (hot < 3 ? 1 : 0);
    for (int f = 0; f < 13; ++f) {
      out << '\t';
      if (f == 0) {
        out << hot * 10;  // I1 and C1 carry the label
      } else if (rng() % 10 != 0) {
        out << rng() % 100;
      }
    }
    for (int f = 0; f < 26; ++f) {
      out << '\t';
      if (rng() % 10 != 0) out << std::hex << (f == 0 ? hot : rng() % 5000) << std::dec;
    }
    out << '\n';
  }
}

TEST(Trainer, TrainsOnCriteoFilesAndCountsMalformedLines) {
  const auto dir = fresh_dir("criteo");
  std::filesystem::create_directories(dir);
  write_criteo(dir / "train.tsv", 3000, 4, 1);
  std::ostringstream log;
  const TrainSummary summary =
      run_training(small_config(dir / "out", {"data.path=\"" + (dir / "train.tsv").string() + "\"",
                                              "data.eval_examples=500", "train.steps=1000",
                                              "train.batch_size=64"}),
                   {.log = &log});
  // 3000 lines - 4 malformed - 500 held out = 2496 examples: the data ends before step 1000.
  EXPECT_EQ(summary.malformed_lines, 4);
  ASSERT_EQ(summary.malformed_messages.size(), 4u);
  EXPECT_THAT(summary.malformed_messages[0], HasSubstr("train.tsv:6: "));
  EXPECT_THAT(format_summary(summary), HasSubstr("skipped 4 malformed input lines"));
  EXPECT_TRUE(std::isnan(summary.best_auc));
  EXPECT_EQ(summary.examples, 2496);
  EXPECT_EQ(summary.steps, 39);  // 2496 / 64
  EXPECT_THAT(log.str(), HasSubstr("the training data ended at step 39"));
  EXPECT_GT(summary.final_auc, 0.7);

  try {
    run_training(small_config(dir / "out2", {"data.path=\"" + (dir / "train.tsv").string() + "\"",
                                             "data.max_malformed=2"}),
                 {.log = &log});
    FAIL() << "no error";
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), HasSubstr("train.tsv"));
  }
}

TEST(Trainer, BadDataPathsAreReported) {
  const auto dir = fresh_dir("bad_path");
  std::ostringstream log;
  EXPECT_THROW(run_training(small_config(dir, {"data.path=\"/nonexistent/day_0\""}), {.log = &log}),
               InvalidArgument);
}

}  // namespace
}  // namespace recemb::train
