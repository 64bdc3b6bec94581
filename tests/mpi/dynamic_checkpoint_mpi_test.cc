// Checkpoints of a dynamic table split by keys over MPI processes: tests/mpi/training_job.cc
// --dynamic-resume under mpirun with 2 ranks trains, saves, resumes from the checkpoint in new
// Embeddings and checks that the resumed run saves the same files as the uninterrupted one; here
// one process then restores them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <string>

#include "recemb/checkpoint.h"

#include "testing/shell_command.h"
#include "testing/temporary_directory.h"

namespace {

using ::testing::HasSubstr;

TEST(DynamicCheckpointMpi, TwoRanksResumeExactlyAsTheUninterruptedRun) {
  const recemb::test::TemporaryDirectory directory;
  // `timeout` ends the test rather than CI if the job ever hangs.
  const recemb::test::CommandOutcome outcome = recemb::test::run_shell_command(
      std::string("timeout 120 ") + RECEMB_MPIEXEC + " --allow-run-as-root --oversubscribe -np 2 " +
      RECEMB_TRAINING_JOB + " --dynamic-resume " + directory.path().string());
  ASSERT_EQ(outcome.status, 0) << outcome.output;
  EXPECT_THAT(outcome.output, HasSubstr("resumed: the same files"));
  const recemb::Embedding loaded = recemb::load_checkpoint(directory.path() / "resumed");
  EXPECT_EQ(loaded.step(), 12);
  EXPECT_GT(loaded.vocabulary_stats("items").size, 0);
  EXPECT_GT(loaded.vocabulary_stats("items").evicted, 0);
  EXPECT_GT(loaded.vocabulary_stats("items").not_admitted_lookups, 0);
}

}  // namespace
