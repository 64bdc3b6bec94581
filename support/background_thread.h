// One thread that runs one job at a time beside its caller: the read of the next batch while the
// trainer steps on the current one (train/data/prefetching_source.h), the lookup an Embedding
// prefetches during the dense step (recemb/embedding.h, Embedding::prefetch). The thread starts
// with the first job and then waits for the next, so a step does not pay for a thread's start and
// a thread that cannot start fails the first start(), before that job changed anything.
#ifndef RECEMB_SUPPORT_BACKGROUND_THREAD_H_
#define RECEMB_SUPPORT_BACKGROUND_THREAD_H_

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "support/thread_pool.h"

namespace recemb::support {

class BackgroundThread {
 public:
  explicit BackgroundThread(ThreadStarter start_thread = start_std_thread);
  // Waits for the job in progress, then stops the thread.
  ~BackgroundThread();
  BackgroundThread(const BackgroundThread&) = delete;
  BackgroundThread& operator=(const BackgroundThread&) = delete;

  // Waits for the job before (if any), then runs `job` on the thread and returns at once. The job
  // must not throw (it keeps its error for its caller to find). When the thread cannot be started,
  // throws std::system_error and `job` is not run. Called from one thread at a time, as wait().
  void start(std::function<void()> job);

  // Returns once the job started last has finished (at once when there is none): what it wrote is
  // then visible to the caller.
  void wait();

 private:
  void run();  // the thread's loop

  ThreadStarter start_thread_;
  std::mutex mutex_;
  std::condition_variable changed_;
  // Guarded by mutex_.
  std::function<void()> job_;  // set while a job waits or runs
  bool stopping_ = false;
  std::thread thread_;  // started by the first start()
};

}  // namespace recemb::support

#endif  // RECEMB_SUPPORT_BACKGROUND_THREAD_H_
