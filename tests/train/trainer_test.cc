#include "train/trainer.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <system_error>
#include <thread>
#include <tuple>
#include <vector>

#include "recemb/checkpoint.h"
#include "recemb/communicator.h"
#include "recemb/error.h"

#include "testing/fault_file_system.h"
#include "testing/files.h"
#include "train/embedding_model.h"
#include "train/example_batch.h"

namespace recemb::train {
namespace {

using test::read_text;
using ::testing::HasSubstr;
using ::testing::Not;

std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / ("trainer_" + name);
  std::filesystem::remove_all(dir);
  return dir;
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

  const std::string metrics = read_text(dir / "metrics.jsonl");
  EXPECT_EQ(std::count(metrics.begin(), metrics.end(), '\n'), 12 + 4);  // 12 losses, 4 evals
  EXPECT_THAT(metrics, HasSubstr("{\"step\": 0, \"eval_auc\": "));
  EXPECT_THAT(metrics, HasSubstr("{\"step\": 120, \"eval_auc\": "));
  EXPECT_THAT(read_text(dir / "training.svg"), HasSubstr("<polyline"));
  EXPECT_THAT(read_text(dir / "summary.json"), HasSubstr("\"final_auc\": "));
  EXPECT_THAT(read_text(dir / "config.toml"), HasSubstr("table_budget_mib = 1"));
  EXPECT_TRUE(std::filesystem::exists(dir / "checkpoints"));
  EXPECT_THAT(log.str(), HasSubstr("eval at step 120"));
  EXPECT_THAT(format_summary(summary), HasSubstr("held-out AUC"));
  EXPECT_TRUE(summary.learned);
  EXPECT_THAT(format_summary(summary), Not(HasSubstr("did not learn")));
}

// embedding.vocabulary = dynamic: the 26 tables are keyed by the synthetic data's raw keys; the
// model learns as with hashed tables, and the summary reports each table's vocabulary as
// Embedding::vocabulary_stats counts it.
TEST(Trainer, DynamicVocabulariesLearnAndReportTheirKeys) {
  const auto dir = fresh_dir("dynamic");
  std::ostringstream log;
  const TrainSummary summary =
      run_training(small_config(dir, {"embedding.vocabulary=dynamic", "embedding.min_count=2",
                                      "embedding.ttl_steps=20", "embedding.capacity=3000"}),
                   {.log = &log});
  EXPECT_NEAR(summary.initial_auc, 0.5, 0.05);
  EXPECT_GT(summary.final_auc, 0.6) << log.str();
  EXPECT_TRUE(summary.learned);
  ASSERT_EQ(summary.vocabularies.size(), 26u);
  VocabularyStats total;
  for (size_t f = 0; f < summary.vocabularies.size(); ++f) {
    const TableVocabulary& v = summary.vocabularies[f];
    EXPECT_EQ(v.table, "C" + std::to_string(f + 1));
    EXPECT_EQ(v.capacity, 3000);
    EXPECT_LE(v.stats.size, v.capacity);
    // Every key admitted is held or was evicted.
    EXPECT_EQ(v.stats.inserted, v.stats.size + v.stats.evicted) << v.table;
    total.size += v.stats.size;
    total.inserted += v.stats.inserted;
    total.evicted += v.stats.evicted;
    total.not_admitted_lookups += v.stats.not_admitted_lookups;
  }
  // min_count = 2 leaves the keys seen once without a row; the TTL evicts keys of the Zipf tail
  // not seen for 20 steps; the capacity evicts in the tables with more live keys than 3000.
  EXPECT_GT(total.size, 0);
  EXPECT_GT(total.not_admitted_lookups, 0);
  EXPECT_GT(total.evicted, 0);
  const std::string text = format_summary(summary);
  EXPECT_THAT(text, HasSubstr("vocabularies of 26 dynamic tables: " + std::to_string(total.size) +
                              " keys held (capacity 78000), " + std::to_string(total.inserted) +
                              " admitted, " + std::to_string(total.evicted) + " evicted, " +
                              std::to_string(total.not_admitted_lookups) +
                              " lookups of keys not admitted"));
  EXPECT_THAT(text, HasSubstr("  largest, C"));
  const std::string json = read_text(dir / "summary.json");
  EXPECT_THAT(json, HasSubstr("\"vocabularies\": {"));
  const TableVocabulary& c1 = summary.vocabularies[0];
  EXPECT_THAT(json,
              HasSubstr("\"C1\": {\"capacity\": 3000, \"keys\": " + std::to_string(c1.stats.size) +
                        ", \"admitted\": " + std::to_string(c1.stats.inserted)));
  EXPECT_THAT(log.str(), HasSubstr("26 dynamic tables"));
  EXPECT_TRUE(std::filesystem::exists(dir / "checkpoints"));  // resumable (tested below)
}

// The synthetic data's open vocabulary drifts: in the smallest table, whose few slots are all seen
// at every step, the TTL evicts keys only because their items were replaced.
TEST(Trainer, DriftingItemsAreAdmittedAndTheirPredecessorsEvicted) {
  std::ostringstream log;
  const auto run = [&](const std::string& name, int64_t lifetime) {
    const TrainConfig config = small_config(
        fresh_dir(name), {"embedding.vocabulary=dynamic", "embedding.ttl_steps=3", "train.steps=40",
                          "train.eval_every=0", "data.eval_examples=1024",
                          "data.synthetic_item_lifetime=" + std::to_string(lifetime)});
    const std::vector<int64_t> sizes = embedding_model(config).sizes;
    const auto smallest =
        static_cast<size_t>(std::min_element(sizes.begin(), sizes.end()) - sizes.begin());
    const TrainSummary summary = run_training(config, {.log = &log});
    return std::pair(sizes[smallest], summary.vocabularies.at(smallest).stats);
  };
  const auto [slots, still] = run("drift_none", int64_t{1} << 40);
  ASSERT_LE(slots, 10);
  EXPECT_EQ(still.size, slots);
  EXPECT_EQ(still.inserted, slots);
  EXPECT_EQ(still.evicted, 0);
  // 40 steps of 256 examples: each slot's item is replaced 10 times (every 1024 examples).
  // The keys held: each slot's current item, and its predecessor if seen in the last 3 steps.
  const auto [same_slots, drifting] = run("drift_fast", 1024);
  EXPECT_GE(drifting.size, slots);
  EXPECT_LE(drifting.size, 2 * slots);
  EXPECT_GE(drifting.inserted, 10 * slots);
  EXPECT_LE(drifting.inserted, 11 * slots);
  EXPECT_EQ(drifting.evicted, drifting.inserted - drifting.size);
  EXPECT_GE(drifting.evicted, 9 * slots);
}

// The hashed mode has no vocabulary to report.
TEST(Trainer, HashedTablesReportNoVocabulary) {
  const auto dir = fresh_dir("hashed_no_vocabulary");
  std::ostringstream log;
  const TrainSummary summary = run_training(small_config(dir, {"train.steps=3"}), {.log = &log});
  EXPECT_TRUE(summary.vocabularies.empty());
  EXPECT_THAT(format_summary(summary), Not(HasSubstr("vocabularies")));
  EXPECT_THAT(read_text(dir / "summary.json"), Not(HasSubstr("vocabularies")));
}

// Trains 120 steps straight, and 75 then --resume to 120, with `settings` added, and expects the
// same records. The first part ends at step 75: inside a loss window (log_every 10) and off the
// evaluation schedule (eval_every 40), so its final records must not survive the resume.
void expect_resume_is_exact(const std::string& name, const std::vector<std::string>& settings) {
  const auto straight_dir = fresh_dir(name + "_straight");
  const auto resumed_dir = fresh_dir(name + "_resumed");
  std::vector<std::string> schedule = {"train.log_every=10", "checkpoint.every=25"};
  schedule.insert(schedule.end(), settings.begin(), settings.end());
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
  EXPECT_EQ(read_text(resumed_dir / "metrics.jsonl"), read_text(straight_dir / "metrics.jsonl"));
  EXPECT_THAT(log.str(), HasSubstr("resumed from "));
}

TEST(Trainer, ResumeContinuesExactlyAsAnUninterruptedRun) { expect_resume_is_exact("hashed", {}); }

// Dynamic tables resume with their keys, counts, last-seen steps and pending counts: admission
// (min_count) and eviction (TTL) go on exactly as in the uninterrupted run.
TEST(Trainer, ADynamicRunResumesExactlyAsAnUninterruptedRun) {
  expect_resume_is_exact("dynamic", {"embedding.vocabulary=dynamic", "embedding.min_count=2",
                                     "embedding.ttl_steps=20"});
}

// The files of every checkpoint under `dir`, by path relative to it. The manifest's copy of the
// run's settings has `dir`, train.overlap and train.steps blanked: runs that differ only in them
// must save the same checkpoints.
std::map<std::string, std::string> checkpoint_files(const std::filesystem::path& dir) {
  const auto blank = [](std::string text, const std::string& what) {
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at)) {
      text.replace(at, what.size(), "<blank>");
    }
    return text;
  };
  std::map<std::string, std::string> files;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir / "checkpoints")) {
    if (!entry.is_regular_file()) continue;
    std::string text = read_text(entry.path());
    if (entry.path().filename() == "manifest.json") {
      text = std::regex_replace(blank(text, dir.string()),
                                std::regex(R"(\\n(overlap|steps) = \w+)"), "<blank>");
    } else if (entry.path().filename() == "manifest.xxh3") {
      continue;  // the checksum of the manifest, compared above
    }
    files[std::filesystem::relative(entry.path(), dir).string()] = std::move(text);
  }
  return files;
}

