// WorkerPool: every task runs exactly once, on a worker number below num_threads(), for any
// number of tasks and threads, run after run; errors on a negative thread count.
#include "train/worker_pool.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <gtest/gtest.h>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "recemb/error.h"

namespace recemb::train {
namespace {

TEST(WorkerPoolTest, RunsEveryTaskOnceOnAValidWorker) {
  for (const int num_threads : {1, 2, 3, 5}) {
    SCOPED_TRACE(std::to_string(num_threads) + " threads");
    WorkerPool pool(num_threads);
    EXPECT_EQ(pool.num_threads(), num_threads);
    for (const int64_t num_tasks : {0, 1, 2, 7, 1000}) {
      for (int run = 0; run < 3; ++run) {
        std::vector<std::atomic<int>> calls(static_cast<size_t>(num_tasks));
        std::atomic<int> bad_workers{0};
        pool.run(num_tasks, [&](int64_t task, int worker) {
          calls[static_cast<size_t>(task)].fetch_add(1);
          if (worker < 0 || worker >= num_threads) bad_workers.fetch_add(1);
        });
        for (int64_t t = 0; t < num_tasks; ++t) {
          EXPECT_EQ(calls[static_cast<size_t>(t)].load(), 1) << "task " << t;
        }
        EXPECT_EQ(bad_workers.load(), 0);
      }
    }
  }
}

TEST(WorkerPoolTest, SpreadsTasksOverItsThreads) {
  WorkerPool pool(2);
  std::atomic<int> arrived{0};
  std::vector<std::thread::id> ids(2);
  // Each of the two tasks waits for the other: they can only finish on two threads at once.
  pool.run(2, [&](int64_t task, int) {
    ids[static_cast<size_t>(task)] = std::this_thread::get_id();
    arrived.fetch_add(1);
    while (arrived.load() < 2) std::this_thread::yield();
  });
  EXPECT_NE(ids[0], ids[1]);
}

TEST(WorkerPoolTest, ZeroMeansOnePerCore) {
  const WorkerPool pool(0);
  EXPECT_EQ(pool.num_threads(),
            static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

TEST(WorkerPoolTest, NegativeThreadCountThrows) {
  try {
    const WorkerPool pool(-1);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("num_threads = -1"), std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace recemb::train
