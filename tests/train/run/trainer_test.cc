#include "train/run/trainer.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <system_error>
#include <vector>

#include "recemb/checkpoint.h"
#include "recemb/error.h"
#include "recemb/serving.h"

#include "dlrm/example_batch.h"
#include "dlrm/model_file.h"
#include "serving/model_access.h"
#include "testing/fault_file_system.h"
#include "testing/files.h"
#include "train/config/embedding_model.h"
#include "train/run/trainer_runs.h"

namespace recemb::train {
namespace {

using test::read_text;
using ::testing::HasSubstr;
using ::testing::Not;

using trainer_runs::fresh_dir;
using trainer_runs::InterruptOnText;
using trainer_runs::small_config;
using trainer_runs::write_criteo;

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
  const nlohmann::json json = nlohmann::json::parse(read_text(dir / "summary.json"));
  ASSERT_EQ(json.at("vocabularies").size(), 26u);
  const TableVocabulary& c1 = summary.vocabularies[0];
  EXPECT_EQ(json.at("vocabularies").at("C1"),
            (nlohmann::json{{"capacity", 3000},
                            {"keys", c1.stats.size},
                            {"admitted", c1.stats.inserted},
                            {"evicted", c1.stats.evicted},
                            {"not_admitted_lookups", c1.stats.not_admitted_lookups}}));
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
// serving.publish_dir: a base at the start, a delta at every step boundary here (a tiny
// publish_every_seconds), and one at the end; the base plus its deltas applied in order equals
// `recemb export` of the final checkpoint byte for byte (tables, dense arrays, metadata), for
// hashed and dynamic tables.
TEST(Trainer, PublishedDeltasAddUpToTheExportOfTheLastStep) {
  for (const std::string vocabulary : {"hashed", "dynamic"}) {
    SCOPED_TRACE(vocabulary);
    const auto dir = fresh_dir("publish_" + vocabulary);
    const std::filesystem::path served = dir / "served" / "ctr";
    const TrainSummary summary = run_training(
        small_config(
            dir, {"train.steps=12", "embedding.vocabulary=" + vocabulary, "embedding.min_count=2",
                  "embedding.ttl_steps=3", "serving.publish_dir=\"" + served.string() + "\"",
                  "serving.publish_every_seconds=1e-9", "serving.publish_dtype=\"int8\""}),
        {});
    EXPECT_EQ(summary.publishes, 1 + 12);  // the base, then each step (the last one at the end)
    ServingModel model = ServingModel::open(served / "1" / "model.recemb");
    for (int k = 1; k <= 12; ++k) {
      char name[32];
      std::snprintf(name, sizeof name, "delta-%08d.recemb", k);
      model.apply_delta(served / "1" / name);
    }
    EXPECT_FALSE(std::filesystem::exists(served / "1" / "delta-00000013.recemb"));
    const dlrm::ExportedModel exported =
        dlrm::export_checkpoint(dir / "checkpoints", dir / "exported", ServingDtype::kInt8, 1);
    const ServingModel fresh = ServingModel::open(exported.path);
    EXPECT_EQ(model.metadata(), fresh.metadata());
    EXPECT_EQ(model.metadata().at(dlrm::kStepMetadata), "12");
    ASSERT_EQ(model.tables().size(), fresh.tables().size());
    for (size_t t = 0; t < model.tables().size(); ++t) {
      const auto rows = internal::ServingModelAccess::table_rows(model, t);
      const auto fresh_rows = internal::ServingModelAccess::table_rows(fresh, t);
      EXPECT_TRUE(std::equal(rows.begin(), rows.end(), fresh_rows.begin(), fresh_rows.end()));
      const auto keys = internal::ServingModelAccess::table_keys(model, t);
      const auto fresh_keys = internal::ServingModelAccess::table_keys(fresh, t);
      EXPECT_TRUE(std::equal(keys.begin(), keys.end(), fresh_keys.begin(), fresh_keys.end()));
    }
    ASSERT_EQ(model.extra_arrays().size(), fresh.extra_arrays().size());
    for (size_t a = 0; a < model.extra_arrays().size(); ++a) {
      const std::span<const float> values = model.extra_arrays()[a].values;
      const std::span<const float> fresh_values = fresh.extra_arrays()[a].values;
      EXPECT_EQ(std::memcmp(values.data(), fresh_values.data(), values.size_bytes()), 0);
    }
  }
}

// Retention through the trainer's settings: a base every 5 deltas, 2 versions kept. 13 publishes
// (the base, then one after each of 12 steps) make versions 1 (base + 5 deltas), 2 (the same) and
// 3 (a base), and version 1 is removed after the third base. The run says where each base went
// and why, and sums up the deltas.
TEST(Trainer, PublishingSaysWhereEachBaseWentAndKeepsTheNewestVersions) {
  const auto dir = fresh_dir("publish_retention");
  const std::filesystem::path served = dir / "served" / "ctr";
  std::ostringstream log;
  const TrainSummary summary = run_training(
      small_config(dir, {"train.steps=12", "serving.publish_dir=\"" + served.string() + "\"",
                         "serving.publish_every_seconds=1e-9", "serving.base_every_deltas=5",
                         "serving.keep_versions=2"}),
      {.log = &log});
  EXPECT_EQ(summary.publishes, 13);
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(served)) {
    if (entry.is_regular_file()) {
      files.push_back(std::filesystem::relative(entry.path(), served).string());
    }
  }
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"2/delta-00000001.recemb", "2/delta-00000002.recemb",
                                             "2/delta-00000003.recemb", "2/delta-00000004.recemb",
                                             "2/delta-00000005.recemb", "2/model.recemb",
                                             "3/model.recemb"}));
  EXPECT_THAT(log.str(),
              AllOf(HasSubstr("published a base: " + (served / "1" / "model.recemb").string()),
                    HasSubstr("the first publish"),
                    HasSubstr("published a base: " + (served / "2" / "model.recemb").string()),
                    HasSubstr("the base has 5 deltas (base_every_deltas 5)"),
                    HasSubstr("published a base: " + (served / "3" / "model.recemb").string()),
                    HasSubstr("removed older version 1"), HasSubstr("published 10 deltas ("),
                    HasSubstr("the last: " + (served / "2" / "delta-00000005.recemb").string())));
}

