// A fixed set of worker threads that run the tasks of parallel loops, or the threads of a caller's
// ParallelExecutor (recemb/executor.h), on which the same loops run. Loops called from different
// threads run at once, the workers helping each (so the trainer's dense layers and its Embedding
// share one set of threads: docs/architecture.md, "The support layer"). A ThreadPool is itself a
// ParallelExecutor: an Embedding given one as EmbeddingOptions::executor runs on its threads.
//
// Why not OpenMP: a pool owned by each Embedding (1) runs correctly under ThreadSanitizer (GCC's
// libgomp is not instrumented, so every OpenMP barrier is reported as a race), (2) does not share
// or resize the process-wide OpenMP pool that PyTorch and NumPy also use, and (3) gives each
// Embedding its own thread count.
#ifndef RECEMB_SUPPORT_THREAD_POOL_H_
#define RECEMB_SUPPORT_THREAD_POOL_H_

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#include "recemb/executor.h"

namespace recemb::support {

// How the support layer's threads are started (this pool's workers, support/background_thread.h):
// start_std_thread, std::thread's constructor, by default; a test passes one that fails as the
// system would (a pid or memory limit).
using ThreadStarter = std::function<std::thread(std::function<void()> body)>;
std::thread start_std_thread(std::function<void()> body);

class ThreadPool final : public ParallelExecutor {
 public:
  // num_threads counts the calling thread: num_threads - 1 workers are started. 0 = one per core.
  // When a worker cannot be started, the workers already running are stopped and joined, and a
  // std::system_error with the system's errno (EAGAIN for a pid or memory limit) says which
  // thread of how many failed.
  explicit ThreadPool(int num_threads, const ThreadStarter& start_thread = start_std_thread);
  // Starts no thread: every loop runs on `executor`'s threads, num_threads() of them at most
  // (executor->max_threads(), read once here: in [1, kMaxNumThreads], validated by the caller).
  explicit ThreadPool(std::shared_ptr<ParallelExecutor> executor);
  ~ThreadPool() override;
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const {
    return executor_ ? executor_threads_ : static_cast<int>(workers_.size()) + 1;
  }

  // The most loops that run on the workers at once; a loop called while as many others are
  // running runs on its calling thread alone.
  static constexpr int kMaxConcurrentLoops = 4;

  // Runs task(task_index, thread_index) for every task_index in [0, num_tasks) and returns when all
  // have finished. Tasks are claimed dynamically by the calling thread (thread_index 0) and the
  // workers free to help; thread_index in [0, num_threads()) is distinct among the threads running
  // one loop (for per-thread scratch buffers: scratch indexed by it belongs to the loop, since
  // loops called from other threads at once have their own thread 0). Tasks must not throw. May be
  // called from several threads at once, and from inside a task (the inner loop then has its own
  // thread indices).
  template <class Task>
  void parallel_for(int64_t num_tasks, Task&& task) {
    using Fn = std::remove_reference_t<Task>;
    run(
        num_tasks,
        [](void* context, int64_t task_index, int thread_index) {
          (*static_cast<Fn*>(context))(task_index, thread_index);
        },
        const_cast<void*>(static_cast<const void*>(&task)));
  }

  // The same loop, run on the calling thread alone (thread_index 0) when the loop's `work` is below
  // `min_work_for_threads` (util/work_split.h's cutoffs): waking the workers would cost more.
  struct SerialCutoff {
    int64_t work = 0;
    int64_t min_work_for_threads = 0;
  };
  template <class Task>
  void parallel_for(int64_t num_tasks, Task&& task, SerialCutoff cutoff) {
    if (cutoff.work < cutoff.min_work_for_threads) {
      for (int64_t task_index = 0; task_index < num_tasks; ++task_index) task(task_index, 0);
    } else {
      parallel_for(num_tasks, task);
    }
  }

  // Splits [0, count) into ranges of `chunk` items (the last may be shorter) and runs
  // fn(first, last, thread_index) for each, as parallel_for does.
  template <class Fn>
  void parallel_for_ranges(int64_t count, int64_t chunk, Fn&& fn) {
    parallel_for((count + chunk - 1) / chunk, [&](int64_t task, int thread_index) {
      const int64_t first = task * chunk;
      fn(first, std::min(count, first + chunk), thread_index);
    });
  }

  // ParallelExecutor: max_threads() is num_threads(); run_on_threads runs body as the tasks of
  // one loop of num_threads() tasks (a thread may run it twice, one call after the other).
  int max_threads() const override { return num_threads(); }
  void run_on_threads(void (*body)(void* context, int thread_index), void* context) override;

 private:
  using TaskFunction = void (*)(void* context, int64_t task_index, int thread_index);

  // One running parallel_for. Its fields are written by the run() that owns it (in_use) under
  // mutex_ while no worker is draining it, and read by the workers that joined it (active_workers)
  // while it was open.
  struct Loop {
    TaskFunction function = nullptr;
    void* context = nullptr;
    int64_t num_tasks = 0;
    std::atomic<int64_t> next_task{0};
    std::atomic<int64_t> unfinished_tasks{0};
    std::atomic<int> active_workers{0};  // workers inside drain(); written under mutex_
    // Guarded by mutex_.
    bool in_use = false;  // owned by a run()
    bool open = false;    // workers may join
  };

  void run(int64_t num_tasks, TaskFunction function, void* context);
  // A free Loop set up to run `function` (open when `open`), or nullptr when all are in use.
  Loop* start_loop(int64_t num_tasks, TaskFunction function, void* context, bool open);
  // Waits until `done()`: spins for a while, then sleeps on work_done_.
  template <class Done>
  void wait_until(const Done& done);
  // Wakes the workers with stopping_ set and joins them (destruction, or a failed construction).
  void stop_workers();
  void worker_loop(int thread_index);
  // Claims and runs tasks of `loop` until none is left.
  void drain(Loop& loop, int thread_index);
  // run() on the executor's threads.
  void run_on_executor(Loop& loop);

  std::shared_ptr<ParallelExecutor> executor_;
  int executor_threads_ = 0;

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  Loop loops_[kMaxConcurrentLoops];
  // Written under mutex_ (so that a waiter on a condition variable misses no change); atomic so
  // that spinning threads may read it without it.
  std::atomic<uint64_t> generation_{0};  // changes whenever a loop opens, and on stopping
  bool stopping_ = false;                // guarded by mutex_
};

// pool->parallel_for(num_tasks, task), or every task in order on the calling thread (thread index
// 0) when pool is null.
template <class Task>
void parallel_for(ThreadPool* pool, int64_t num_tasks, Task&& task) {
  if (pool != nullptr) {
    pool->parallel_for(num_tasks, task);
    return;
  }
  for (int64_t task_index = 0; task_index < num_tasks; ++task_index) task(task_index, 0);
}

}  // namespace recemb::support

#endif  // RECEMB_SUPPORT_THREAD_POOL_H_
