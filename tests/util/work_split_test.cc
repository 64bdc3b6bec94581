#include "util/work_split.h"

#include <gtest/gtest.h>

namespace recemb::internal {
namespace {

TEST(WorkSplitTest, BagsPerTaskHoldAboutTheAskedIds) {
  EXPECT_EQ(bags_per_task(4096, 81920, 2048), 102);  // 20 ids a bag: 2,040 ids a task
  EXPECT_EQ(bags_per_task(4096, 4096, 2048), 2048);
  EXPECT_EQ(bags_per_task(10, 100000, 2048), 1);  // a bag larger than a task: one bag each
  EXPECT_EQ(bags_per_task(7, 0, 2048), 7);        // no ids: one task
  EXPECT_EQ(bags_per_task(0, 0, 2048), 1);
}

TEST(WorkSplitTest, EveryTaskSizeAndCutoffIsPositive) {
  for (const int64_t value :
       {kMinIdsForThreads, kIdsPerPoolTask, kMinGradientValuesForThreads,
        kGradientValuesPerCheckTask, kContributionsPerListingTask, kContributionsPerPermuteTask,
        kSharedRowsPerPermuteTask, kMinRowsForThreads, kRowsPerUpdateTask, kRowsPerDenseUpdateTask,
        kRowsPerInitializeTask}) {
    EXPECT_GT(value, 0);
  }
  EXPECT_GT(kMinContributionsPerGroupingChunk, 0u);
}

}  // namespace
}  // namespace recemb::internal