TEST(Trainer, APublishDirThatCannotBeCreatedStopsTheRunBeforeTraining) {
  const auto dir = fresh_dir("publish_bad");
  std::filesystem::create_directories(dir);
  test::write_bytes(dir / "file", {});
  const std::string publish_dir = (dir / "file" / "ctr").string();
  try {
    run_training(small_config(dir, {"serving.publish_dir=\"" + publish_dir + "\""}), {});
    ADD_FAILURE() << "no error";
  } catch (const std::exception& error) {
    EXPECT_THAT(error.what(), HasSubstr(publish_dir));
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "checkpoints"));
}

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
  std::vector<std::set<std::string>> values(dlrm::kNumCategoricalFeatures);
  std::istringstream lines(read_text(dir / "train.tsv"));
  int valid = 0;
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> fields;
    std::istringstream split(line);
    for (std::string field; std::getline(split, field, '\t');) fields.push_back(field);
    if (line.back() == '\t') fields.emplace_back();
    if (fields.size() != 40 || ++valid <= 500) continue;
    for (int f = 0; f < dlrm::kNumCategoricalFeatures; ++f) {
      values[static_cast<size_t>(f)].insert(fields[static_cast<size_t>(14 + f)]);
    }
  }
  ASSERT_EQ(valid, 2996);
  ASSERT_EQ(summary.vocabularies.size(), 26u);
  for (int f = 0; f < dlrm::kNumCategoricalFeatures; ++f) {
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

// data.max_malformed bounds the run's malformed lines, those of the held-out head and of the
// training together, each distinct line counted once however many epochs read it.
TEST(Trainer, MaxMalformedCountsEachLineOnceOverTheWholeRun) {
  const auto dir = fresh_dir("malformed_run");
  std::filesystem::create_directories(dir);
  // 10 malformed lines (lines 6, 103, ..., 879): 6 in the 500 held-out examples' head, 4 after.
  write_criteo(dir / "train.tsv", 3000, 10, 2);
  const std::vector<std::string> data = {"data.path=\"" + (dir / "train.tsv").string() + "\"",
                                         "data.eval_examples=500", "train.steps=1000",
                                         "train.batch_size=64"};
  std::ostringstream log;
  std::vector<std::string> limit_6 = data;
  limit_6.push_back("data.max_malformed=6");
  try {
    run_training(small_config(dir / "limit_6", limit_6), {.log = &log});
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), HasSubstr("7 malformed lines, more than max_malformed = 6"));
  }
  std::vector<std::string> epochs = data;
  epochs.insert(epochs.end(), {"data.max_malformed=10", "train.epochs=3"});
  const TrainSummary summary = run_training(small_config(dir / "epochs", epochs), {.log = &log});
  EXPECT_TRUE(summary.data_ended);
  EXPECT_EQ(summary.examples, 3 * (3000 - 10 - 500));
  EXPECT_EQ(summary.malformed_lines, 10);
  ASSERT_EQ(summary.malformed_messages.size(), 10u);
  const std::set<std::string> distinct(summary.malformed_messages.begin(),
                                       summary.malformed_messages.end());
  EXPECT_EQ(distinct.size(), 10u);
  EXPECT_THAT(summary.malformed_messages[9], HasSubstr("train.tsv:879: "));
}

