// How the engine splits its loops between the calling thread and the pool (util/thread_pool.h):
// every serial-or-parallel cutoff and every task size, in one place.
//
// Cutoffs. Waking a worker costs tens of microseconds on a VM (docs/performance.md): a loop with
// less work than its cutoff runs on the calling thread (ThreadPool::parallel_for with a
// SerialCutoff). Task sizes: big enough that a task amortises its scheduling, small enough to
// balance two cores.
#ifndef RECEMB_UTIL_WORK_SPLIT_H_
#define RECEMB_UTIL_WORK_SPLIT_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace recemb::internal {

// Lookup: pooling, in ids.
inline constexpr int64_t kMinIdsForThreads = 16384;
inline constexpr int64_t kIdsPerPoolTask = 2048;
// Lookup: the check and copy of one feature's ids (batch/csr_feature.h), in ids.
inline constexpr int64_t kIdsPerNormalizeTask = 8192;
// apply_gradients: the finiteness check of the gradients, in values.
inline constexpr int64_t kMinGradientValuesForThreads = int64_t{1} << 18;  // 1 MiB
inline constexpr int64_t kGradientValuesPerCheckTask = int64_t{1} << 16;   // 256 KiB
// apply_gradients: the listing of a table's contributions, in contributions; a run of a table's
// contributions (one feature's, from one rank) is listed on several threads from two tasks' worth.
inline constexpr int64_t kContributionsPerListingTask = 8192;
// apply_gradients: the grouping by row (kernels/row_grouping.h), in contributions per thread.
inline constexpr size_t kMinContributionsPerGroupingChunk = 16384;
// apply_gradients: the permutation of the grouped contributions, in contributions (a table that
// updates every row) or in rows with several contributions.
inline constexpr int64_t kContributionsPerPermuteTask = 16384;
inline constexpr int64_t kSharedRowsPerPermuteTask = 4096;
// apply_gradients: the update, in touched rows.
inline constexpr int64_t kMinRowsForThreads = 1024;
inline constexpr int64_t kRowsPerUpdateTask = 256;
inline constexpr int64_t kRowsPerDenseUpdateTask = 4096;
// Construction: the initial values, in rows.
inline constexpr int64_t kRowsPerInitializeTask = 4096;

// How many consecutive bags one parallel task takes so that it holds about ids_per_task of the
// num_ids ids of num_bags bags (bags of average size): at least 1; all of them when there are no
// ids. ids_per_task >= 1.
inline int64_t bags_per_task(int64_t num_bags, int64_t num_ids, int64_t ids_per_task) {
  if (num_ids == 0) return std::max<int64_t>(num_bags, 1);
  return std::max<int64_t>(1, ids_per_task * num_bags / num_ids);
}

}  // namespace recemb::internal

#endif  // RECEMB_UTIL_WORK_SPLIT_H_
