#include "support/thread_pool.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <functional>
#include <gtest/gtest.h>
#include <memory>
#include <numeric>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "testing/thread_per_index_executor.h"

namespace recemb::support {
namespace {

TEST(ThreadPoolTest, RunsEveryTaskExactlyOnce) {
  for (const int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (const int64_t tasks : {0, 1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> runs(static_cast<size_t>(tasks));
      pool.parallel_for(tasks, [&](int64_t task, int thread) {
        EXPECT_GE(thread, 0);
        EXPECT_LT(thread, threads);
        runs[static_cast<size_t>(task)].fetch_add(1);
      });
      for (int64_t t = 0; t < tasks; ++t) EXPECT_EQ(runs[static_cast<size_t>(t)].load(), 1) << t;
    }
  }
}

TEST(ThreadPoolTest, ResultsAreVisibleAfterReturnAcrossManyLoops) {
  ThreadPool pool(3);
  std::vector<int64_t> values(257);
  for (int round = 1; round <= 200; ++round) {
    pool.parallel_for(static_cast<int64_t>(values.size()),
                      [&](int64_t task, int) { values[static_cast<size_t>(task)] = task * round; });
    const int64_t sum = std::accumulate(values.begin(), values.end(), int64_t{0});
    ASSERT_EQ(sum, round * 256 * 257 / 2) << "round " << round;
  }
}

TEST(ThreadPoolTest, PerThreadIndicesNeverRunConcurrently) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> in_use(4);
  std::atomic<bool> overlap{false};
  pool.parallel_for(2000, [&](int64_t, int thread) {
    if (in_use[static_cast<size_t>(thread)].fetch_add(1) != 0) overlap = true;
    in_use[static_cast<size_t>(thread)].fetch_sub(1);
  });
  EXPECT_FALSE(overlap.load());
}

// Waits until `count` reaches `target` or 20 s have passed (a failure, not a hang); returns
// whether it was reached.
bool wait_for_count(const std::atomic<int>& count, int target) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (count.load() < target) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST(ThreadPoolTest, LoopsCalledFromSeveralThreadsAtOnceEachRunEveryTaskOnce) {
  ThreadPool pool(3);
  constexpr int kCallers = ThreadPool::kMaxConcurrentLoops + 2;  // some run on their caller alone
  std::atomic<int> failures{0};
  std::vector<std::thread> callers;
  for (int caller = 0; caller < kCallers; ++caller) {
    callers.emplace_back([&, caller] {
      std::vector<int64_t> values(97 + static_cast<size_t>(caller));
      for (int round = 1; round <= 100; ++round) {
        std::vector<std::atomic<int>> in_use(3);
        pool.parallel_for(static_cast<int64_t>(values.size()), [&](int64_t task, int thread) {
          // Thread indices are distinct among the threads of one loop.
          if (in_use[static_cast<size_t>(thread)].fetch_add(1) != 0) failures.fetch_add(1);
          values[static_cast<size_t>(task)] = task * round;
          in_use[static_cast<size_t>(thread)].fetch_sub(1);
        });
        const auto n = static_cast<int64_t>(values.size());
        if (std::accumulate(values.begin(), values.end(), int64_t{0}) != round * n * (n - 1) / 2) {
          failures.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(ThreadPoolTest, AWorkerHelpsALoopThatOpenedWhileAnotherLoopWaits) {
  // Loop A's caller blocks in a task it runs itself until loop B has finished (its loops are
  // repeated until its caller gets a task: the worker may run them all); B's two tasks each wait
  // until both have started, so B finishes only if the pool's one worker runs a task of B.
  ThreadPool pool(2);
  std::atomic<bool> b_done{false};
  std::atomic<int> a_started{0};
  std::atomic<int> b_started{0};
  std::atomic<int> b_threads_seen{0};
  std::thread a_caller([&] {
    const std::thread::id a_thread = std::this_thread::get_id();
    while (a_started.load() == 0) {
      pool.parallel_for(2, [&](int64_t, int) {
        if (std::this_thread::get_id() != a_thread) return;
        a_started = 1;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (!b_done.load() && std::chrono::steady_clock::now() < deadline) {
          std::this_thread::yield();
        }
      });
    }
  });
  ASSERT_TRUE(wait_for_count(a_started, 1));
  bool both_started = true;
  pool.parallel_for(2, [&](int64_t, int thread) {
    b_threads_seen.fetch_or(1 << thread);
    b_started.fetch_add(1);
    if (!wait_for_count(b_started, 2)) both_started = false;
  });
  b_done = true;
  a_caller.join();
  EXPECT_TRUE(both_started);
  EXPECT_EQ(b_threads_seen.load(), 0b11);  // the caller (0) and the worker (1)
}

TEST(ThreadPoolTest, ALoopInsideATaskRunsEveryTask) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> runs(16 * 16);
  pool.parallel_for(16, [&](int64_t outer, int) {
    pool.parallel_for(16, [&](int64_t inner, int thread) {
      EXPECT_GE(thread, 0);
      EXPECT_LT(thread, 3);
      runs[static_cast<size_t>(outer * 16 + inner)].fetch_add(1);
    });
  });
  for (const std::atomic<int>& count : runs) EXPECT_EQ(count.load(), 1);
}

TEST(ThreadPoolTest, AsAnExecutorItCallsTheBodyOnDistinctIndicesOfItsThreads) {
  for (const int threads : {1, 3}) {
    ThreadPool pool(threads);
    ParallelExecutor& executor = pool;
    EXPECT_EQ(executor.max_threads(), threads);
    struct Seen {
      std::vector<std::atomic<int>> in_use;
      std::atomic<int> calls{0};
      std::atomic<int> failures{0};
    } seen{std::vector<std::atomic<int>>(static_cast<size_t>(threads))};
    executor.run_on_threads(
        [](void* context, int thread) {
          auto& observed = *static_cast<Seen*>(context);
          if (thread < 0 || thread >= static_cast<int>(observed.in_use.size()) ||
              observed.in_use[static_cast<size_t>(thread)].fetch_add(1) != 0) {
            observed.failures.fetch_add(1);
            return;
          }
          observed.calls.fetch_add(1);
          observed.in_use[static_cast<size_t>(thread)].fetch_sub(1);
        },
        &seen);
    EXPECT_EQ(seen.failures.load(), 0);
    EXPECT_EQ(seen.calls.load(), threads);  // one task per thread (a thread may run two)
  }
}

TEST(ThreadPoolTest, RangesCoverEveryItemOnce) {
  ThreadPool pool(2);
  for (const int64_t count : {0, 1, 9, 10, 11, 1000}) {
    std::vector<std::atomic<int>> covered(static_cast<size_t>(count));
    pool.parallel_for_ranges(count, 10, [&](int64_t first, int64_t last, int) {
      EXPECT_LE(last - first, 10);
      EXPECT_LT(first, last);
      for (int64_t i = first; i < last; ++i) covered[static_cast<size_t>(i)].fetch_add(1);
    });
    for (int64_t i = 0; i < count; ++i) EXPECT_EQ(covered[static_cast<size_t>(i)].load(), 1) << i;
  }
}

TEST(ThreadPoolTest, BelowTheCutoffEveryTaskRunsOnTheCallingThreadInOrder) {
  ThreadPool pool(3);
  for (const int64_t work : {int64_t{0}, int64_t{99}, int64_t{100}, int64_t{5000}}) {
    SCOPED_TRACE(work);
    std::vector<std::atomic<int>> runs(64);
    std::atomic<bool> serial{true};
    std::atomic<int64_t> previous{-1};
    pool.parallel_for(64,
                      [&](int64_t task, int thread) {
                        if (thread != 0 || previous.exchange(task) != task - 1) serial = false;
                        runs[static_cast<size_t>(task)].fetch_add(1);
                      },
                      {.work = work, .min_work_for_threads = 100});
    for (const std::atomic<int>& count : runs) EXPECT_EQ(count.load(), 1);
    if (work < 100) {
      EXPECT_TRUE(serial.load());
    }
  }
}

TEST(ThreadPoolTest, ZeroMeansOnePerCore) {
  ThreadPool pool(0);
  EXPECT_GE(pool.num_threads(), 1);
}

// Starts threads as std::thread does until `limit` are running, then fails as pthread_create does
// under a pid or memory limit (EAGAIN). Counts the threads that started and those that returned.
struct LimitedThreadStarter {
  int limit = 0;
  std::atomic<int> started{0};
  std::atomic<int> finished{0};

  ThreadStarter starter() {
    return [this](std::function<void()> body) {
      if (started.load() == limit) {
        throw std::system_error(EAGAIN, std::generic_category(), "pthread_create");
      }
      started.fetch_add(1);
      return std::thread([this, body = std::move(body)] {
        body();
        finished.fetch_add(1);
      });
    };
  }
};

TEST(ThreadPoolTest, AFailedThreadStartJoinsTheStartedWorkersAndSaysWhichThreadFailed) {
  for (const int limit : {0, 1, 5}) {
    SCOPED_TRACE(limit);
    LimitedThreadStarter threads{.limit = limit};
    try {
      ThreadPool pool(8, threads.starter());
      FAIL() << "no error";
    } catch (const std::system_error& error) {
      EXPECT_EQ(error.code().value(), EAGAIN);
      const std::string message = error.what();
      EXPECT_NE(message.find("cannot start thread " + std::to_string(limit + 2) + " of 8"),
                std::string::npos)
          << message;
      EXPECT_NE(message.find("lower num_threads"), std::string::npos) << message;
    }
    // Every worker that started has returned (joined) before the error reached the caller.
    EXPECT_EQ(threads.started.load(), limit);
    EXPECT_EQ(threads.finished.load(), limit);
  }
}

TEST(ThreadPoolTest, WorkersStartedByAStarterRunEveryTask) {
  LimitedThreadStarter threads{.limit = 3};
  {
    ThreadPool pool(4, threads.starter());
    EXPECT_EQ(pool.num_threads(), 4);
    std::vector<std::atomic<int>> runs(100);
    pool.parallel_for(100,
                      [&](int64_t task, int) { runs[static_cast<size_t>(task)].fetch_add(1); });
    for (const std::atomic<int>& count : runs) EXPECT_EQ(count.load(), 1);
  }
  EXPECT_EQ(threads.finished.load(), 3);
}

using test::ThreadPerIndexExecutor;

TEST(ThreadPoolExecutorTest, RunsEveryTaskOnceOnTheExecutorsThreads) {
  auto executor = std::make_shared<ThreadPerIndexExecutor>(3, std::vector<int>{2, 0, 1});
  ThreadPool pool(executor);
  EXPECT_EQ(pool.num_threads(), 3);
  for (const int64_t tasks : {2, 7, 1000}) {
    std::vector<std::atomic<int>> runs(static_cast<size_t>(tasks));
    std::vector<std::atomic<int>> per_thread(3);
    pool.parallel_for(tasks, [&](int64_t task, int thread) {
      ASSERT_GE(thread, 0);
      ASSERT_LT(thread, 3);
      runs[static_cast<size_t>(task)].fetch_add(1);
      per_thread[static_cast<size_t>(thread)].fetch_add(1);
    });
    for (int64_t t = 0; t < tasks; ++t) EXPECT_EQ(runs[static_cast<size_t>(t)].load(), 1) << t;
    EXPECT_EQ(per_thread[0] + per_thread[1] + per_thread[2], tasks);
  }
  EXPECT_EQ(executor->calls, 3);
  for (const std::thread::id id : executor->thread_ids()) EXPECT_NE(id, std::this_thread::get_id());
}

TEST(ThreadPoolExecutorTest, OneTaskRunsOnTheCallingThreadWithoutTheExecutor) {
  auto executor = std::make_shared<ThreadPerIndexExecutor>(4, std::vector<int>{0, 1, 2, 3});
  ThreadPool pool(executor);
  std::thread::id ran_on;
  pool.parallel_for(1, [&](int64_t, int thread) {
    EXPECT_EQ(thread, 0);
    ran_on = std::this_thread::get_id();
  });
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_EQ(executor->calls, 0);
}

TEST(ThreadPoolExecutorTest, IndicesBeyondMaxThreadsRunNothingAndFewerThreadsRunEverything) {
  // Index 5 is beyond max_threads (3) and -1 below 0: they claim no task. Index 1 alone of the
  // valid ones runs: it claims every task.
  auto executor = std::make_shared<ThreadPerIndexExecutor>(3, std::vector<int>{5, -1, 1});
  ThreadPool pool(executor);
  std::vector<std::atomic<int>> runs(500);
  std::atomic<int> on_other_threads{0};
  pool.parallel_for(500, [&](int64_t task, int thread) {
    if (thread != 1) on_other_threads.fetch_add(1);
    runs[static_cast<size_t>(task)].fetch_add(1);
  });
  for (const std::atomic<int>& count : runs) EXPECT_EQ(count.load(), 1);
  EXPECT_EQ(on_other_threads.load(), 0);
}

}  // namespace
}  // namespace recemb::support
