#include "train/report/run_report.h"

#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <system_error>

#include "testing/fault_file_system.h"
#include "testing/files.h"
#include "testing/temporary_directory.h"

namespace recemb::train {
namespace {

using test::read_text;
using test::TemporaryDirectory;
using ::testing::HasSubstr;
using ::testing::Not;

// A summary whose every figure differs, with values that %.4g-style rounding would change.
TrainSummary sample_summary() {
  TrainSummary s;
  s.rank = 1;
  s.ranks = 3;
  s.first_step = 40;
  s.steps = 140;
  s.requested_steps = 500;
  s.dense_isa = "avx2";
  s.examples = 204800;
  s.seconds = 12.345678901234567;
  s.examples_per_second = 16589.123456789;
  s.initial_auc = 0.5012345678;
  s.initial_log_loss = 0.69312345;
  s.final_auc = 0.7410000001;
  s.final_log_loss = 0.49341234;
  s.best_auc = 0.78;
  s.best_log_loss = 0.4648;
  s.data_seconds = 0.05;
  s.lookup_seconds = 1.5;
  s.dense_seconds = 6.0;
  s.update_seconds = 2.5;
  s.eval_seconds = 0.7;
  s.checkpoint_seconds = 1.25;
  s.checkpoints = 2;
  s.publish_seconds = 0.375;
  s.publishes = 9;
  s.embedding_bytes = 134217728;
  s.peak_resident_bytes = 182714368;
  s.malformed_lines = 2;
  s.short_lines = 469;
  s.malformed_messages = {"day_0.tsv:7: 12 fields, expected 40", "day_0.tsv:9: bad hex"};
  return s;
}

// "name": value pairs of a flat JSON object, one per line, values as text.
std::map<std::string, std::string> json_fields(const std::string& text) {
  std::map<std::string, std::string> fields;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t open = line.find('"');
    if (open == std::string::npos) continue;
    const size_t close = line.find('"', open + 1);
    std::string value = line.substr(line.find(':', close) + 2);
    if (!value.empty() && value.back() == ',') value.pop_back();
    fields[line.substr(open + 1, close - open - 1)] = value;
  }
  return fields;
}

TEST(RunReport, SummaryJsonHoldsEveryFigureExactly) {
  const TemporaryDirectory dir;
  const TrainSummary s = sample_summary();
  write_summary_json(s, dir / "summary.json");
  const std::string text = read_text(dir / "summary.json");
  EXPECT_EQ(text.front(), '{');
  EXPECT_EQ(text.substr(text.size() - 2), "}\n");
  const auto fields = json_fields(text);
  EXPECT_EQ(fields.size(), 32u);
  EXPECT_EQ(fields.at("overfitting_from_step"), "-1");
  EXPECT_EQ(fields.at("lowest_log_loss"), "null");
  const auto number = [&](const std::string& name) {
    return std::strtod(fields.at(name).c_str(), nullptr);
  };
  // Doubles read back bit for bit; integers as written.
  EXPECT_EQ(number("seconds"), s.seconds);
  EXPECT_EQ(number("examples_per_second"), s.examples_per_second);
  EXPECT_EQ(number("initial_auc"), s.initial_auc);
  EXPECT_EQ(number("initial_log_loss"), s.initial_log_loss);
  EXPECT_EQ(number("final_auc"), s.final_auc);
  EXPECT_EQ(number("final_log_loss"), s.final_log_loss);
  EXPECT_EQ(number("best_auc"), s.best_auc);
  EXPECT_EQ(number("best_log_loss"), s.best_log_loss);
  EXPECT_EQ(number("data_seconds"), s.data_seconds);
  EXPECT_EQ(number("lookup_seconds"), s.lookup_seconds);
  EXPECT_EQ(number("dense_seconds"), s.dense_seconds);
  EXPECT_EQ(number("update_seconds"), s.update_seconds);
  EXPECT_EQ(number("eval_seconds"), s.eval_seconds);
  EXPECT_EQ(number("checkpoint_seconds"), s.checkpoint_seconds);
  EXPECT_EQ(number("publish_seconds"), s.publish_seconds);
  EXPECT_EQ(fields.at("publishes"), "9");
  EXPECT_EQ(fields.at("ranks"), "3");
  EXPECT_EQ(fields.at("dense_isa"), "\"avx2\"");
  EXPECT_EQ(fields.at("first_step"), "40");
  EXPECT_EQ(fields.at("steps"), "140");
  EXPECT_EQ(fields.at("requested_steps"), "500");
  EXPECT_EQ(fields.at("data_ended"), "false");
  EXPECT_EQ(fields.at("stop_signal"), "0");
  EXPECT_EQ(fields.at("learned"), "true");
  EXPECT_EQ(fields.at("examples"), "204800");
  EXPECT_EQ(fields.at("checkpoints"), "2");
  EXPECT_EQ(fields.at("embedding_bytes"), "134217728");
  EXPECT_EQ(fields.at("peak_resident_bytes"), "182714368");
  EXPECT_EQ(fields.at("malformed_lines"), "2");
  EXPECT_EQ(fields.at("short_lines"), "469");
  EXPECT_THAT(format_summary(s), HasSubstr("read 469 short input lines (fewer than 40 fields: the "
                                           "missing trailing fields taken as empty)\n"));
}

// Dynamic tables: a line for all of them, one for the table holding the most keys, and every
// table's figures in summary.json.
TEST(RunReport, VocabulariesOfDynamicTables) {
  const TemporaryDirectory dir;
  TrainSummary s = sample_summary();
  s.vocabularies = {
      {.table = "C1",
       .capacity = 100,
       .stats = {.size = 90, .inserted = 130, .evicted = 40, .not_admitted_lookups = 7}},
      {.table = "C2",
       .capacity = 5000,
       .stats = {.size = 4000, .inserted = 4500, .evicted = 500, .not_admitted_lookups = 0}},
      {.table = "C3",
       .capacity = 50,
       .stats = {.size = 3, .inserted = 3, .evicted = 0, .not_admitted_lookups = 1}}};
  EXPECT_THAT(
      format_summary(s),
      HasSubstr("vocabularies of 3 dynamic tables: 4093 keys held (capacity 5150), 4633 "
                "admitted, 540 evicted, 8 lookups of keys not admitted\n"
                "  largest, C2: 4000 keys held (capacity 5000), 4500 admitted, 500 evicted, "
                "0 lookups of keys not admitted\n"));
  write_summary_json(s, dir / "summary.json");
  const std::string text = read_text(dir / "summary.json");
  const nlohmann::json json = nlohmann::json::parse(text);
  EXPECT_EQ(json.at("vocabularies"), nlohmann::json::parse(R"({
      "C1": {"capacity": 100, "keys": 90, "admitted": 130, "evicted": 40,
             "not_admitted_lookups": 7},
      "C2": {"capacity": 5000, "keys": 4000, "admitted": 4500, "evicted": 500,
             "not_admitted_lookups": 0},
      "C3": {"capacity": 50, "keys": 3, "admitted": 3, "evicted": 0, "not_admitted_lookups": 1}})"));
  EXPECT_THAT(text, HasSubstr("\"short_lines\": 469,\n  \"vocabularies\": {\n    \"C1\": {\n"));
  EXPECT_THAT(format_summary(sample_summary()), Not(HasSubstr("vocabularies")));
}

TEST(RunReport, UnknownBestFiguresAreNullInJsonAndLeftOutOfTheText) {
  const TemporaryDirectory dir;
  TrainSummary s = sample_summary();
  s.best_auc = std::nan("");
  s.best_log_loss = std::nan("");
  write_summary_json(s, dir / "summary.json");
  const auto fields = json_fields(read_text(dir / "summary.json"));
  EXPECT_EQ(fields.at("best_auc"), "null");
  EXPECT_EQ(fields.at("best_log_loss"), "null");
  EXPECT_THAT(format_summary(s), Not(HasSubstr("best possible")));
}

TEST(RunReport, TextSummaryNamesTheFiguresAndTheTimeShares) {
  const std::string text = format_summary(sample_summary());
  EXPECT_THAT(text,
              HasSubstr("trained steps 40..140: 204800 examples in 12.3 s (16589 examples/s)"));
  EXPECT_THAT(text, HasSubstr("held-out AUC 0.7410 (before: 0.5012), log loss 0.4934"));
  EXPECT_THAT(text, HasSubstr("(the planted model): AUC 0.7800, log loss 0.4648"));
  // Shares of lookup + dense + update = 10 s.
  EXPECT_THAT(text, HasSubstr("embedding lookup 1.50 s (15%), dense forward+backward+update 6.00 s "
                              "(60%), embedding update 2.50 s (25%)"));
  EXPECT_THAT(text, HasSubstr("tables + slots 128.0 MiB, peak resident 174.2 MiB"));
  EXPECT_THAT(text, HasSubstr("data-parallel on 3 ranks (time and memory: rank 1's)"));
  EXPECT_THAT(text, HasSubstr("skipped 2 malformed input lines, the first ones:\n"
                              "  day_0.tsv:7: 12 fields, expected 40\n  day_0.tsv:9: bad hex\n"));
}

// How a run ended early, and whether it learned, end the summary (docs/training.md).
TEST(RunReport, TextSummarySaysWhyARunEndedEarlyAndWhenItDidNotLearn) {
  TrainSummary s = sample_summary();
  EXPECT_THAT(format_summary(s), AllOf(Not(HasSubstr("stopped by")), Not(HasSubstr("data ended")),
                                       Not(HasSubstr("did not learn"))));
  s.data_ended = true;
  EXPECT_THAT(format_summary(s),
              HasSubstr("the training data ended at step 140, before train.steps = 500\n"));
  s.data_ended = false;
  s.stop_signal = SIGINT;
  EXPECT_THAT(format_summary(s),
              HasSubstr("stopped by SIGINT after step 140 of 500: continue with --resume\n"));
  s.stop_signal = SIGTERM;
  EXPECT_THAT(format_summary(s), HasSubstr("stopped by SIGTERM"));
  s.learned = false;
  s.final_auc = 0.509;
  const std::string text = format_summary(s);
  EXPECT_THAT(text, AllOf(HasSubstr("warning: the model did not learn (held-out AUC 0.5090, log "
                                    "loss 0.4934; before: 0.6931)"),
                          HasSubstr("embedding.learning_rate")));
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(text.rfind("warning: "), text.rfind('\n', text.size() - 2) + 1);  // the last line
  const TemporaryDirectory dir;
  write_summary_json(s, dir / "summary.json");
  const auto fields = json_fields(read_text(dir / "summary.json"));
  EXPECT_EQ(fields.at("learned"), "false");
  EXPECT_EQ(fields.at("stop_signal"), std::to_string(SIGTERM));
}

// Checkpoints that take over a quarter of the run get a warning naming the setting to change.
TEST(RunReport, TextSummaryWarnsWhenCheckpointsTakeMuchOfTheRun) {
  TrainSummary s = sample_summary();
  s.seconds = 40.0;
  s.embedding_bytes = 1'000'000'000;
  s.checkpoints = 3;
  s.checkpoint_every = 1000;
  s.checkpoint_seconds = 9.9;
  EXPECT_THAT(format_summary(s), Not(HasSubstr("checkpoints took")));
  s.checkpoint_seconds = 12.0;
  EXPECT_THAT(format_summary(s),
              HasSubstr("warning: writing 3 checkpoints took 12.0 s, 30% of the run (250 MB/s of "
                        "tables and slots); training waits for them: raise checkpoint.every (now "
                        "1000 steps; 0 = only at the end)\n"));
  s.checkpoints = 0;  // a run that wrote none has nothing to warn about
  EXPECT_THAT(format_summary(s), Not(HasSubstr("checkpoints took")));
  s.checkpoints = 1;  // the final one alone: no setting avoids it, no advice
  EXPECT_THAT(format_summary(s), Not(HasSubstr("checkpoints took")));
}

// A held-out log loss that rises from its lowest while the training loss falls is overfitting:
// the warning that the model did not learn says so and advises fewer steps, not more.
TEST(RunReport, OverfittingIsNamedWhenTheHeldOutLossRisesAsTheTrainingLossFalls) {
  const TemporaryDirectory dir;
  MetricsLog metrics(dir / "metrics.jsonl", KeptRecords{});
  std::mt19937_64 random(11);
  std::uniform_real_distribution<double> noise(-0.002, 0.002);
  for (int64_t step = 10; step <= 200; step += 10) {
    metrics.add(TrainRecord{.step = step,
                            .examples = step * 8,
                            .train_loss = 0.7 - 0.002 * static_cast<double>(step) + noise(random)});
  }
  TrainSummary falling = sample_summary();
  note_overfitting(metrics, falling);
  EXPECT_EQ(falling.overfitting_from_step, -1);  // no evaluations yet
  for (int64_t step = 0; step <= 200; step += 50) {
    // Lowest at step 50 (0.60), then up to 0.66 at step 200.
    const double log_loss = step <= 50 ? 0.7 - 0.002 * static_cast<double>(step)
                                       : 0.6 + 0.0004 * static_cast<double>(step - 50);
    metrics.add(EvalRecord{.step = step, .auc = 0.6, .log_loss = log_loss});
  }
  TrainSummary s = sample_summary();
  note_overfitting(metrics, s);
  EXPECT_EQ(s.overfitting_from_step, 50);
  EXPECT_DOUBLE_EQ(s.lowest_log_loss, 0.6);
  s.learned = false;
  const std::string text = format_summary(s);
  EXPECT_THAT(text, AllOf(HasSubstr("the held-out log loss rose from 0.6000 at step 50 while the "
                                    "training loss fell: the model overfits"),
                          HasSubstr("fewer steps or epochs"), Not(HasSubstr("more steps"))));
  const std::string json = [&] {
    write_summary_json(s, dir / "summary.json");
    return read_text(dir / "summary.json");
  }();
  EXPECT_THAT(json, HasSubstr("\"overfitting_from_step\": 50,"));
  // A held-out loss that keeps falling: no overfitting; a model that did not learn gets the
  // other advice.
  MetricsLog learning(dir / "learning.jsonl", KeptRecords{});
  for (const TrainRecord& r : metrics.train_records()) learning.add(r);
  for (int64_t step = 0; step <= 200; step += 50) {
    learning.add(
        EvalRecord{.step = step, .auc = 0.6, .log_loss = 0.7 - 0.0001 * static_cast<double>(step)});
  }
  TrainSummary fine = sample_summary();
  note_overfitting(learning, fine);
  EXPECT_EQ(fine.overfitting_from_step, -1);
  fine.learned = false;
  EXPECT_THAT(format_summary(fine), AllOf(HasSubstr("more steps"), Not(HasSubstr("overfits"))));
}

TEST(RunReport, PublishedBasesAndDeltasAreOneLineEach) {
  EXPECT_EQ(published_base_line({.file = "models/ctr/3/model.recemb",
                                 .version = 3,
                                 .rows = 1000,
                                 .bytes = 3 << 19,
                                 .base_reason = "the base has 360 deltas (base_every_deltas)",
                                 .removed_versions = {1, 2}}),
            "published a base: models/ctr/3/model.recemb (1.5 MiB, 1000 rows; the base has 360 "
            "deltas (base_every_deltas)); removed older version 1 2");
  EXPECT_EQ(published_base_line({.file = "m/1/model.recemb",
                                 .version = 1,
                                 .rows = 7,
                                 .bytes = 1 << 20,
                                 .base_reason = "the first publish into m"}),
            "published a base: m/1/model.recemb (1.0 MiB, 7 rows; the first publish into m)");
  EXPECT_EQ(published_deltas_line(10, 5 << 20, "m/1/delta-00000010.recemb"),
            "published 10 deltas (5.0 MiB) beside the bases; the last: m/1/delta-00000010.recemb");
}

TEST(RunReport, TrainingSvgDrawsTheLossAndTheAuc) {
  const TemporaryDirectory dir;
  {
    MetricsLog metrics(dir / "metrics.jsonl", KeptRecords{});
    for (int64_t step = 10; step <= 50; step += 10) {
      metrics.add(TrainRecord{.step = step,
                              .examples = step * 8,
                              .train_loss = 0.7 - 0.001 * static_cast<double>(step)});
    }
    metrics.add(EvalRecord{.step = 0, .auc = 0.5, .log_loss = 0.7});
    metrics.add(EvalRecord{.step = 50, .auc = 0.7, .log_loss = 0.6});
    write_training_svg(metrics, 10, dir / "training.svg");
  }
  const std::string svg = read_text(dir / "training.svg");
  EXPECT_THAT(svg, HasSubstr("<svg"));
  EXPECT_THAT(svg, HasSubstr("train (mean over 10 steps)"));
  EXPECT_THAT(svg, HasSubstr("Held-out AUC"));
  size_t polylines = 0;
  for (size_t at = svg.find("<polyline"); at != std::string::npos;
       at = svg.find("<polyline", at + 1)) {
    ++polylines;
  }
  EXPECT_EQ(polylines, 3u);  // training and held-out log loss, held-out AUC
  EXPECT_THAT(svg, AllOf(HasSubstr("Log loss"), HasSubstr("held-out")));
  size_t markers = 0;  // each of the 2 evaluations, in both charts
  for (size_t at = svg.find("<circle"); at != std::string::npos; at = svg.find("<circle", at + 1)) {
    ++markers;
  }
  EXPECT_EQ(markers, 4u);
}

// A full disk: summary.json keeps its previous version whole (no empty or partial file), and the
// error names the file; a directory that cannot be written is found before anything else.
TEST(RunReport, AFailingWriteLeavesThePreviousFileAndNamesIt) {
  const TemporaryDirectory dir;
  TrainSummary summary;
  summary.steps = 5;
  write_summary_json(summary, dir / "summary.json");
  const std::string before = read_text(dir / "summary.json");
  test::FaultFileSystem file_system;
  file_system.fail_writes_to("summary.json", ENOSPC);
  summary.steps = 6;
  try {
    write_summary_json(summary, dir / "summary.json");
    FAIL() << "no error";
  } catch (const std::system_error& error) {
    EXPECT_EQ(error.code().value(), ENOSPC);
    EXPECT_THAT(error.what(), HasSubstr("summary.json"));
  }
  EXPECT_EQ(read_text(dir / "summary.json"), before);
  file_system.fail_writes_to(dir.path().string() + "/ro", EROFS);
  try {
    create_writable_directory(dir / "ro" / "ck", "checkpoint.dir");
    FAIL() << "no error";
  } catch (const std::system_error& error) {
    EXPECT_EQ(error.code().value(), EROFS);
    EXPECT_THAT(error.what(), HasSubstr("checkpoint.dir '" + (dir / "ro" / "ck").string() + "'"));
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir / "ro" / "ck"));
  EXPECT_NO_THROW(create_writable_directory(dir / "rw", "output.dir"));
  EXPECT_TRUE(std::filesystem::is_empty(dir / "rw"));
}

}  // namespace
}  // namespace recemb::train