// The overlapped loop (train.overlap = true: the next batch's lookup prefetched during the dense
// step) against the serial one, with `settings` added, on 1 and 2 embedding threads: 120 steps
// straight, and 75 then --resume to 120, must give bitwise the same evaluations, metrics,
// vocabularies and checkpoints. The evaluations (every 40 steps) and the checkpoints (every 25;
// the last of the first part at 75) come while the next batch is prefetched: they must see the
// state after their step, without that batch's keys.
void expect_overlap_is_exact(const std::string& name, const std::vector<std::string>& settings) {
  for (const int threads : {1, 2}) {
    SCOPED_TRACE("embedding.threads=" + std::to_string(threads));
    std::vector<std::string> schedule = {"checkpoint.every=25", "checkpoint.keep=3",
                                         "embedding.threads=" + std::to_string(threads)};
    schedule.insert(schedule.end(), settings.begin(), settings.end());
    const auto with = [&](std::vector<std::string> extra) {
      extra.insert(extra.begin(), schedule.begin(), schedule.end());
      return extra;
    };
    const std::string suffix = "_" + std::to_string(threads);
    const auto serial_dir = fresh_dir(name + "_serial" + suffix);
    const auto overlapped_dir = fresh_dir(name + "_overlapped" + suffix);
    const auto resumed_dir = fresh_dir(name + "_overlapped_resumed" + suffix);
    std::ostringstream log;
    const TrainSummary serial =
        run_training(small_config(serial_dir, with({"train.overlap=false"})), {.log = &log});
    const TrainSummary overlapped =
        run_training(small_config(overlapped_dir, with({"train.overlap=true"})), {.log = &log});
    run_training(small_config(resumed_dir, with({"train.overlap=true", "train.steps=75"})),
                 {.log = &log});
    const TrainSummary resumed = run_training(
        small_config(resumed_dir, with({"train.overlap=true"})), {.resume = true, .log = &log});
    EXPECT_EQ(resumed.first_step, 75);

    const std::map<std::string, std::string> serial_checkpoints = checkpoint_files(serial_dir);
    ASSERT_EQ(serial_checkpoints.count("checkpoints/ckpt-000000000075/manifest.json"), 1u);
    for (const auto& [run, summary, dir] : {std::tuple{"straight", &overlapped, overlapped_dir},
                                            std::tuple{"resumed", &resumed, resumed_dir}}) {
      SCOPED_TRACE(run);
      EXPECT_EQ(summary->steps, 120);
      EXPECT_EQ(summary->final_auc, serial.final_auc);  // bitwise
      EXPECT_EQ(summary->final_log_loss, serial.final_log_loss);
      ASSERT_EQ(summary->vocabularies.size(), serial.vocabularies.size());
      for (size_t t = 0; t < serial.vocabularies.size(); ++t) {
        const VocabularyStats& got = summary->vocabularies[t].stats;
        const VocabularyStats& want = serial.vocabularies[t].stats;
        EXPECT_EQ(std::tuple(got.size, got.inserted, got.evicted, got.not_admitted_lookups),
                  std::tuple(want.size, want.inserted, want.evicted, want.not_admitted_lookups));
      }
      EXPECT_EQ(read_text(dir / "metrics.jsonl"), read_text(serial_dir / "metrics.jsonl"));
      const std::map<std::string, std::string> checkpoints = checkpoint_files(dir);
      EXPECT_EQ(checkpoints.size(), serial_checkpoints.size());
      for (const auto& [path, contents] : serial_checkpoints) {
        const auto found = checkpoints.find(path);
        EXPECT_TRUE(found != checkpoints.end() && found->second == contents) << path;
      }
    }
  }
}

