#include "train/report/metrics_log.h"

#include <cmath>
#include <fstream>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <random>
#include <sstream>
#include <system_error>

#include "recemb/error.h"

#include "testing/fault_file_system.h"

namespace recemb::train {
namespace {

std::filesystem::path temp_path(const std::string& name) {
  return std::filesystem::path(::testing::TempDir()) / name;
}

std::string read(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(MetricsLog, WritesOneJsonObjectPerLine) {
  const auto path = temp_path("metrics_lines.jsonl");
  {
    MetricsLog log(path, {});
    log.add(TrainRecord{.step = 10, .examples = 20480, .train_loss = 0.5});
    log.add(EvalRecord{.step = 10, .auc = 0.75, .log_loss = 0.25});
  }
  EXPECT_EQ(read(path),
            "{\"step\": 10, \"examples\": 20480, \"train_loss\": 0.5}\n"
            "{\"step\": 10, \"eval_auc\": 0.75, \"eval_log_loss\": 0.25}\n");
}

TEST(MetricsLog, ResumeKeepsRecordsUpToTheStepExactly) {
  const auto path = temp_path("metrics_resume.jsonl");
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> uniform(0, 1);
  std::vector<TrainRecord> written;
  {
    MetricsLog log(path, {});
    for (int64_t step = 1; step <= 20; ++step) {
      written.push_back({.step = step, .examples = step * 64, .train_loss = uniform(rng)});
      log.add(written.back());
      if (step % 5 == 0) log.add(EvalRecord{.step = step, .auc = uniform(rng), .log_loss = 1});
    }
  }
  MetricsLog resumed(path, {.step = 12, .train_every = 1, .eval_every = 5});
  ASSERT_EQ(resumed.train_records().size(), 12u);
  for (size_t i = 0; i < 12; ++i) {
    EXPECT_EQ(resumed.train_records()[i].train_loss, written[i].train_loss) << i;  // bitwise
    EXPECT_EQ(resumed.train_records()[i].examples, written[i].examples);
  }
  ASSERT_EQ(resumed.eval_records().size(), 2u);
  EXPECT_EQ(resumed.eval_records()[1].step, 10);
  resumed.add(TrainRecord{.step = 13, .examples = 1, .train_loss = 2});
  const std::string text = read(path);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 12 + 2 + 1);
  EXPECT_THAT(text, ::testing::EndsWith("{\"step\": 13, \"examples\": 1, \"train_loss\": 2}\n"));
  EXPECT_EQ(MetricsLog(path, {}).train_records().size(), 0u);
  EXPECT_EQ(read(path), "");
}

TEST(MetricsLog, RecordsAtTheResumedStepAreKeptOnlyOnSchedule) {
  const auto path = temp_path("metrics_schedule.jsonl");
  {
    MetricsLog log(path, {});
    log.add(EvalRecord{.step = 0, .auc = 0.5, .log_loss = 0.7});
    log.add(TrainRecord{.step = 10, .examples = 10, .train_loss = 0.6});
    log.add(TrainRecord{.step = 14, .examples = 14, .train_loss = 0.5});  // the run's end
    log.add(EvalRecord{.step = 14, .auc = 0.6, .log_loss = 0.6});         // final evaluation
  }
  MetricsLog off_schedule(path, {.step = 14, .train_every = 10, .eval_every = 5});
  EXPECT_EQ(off_schedule.train_records().size(), 1u);
  EXPECT_EQ(off_schedule.eval_records().size(), 1u);
  {
    MetricsLog log(path, {});
    log.add(TrainRecord{.step = 20, .examples = 20, .train_loss = 0.6});
    log.add(EvalRecord{.step = 20, .auc = 0.6, .log_loss = 0.6});
  }
  MetricsLog on_schedule(path, {.step = 20, .train_every = 10, .eval_every = 5});
  EXPECT_EQ(on_schedule.train_records().size(), 1u);
  EXPECT_EQ(on_schedule.eval_records().size(), 1u);
  MetricsLog no_evals(path, {.step = 20, .train_every = 10, .eval_every = 0});
  EXPECT_EQ(no_evals.eval_records().size(), 0u);
}

TEST(MetricsLog, ForeignLinesAreAnErrorNamingFileAndLine) {
  const auto path = temp_path("metrics_foreign.jsonl");
  std::ofstream(path) << "{\"step\": 1, \"examples\": 2, \"train_loss\": 0.5}\n"
                      << "{\"step\": 2, \"loss\": 0.5}\n";
  try {
    MetricsLog log(path, {.step = 10});
    FAIL() << "no error";
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), ::testing::HasSubstr(path.string() + ":2:"));
  }
  EXPECT_THAT(read(path), ::testing::HasSubstr("\"loss\""));  // left as it was
}

// A diverged run's NaN loss is written null and read back as NaN; a file of an earlier recemb
// (17 significant digits, "%.17g") reads back as the values it holds.
TEST(MetricsLog, NanLossesAndEarlierFilesReadBack) {
  const auto path = temp_path("metrics_nan.jsonl");
  std::ofstream(path)
      << "{\"step\": 1, \"examples\": 2, \"train_loss\": 0.10000000000000001}\n"
      << "{\"step\": 1, \"eval_auc\": 0.5, \"eval_log_loss\": 0.69314718055994529}\n";
  {
    MetricsLog log(path, {.step = 5});
    ASSERT_EQ(log.train_records().size(), 1u);
    EXPECT_EQ(log.train_records()[0].train_loss, 0.1);
    EXPECT_EQ(log.eval_records()[0].log_loss, 0.69314718055994529);
    log.add(TrainRecord{.step = 2, .examples = 4, .train_loss = std::nan("")});
  }
  EXPECT_THAT(read(path),
              ::testing::EndsWith("{\"step\": 2, \"examples\": 4, \"train_loss\": null}\n"));
  const MetricsLog resumed(path, {.step = 5});
  ASSERT_EQ(resumed.train_records().size(), 2u);
  EXPECT_TRUE(std::isnan(resumed.train_records()[1].train_loss));
  // A line with a field of neither record is refused, naming the line and the field.
  std::ofstream(path, std::ios::app) << "{\"step\": 3, \"examples\": 4, \"loss\": 1}\n";
  try {
    MetricsLog log(path, {.step = 5});
    FAIL() << "no error";
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), ::testing::HasSubstr(path.string() + ":4: loss: not a known field"));
  }
}

// A record whose write fails (a full disk) throws std::system_error naming the file, and is not
// kept; the records written before stay whole.
TEST(MetricsLog, AFailingWriteThrowsNamingTheFile) {
  const auto path = temp_path("metrics_full.jsonl");
  test::FaultFileSystem file_system;
  MetricsLog log(path, {});
  log.add(TrainRecord{.step = 10, .examples = 20480, .train_loss = 0.5});
  file_system.fail_writes_to("metrics_full", ENOSPC);
  try {
    log.add(EvalRecord{.step = 10, .auc = 0.75, .log_loss = 0.25});
    FAIL() << "no error";
  } catch (const std::system_error& error) {
    EXPECT_EQ(error.code().value(), ENOSPC);
    EXPECT_THAT(error.what(), ::testing::HasSubstr(path.string()));
  }
  EXPECT_TRUE(log.eval_records().empty());
  EXPECT_EQ(read(path), "{\"step\": 10, \"examples\": 20480, \"train_loss\": 0.5}\n");
}

}  // namespace
}  // namespace recemb::train
