#include "util/thread_pool.h"

#include <string>
#include <system_error>
#include <utility>

namespace recemb::internal {

ThreadPool::ThreadPool(int num_threads, const ThreadStarter& start_thread) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::thread::hardware_concurrency());
  if (num_threads <= 0) num_threads = 1;
  workers_.reserve(static_cast<size_t>(num_threads - 1));
  for (int t = 1; t < num_threads; ++t) {
    // Joinable threads must not outlive a failed construction (std::terminate), nor may the
    // members they wait on be destroyed under them: stop them before throwing.
    try {
      workers_.push_back(start_thread([this, t] { worker_loop(t); }));
    } catch (const std::system_error& error) {
      stop_workers();
      throw std::system_error(error.code(), "cannot start thread " + std::to_string(t + 1) +
                                                " of " + std::to_string(num_threads) +
                                                " (lower num_threads; 0 = one per core)");
    } catch (...) {
      stop_workers();
      throw;
    }
  }
}

ThreadPool::~ThreadPool() { stop_workers(); }

std::thread ThreadPool::start_std_thread(std::function<void()> body) {
  return std::thread(std::move(body));
}

void ThreadPool::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::run(int64_t num_tasks, TaskFunction function, void* context) {
  if (num_tasks <= 0) return;
  if (workers_.empty() || num_tasks == 1) {
    for (int64_t task = 0; task < num_tasks; ++task) function(context, task, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    function_ = function;
    context_ = context;
    num_tasks_ = num_tasks;
    next_task_.store(0, std::memory_order_relaxed);
    unfinished_tasks_.store(num_tasks, std::memory_order_relaxed);
    loop_open_ = true;
    ++generation_;
  }
  work_ready_.notify_all();
  drain(0);
  std::unique_lock<std::mutex> lock(mutex_);
  work_done_.wait(lock, [this] { return unfinished_tasks_.load() == 0; });
  // No worker may join after this point, and none may still read the loop's state when the
  // next run() overwrites it.
  loop_open_ = false;
  work_done_.wait(lock, [this] { return active_workers_ == 0; });
}

void ThreadPool::worker_loop(int thread_index) {
  uint64_t seen_generation = 0;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || generation_ != seen_generation; });
      if (stopping_) return;
      seen_generation = generation_;
      if (!loop_open_) continue;
      ++active_workers_;
    }
    drain(thread_index);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      --active_workers_;
    }
    work_done_.notify_all();
  }
}

void ThreadPool::drain(int thread_index) {
  while (true) {
    const int64_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= num_tasks_) return;
    function_(context_, task, thread_index);
    if (unfinished_tasks_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // Take the lock so the notification cannot slip between run()'s predicate check and wait.
      std::lock_guard<std::mutex> lock(mutex_);
      work_done_.notify_all();
    }
  }
}

}  // namespace recemb::internal