TEST(Trainer, TheOverlappedLoopTrainsBitwiseAsTheSerialOne) {
  expect_overlap_is_exact("hashed", {});
}

TEST(Trainer, TheOverlappedLoopTrainsDynamicTablesBitwiseAsTheSerialOne) {
  // Admission (min_count), TTL and full tables (capacity) all at work.
  expect_overlap_is_exact("dynamic_overlap",
                          {"embedding.vocabulary=dynamic", "embedding.min_count=2",
                           "embedding.ttl_steps=20", "embedding.capacity=3000"});
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
  const std::string metrics = read_text(dir / "metrics.jsonl");
  try {
    run_training(small_config(dir, {"train.steps=5"}), {.log = &log});
    FAIL() << "no error";
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), AllOf(HasSubstr("ckpt-000000000005"), HasSubstr("--resume")));
  }
  EXPECT_EQ(read_text(dir / "metrics.jsonl"), metrics);
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

// Writes dir/train.tsv (3000 lines, 4 malformed) and trains on it (500 lines held out, 1000 steps
// of 64) into dir/out, with `settings` added.
TrainSummary train_on_criteo_file(const std::filesystem::path& dir,
                                  std::vector<std::string> settings, std::ostringstream& log) {
  std::filesystem::create_directories(dir);
  write_criteo(dir / "train.tsv", 3000, 4, 1);
  settings.insert(settings.begin(),
                  {"data.path=\"" + (dir / "train.tsv").string() + "\"", "data.eval_examples=500",
                   "train.steps=1000", "train.batch_size=64"});
  return run_training(small_config(dir / "out", settings), {.log = &log});
}

// Criteo files with dynamic tables: every distinct value of the lines trained on (the missing
// value included) holds a key of its own, and the model learns as with hashed tables.
TEST(Trainer, TrainsDynamicTablesOnCriteoFilesKeyedByTheirValues) {
  const auto dir = fresh_dir("criteo_dynamic");
  std::ostringstream log;
  const TrainSummary summary =
      train_on_criteo_file(dir, {"embedding.vocabulary=dynamic", "embedding.capacity=100000"}, log);
  EXPECT_EQ(summary.malformed_lines, 4);
  EXPECT_EQ(summary.examples, 2496);
  EXPECT_GT(summary.final_auc, 0.7);
  // The reference: the distinct texts of each field in the lines trained on (after the 500 held
  // out), counted from the file.
  std::vector<std::set<std::string>> values(kNumCategoricalFeatures);
  std::istringstream lines(read_text(dir / "train.tsv"));
  int valid = 0;
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> fields;
    std::istringstream split(line);
    for (std::string field; std::getline(split, field, '\t');) fields.push_back(field);
    if (line.back() == '\t') fields.emplace_back();
    if (fields.size() != 40 || ++valid <= 500) continue;
    for (int f = 0; f < kNumCategoricalFeatures; ++f) {
      values[static_cast<size_t>(f)].insert(fields[static_cast<size_t>(14 + f)]);
    }
  }
  ASSERT_EQ(valid, 2996);
  ASSERT_EQ(summary.vocabularies.size(), 26u);
  for (int f = 0; f < kNumCategoricalFeatures; ++f) {
    const VocabularyStats& stats = summary.vocabularies[static_cast<size_t>(f)].stats;
    EXPECT_EQ(stats.size, static_cast<int64_t>(values[static_cast<size_t>(f)].size()))
        << "C" << f + 1;
    EXPECT_EQ(stats.evicted, 0);
  }
}

