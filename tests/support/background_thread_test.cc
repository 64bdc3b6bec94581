#include "support/background_thread.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <functional>
#include <gtest/gtest.h>
#include <random>
#include <set>
#include <system_error>
#include <thread>
#include <vector>

namespace recemb::support {
namespace {

// Starts threads as std::thread does, counting them; fails as pthread_create does under a pid or
// memory limit (EAGAIN) while `fail` is set.
struct CountingStarter {
  std::atomic<int> started{0};
  bool fail = false;

  ThreadStarter starter() {
    return [this](std::function<void()> body) {
      if (fail) throw std::system_error(EAGAIN, std::generic_category(), "pthread_create");
      started.fetch_add(1);
      return std::thread(std::move(body));
    };
  }
};

TEST(BackgroundThreadTest, RunsEachJobAfterTheOneBeforeAndShowsItsResultsAfterWait) {
  BackgroundThread thread;
  std::mt19937_64 random(7);
  std::vector<uint64_t> inputs(500);
  for (uint64_t& input : inputs) input = random();
  // Each job reads what the job before wrote: a job started before the one before ended would
  // read a stale value.
  uint64_t chained = 0;
  uint64_t expected = 0;
  for (const uint64_t input : inputs) {
    thread.start([&chained, input] { chained = chained * 31 + input; });
    expected = expected * 31 + input;
  }
  thread.wait();
  EXPECT_EQ(chained, expected);
}

TEST(BackgroundThreadTest, RunsEveryJobOnOneThreadOtherThanTheCaller) {
  BackgroundThread thread;
  std::set<std::thread::id> ids;
  for (int job = 0; job < 50; ++job) {
    thread.start([&ids] { ids.insert(std::this_thread::get_id()); });
    thread.wait();
  }
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_NE(*ids.begin(), std::this_thread::get_id());
}

TEST(BackgroundThreadTest, StartsItsThreadWithTheFirstJobOnly) {
  CountingStarter threads;
  {
    BackgroundThread thread(threads.starter());
    thread.wait();  // nothing to wait for
    EXPECT_EQ(threads.started.load(), 0);
    int runs = 0;
    for (int job = 0; job < 10; ++job) thread.start([&runs] { ++runs; });
    thread.wait();
    EXPECT_EQ(runs, 10);
    EXPECT_EQ(threads.started.load(), 1);
  }
  BackgroundThread unused(threads.starter());
  EXPECT_EQ(threads.started.load(), 1);
}

TEST(BackgroundThreadTest, AThreadThatCannotStartThrowsWithoutRunningTheJob) {
  CountingStarter threads{.fail = true};
  BackgroundThread thread(threads.starter());
  bool ran = false;
  try {
    thread.start([&ran] { ran = true; });
    FAIL() << "no error";
  } catch (const std::system_error& error) {
    EXPECT_EQ(error.code().value(), EAGAIN);
  }
  thread.wait();
  EXPECT_FALSE(ran);
  // Once the system lets it, the next start starts the thread and runs its job.
  threads.fail = false;
  thread.start([&ran] { ran = true; });
  thread.wait();
  EXPECT_TRUE(ran);
}

TEST(BackgroundThreadTest, DestructionWaitsForTheJobInProgress) {
  std::atomic<bool> finished{false};
  {
    BackgroundThread thread;
    thread.start([&finished] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      finished = true;
    });
  }
  EXPECT_TRUE(finished.load());
}

}  // namespace
}  // namespace recemb::support
