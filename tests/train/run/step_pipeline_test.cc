// The overlapped loop (train.overlap: the next batch read and its lookup prefetched during the
// dense step) against the serial one: the pipeline alone, and through the trainer (the same
// results, bitwise, and the same errors at the same steps).
#include "train/run/step_pipeline.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <map>
#include <optional>
#include <regex>
#include <span>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "recemb/embedding.h"
#include "recemb/error.h"

#include "dlrm/criteo_profile.h"
#include "testing/files.h"
#include "train/data/synthetic_criteo.h"
#include "train/run/trainer.h"
#include "train/run/trainer_runs.h"

namespace recemb::train {
namespace {

using test::read_text;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using trainer_runs::fresh_dir;
using trainer_runs::small_config;
using trainer_runs::write_criteo;

constexpr int64_t kDim = 4;
constexpr int64_t kBatch = 64;

// What a step of a pipeline's loop saw: its batch's count and position, the activations looked up
// for it, and whether the buffers idle before next() were the batch's own.
struct SeenStep {
  int64_t count = 0;
  std::string position;
  std::vector<float> activations;
  bool idle_buffers_were_the_batchs = false;
};

// `steps` steps (fewer if the `examples` synthetic examples end first) over 26 tables of 50 rows,
// each step updating the rows it looked up (gradient: the activations themselves), so that every
// lookup depends on the updates before it.
std::vector<SeenStep> run_pipeline(bool overlap, int64_t steps, int64_t examples) {
  SyntheticCriteo source(
      {.seed = 5,
       .vocabulary_sizes = std::vector<int64_t>(dlrm::kNumCategoricalFeatures, 50),
       .num_examples = examples});
  PrefetchingSource prefetching(source, kBatch);
  RankGroup group(nullptr);
  RankErrors errors(group);
  TrainSummary times;
  std::vector<TableConfig> tables;
  std::vector<FeatureConfig> features;
  for (int f = 0; f < dlrm::kNumCategoricalFeatures; ++f) {
    const std::string name = dlrm::categorical_feature_name(f);
    tables.push_back({.name = name,
                      .vocabulary_size = 50,
                      .dim = kDim,
                      .initializer = TruncatedNormal{.stddev = 0.5f}});
    features.push_back({.name = name, .table = name});
  }
  std::optional<StepPipeline> pipeline;  // before the Embedding, which outlives none of its lookups
  Embedding embedding(tables, features,
                      {.optimizer = Sgd{.learning_rate = 0.5f}, .num_threads = 1, .seed = 5});
  pipeline.emplace(kDim, overlap, kBatch, prefetching, embedding, errors, times);
  std::vector<SeenStep> seen;
  for (int64_t step = 0; step < steps; ++step) {
    const dlrm::BatchBuffers* idle = &pipeline->idle_buffers();
    StepBatch& batch = pipeline->next();
    seen.push_back({.count = batch.count,
                    .position = batch.position,
                    .idle_buffers_were_the_batchs = idle == &batch.buffers});
    if (batch.count == 0) break;
    pipeline->look_up(batch, {.begin = 0, .count = batch.count}, step + 1 < steps);
    const std::span<const std::span<float>> gradients = batch.buffers.gradients();
    for (size_t f = 0; f < gradients.size(); ++f) {
      const std::span<const float> rows = batch.buffers.activation_views()[f];
      seen.back().activations.insert(seen.back().activations.end(), rows.begin(), rows.end());
      std::copy(rows.begin(), rows.end(), gradients[f].begin());
    }
    pipeline->wait_for_prefetch();
    embedding.apply_gradients(batch.lookup, batch.buffers.gradient_views());
    pipeline->advance();
  }
  EXPECT_GT(times.data_seconds, 0.0);
  EXPECT_GT(times.lookup_seconds, 0.0);
  return seen;
}

// 10 batches of 64 and one of 7, then the end of the data; and a run that stops at its steps.
TEST(StepPipeline, TheOverlappedPipelineLooksUpBitwiseAsTheSerialOne) {
  for (const int64_t steps : {int64_t{30}, int64_t{6}}) {
    SCOPED_TRACE(std::to_string(steps) + " steps");
    const std::vector<SeenStep> serial = run_pipeline(false, steps, 10 * kBatch + 7);
    const std::vector<SeenStep> overlapped = run_pipeline(true, steps, 10 * kBatch + 7);
    ASSERT_EQ(serial.size(), steps == 30 ? 12u : 6u);
    ASSERT_EQ(overlapped.size(), serial.size());
    for (size_t s = 0; s < serial.size(); ++s) {
      SCOPED_TRACE("step " + std::to_string(s + 1));
      EXPECT_EQ(overlapped[s].count, serial[s].count);
      EXPECT_EQ(overlapped[s].position, serial[s].position);
      EXPECT_TRUE(overlapped[s].activations == serial[s].activations);  // bitwise
      // Serial: one batch's buffers, idle between steps. Overlapped: the batch read ahead is not
      // idle (its lookup was prefetched).
      EXPECT_TRUE(serial[s].idle_buffers_were_the_batchs);
      EXPECT_EQ(overlapped[s].idle_buffers_were_the_batchs, s == 0);
    }
    if (steps == 30) {
      EXPECT_EQ(serial[10].count, 7);
      EXPECT_EQ(serial[11].count, 0);
    }
    // Random rows: the gradients (the activations) are not zero, every step updates its rows.
    EXPECT_NE(serial[0].activations, std::vector<float>(serial[0].activations.size(), 0.0f));
  }
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
// step) against the serial one, with `settings` added, on `threads` embedding threads (each test
// runs for 1 and 2, as separate tests: under the sanitizers each takes minutes): 120 steps
// straight, and 75 then --resume to 120, must give bitwise the same evaluations, metrics,
// vocabularies and checkpoints. The evaluations (every 40 steps) and the checkpoints (every 25;
// the last of the first part at 75) come while the next batch is prefetched: they must see the
// state after their step, without that batch's keys. Batches of 128 and 1,024 held-out examples:
// what matters is where the evaluations, checkpoints and the resume fall among the prefetches
// (4 trainings). *serial_summary (when given): the serial run's.
void expect_overlap_is_exact(const std::string& name, int threads,
                             const std::vector<std::string>& settings,
                             TrainSummary* serial_summary = nullptr) {
  std::vector<std::string> schedule = {"checkpoint.every=25", "checkpoint.keep=3",
                                       "train.batch_size=128", "data.eval_examples=1024",
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
  const TrainSummary resumed = run_training(small_config(resumed_dir, with({"train.overlap=true"})),
                                            {.resume = true, .log = &log});
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
  if (serial_summary != nullptr) *serial_summary = serial;
}

// The parameter: embedding.threads.
class StepPipelineOverlap : public testing::TestWithParam<int> {};

TEST_P(StepPipelineOverlap, TheOverlappedLoopTrainsBitwiseAsTheSerialOne) {
  expect_overlap_is_exact("hashed", GetParam(), {});
}

TEST_P(StepPipelineOverlap, TheOverlappedLoopTrainsDynamicTablesBitwiseAsTheSerialOne) {
  // Admission (min_count), TTL and full tables (capacity) all at work.
  TrainSummary serial;
  expect_overlap_is_exact("dynamic_overlap", GetParam(),
                          {"embedding.vocabulary=dynamic", "embedding.min_count=2",
                           "embedding.ttl_steps=20", "embedding.capacity=3000"},
                          &serial);
  int64_t evicted = 0, not_admitted = 0;
  for (const auto& vocabulary : serial.vocabularies) {
    evicted += vocabulary.stats.evicted;
    not_admitted += vocabulary.stats.not_admitted_lookups;
  }
  EXPECT_GT(evicted, 0);
  EXPECT_GT(not_admitted, 0);
}

INSTANTIATE_TEST_SUITE_P(EmbeddingThreads, StepPipelineOverlap, testing::Values(1, 2));

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
TEST(StepPipeline, TheOverlappedLoopMeetsDataErrorsAndTheDataEndAsTheSerialOne) {
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
TEST(StepPipeline, TheOverlappedLoopMeetsAFullTableAsTheSerialOne) {
  const RunOutcome full = expect_same_outcome_overlapped(
      "overlap_full", {"embedding.vocabulary=dynamic", "embedding.capacity=1500",
                       "embedding.when_full=error", "checkpoint.every=5", "train.eval_every=5"});
  EXPECT_THAT(full.error, HasSubstr("is full"));
  EXPECT_GT(full.checkpoints.size(), 0u);  // (at step 40 on this data)
}

}  // namespace
}  // namespace recemb::train