// The data lasting longer than estimated (training lines shorter than the held-out ones, over
// epochs): the progress bar reaches its end once, when the data ends, instead of every step
// past the estimate ("974/974", "975/975", ...).
TEST(Trainer, TheProgressBarReachesItsEndOnce) {
  const auto dir = fresh_dir("progress_end");
  std::filesystem::create_directories(dir);
  write_criteo(dir / "train.tsv", 600, 0, 3);
  {
    std::ofstream out(dir / "train.tsv", std::ios::app);
    for (int i = 0; i < 2000; ++i) out << (i % 3 == 0 ? "1" : "0") << std::string(39, '\t') << '\n';
  }
  std::ostringstream log;
  const TrainSummary summary =
      run_training(small_config(dir / "out", {"data.path=\"" + (dir / "train.tsv").string() + "\"",
                                              "data.eval_examples=500", "train.steps=1000",
                                              "train.batch_size=64", "train.epochs=2"}),
                   {.log = &log});
  EXPECT_TRUE(summary.data_ended);
  const std::regex full(R"((\d+)/(\d+) steps)");
  int ends = 0;
  std::string text = log.str();
  for (std::sregex_iterator it(text.begin(), text.end(), full), end; it != end; ++it) {
    if ((*it)[1] == (*it)[2]) {
      ++ends;
      EXPECT_EQ((*it)[1].str(), std::to_string(summary.steps));
    }
  }
  EXPECT_EQ(ends, 1) << text;
  EXPECT_THAT(text, HasSubstr("the data will end before train.steps"));
}

TEST(Trainer, BadDataPathsAreReported) {
  const auto dir = fresh_dir("bad_path");
  std::ostringstream log;
  EXPECT_THROW(run_training(small_config(dir, {"data.path=\"/nonexistent/day_0\""}), {.log = &log}),
               InvalidArgument);
}

// A log that notes the file system's call counts each time a checkpoint is reported.
class CountsAtCheckpoints : public std::stringbuf {
 public:
  explicit CountsAtCheckpoints(const test::FaultFileSystem& file_system)
      : file_system_(file_system) {}
  // counts()[k][p]: the calls of kFaultPoints[p] when checkpoint k had been written.
  const std::vector<std::array<int, test::kFaultPoints.size()>>& counts() const { return counts_; }

 protected:
  int sync() override {
    const std::string text = str();
    const auto seen = static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
    for (; lines_ < seen; ++lines_) {
      const size_t start = lines_ == 0 ? 0 : nth_newline(text, lines_) + 1;
      if (text.compare(start, 11, "checkpoint ") != 0) continue;
      std::array<int, test::kFaultPoints.size()> now{};
      for (size_t p = 0; p < now.size(); ++p) now[p] = file_system_.count(test::kFaultPoints[p]);
      counts_.push_back(now);
    }
    return 0;
  }

 private:
  static size_t nth_newline(const std::string& text, size_t n) {
    size_t at = 0;
    for (size_t k = 0; k < n; ++k) at = text.find('\n', k == 0 ? 0 : at + 1);
    return at;
  }
  const test::FaultFileSystem& file_system_;
  size_t lines_ = 0;
  std::vector<std::array<int, test::kFaultPoints.size()>> counts_;
};

