#include "train/worker_pool.h"

#include <string>

#include "recemb/error.h"

namespace recemb::train {
namespace {

int resolved_thread_count(int num_threads) {
  if (num_threads < 0) {
    throw InvalidArgument("WorkerPool: num_threads = " + std::to_string(num_threads) +
                          " must be >= 0 (0: one per core)");
  }
  if (num_threads > 0) return num_threads;
  const unsigned cores = std::thread::hardware_concurrency();
  return cores == 0 ? 1 : static_cast<int>(cores);
}

}  // namespace

WorkerPool::WorkerPool(int num_threads) {
  const int count = resolved_thread_count(num_threads);
  threads_.reserve(static_cast<size_t>(count - 1));
  for (int worker = 1; worker < count; ++worker) {
    threads_.emplace_back([this, worker] { work(worker); });
  }
}

WorkerPool::~WorkerPool() {
  {
    const std::lock_guard lock(mutex_);
    closing_ = true;
  }
  wake_.notify_all();
  for (std::thread& thread : threads_) thread.join();
}

void WorkerPool::run_erased(int64_t num_tasks, TaskRef task) {
  if (threads_.empty() || num_tasks <= 1) {
    for (int64_t t = 0; t < num_tasks; ++t) task.call(task.task, t, 0);
    return;
  }
  {
    const std::lock_guard lock(mutex_);
    task_ = task;
    num_tasks_ = num_tasks;
    next_task_ = 0;
    completed_ = 0;
    ++generation_;
  }
  wake_.notify_all();
  take_tasks(0);
  std::unique_lock lock(mutex_);
  done_.wait(lock, [this] { return completed_ == num_tasks_; });
}

void WorkerPool::work(int worker) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return closing_ || generation_ != seen; });
      if (closing_) return;
      seen = generation_;
    }
    take_tasks(worker);
  }
}

void WorkerPool::take_tasks(int worker) {
  for (;;) {
    TaskRef task;
    int64_t t = 0;
    {
      const std::lock_guard lock(mutex_);
      if (next_task_ >= num_tasks_) return;
      t = next_task_++;
      task = task_;
    }
    task.call(task.task, t, worker);
    const std::lock_guard lock(mutex_);
    if (++completed_ == num_tasks_) done_.notify_one();
  }
}

}  // namespace recemb::train