TEST(Trainer, TrainsOnCriteoFilesAndCountsMalformedLines) {
  const auto dir = fresh_dir("criteo");
  std::ostringstream log;
  const TrainSummary summary = train_on_criteo_file(dir, {}, log);
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

// How a run ended: its error, or its summary's figures; and what it left: its metrics and
// checkpoints.
struct RunOutcome {
  std::string error;
  int64_t steps = 0, malformed_lines = 0;
  bool data_ended = false;
  double final_auc = 0;
  std::string metrics;
  std::map<std::string, std::string> checkpoints;
};

RunOutcome run_outcome(const TrainConfig& config) {
  RunOutcome outcome;
  std::ostringstream log;
  try {
    const TrainSummary summary = run_training(config, {.log = &log});
    outcome.steps = summary.steps;
    outcome.malformed_lines = summary.malformed_lines;
    outcome.data_ended = summary.data_ended;
    outcome.final_auc = summary.final_auc;
  } catch (const std::exception& error) {
    outcome.error = error.what();
  }
  const std::filesystem::path dir = config.output.dir;
  outcome.metrics = read_text(dir / "metrics.jsonl");
  outcome.checkpoints = checkpoint_files(dir);
  return outcome;
}

// Runs `settings` with the serial and the overlapped loop and expects the same ending, metrics
// and checkpoints; returns the serial run's.
RunOutcome expect_same_outcome_overlapped(const std::string& name,
                                          const std::vector<std::string>& settings) {
  const auto with = [&](const std::string& overlap, const std::string& suffix) {
    std::vector<std::string> all = settings;
    all.push_back("train.overlap=" + overlap);
    return small_config(fresh_dir(name + suffix), all);
  };
  const RunOutcome serial = run_outcome(with("false", "_serial"));
  const RunOutcome overlapped = run_outcome(with("true", "_overlapped"));
  EXPECT_EQ(overlapped.error, serial.error);
  EXPECT_EQ(std::tuple(overlapped.steps, overlapped.malformed_lines, overlapped.data_ended),
            std::tuple(serial.steps, serial.malformed_lines, serial.data_ended));
  EXPECT_EQ(overlapped.final_auc, serial.final_auc);  // bitwise
  EXPECT_EQ(overlapped.metrics, serial.metrics);
  EXPECT_TRUE(overlapped.checkpoints == serial.checkpoints);
  return serial;
}

// The overlapped loop reads the next batch during a step: its data errors and the end of the data
// are met where the serial loop meets them, after the step's evaluation and checkpoint. The file:
// 1500 lines, 3 malformed ones, 500 more; its first fifth (399 lines) held out, 1101 lines (17
// steps of 64) trained on before the malformed ones, 1601 in all (26 steps).
TEST(Trainer, TheOverlappedLoopMeetsDataErrorsAndTheDataEndAsTheSerialOne) {
  const auto dir = fresh_dir("overlap_data");
  std::filesystem::create_directories(dir);
  const std::filesystem::path first = dir / "first.tsv", second = dir / "second.tsv";
  write_criteo(first, 1500, 0, 1);
  write_criteo(second, 500, 0, 2);
  {
    std::ofstream out(dir / "train.tsv");
    out << read_text(first) << "0\tbad\n1\tbad\n0\tbad\n" << read_text(second);
  }
  const std::vector<std::string> settings = {"data.path=\"" + (dir / "train.tsv").string() + "\"",
                                             "data.eval_examples=500",
                                             "train.steps=1000",
                                             "train.batch_size=64",
                                             "train.eval_every=1",
                                             "checkpoint.every=5",
                                             "checkpoint.keep=1"};
  std::vector<std::string> strict = settings;
  strict.push_back("data.max_malformed=2");
  const RunOutcome failed = expect_same_outcome_overlapped("overlap_data_error", strict);
  EXPECT_THAT(failed.error, HasSubstr("train.tsv"));
  EXPECT_EQ(failed.checkpoints.count("checkpoints/ckpt-000000000015/manifest.json"), 1u);
  EXPECT_THAT(failed.metrics, AllOf(HasSubstr("{\"step\": 17, \"eval_auc\""),
                                    Not(HasSubstr("{\"step\": 18, \"eval_auc\""))));

  const RunOutcome ended = expect_same_outcome_overlapped("overlap_data_end", settings);
  EXPECT_EQ(ended.error, "");
  EXPECT_TRUE(ended.data_ended);
  EXPECT_EQ(ended.steps, 26);
  EXPECT_EQ(ended.malformed_lines, 3);
}

// A dynamic table filling up with when_full = "error": the training lookup that finds no room
// throws (in the overlapped loop, finish_lookup does), at the same step and with the same
// checkpoints left as in the serial loop.
TEST(Trainer, TheOverlappedLoopMeetsAFullTableAsTheSerialOne) {
  const RunOutcome full = expect_same_outcome_overlapped(
      "overlap_full", {"embedding.vocabulary=dynamic", "embedding.capacity=1500",
                       "embedding.when_full=error", "checkpoint.every=5", "train.eval_every=5"});
  EXPECT_THAT(full.error, HasSubstr("is full"));
  EXPECT_GT(full.checkpoints.size(), 0u);  // (at step 40 on this data)
}

TEST(Trainer, BadDataPathsAreReported) {
  const auto dir = fresh_dir("bad_path");
  std::ostringstream log;
  EXPECT_THROW(run_training(small_config(dir, {"data.path=\"/nonexistent/day_0\""}), {.log = &log}),
               InvalidArgument);
}

// A write, fsync, rename or directory fsync failing in the trainer's second or last checkpoint:
// the run throws std::system_error with that errno, the latest checkpoint is a complete one, and
// a resume from it finishes the run.
TEST(Trainer, AFailingCheckpointLeavesACompleteOneToResumeFrom) {
  const std::vector<std::string> schedule = {"train.steps=60", "checkpoint.every=20",
                                             "train.eval_every=60"};
  std::array<int, test::kFaultPoints.size()> calls{};  // of a run without faults
  {
    test::FaultFileSystem file_system;
    std::ostringstream log;
    run_training(small_config(fresh_dir("fault_count"), schedule), {.log = &log});
    for (size_t p = 0; p < calls.size(); ++p) calls[p] = file_system.count(test::kFaultPoints[p]);
  }
  for (size_t p = 0; p < calls.size(); ++p) {
    const test::FaultPoint point = test::kFaultPoints[p];
    for (const int nth : {calls[p] / 2, calls[p]}) {
      SCOPED_TRACE(test::fault_point_name(point) + " number " + std::to_string(nth) + " of " +
                   std::to_string(calls[p]));
      ASSERT_GT(nth, 0);
      const auto dir = fresh_dir("fault");
      std::ostringstream log;
      {
        test::FaultFileSystem file_system;
        file_system.fail(point, nth, EIO);
        try {
          run_training(small_config(dir, schedule), {.log = &log});
          ADD_FAILURE() << "no exception";
        } catch (const std::system_error& error) {
          EXPECT_EQ(error.code().value(), EIO) << error.what();
        }
      }
      const std::optional<std::filesystem::path> latest = latest_checkpoint(dir / "checkpoints");
      ASSERT_TRUE(latest.has_value());
      EXPECT_NO_THROW(load_checkpoint(*latest));  // verifies every file
      const TrainSummary resumed =
          run_training(small_config(dir, schedule), {.resume = true, .log = &log});
      EXPECT_EQ(resumed.steps, 60);
    }
  }
}

// A file smaller than data.eval_examples: the held-out set takes its first fifth, the rest
// trains, and the run says both; with nothing left to train on, the run is an error.
TEST(Trainer, ASmallFileIsNotAllHeldOut) {
  const auto dir = fresh_dir("small_file");
  std::filesystem::create_directories(dir);
  write_criteo(dir / "small.tsv", 100, 0, 3);
  const std::string data = "data.path=\"" + (dir / "small.tsv").string() + "\"";
  std::ostringstream log;
  const TrainSummary summary =
      run_training(small_config(dir / "out", {data, "train.batch_size=32"}), {.log = &log});
  // The lines have nearly equal lengths: 20 of them are about a fifth of the bytes.
  EXPECT_THAT(log.str(), AllOf(HasSubstr("warning: data.eval_examples = 4096 would hold out 100 "
                                         "examples of " +
                                         (dir / "small.tsv").string() + " (100%"),
                               HasSubstr("holding out its first 20 examples"),
                               HasSubstr("(20 held-out examples)"),
                               HasSubstr("the data will end before train.steps = 120: about 80 "
                                         "examples are left"),
                               HasSubstr("about 3 steps of 32")));
  EXPECT_EQ(summary.examples, 80);
  EXPECT_EQ(summary.steps, 3);  // 32 + 32 + 16
  EXPECT_TRUE(summary.data_ended);
  EXPECT_THAT(format_summary(summary),
              HasSubstr("the training data ended at step 3, before train.steps = 120"));
  EXPECT_THAT(read_text(dir / "out" / "summary.json"), HasSubstr("\"data_ended\": true"));

  // Resumed where the data ended: nothing to train on.
  try {
    run_training(small_config(dir / "out", {data, "train.batch_size=32"}),
                 {.resume = true, .log = &log});
    FAIL() << "no error";
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), AllOf(HasSubstr("no examples to train on"),
                                    HasSubstr("ended at step 3, where this run resumed")));
  }
  // A held-out file of its own leaves all of the training file to train on.
  const TrainSummary separate = run_training(
      small_config(dir / "separate", {data, "train.batch_size=32",
                                      "data.eval_path=\"" + (dir / "small.tsv").string() + "\""}),
      {.log = &log});
  EXPECT_EQ(separate.examples, 100);

  write_criteo(dir / "one.tsv", 1, 0, 3);
  try {
    run_training(small_config(dir / "one", {"data.path=\"" + (dir / "one.tsv").string() + "\""}),
                 {.log = &log});
    FAIL() << "no error";
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(),
                AllOf(HasSubstr("one.tsv holds 1 example"), HasSubstr("data.eval_path")));
  }
}

