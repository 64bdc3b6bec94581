// `recemb train` under `mpirun -np 2` (RECEMB_MPIEXEC, RECEMB_CLI: the paths CMake passes): the
// two processes train as one data-parallel job with sharded tables, match one process trained
// with the same global batches, report through rank 0 only, and resume exactly.
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sstream>
#include <string>

#include "testing/shell_command.h"

namespace {

using ::testing::HasSubstr;

using Outcome = recemb::test::CommandOutcome;

Outcome run(const std::string& command) {
  const Outcome outcome = recemb::test::run_shell_command(command);
  std::printf("%.1f s: %s\n", outcome.seconds, command.c_str());
  return outcome;
}

// A small model on small tables (about 1 s of training per run on 2 busy cores); one embedding
// thread per process, as two processes share the two cores.
const std::string kSmallRun =
    " train --set data.table_budget_mib=1 --set data.eval_examples=4096 --set model.embedding_dim=8"
    " --set model.bottom_mlp=[16,8] --set model.top_mlp=[16] --batch-size 256 --threads 1"
    " --set train.eval_every=20 --set train.log_every=5 --set checkpoint.every=10"
    " --set dense.learning_rate=0.01";

// `recemb <arguments>` in one process, or under mpirun as `processes` processes. `timeout` ends
// the test rather than CI if a job ever hangs.
Outcome recemb(const std::string& arguments, int processes = 0) {
  const std::string launcher = processes == 0 ? std::string()
                                              : std::string(RECEMB_MPIEXEC) +
                                                    " --allow-run-as-root --oversubscribe -np " +
                                                    std::to_string(processes) + " ";
  return run("timeout 120 " + launcher + RECEMB_CLI + arguments);
}

// `recemb <arguments>` as 2 processes of which each reports its exit status ("exit status N")
// after its own output: mpirun is told not to end the job when one exits with an error, so every
// rank finishes by itself (and one that waits forever shows as a timeout).
Outcome recemb_on_each_rank(const std::string& arguments) {
  return run("timeout 120 " + std::string(RECEMB_MPIEXEC) +
             " --allow-run-as-root --oversubscribe --mca orte_abort_on_non_zero_status 0 -np 2"
             " sh -c '\"$0\" \"$@\"; echo \"exit status $?\"' " +
             RECEMB_CLI + arguments);
}

std::string fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / ("train_mpi_" + name);
  std::filesystem::remove_all(dir);
  return dir.string();
}

