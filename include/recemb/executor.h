// Where an Embedding runs its parallel loops (EmbeddingOptions::executor): on worker threads of its
// own by default, or on threads the caller already has, such as PyTorch's intra-op threads. Two
// thread pools on the same cores each keep their threads spinning while the other needs the core
// (docs/python.md, "One set of threads"); an executor lets recemb run on the other pool's threads.
#ifndef RECEMB_EXECUTOR_H_
#define RECEMB_EXECUTOR_H_

#include "recemb/export.h"

namespace recemb {

class RECEMB_EXPORT ParallelExecutor {
 public:
  virtual ~ParallelExecutor();

  // The most threads run_on_threads uses: at least 1, at most kMaxNumThreads (embedding.h). Read
  // once, when an Embedding is built (it sizes per-thread scratch); must not change afterwards.
  virtual int max_threads() const = 0;

  // Calls body(context, thread_index) once on each of the threads it runs at once, with distinct
  // thread indices (the calling thread may be one of them), and returns when every call has
  // returned. A call whose index is outside [0, max_threads()) does nothing (a team of threads
  // that grew after max_threads() was read); two calls with the same index at once break the
  // Embedding's per-thread state. body never throws; run_on_threads must not either. An Embedding
  // calls it from one thread at a time, but different Embedding objects may call it concurrently.
  virtual void run_on_threads(void (*body)(void* context, int thread_index), void* context) = 0;
};

}  // namespace recemb

#endif  // RECEMB_EXECUTOR_H_