// A log that sets `flag` to SIGINT once `trigger` was written to it and flushed: a user pressing
// Ctrl-C on seeing that line.
class InterruptOnText : public std::stringbuf {
 public:
  InterruptOnText(std::string trigger, std::atomic<int>& flag)
      : trigger_(std::move(trigger)), flag_(flag) {}

 protected:
  int sync() override {
    if (str().find(trigger_) != std::string::npos) flag_.store(SIGINT);
    return 0;
  }

 private:
  std::string trigger_;
  std::atomic<int>& flag_;
};

// Stopped by a signal after the checkpoint of step 50: the run saves, evaluates and reports, and
// a resume continues exactly as the uninterrupted run. The overlapped loop has read and
// prefetched the batch of step 51 when it stops: never finished, it changes nothing.
void expect_a_stop_to_resume_exactly(const std::string& overlap) {
  SCOPED_TRACE("train.overlap=" + overlap);
  const auto small_config = [&](const std::filesystem::path& dir) {
    return train::small_config(dir, {"train.overlap=" + overlap});
  };
  const auto straight_dir = fresh_dir("stop_straight");
  const auto stopped_dir = fresh_dir("stop_stopped");
  std::ostringstream log;
  const TrainSummary straight = run_training(small_config(straight_dir), {.log = &log});

  std::atomic<int> stop{0};
  InterruptOnText buffer("checkpoint", stop);
  std::ostream interrupted_log(&buffer);
  const TrainSummary stopped =
      run_training(small_config(stopped_dir), {.log = &interrupted_log, .stop_signal = &stop});
  EXPECT_EQ(stopped.stop_signal, SIGINT);
  EXPECT_EQ(stopped.steps, 50);
  EXPECT_EQ(stopped.examples, 50 * 256);
  EXPECT_FALSE(stopped.data_ended);
  EXPECT_THAT(buffer.str(), AllOf(HasSubstr("stopping at step 50"), HasSubstr("eval at step 50")));
  EXPECT_THAT(format_summary(stopped), HasSubstr("stopped by SIGINT after step 50 of 120"));
  EXPECT_THAT(read_text(stopped_dir / "summary.json"), HasSubstr("\"stop_signal\": 2,"));
  ASSERT_EQ(latest_checkpoint(stopped_dir / "checkpoints"),
            stopped_dir / "checkpoints" / "ckpt-000000000050");

  const TrainSummary resumed =
      run_training(small_config(stopped_dir), {.resume = true, .log = &log});
  EXPECT_EQ(resumed.first_step, 50);
  EXPECT_EQ(resumed.steps, 120);
  EXPECT_EQ(resumed.stop_signal, 0);
  EXPECT_EQ(resumed.final_auc, straight.final_auc);  // bitwise
  EXPECT_EQ(read_text(stopped_dir / "metrics.jsonl"), read_text(straight_dir / "metrics.jsonl"));
}

TEST(Trainer, AStopRequestEndsTheRunAfterTheStepAndResumesExactly) {
  expect_a_stop_to_resume_exactly("false");
  expect_a_stop_to_resume_exactly("true");
}

