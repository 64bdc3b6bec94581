#include "support/thread_pool.h"

#include <chrono>
#include <string>
#include <system_error>
#include <utility>

namespace recemb::support {
namespace {

// How long a thread spins on a change before it sleeps on a condition variable: waking a
// sleeping thread costs tens of microseconds on a VM, about a tenth of a batch's pooling
// (docs/performance.md, "Decisions").
constexpr auto kSpinTime = std::chrono::microseconds(100);

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spins until done() or kSpinTime has passed; returns done().
template <class Done>
bool spin_until(const Done& done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpinTime;
  for (uint32_t spin = 1;; ++spin) {
    if (done()) return true;
    cpu_relax();
    if (spin % 64 == 0 && std::chrono::steady_clock::now() >= deadline) return done();
  }
}

}  // namespace

}  // namespace recemb::support

namespace recemb {

// The key function of the public interface ThreadPool runs loops on.
ParallelExecutor::~ParallelExecutor() = default;

}  // namespace recemb

namespace recemb::support {

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

ThreadPool::ThreadPool(std::shared_ptr<ParallelExecutor> executor)
    : executor_(std::move(executor)), executor_threads_(executor_->max_threads()) {}

ThreadPool::~ThreadPool() { stop_workers(); }

std::thread ThreadPool::start_std_thread(std::function<void()> body) {
  return std::thread(std::move(body));
}

void ThreadPool::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    generation_.fetch_add(1, std::memory_order_release);
  }
  work_ready_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::run(int64_t num_tasks, TaskFunction function, void* context) {
  if (num_tasks <= 0) return;
  if (executor_ && num_tasks > 1 && executor_threads_ > 1) {
    run_on_executor(num_tasks, function, context);
    return;
  }
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
    generation_.fetch_add(1, std::memory_order_release);
  }
  work_ready_.notify_all();
  drain(0);
  const auto finished = [this] { return unfinished_tasks_.load(std::memory_order_acquire) == 0; };
  spin_until(finished);
  {
    std::unique_lock<std::mutex> lock(mutex_);
    work_done_.wait(lock, finished);
    // No worker may join after this point, and none may still read the loop's state when the
    // next run() overwrites it.
    loop_open_ = false;
  }
  const auto left = [this] { return active_workers_.load(std::memory_order_acquire) == 0; };
  if (spin_until(left)) return;
  std::unique_lock<std::mutex> lock(mutex_);
  work_done_.wait(lock, left);
}

void ThreadPool::run_on_executor(int64_t num_tasks, TaskFunction function, void* context) {
  // The executor returns once every thread's body has returned, so nothing waits on the
  // completion count that drain() keeps (its last notification wakes nobody).
  function_ = function;
  context_ = context;
  num_tasks_ = num_tasks;
  next_task_.store(0, std::memory_order_relaxed);
  unfinished_tasks_.store(num_tasks, std::memory_order_relaxed);
  executor_->run_on_threads(
      [](void* pool_pointer, int thread_index) {
        auto& pool = *static_cast<ThreadPool*>(pool_pointer);
        // An index beyond what the per-thread state was sized for runs nothing (a team that grew
        // since max_threads() was read: recemb/executor.h).
        if (thread_index >= 0 && thread_index < pool.executor_threads_) pool.drain(thread_index);
      },
      this);
}

void ThreadPool::worker_loop(int thread_index) {
  uint64_t seen_generation = 0;
  while (true) {
    const auto changed = [&] {
      return generation_.load(std::memory_order_acquire) != seen_generation;
    };
    spin_until(changed);
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_ready_.wait(lock, changed);
      if (stopping_) return;
      seen_generation = generation_.load(std::memory_order_relaxed);
      if (!loop_open_) continue;
      active_workers_.fetch_add(1, std::memory_order_relaxed);
    }
    drain(thread_index);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      active_workers_.fetch_sub(1, std::memory_order_release);
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

}  // namespace recemb::support
