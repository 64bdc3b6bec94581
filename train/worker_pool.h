// WorkerPool: the threads of the trainer's dense layers. run(num_tasks, task) calls task(t, worker)
// for every t in [0, num_tasks), spread over the pool's threads (the caller's among them), and
// returns when all have returned.
//
//   WorkerPool pool(2);                         // the caller and one worker thread
//   pool.run(num_blocks, [&](int64_t block, int worker) { ... scratch[worker] ... });
//
// Which thread runs which task varies from run to run: callers make results independent of it
// (and so of the thread count) by giving every task its own output and every worker its own
// scratch, and by summing tasks' partial results in task order afterwards (docs/training.md,
// "Performance").
//
// Tasks must not throw (callers validate first) nor call run. One thread calls run at a time.
#ifndef RECEMB_TRAIN_WORKER_POOL_H_
#define RECEMB_TRAIN_WORKER_POOL_H_

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace recemb::train {

class WorkerPool {
 public:
  // num_threads >= 1 threads, counting the caller of run; 0 means one per core
  // (std::thread::hardware_concurrency()). Throws InvalidArgument when num_threads < 0.
  explicit WorkerPool(int num_threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Threads counting the caller: workers are numbered 0 (the caller) to num_threads() - 1.
  int num_threads() const { return static_cast<int>(threads_.size()) + 1; }

  // Runs task(t, worker) for t in [0, num_tasks) and returns when every call has returned.
  // Allocates nothing (the task is passed by reference, not copied into a std::function).
  template <class Task>
  void run(int64_t num_tasks, const Task& task) {
    run_erased(num_tasks, {.call = &call<Task>, .task = &task});
  }

 private:
  // A reference to a caller's task, its type erased.
  struct TaskRef {
    void (*call)(const void* task, int64_t t, int worker);
    const void* task;
  };
  template <class Task>
  static void call(const void* task, int64_t t, int worker) {
    (*static_cast<const Task*>(task))(t, worker);
  }
  void run_erased(int64_t num_tasks, TaskRef task);
  void work(int worker);
  // Takes tasks of the current run until none is left.
  void take_tasks(int worker);

  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable wake_;  // workers: a run started or the pool is closing
  std::condition_variable done_;  // the caller: the run's last task returned
  // All guarded by mutex_. A run ends when its tasks have returned, whether or not every worker
  // took part (a worker the system has not scheduled yet holds nobody up).
  uint64_t generation_ = 0;  // runs started
  bool closing_ = false;
  TaskRef task_ = {};  // the current run's
  int64_t num_tasks_ = 0;
  int64_t next_task_ = 0;  // the first task not taken
  int64_t completed_ = 0;  // tasks returned
};

// pool->run(num_tasks, task), or task(t, 0) for t in order on the caller when pool is null.
template <class Task>
void run_tasks(WorkerPool* pool, int64_t num_tasks, const Task& task) {
  if (pool != nullptr) {
    pool->run(num_tasks, task);
    return;
  }
  for (int64_t t = 0; t < num_tasks; ++t) task(t, 0);
}

}  // namespace recemb::train

#endif  // RECEMB_TRAIN_WORKER_POOL_H_