// What decides the updates may not change on --resume (check_resume_settings); the length of
// the run may.
TEST(Trainer, ResumeRefusesChangedSettings) {
  const auto dir = fresh_dir("resume_changed");
  std::ostringstream log;
  run_training(small_config(dir, {"train.steps=5"}), {.log = &log});
  const std::string metrics = read_text(dir / "metrics.jsonl");
  for (const auto& [setting, message] : std::vector<std::pair<std::string, std::string>>{
           {"train.batch_size=128", "train.batch_size is 128, was 256"},
           {"data.synthetic_seed=7", "data.synthetic_seed is 7, was 1"}}) {
    try {
      run_training(small_config(dir, {"train.steps=10", setting}), {.resume = true, .log = &log});
      ADD_FAILURE() << setting << ": no error";
    } catch (const InvalidArgument& error) {
      EXPECT_THAT(error.what(), AllOf(HasSubstr(message), HasSubstr("ckpt-000000000005")));
    }
  }
  EXPECT_EQ(read_text(dir / "metrics.jsonl"), metrics);  // nothing written
  EXPECT_EQ(
      run_training(small_config(dir, {"train.steps=10"}), {.resume = true, .log = &log}).steps, 10);
}

// Rates far too small for anything to move: the summary says the model did not learn.
TEST(Trainer, ARunThatDoesNotLearnSaysSo) {
  const auto dir = fresh_dir("no_learning");
  std::ostringstream log;
  const TrainSummary summary = run_training(
      small_config(dir,
                   {"train.steps=20", "embedding.learning_rate=1e-9", "dense.learning_rate=1e-9"}),
      {.log = &log});
  EXPECT_FALSE(summary.learned);
  EXPECT_THAT(format_summary(summary), HasSubstr("warning: the model did not learn"));
  EXPECT_THAT(read_text(dir / "summary.json"), HasSubstr("\"learned\": false"));
}

}  // namespace
}  // namespace recemb::train

namespace recemb::train {
namespace {

// What one rank of a group run returned or threw.
struct RankOutcome {
  TrainSummary summary;
  std::string log;
  std::string error;  // "InvalidArgument: <message>", "<other>: <message>" or "" if none
};

// Runs run_training on `ranks` threads connected as one group (in_process_communicators), each
// with the same config, as `mpirun -np <ranks>` runs processes.
// `log_of_rank_0` (if given) is rank 0's log, and `stop_signals` (if given) the ranks' stop
// flags.
std::vector<RankOutcome> train_on_ranks(int ranks, const TrainConfig& config, bool resume = false,
                                        std::ostream* log_of_rank_0 = nullptr,
                                        std::vector<std::atomic<int>>* stop_signals = nullptr) {
  const std::vector<std::shared_ptr<Communicator>> communicators = in_process_communicators(ranks);
  std::vector<RankOutcome> outcomes(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      RankOutcome& outcome = outcomes[static_cast<size_t>(r)];
      std::ostringstream log;
      try {
        outcome.summary =
            run_training(config, {.resume = resume,
                                  .log = r == 0 && log_of_rank_0 != nullptr ? log_of_rank_0 : &log,
                                  .communicator = communicators[static_cast<size_t>(r)],
                                  .stop_signal = stop_signals != nullptr
                                                     ? &(*stop_signals)[static_cast<size_t>(r)]
                                                     : nullptr});
      } catch (const InvalidArgument& error) {
        outcome.error = std::string("InvalidArgument: ") + error.what();
      } catch (const std::exception& error) {
        outcome.error = std::string("other: ") + error.what();
      }
      outcome.log = log.str();
    });
  }
  for (std::thread& thread : threads) thread.join();
  return outcomes;
}

// One line of metrics.jsonl: a training-loss record (a = train_loss) or an evaluation (a = AUC,
// b = log loss).
struct MetricLine {
  int64_t step = 0;
  bool eval = false;
  int64_t examples = 0;
  double a = 0, b = 0;
};

std::vector<MetricLine> metric_lines(const std::filesystem::path& path) {
  std::vector<MetricLine> lines;
  std::ifstream in(path);
  for (std::string text; std::getline(in, text);) {
    MetricLine line;
    if (std::sscanf(text.c_str(),
                    "{\"step\": %" SCNd64 ", \"examples\": %" SCNd64 ", \"train_loss\": %lf}",
                    &line.step, &line.examples, &line.a) == 3) {
      lines.push_back(line);
    } else if (std::sscanf(text.c_str(),
                           "{\"step\": %" SCNd64 ", \"eval_auc\": %lf, \"eval_log_loss\": %lf}",
                           &line.step, &line.a, &line.b) == 3) {
      line.eval = true;
      lines.push_back(line);
    } else {
      ADD_FAILURE() << path << ": unexpected line " << text;
    }
  }
  return lines;
}

// How far a run on several ranks may drift from one process with the same config. The ranks
// compute the same global-batch means in another summation order (per-slice sums, then a
// weighted sum over the slices in double; the Embedding sums the slices' row gradients rank by
// rank), so each step differs by a few float roundings (relative 1e-7) that training carries
// along: the largest relative difference of any metric in these tests is 9e-7 (printed by
// expect_close_metrics). A gradient not scaled to the global batch (the embedding gradients
// left at their slice's mean) or dense layers trained on their rank's gradients alone move the
// metrics by 2e-2 or more (tried).
constexpr double kRankTolerance = 1e-5;

void expect_close_metrics(const std::filesystem::path& ranks_dir,
                          const std::filesystem::path& alone_dir) {
  const std::vector<MetricLine> ranks = metric_lines(ranks_dir / "metrics.jsonl");
  const std::vector<MetricLine> alone = metric_lines(alone_dir / "metrics.jsonl");
  ASSERT_EQ(ranks.size(), alone.size());
  double largest = 0;
  for (size_t i = 0; i < ranks.size(); ++i) {
    SCOPED_TRACE("metrics.jsonl line " + std::to_string(i + 1));
    EXPECT_EQ(ranks[i].step, alone[i].step);
    EXPECT_EQ(ranks[i].eval, alone[i].eval);
    EXPECT_EQ(ranks[i].examples, alone[i].examples);
    EXPECT_NEAR(ranks[i].a, alone[i].a, kRankTolerance * std::abs(alone[i].a));
    EXPECT_NEAR(ranks[i].b, alone[i].b, kRankTolerance * std::abs(alone[i].b));
    largest = std::max({largest, std::abs(ranks[i].a / alone[i].a - 1),
                        ranks[i].eval ? std::abs(ranks[i].b / alone[i].b - 1) : 0.0});
  }
  std::printf("largest relative difference of the metrics: %.3g\n", largest);
}

