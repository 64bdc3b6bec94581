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

std::thread start_std_thread(std::function<void()> body) { return std::thread(std::move(body)); }

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
  const bool on_executor = executor_ && num_tasks > 1 && executor_threads_ > 1;
  const bool on_workers = !workers_.empty() && num_tasks > 1;
  Loop* loop = on_executor || on_workers
                   ? start_loop(num_tasks, function, context, /*open=*/on_workers)
                   : nullptr;
  if (loop == nullptr) {
    for (int64_t task = 0; task < num_tasks; ++task) function(context, task, 0);
    return;
  }
  if (on_executor) {
    run_on_executor(*loop);
  } else {
    work_ready_.notify_all();
    drain(*loop, 0);
    wait_until([loop] { return loop->unfinished_tasks.load(std::memory_order_acquire) == 0; });
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // No worker may join after this point, and none may still read the loop's state when the
      // next run() takes it.
      loop->open = false;
    }
    wait_until([loop] { return loop->active_workers.load(std::memory_order_acquire) == 0; });
  }
  std::lock_guard<std::mutex> lock(mutex_);
  loop->in_use = false;
}

ThreadPool::Loop* ThreadPool::start_loop(int64_t num_tasks, TaskFunction function, void* context,
                                         bool open) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (Loop& loop : loops_) {
    if (loop.in_use) continue;
    loop.function = function;
    loop.context = context;
    loop.num_tasks = num_tasks;
    loop.next_task.store(0, std::memory_order_relaxed);
    loop.unfinished_tasks.store(num_tasks, std::memory_order_relaxed);
    loop.in_use = true;
    loop.open = open;
    if (open) generation_.fetch_add(1, std::memory_order_release);
    return &loop;
  }
  return nullptr;
}

template <class Done>
void ThreadPool::wait_until(const Done& done) {
  if (spin_until(done)) return;
  std::unique_lock<std::mutex> lock(mutex_);
  work_done_.wait(lock, done);
}

void ThreadPool::run_on_executor(Loop& loop) {
  // The executor returns once every thread's body has returned, so nothing waits on the
  // completion count that drain() keeps (its last notification wakes nobody).
  struct PoolLoop {
    ThreadPool* pool;
    Loop* loop;
  } pool_loop{this, &loop};
  executor_->run_on_threads(
      [](void* context, int thread_index) {
        const PoolLoop& on = *static_cast<const PoolLoop*>(context);
        // An index beyond what the per-thread state was sized for runs nothing (a team that grew
        // since max_threads() was read: recemb/executor.h).
        if (thread_index >= 0 && thread_index < on.pool->executor_threads_) {
          on.pool->drain(*on.loop, thread_index);
        }
      },
      &pool_loop);
}

void ThreadPool::run_on_threads(void (*body)(void* context, int thread_index), void* context) {
  struct Body {
    void (*function)(void* context, int thread_index);
    void* context;
  } on_each{body, context};
  run(
      num_threads(),
      [](void* pointer, int64_t /*task_index*/, int thread_index) {
        const Body& each = *static_cast<const Body*>(pointer);
        each.function(each.context, thread_index);
      },
      &on_each);
}

void ThreadPool::worker_loop(int thread_index) {
  uint64_t seen_generation = 0;
  // After a loop, the worker looks for another open one before it waits for a change: loops that
  // opened while it drained did not change the generation it will wait on.
  bool look_again = false;
  while (true) {
    const auto changed = [&] {
      return generation_.load(std::memory_order_acquire) != seen_generation;
    };
    if (!look_again) spin_until(changed);
    Loop* joined = nullptr;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (!look_again) work_ready_.wait(lock, changed);
      if (stopping_) return;
      seen_generation = generation_.load(std::memory_order_relaxed);
      for (Loop& loop : loops_) {
        if (loop.open && loop.next_task.load(std::memory_order_relaxed) < loop.num_tasks) {
          joined = &loop;
          break;
        }
      }
      look_again = joined != nullptr;
      if (joined == nullptr) continue;
      joined->active_workers.fetch_add(1, std::memory_order_relaxed);
    }
    drain(*joined, thread_index);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      joined->active_workers.fetch_sub(1, std::memory_order_release);
    }
    work_done_.notify_all();
  }
}

void ThreadPool::drain(Loop& loop, int thread_index) {
  while (true) {
    const int64_t task = loop.next_task.fetch_add(1, std::memory_order_relaxed);
    if (task >= loop.num_tasks) return;
    loop.function(loop.context, task, thread_index);
    if (loop.unfinished_tasks.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // Take the lock so the notification cannot slip between a waiter's predicate check and wait.
      std::lock_guard<std::mutex> lock(mutex_);
      work_done_.notify_all();
    }
  }
}

}  // namespace recemb::support
