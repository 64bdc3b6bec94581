#include "support/background_thread.h"

#include <utility>

namespace recemb::support {

BackgroundThread::BackgroundThread(ThreadStarter start_thread)
    : start_thread_(std::move(start_thread)) {}

BackgroundThread::~BackgroundThread() {
  if (!thread_.joinable()) return;
  {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [this] { return !job_; });
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void BackgroundThread::start(std::function<void()> job) {
  wait();
  if (!thread_.joinable()) thread_ = start_thread_([this] { run(); });  // may throw: nothing ran
  {
    const std::lock_guard lock(mutex_);
    job_ = std::move(job);
  }
  changed_.notify_all();
}

void BackgroundThread::wait() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return !job_; });
}

void BackgroundThread::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return stopping_ || job_; });
    if (stopping_) return;
    lock.unlock();
    job_();  // job_ is this thread's while it is set: start() waits for it to be cleared
    lock.lock();
    job_ = nullptr;
    changed_.notify_all();
  }
}

}  // namespace recemb::support