// The data-parallel runs' configuration: 60 steps, uneven slices of 256 over 3 ranks.
TrainConfig ranks_config(const std::filesystem::path& dir, std::vector<std::string> extra = {}) {
  std::vector<std::string> overrides = {"train.steps=60", "train.eval_every=20",
                                        "checkpoint.every=20", "embedding.threads=1"};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return small_config(dir, overrides);
}

TEST(Trainer, RanksTrainAsOneProcessUpToRounding) {
  const auto alone_dir = fresh_dir("ranks_alone");
  const auto ranks_dir = fresh_dir("ranks_three");
  std::ostringstream log;
  const TrainSummary alone = run_training(ranks_config(alone_dir), {.log = &log});
  // Row-wise tables: every lookup and update goes through the exchange between ranks.
  const std::vector<RankOutcome> ranks =
      train_on_ranks(3, ranks_config(ranks_dir, {"embedding.sharding=\"row_wise\""}));
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const RankOutcome& outcome = ranks[static_cast<size_t>(r)];
    ASSERT_EQ(outcome.error, "");
    EXPECT_EQ(outcome.summary.rank, r);
    EXPECT_EQ(outcome.summary.ranks, 3);
    EXPECT_EQ(outcome.summary.steps, 60);
    EXPECT_EQ(outcome.summary.examples, alone.examples);                // the global batches
    EXPECT_EQ(outcome.summary.embedding_bytes, alone.embedding_bytes);  // all of the tables
    // Every rank computes the metrics of the whole held-out set.
    EXPECT_EQ(outcome.summary.final_auc, ranks[0].summary.final_auc);
    EXPECT_EQ(outcome.summary.best_auc, alone.best_auc);
    if (r > 0) {
      EXPECT_EQ(outcome.log, "");  // only rank 0 reports
    }
  }
  EXPECT_THAT(ranks[0].log, AllOf(HasSubstr("data-parallel on 3 ranks"), HasSubstr("row-wise"),
                                  HasSubstr("eval at step 60")));
  EXPECT_THAT(format_summary(ranks[0].summary), HasSubstr("data-parallel on 3 ranks"));
  EXPECT_NEAR(ranks[0].summary.initial_auc, alone.initial_auc, kRankTolerance);
  EXPECT_NEAR(ranks[0].summary.final_auc, alone.final_auc, kRankTolerance);
  EXPECT_NEAR(ranks[0].summary.final_log_loss, alone.final_log_loss,
              kRankTolerance * alone.final_log_loss);
  expect_close_metrics(ranks_dir, alone_dir);
  EXPECT_THAT(read_text(ranks_dir / "summary.json"), HasSubstr("\"ranks\": 3,"));
  EXPECT_THAT(read_text(ranks_dir / "config.toml"), HasSubstr("sharding = 'row_wise'"));
}

// Dynamic tables split by keys over the ranks train as in one process, and report the same
// vocabularies (no part is full: admission and the TTL do not depend on the placement).
TEST(Trainer, RanksTrainDynamicTablesAsOneProcess) {
  const auto alone_dir = fresh_dir("dynamic_alone");
  const auto ranks_dir = fresh_dir("dynamic_ranks");
  const std::vector<std::string> dynamic = {"embedding.vocabulary=dynamic", "embedding.min_count=2",
                                            "embedding.ttl_steps=10", "embedding.capacity=100000"};
  std::ostringstream log;
  const TrainSummary alone = run_training(ranks_config(alone_dir, dynamic), {.log = &log});
  std::vector<std::string> row_wise = dynamic;
  row_wise.push_back("embedding.sharding=row_wise");
  const std::vector<RankOutcome> ranks = train_on_ranks(2, ranks_config(ranks_dir, row_wise));
  for (const RankOutcome& outcome : ranks) {
    ASSERT_EQ(outcome.error, "");
    ASSERT_EQ(outcome.summary.vocabularies.size(), alone.vocabularies.size());
    for (size_t t = 0; t < alone.vocabularies.size(); ++t) {
      const VocabularyStats& a = alone.vocabularies[t].stats;
      const VocabularyStats& b = outcome.summary.vocabularies[t].stats;
      EXPECT_EQ(b.size, a.size) << alone.vocabularies[t].table;
      EXPECT_EQ(b.inserted, a.inserted) << alone.vocabularies[t].table;
      EXPECT_EQ(b.evicted, a.evicted) << alone.vocabularies[t].table;
      EXPECT_EQ(b.not_admitted_lookups, a.not_admitted_lookups) << alone.vocabularies[t].table;
    }
  }
  EXPECT_NEAR(ranks[0].summary.final_auc, alone.final_auc, kRankTolerance);
  expect_close_metrics(ranks_dir, alone_dir);
}

TEST(Trainer, ResumeOnTwoRanksContinuesExactlyAsAnUninterruptedRun) {
  // As ResumeContinuesExactlyAsAnUninterruptedRun, on two ranks: the first part ends at step 35,
  // inside a loss window and off the evaluation schedule.
  const auto straight_dir = fresh_dir("ranks_straight");
  const auto resumed_dir = fresh_dir("ranks_resumed");
  const std::vector<RankOutcome> straight = train_on_ranks(2, ranks_config(straight_dir));
  ASSERT_EQ(straight[0].error, "");
  ASSERT_EQ(train_on_ranks(2, ranks_config(resumed_dir, {"train.steps=35"}))[0].error, "");
  const std::vector<RankOutcome> resumed = train_on_ranks(2, ranks_config(resumed_dir), true);
  for (const RankOutcome& outcome : resumed) {
    ASSERT_EQ(outcome.error, "");
    EXPECT_EQ(outcome.summary.first_step, 35);
    EXPECT_EQ(outcome.summary.final_auc, straight[0].summary.final_auc);  // bitwise
    EXPECT_EQ(outcome.summary.final_log_loss, straight[0].summary.final_log_loss);
  }
  EXPECT_EQ(read_text(resumed_dir / "metrics.jsonl"), read_text(straight_dir / "metrics.jsonl"));
  EXPECT_THAT(resumed[0].log, HasSubstr("resumed from "));
}

