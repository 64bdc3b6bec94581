// A ParallelExecutor (recemb/executor.h) for tests: run_on_threads starts one std::thread per
// index of `indices` (which a test may make negative or beyond max_threads) and joins them. It
// counts its calls and records the threads that ran.
#ifndef RECEMB_TESTS_TESTING_THREAD_PER_INDEX_EXECUTOR_H_
#define RECEMB_TESTS_TESTING_THREAD_PER_INDEX_EXECUTOR_H_

#include <atomic>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "recemb/executor.h"

namespace recemb::test {

class ThreadPerIndexExecutor : public ParallelExecutor {
 public:
  ThreadPerIndexExecutor(int max_threads, std::vector<int> indices)
      : max_threads_(max_threads), indices_(std::move(indices)) {}

  int max_threads() const override { return max_threads_; }

  void run_on_threads(void (*body)(void* context, int thread_index), void* context) override {
    calls.fetch_add(1);
    std::vector<std::thread> threads;
    threads.reserve(indices_.size());
    for (const int index : indices_) {
      threads.emplace_back([this, body, context, index] {
        {
          std::lock_guard<std::mutex> lock(mutex_);
          thread_ids_.push_back(std::this_thread::get_id());
        }
        body(context, index);
      });
    }
    for (std::thread& thread : threads) thread.join();
  }

  std::vector<std::thread::id> thread_ids() {
    std::lock_guard<std::mutex> lock(mutex_);
    return thread_ids_;
  }

  std::atomic<int> calls{0};

 private:
  int max_threads_;
  std::vector<int> indices_;
  std::mutex mutex_;
  std::vector<std::thread::id> thread_ids_;
};

}  // namespace recemb::test

#endif  // RECEMB_TESTS_TESTING_THREAD_PER_INDEX_EXECUTOR_H_