std::string read(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A number of summary.json: "  \"<key>\": <value>,".
double summary_value(const std::string& dir, const std::string& key) {
  const std::string text = read(std::filesystem::path(dir) / "summary.json");
  const size_t at = text.find("\"" + key + "\": ");
  if (at == std::string::npos) {
    ADD_FAILURE() << "no " << key << " in " << dir << "/summary.json:\n" << text;
    return std::nan("");
  }
  return std::stod(text.substr(at + key.size() + 4));
}

int occurrences(const std::string& text, const std::string& part) {
  int count = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++count;
  return count;
}

TEST(TrainMpi, TwoProcessesTrainAsOneAndResumeExactly) {
  const std::string alone = fresh_dir("alone");
  const std::string straight = fresh_dir("straight");
  const std::string resumed = fresh_dir("resumed");

  const Outcome one = recemb(kSmallRun + " --steps 40 --output " + alone);
  ASSERT_EQ(one.status, 0) << one.output;
  const Outcome two = recemb(kSmallRun + " --steps 40 --output " + straight, 2);
  ASSERT_EQ(two.status, 0) << two.output;

  // Rank 0 alone reports: one description, one summary, one line per evaluation.
  EXPECT_EQ(occurrences(two.output, "data-parallel on 2 ranks: "), 1) << two.output;
  EXPECT_EQ(occurrences(two.output, "trained steps 0..40"), 1) << two.output;
  EXPECT_EQ(occurrences(two.output, "eval at step 40"), 1) << two.output;
  EXPECT_EQ(occurrences(two.output, "wrote " + straight), 1) << two.output;
  EXPECT_EQ(summary_value(straight, "ranks"), 2);
  for (const char* file : {"config.toml", "metrics.jsonl", "summary.json", "training.svg"}) {
    EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(straight) / file)) << file;
  }

  // A group of one is the plain program: the same metrics, bit for bit.
  const std::string single = fresh_dir("single");
  const Outcome one_rank = recemb(kSmallRun + " --steps 40 --output " + single, 1);
  ASSERT_EQ(one_rank.status, 0) << one_rank.output;
  EXPECT_EQ(read(std::filesystem::path(single) / "metrics.jsonl"),
            read(std::filesystem::path(alone) / "metrics.jsonl"));

  // The same global batches and data, the sums in another order: each step differs from one
  // process's by float roundings (relative 1e-7), which 40 steps of training carry along to a
  // few 1e-7 in the final metrics (measured: printed below). A gradient not scaled to the global
  // batch, or replicas of the dense layers trained on their own gradients, move them by 1e-2.
  constexpr double kTolerance = 1e-5;
  const double auc = summary_value(straight, "final_auc");
  const double log_loss = summary_value(straight, "final_log_loss");
  const double alone_auc = summary_value(alone, "final_auc");
  const double alone_log_loss = summary_value(alone, "final_log_loss");
  std::printf("final AUC %.17g (one process: %.17g), log loss %.17g (%.17g)\n", auc, alone_auc,
              log_loss, alone_log_loss);
  EXPECT_NEAR(auc, alone_auc, kTolerance);
  EXPECT_NEAR(log_loss, alone_log_loss, kTolerance * log_loss);
  EXPECT_GT(auc, summary_value(straight, "initial_auc") + 0.03);  // it learned

  // Interrupted at step 25 (inside a loss window, off the evaluation schedule) and resumed: the
  // uninterrupted run's metrics, line for line.
  const Outcome first = recemb(kSmallRun + " --steps 25 --output " + resumed, 2);
  ASSERT_EQ(first.status, 0) << first.output;
  const Outcome second = recemb(kSmallRun + " --steps 40 --resume --output " + resumed, 2);
  ASSERT_EQ(second.status, 0) << second.output;
  EXPECT_EQ(occurrences(second.output, "resumed from "), 1) << second.output;
  EXPECT_EQ(read(std::filesystem::path(resumed) / "metrics.jsonl"),
            read(std::filesystem::path(straight) / "metrics.jsonl"));
  EXPECT_EQ(summary_value(resumed, "final_auc"), auc);
}

// SIGINT to one rank (the last one started, which does not report) once the first checkpoint is
// written: the ranks agree to stop at the same step, save it, rank 0 reports, and the job
// resumes. (mpirun itself, on Ctrl-C, aborts the job: docs/training.md, "Stopping a run".)
TEST(TrainMpi, ASignalToOneRankStopsEveryRankAtTheSameStep) {
  const std::string dir = fresh_dir("signal");
  const std::string log = dir + ".log";
  const std::string job = std::string(RECEMB_MPIEXEC) +
                          " --allow-run-as-root --oversubscribe --mca orte_abort_on_non_zero_status"
                          " 0 -np 2 " +
                          RECEMB_CLI + kSmallRun + " --output " + dir + " --steps 1000000";
  // The log is emptied before the job starts: a stale one (an earlier run's, as the release and
  // sanitizer builds share TempDir) would satisfy the wait before the job has ranks.
  const Outcome outcome =
      run("timeout 120 sh -c ': >" + log + "; " + job + " >" + log +
          " 2>&1 & job=$!; until grep -q \"checkpoint " + dir + "/checkpoints/ckpt-\" " + log +
          "; do sleep 0.1; done; kill -INT $(pgrep -P $job | tail -n 1); "
          "wait $job'");
  const std::string output = read(log);
  EXPECT_NE(outcome.status, -1) << "the job hung until timeout killed it:\n" << output;
  EXPECT_EQ(occurrences(output, "stopping after the current step"), 1) << output;
  const size_t at = output.find("stopped by SIGINT after step ");
  ASSERT_NE(at, std::string::npos) << output;
  EXPECT_EQ(occurrences(output, "stopped by SIGINT"), 1) << output;  // rank 0 reports
  const int64_t step =
      std::stoll(output.substr(at + std::string("stopped by SIGINT after step ").size()));
  EXPECT_EQ(summary_value(dir, "steps"), static_cast<double>(step));
  EXPECT_EQ(summary_value(dir, "stop_signal"), SIGINT);
  char name[32];
  std::snprintf(name, sizeof name, "ckpt-%012lld", static_cast<long long>(step));
  EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(dir) / "checkpoints" / name)) << output;

  const Outcome resumed =
      recemb(kSmallRun + " --output " + dir + " --resume --steps " + std::to_string(step + 10), 2);
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_EQ(occurrences(resumed.output, "resumed from "), 1) << resumed.output;
  EXPECT_EQ(summary_value(dir, "steps"), static_cast<double>(step + 10));
}