TEST(Trainer, ACheckpointOfTwoRanksResumesInOneProcess) {
  // Checkpoints hold whole tables and the position in the global stream of batches: a run
  // continues under another number of ranks as it would have gone on (up to rounding).
  const auto alone_dir = fresh_dir("across_alone");
  const auto across_dir = fresh_dir("across_resumed");
  std::ostringstream log;
  run_training(ranks_config(alone_dir), {.log = &log});
  ASSERT_EQ(train_on_ranks(2, ranks_config(across_dir, {"train.steps=35"}))[0].error, "");
  const TrainSummary resumed =
      run_training(ranks_config(across_dir), {.resume = true, .log = &log});
  EXPECT_EQ(resumed.first_step, 35);
  EXPECT_EQ(resumed.ranks, 1);
  expect_close_metrics(across_dir, alone_dir);
}

TEST(Trainer, RanksTrainOnCriteoFilesAsOneProcess) {
  // 2496 training examples in batches of 499: the last batch holds one example, so rank 0's
  // slice of it is empty.
  const auto dir = fresh_dir("ranks_criteo");
  std::filesystem::create_directories(dir);
  write_criteo(dir / "train.tsv", 3000, 4, 1);
  const std::vector<std::string> criteo = {"data.path=\"" + (dir / "train.tsv").string() + "\"",
                                           "data.eval_examples=500", "train.steps=1000",
                                           "train.batch_size=499", "embedding.threads=1"};
  std::ostringstream log;
  const TrainSummary alone = run_training(small_config(dir / "alone", criteo), {.log = &log});
  const std::vector<RankOutcome> ranks = train_on_ranks(2, small_config(dir / "ranks", criteo));
  for (const RankOutcome& outcome : ranks) {
    ASSERT_EQ(outcome.error, "");
    EXPECT_EQ(outcome.summary.steps, 6);
    EXPECT_EQ(outcome.summary.examples, 2496);
    EXPECT_EQ(outcome.summary.malformed_lines, 4);  // every rank reads every line
  }
  EXPECT_EQ(alone.steps, 6);
  EXPECT_THAT(ranks[0].log, HasSubstr("the training data ended at step 6"));
  EXPECT_NEAR(ranks[0].summary.final_auc, alone.final_auc, kRankTolerance);
  expect_close_metrics(dir / "ranks", dir / "alone");
}

// A stop asked for on rank 1 alone (here when rank 0 reports its checkpoint of step 20): every
// rank stops at the same step, saves, and the run resumes from there.
TEST(Trainer, RanksStopTogetherWhenOneIsAskedTo) {
  const auto dir = fresh_dir("ranks_stop");
  std::vector<std::atomic<int>> stops(2);
  InterruptOnText buffer("checkpoint", stops[1]);
  std::ostream log(&buffer);
  const std::vector<RankOutcome> stopped =
      train_on_ranks(2, ranks_config(dir), false, &log, &stops);
  for (const RankOutcome& outcome : stopped) {
    ASSERT_EQ(outcome.error, "");
    EXPECT_EQ(outcome.summary.stop_signal, SIGINT);
    EXPECT_EQ(outcome.summary.steps, stopped[0].summary.steps);
  }
  EXPECT_GE(stopped[0].summary.steps, 20);
  EXPECT_LT(stopped[0].summary.steps, 60);
  EXPECT_EQ(stops[0].load(), 0);  // rank 0 stopped on rank 1's word
  const auto latest = latest_checkpoint(dir / "checkpoints");
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->filename().string(),
            "ckpt-" + std::string(12 - std::to_string(stopped[0].summary.steps).size(), '0') +
                std::to_string(stopped[0].summary.steps));
  const std::vector<RankOutcome> resumed = train_on_ranks(2, ranks_config(dir), true);
  for (const RankOutcome& outcome : resumed) {
    ASSERT_EQ(outcome.error, "");
    EXPECT_EQ(outcome.summary.first_step, stopped[0].summary.steps);
    EXPECT_EQ(outcome.summary.steps, 60);
  }
}

TEST(Trainer, AnErrorOfOneRankIsThrownOnEveryRank) {
  // Without the agreement, rank 1 would wait forever in its first lookup (the test would hang).
  const auto dir = fresh_dir("ranks_error");
  ASSERT_EQ(train_on_ranks(2, ranks_config(dir, {"train.steps=10"}))[0].error, "");
  // Rank 0 alone looks for earlier checkpoints...
  for (const RankOutcome& outcome : train_on_ranks(2, ranks_config(dir))) {
    EXPECT_THAT(outcome.error, AllOf(HasSubstr("InvalidArgument: rank 0: "),
                                     HasSubstr("ckpt-000000000010"), HasSubstr("--resume")));
  }
  // ... and reads metrics.jsonl back on --resume.
  std::ofstream(dir / "metrics.jsonl", std::ios::app) << "not a record\n";
  const std::vector<RankOutcome> resumed = train_on_ranks(2, ranks_config(dir), true);
  EXPECT_THAT(resumed[0].error,
              AllOf(HasSubstr("InvalidArgument: rank 0: "), HasSubstr("metrics.jsonl")));
  EXPECT_EQ(resumed[1].error, resumed[0].error);
}

TEST(Trainer, BatchesSmallerThanTheRanksAreRejectedOnEveryRank) {
  const auto dir = fresh_dir("ranks_small_batch");
  for (const RankOutcome& outcome : train_on_ranks(3, ranks_config(dir, {"train.batch_size=2"}))) {
    EXPECT_EQ(outcome.error,
              "InvalidArgument: train.batch_size 2 is smaller than the number of ranks (3): every "
              "rank trains on its share of each batch");
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "metrics.jsonl"));
}

}  // namespace
}  // namespace recemb::train
