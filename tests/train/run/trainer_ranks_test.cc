// Data-parallel runs (trainer.h): several ranks, on threads connected as one group, train as one
// process up to rounding, resume, stop and fail together.
#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "recemb/checkpoint.h"
#include "recemb/communicator.h"
#include "recemb/error.h"

#include "testing/files.h"
#include "train/run/trainer.h"
#include "train/run/trainer_runs.h"

namespace recemb::train {
namespace {

using test::read_text;
using ::testing::HasSubstr;
using trainer_runs::fresh_dir;
using trainer_runs::InterruptOnText;
using trainer_runs::small_config;
using trainer_runs::write_criteo;

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
