// A rank that dies or fails must end the whole MPI job quickly, with a message that says which
// rank and why, and never leave the other ranks waiting in a collective. Runs
// tests/mpi/training_job.cc under mpirun with 2 ranks and one failure each.
#include <cerrno>
#include <fstream>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <string>

#include "testing/shell_command.h"
#include "testing/temporary_directory.h"

namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using Outcome = recemb::test::CommandOutcome;

Outcome run_job(const std::string& arguments) {
  // `timeout` ends the test rather than CI if the job ever hangs.
  return recemb::test::run_shell_command(std::string("timeout 120 ") + RECEMB_MPIEXEC +
                                         " --allow-run-as-root --oversubscribe -np 2 " +
                                         RECEMB_TRAINING_JOB + " " + arguments);
}

TEST(RankFailure, AHealthyJobFinishes) {
  const Outcome outcome = run_job("--steps 5");
  EXPECT_EQ(outcome.status, 0) << outcome.output;
  EXPECT_THAT(outcome.output, HasSubstr("step 4"));
}

TEST(RankFailure, AKilledRankEndsTheJobWithinSeconds) {
  const Outcome outcome = run_job("--steps 100000 --fail-rank 1 --fail-at 3 --failure kill");
  EXPECT_NE(outcome.status, 0) << outcome.output;
  EXPECT_NE(outcome.status, 124) << "the job hung until timeout killed it:\n" << outcome.output;
  EXPECT_LT(outcome.seconds, 30.0) << outcome.output;
  EXPECT_THAT(outcome.output, HasSubstr("rank 1: killing itself at step 3"));
  // OpenMPI's launcher names the rank that died and how.
  EXPECT_THAT(outcome.output, HasSubstr("rank 1"));
  EXPECT_THAT(outcome.output, HasSubstr("signal 9"));
}

TEST(RankFailure, ARankThatThrowsEndsTheJobWithinSeconds) {
  const Outcome outcome = run_job("--steps 100000 --fail-rank 0 --fail-at 2 --failure throw");
  EXPECT_NE(outcome.status, 0) << outcome.output;
  EXPECT_NE(outcome.status, 124) << "the job hung until timeout killed it:\n" << outcome.output;
  EXPECT_LT(outcome.seconds, 30.0) << outcome.output;
  EXPECT_THAT(outcome.output, HasSubstr("rank 0 fails at step 2"));
}

// A rank that exits while the others wait for it in an exchange (here: skipping the remaining
// steps) ends the job, whatever its exit status: the waiting rank names it, and aborts the job.
TEST(RankFailure, ARankThatExitsMidTrainingEndsTheJobWithinSeconds) {
  for (const int status : {0, 7}) {
    const Outcome outcome = run_job("--steps 100000 --fail-rank 1 --fail-at 3 --failure exit " +
                                    std::string("--exit-status ") + std::to_string(status));
    EXPECT_NE(outcome.status, 0) << outcome.output;
    EXPECT_NE(outcome.status, 124) << "the job hung until timeout killed it:\n" << outcome.output;
    EXPECT_LT(outcome.seconds, 30.0) << outcome.output;
    EXPECT_THAT(outcome.output, HasSubstr("rank 1: exiting with status " + std::to_string(status)));
    EXPECT_THAT(outcome.output,
                HasSubstr("rank 0: rank 1 left the MPI job (exit status " + std::to_string(status) +
                          ") without taking part in the exchange"));
    EXPECT_THAT(outcome.output, HasSubstr("recemb: rank 0: ending the MPI job (MPI_Abort)"));
  }
}

// A rank that exits with an error while the others compute (in no exchange) ends the job after a
// few seconds, rather than when they next exchange (or never, if they would wait for it there).
TEST(RankFailure, ARankThatExitsWithAnErrorEndsTheJobWhileOthersCompute) {
  const Outcome outcome = run_job(
      "--steps 3 --fail-rank 1 --fail-at 3 --failure exit --exit-status 7 --busy-rank 0 "
      "--busy-seconds 100");
  EXPECT_EQ(outcome.status, 7) << outcome.output;
  EXPECT_LT(outcome.seconds, 30.0) << outcome.output;
  EXPECT_THAT(outcome.output,
              HasSubstr("recemb: rank 1: exits with status 7 while rank(s) 0 still run: ending "
                        "the MPI job (MPI_Abort)"));
  EXPECT_THAT(outcome.output, Not(HasSubstr("rank 0: done")));
}

// Ranks that finish at different times, all with status 0, are a normal job: the ones done first
// wait for the others however long they compute (here longer than the 3 s a failing rank waits).
TEST(RankFailure, RanksThatFinishAtDifferentTimesAreNotEnded) {
  const Outcome outcome = run_job("--steps 3 --busy-rank 1 --busy-seconds 6");
  EXPECT_EQ(outcome.status, 0) << outcome.output;
  EXPECT_GE(outcome.seconds, 6.0) << outcome.output;
  EXPECT_THAT(outcome.output, HasSubstr("rank 1: done after computing for 6 s"));
}

TEST(RankFailure, ABadIdOnOneRankIsReportedByEveryRank) {
  const Outcome outcome = run_job("--steps 100000 --fail-rank 1 --fail-at 2 --failure bad-id");
  EXPECT_EQ(outcome.status, 3) << outcome.output;
  // Both ranks report rank 1's error, naming the feature, example and id.
  EXPECT_THAT(outcome.output, HasSubstr("rank 0: rank 1: feature 'clicked' (table 'items'): "
                                        "example 5: id 10001 is out of range"));
  EXPECT_THAT(outcome.output, HasSubstr("rank 1: rank 1: feature 'clicked' (table 'items'): "
                                        "example 5: id 10001 is out of range"));
}

// A checkpoint error has the same type (and errno) on every rank, whichever rank met it.
TEST(RankFailure, CheckpointErrorsHaveTheSameTypeOnEveryRank) {
  const recemb::test::TemporaryDirectory directory;
  std::ofstream(directory / "a_file") << "not a directory";
  Outcome outcome = run_job("--steps 3 --fail-at 1 --failure save-into-file --directory " +
                            directory.path().string());
  EXPECT_EQ(outcome.status, 4) << outcome.output;
  const std::string not_a_directory = "system_error errno " + std::to_string(ENOTDIR) +
                                      ": rank 0: mkdir '" + (directory / "a_file").string();
  EXPECT_THAT(outcome.output, HasSubstr("rank 0: " + not_a_directory));
  EXPECT_THAT(outcome.output, HasSubstr("rank 1: " + not_a_directory));

  outcome = run_job("--steps 3 --fail-rank 1 --fail-at 1 --failure damaged-restore --directory " +
                    directory.path().string());
  EXPECT_EQ(outcome.status, 4) << outcome.output;
  for (const std::string rank : {"rank 0: ", "rank 1: "}) {
    EXPECT_THAT(outcome.output, HasSubstr(rank + "DataLoss errno 0: rank "));
  }
  EXPECT_THAT(outcome.output, HasSubstr("t0.accumulators.f32"));
  EXPECT_THAT(outcome.output, HasSubstr("is damaged"));
}

}  // namespace