// A write, fsync, rename or directory fsync failing in the trainer's second or last checkpoint:
// the run throws std::system_error with that errno, the latest checkpoint is a complete one, and
// a resume from it finishes the run. Small batches: what is trained does not matter here, and the
// test runs 37 trainings.
TEST(Trainer, AFailingCheckpointLeavesACompleteOneToResumeFrom) {
  const std::vector<std::string> schedule = {"train.steps=60", "checkpoint.every=20",
                                             "train.eval_every=60", "train.batch_size=32",
                                             "data.eval_examples=512"};
  // The calls of a run without faults when each of its 3 checkpoints was written.
  std::vector<std::array<int, test::kFaultPoints.size()>> at_checkpoint;
  {
    test::FaultFileSystem file_system;
    CountsAtCheckpoints counts(file_system);
    std::ostream log(&counts);
    run_training(small_config(fresh_dir("fault_count"), schedule), {.log = &log});
    at_checkpoint = counts.counts();
  }
  ASSERT_EQ(at_checkpoint.size(), 3u);
  std::array<int, test::kFaultPoints.size()> calls{};
  for (size_t p = 0; p < calls.size(); ++p) calls[p] = at_checkpoint[2][p];
  for (size_t p = 0; p < calls.size(); ++p) {
    const test::FaultPoint point = test::kFaultPoints[p];
    // In the second checkpoint, and the last call of the last one.
    const int second = at_checkpoint[0][p] + (at_checkpoint[1][p] - at_checkpoint[0][p] + 1) / 2;
    for (const int nth : {second, calls[p]}) {
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

// A full disk under output.dir: a record (config.toml, metrics.jsonl, summary.json,
// training.svg) that cannot be written stops the run with std::system_error ENOSPC naming it, and
// none is left written in part: the atomic ones are absent.
TEST(Trainer, ARecordThatCannotBeWrittenStopsTheRunNamingIt) {
  for (const std::string name : {"config.toml", "metrics.jsonl", "summary.json", "training.svg"}) {
    SCOPED_TRACE(name);
    const auto dir = fresh_dir("full_disk");
    std::ostringstream log;
    {
      test::FaultFileSystem file_system;
      file_system.fail_writes_to(name, ENOSPC);
      try {
        run_training(small_config(dir, {"train.steps=20"}), {.log = &log});
        ADD_FAILURE() << "no error";
      } catch (const std::system_error& error) {
        EXPECT_EQ(error.code().value(), ENOSPC) << error.what();
        EXPECT_THAT(error.what(), HasSubstr(name));
      }
    }
    if (name != "metrics.jsonl") {
      EXPECT_FALSE(std::filesystem::exists(dir / name));
    }
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      EXPECT_THAT(entry.path().filename().string(), Not(HasSubstr(".tmp-")));
    }
  }
}

// A checkpoint.dir (or output.dir) that cannot be written is found before the first step, not
// when the first checkpoint is saved.
TEST(Trainer, AnUnwritableCheckpointDirStopsTheRunBeforeTheFirstStep) {
  for (const std::string setting : {"checkpoint.dir", "output.dir"}) {
    SCOPED_TRACE(setting);
    const auto dir = fresh_dir("read_only");
    const std::filesystem::path checkpoints = dir / "read_only_checkpoints";
    std::ostringstream log;
    test::FaultFileSystem file_system;
    file_system.fail_writes_to(
        setting == "output.dir" ? (dir / "out").string() : checkpoints.string(), EROFS);
    try {
      run_training(small_config(dir / "out", {"checkpoint.dir=\"" + checkpoints.string() + "\""}),
                   {.log = &log});
      ADD_FAILURE() << "no error";
    } catch (const std::system_error& error) {
      EXPECT_EQ(error.code().value(), EROFS) << error.what();
      EXPECT_THAT(error.what(), HasSubstr(setting + " '"));
    }
    EXPECT_THAT(log.str(), Not(HasSubstr("eval at step")));
    EXPECT_FALSE(std::filesystem::exists(dir / "out" / "metrics.jsonl"));
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

// Stopped by a signal after the checkpoint of step 50: the run saves, evaluates and reports, and
// a resume continues exactly as the uninterrupted run. The overlapped loop has read and
// prefetched the batch of step 51 when it stops: never finished, it changes nothing.
// With `eval_every` 50, the step it stops at is also one of the evaluation schedule: the records
// hold that evaluation once, in the stopped run and after the resume.
void expect_a_stop_to_resume_exactly(const std::string& overlap, int eval_every = 40) {
  SCOPED_TRACE("train.overlap=" + overlap + ", train.eval_every=" + std::to_string(eval_every));
  const auto small_config = [&](const std::filesystem::path& dir) {
    return train::small_config(
        dir, {"train.overlap=" + overlap, "train.eval_every=" + std::to_string(eval_every)});
  };
  // Directories of their own: the tests calling this run at once under ctest -j.
  const std::string variant = overlap + "_" + std::to_string(eval_every);
  const auto straight_dir = fresh_dir("stop_straight_" + variant);
  const auto stopped_dir = fresh_dir("stop_stopped_" + variant);
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
  const std::string stopped_metrics = read_text(stopped_dir / "metrics.jsonl");
  size_t evaluations_at_50 = 0;
  for (size_t at = 0;
       (at = stopped_metrics.find("{\"step\": 50, \"eval_auc\"", at)) != std::string::npos; ++at) {
    ++evaluations_at_50;
  }
  EXPECT_EQ(evaluations_at_50, 1u) << stopped_metrics;

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

TEST(Trainer, AStopAtAnEvaluationStepResumesWithTheRecordsOfAnUninterruptedRun) {
  expect_a_stop_to_resume_exactly("false", 50);
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

// Day after day (--init-from): day 1's 40 steps, then a new run of 30 steps on day 2 from day 1's
// checkpoint, against one run of 70 steps reading day 1 then day 2 (no checkpoint restored).
// Every table, slot, dense parameter and dense slot of the two final checkpoints is the same
// bytes: the new run carries the model and its optimizers' state (and their steps: Adam's bias
// correction), and counts its own steps from 0.
TEST(Trainer, InitFromContinuesTheModelOnNewDataAsOneRunOverBothDays) {
  const auto dir = fresh_dir("init_from");
  std::filesystem::create_directories(dir);
  write_criteo(dir / "day1.tsv", 40 * 64, 0, 11);  // 40 steps of 64, exactly
  write_criteo(dir / "day2.tsv", 30 * 64, 0, 12);
  write_criteo(dir / "eval.tsv", 500, 0, 13);
  const auto settings = [&](const std::string& data, int steps, const std::string& out) {
    return small_config(
        dir / out,
        {"data.path=" + data, "data.eval_path=\"" + (dir / "eval.tsv").string() + "\"",
         "data.eval_examples=500", "train.batch_size=64", "train.steps=" + std::to_string(steps),
         "embedding.optimizer=adam", "embedding.learning_rate=0.01", "checkpoint.every=0"});
  };
  const std::string day1 = "\"" + (dir / "day1.tsv").string() + "\"";
  const std::string day2 = "\"" + (dir / "day2.tsv").string() + "\"";
  std::ostringstream log;
  run_training(settings(day1, 40, "day1"), {.log = &log});
  const TrainSummary day2_run =
      run_training(settings(day2, 30, "day2"),
                   {.init_from = (dir / "day1" / "checkpoints").string(), .log = &log});
  EXPECT_EQ(day2_run.first_step, 0);
  EXPECT_EQ(day2_run.steps, 30);
  EXPECT_EQ(day2_run.examples, 30 * 64);
  EXPECT_THAT(log.str(), HasSubstr("initialised from " +
                                   (dir / "day1" / "checkpoints" / "ckpt-000000000040").string()));
  EXPECT_THAT(read_text(dir / "day2" / "metrics.jsonl"), HasSubstr("{\"step\": 0,"));
  const TrainSummary both =
      run_training(settings("[" + day1 + ", " + day2 + "]", 70, "both"), {.log = &log});
  EXPECT_EQ(both.steps, 70);
  EXPECT_EQ(day2_run.final_auc, both.final_auc);  // bitwise: the same model

  // The checkpoints hold the tables' step (70) in their names; their data files must be equal.
  const auto files_of = [](const std::filesystem::path& checkpoint) {
    std::vector<std::pair<std::string, std::string>> files;
    for (const CheckpointFile& file : inspect_checkpoint(checkpoint).files) {
      if (file.holds != "manifest") files.emplace_back(file.holds, file.checksum);
    }
    return files;
  };
  const auto continued = files_of(dir / "day2" / "checkpoints" / "ckpt-000000000070");
  EXPECT_EQ(continued, files_of(dir / "both" / "checkpoints" / "ckpt-000000000070"));
  EXPECT_EQ(continued.size(), 26u * 3 + 2);  // parameters and Adam's two slots; the dense arrays

  // A run initialised from day 1, stopped at its step 15 and resumed, ends as the day-2 run.
  run_training(settings(day2, 15, "day2_resumed"),
               {.init_from = (dir / "day1" / "checkpoints").string(), .log = &log});
  const TrainSummary resumed =
      run_training(settings(day2, 30, "day2_resumed"), {.resume = true, .log = &log});
  EXPECT_EQ(resumed.first_step, 15);
  EXPECT_EQ(files_of(dir / "day2_resumed" / "checkpoints" / "ckpt-000000000070"), continued);
}

// --init-from refuses a model of another shape, naming every difference with both values, before
// anything is written; the data, steps, learning rates and output may change.
TEST(Trainer, InitFromRefusesAnotherModelShapeAndWritesNothing) {
  const auto dir = fresh_dir("init_from_refused");
  std::ostringstream log;
  run_training(small_config(dir / "day1", {"train.steps=5"}), {.log = &log});
  const std::string checkpoints = (dir / "day1" / "checkpoints").string();
  const std::string checkpoint = checkpoints + "/ckpt-000000000005";
  const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> cases = {
      {{"tables.C3.vocabulary_size=77"}, {"table C3: vocabulary_size is 77, was "}},
      {{"model.embedding_dim=4", "model.bottom_mlp=[16,4]"},
       {"table C1: dim is 4, was 8", "table C26: dim is 4, was 8",
        "dense/embedding_dim is [4], was [8]", "dense/bottom_mlp is [16,4], was [16,8]"}},
      {{"model.top_mlp=[32,16]"}, {"dense/top_mlp is [32,16], was [16]"}},
      {{"embedding.optimizer=adam", "tables.C2.optimizer=sgd", "dense.optimizer=adagrad"},
       {"table C1: optimizer is adam, was adagrad", "table C2: optimizer is sgd, was adagrad",
        "dense.optimizer is 'adagrad', was 'adam'"}},
      {{"embedding.vocabulary=dynamic"}, {"table C7: vocabulary is dynamic, was hashed"}},
  };
  for (const auto& [changes, messages] : cases) {
    const auto out = dir / "refused";
    std::vector<std::string> settings = changes;
    settings.push_back("train.steps=3");
    try {
      run_training(small_config(out, settings), {.init_from = checkpoints, .log = &log});
      ADD_FAILURE() << changes.front() << ": no error";
    } catch (const InvalidArgument& error) {
      EXPECT_THAT(error.what(), AllOf(HasSubstr("--init-from"), HasSubstr(checkpoint)));
      for (const std::string& message : messages) {
        EXPECT_THAT(error.what(), HasSubstr(message)) << changes.front();
      }
    }
    EXPECT_FALSE(std::filesystem::exists(out)) << changes.front();  // nothing written
  }
  try {
    run_training(small_config(dir / "both", {"train.steps=3"}),
                 {.resume = true, .init_from = checkpoints, .log = &log});
    ADD_FAILURE() << "--resume with --init-from: no error";
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), HasSubstr("give one"));
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "both"));
  // What may change: data, steps, learning rates, output.
  const TrainSummary changed = run_training(
      small_config(dir / "day2", {"train.steps=3", "data.synthetic_seed=9",
                                  "embedding.learning_rate=0.5", "dense.learning_rate=0.001"}),
      {.init_from = checkpoint, .log = &log});
  EXPECT_EQ(changed.steps, 3);
}

// The hint of a run whose data ended at once names --init-from, which exists.
TEST(Trainer, AFinishedRunsHintForNewDataNamesInitFrom) {
  const auto dir = fresh_dir("hint_init_from");
  std::filesystem::create_directories(dir);
  write_criteo(dir / "day1.tsv", 700, 0, 3);
  std::ostringstream log;
  const auto config = [&](int steps) {
    return small_config(
        dir / "out", {"data.path=\"" + (dir / "day1.tsv").string() + "\"", "data.eval_examples=100",
                      "train.batch_size=64", "train.steps=" + std::to_string(steps)});
  };
  run_training(config(100), {.log = &log});
  try {
    run_training(config(200), {.resume = true, .log = &log});
    FAIL() << "no error";
  } catch (const InvalidArgument& error) {
    EXPECT_THAT(error.what(), HasSubstr("--init-from " + (dir / "out" / "checkpoints").string()));
  }
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