TEST(TrainMpi, ABadSettingFailsOnEveryRankWithTheSameMessage) {
  const Outcome outcome =
      recemb_on_each_rank(kSmallRun + " --set train.steps=0 --output " + fresh_dir("bad"));
  EXPECT_EQ(outcome.status, 0) << "the job hung until timeout killed it:\n" << outcome.output;
  EXPECT_EQ(occurrences(outcome.output, "recemb: error: "), 2) << outcome.output;
  EXPECT_EQ(occurrences(outcome.output, "train.steps must be >= 1, not 0 ("), 2) << outcome.output;
  EXPECT_EQ(occurrences(outcome.output, "exit status 2\n"), 2) << outcome.output;
}

// Ranks whose dense layers run different instruction sets (rank 1 forced to the baseline) would
// drift apart: every rank refuses to train, naming both sets.
TEST(TrainMpi, RanksOnDifferentInstructionSetsFailWithTheSameMessage) {
  const Outcome outcome =
      run("timeout 120 " + std::string(RECEMB_MPIEXEC) +
          " --allow-run-as-root --oversubscribe --mca orte_abort_on_non_zero_status 0 -np 2"
          " sh -c 'if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then export RECEMB_DENSE_ISA=baseline; fi;"
          " \"$0\" \"$@\"; echo \"exit status $?\"' " +
          RECEMB_CLI + kSmallRun + " --steps 5 --output " + fresh_dir("isa"));
  EXPECT_EQ(outcome.status, 0) << "the job hung until timeout killed it:\n" << outcome.output;
  EXPECT_EQ(occurrences(outcome.output, "rank 1's dense layers run baseline, rank 0's "), 2)
      << outcome.output;
  EXPECT_EQ(occurrences(outcome.output, "exit status 2\n"), 2) << outcome.output;
}

TEST(TrainMpi, AnErrorOfRankZeroEndsEveryRank) {
  // Rank 0 alone writes output.dir: a file in its way fails rank 0 only, and every rank then
  // reports it instead of waiting for rank 0 in the first exchange.
  const std::string blocked = fresh_dir("blocked");
  std::ofstream(blocked) << "a file, not a directory\n";
  const Outcome outcome = recemb_on_each_rank(kSmallRun + " --steps 5 --output " + blocked);
  EXPECT_EQ(outcome.status, 0) << "the job hung until timeout killed it:\n" << outcome.output;
  EXPECT_EQ(occurrences(outcome.output, "recemb: error: "), 2) << outcome.output;
  EXPECT_EQ(occurrences(outcome.output, "rank 0: "), 2) << outcome.output;
  EXPECT_EQ(occurrences(outcome.output, blocked + "]"), 2) << outcome.output;  // the path
  EXPECT_EQ(occurrences(outcome.output, "exit status 1\n"), 2) << outcome.output;
}

}  // namespace
