// recemb/executor.h. A ParallelExecutor is opaque here, held by shared_ptr (as
// EmbeddingOptions.executor does). The one Python makes is the OpenMP executor: the loops of an
// Embedding run on the threads of the process's OpenMP runtime, which are PyTorch's intra-op
// threads when torch uses OpenMP (docs/python.md, "One set of threads"). The runtime is found by
// its soname (libgomp.so.1), so the extension and torch share whichever copy was loaded first;
// openmp_runtime_path names it, for the check that there is only one. This file is the only one
// that uses OpenMP.
#include <dlfcn.h>
#include <memory>
#include <omp.h>
#include <string>

#include "recemb/embedding.h"
#include "recemb/error.h"
#include "recemb/executor.h"

#include "bind.h"

namespace recemb::python {
namespace {

class OpenMPExecutor final : public ParallelExecutor {
 public:
  explicit OpenMPExecutor(int max_threads) : max_threads_(max_threads) {}

  int max_threads() const override { return max_threads_; }

  // One parallel region of the calling thread's team (omp_get_max_threads() threads, which
  // torch.set_num_threads sets), without a num_threads clause: a different team size makes
  // libgomp rebuild its team of waiting threads. Threads beyond max_threads run nothing
  // (ThreadPool skips their indices); inside another parallel region the team is this thread alone.
  void run_on_threads(void (*body)(void* context, int thread_index), void* context) override {
#pragma omp parallel
    body(context, omp_get_thread_num());
  }

 private:
  int max_threads_;
};

}  // namespace

void bind_executor(py::module_& module) {
  py::class_<ParallelExecutor, std::shared_ptr<ParallelExecutor>>(
      module, "ParallelExecutor",
      "Threads an Embedding runs its parallel loops on (opaque; pass it as "
      "EmbeddingOptions.executor, with num_threads 0).")
      .def("max_threads", &ParallelExecutor::max_threads,
           "The most threads a loop runs on (thread indices in [0, max_threads())).");
  module.def(
      "openmp_executor",
      [](int max_threads) -> std::shared_ptr<ParallelExecutor> {
        if (max_threads < 1 || max_threads > kMaxNumThreads) {
          throw InvalidArgument("openmp_executor: max_threads must be in [1, " +
                                std::to_string(kMaxNumThreads) + "], got " +
                                std::to_string(max_threads));
        }
        return std::make_shared<OpenMPExecutor>(max_threads);
      },
      py::arg("max_threads"),
      "An executor running each loop in one OpenMP parallel region of the calling thread; "
      "threads beyond max_threads run nothing.");
  module.def(
      "openmp_max_threads", [] { return omp_get_max_threads(); },
      "omp_get_max_threads() of the OpenMP runtime the extension uses, for the calling thread.");
  module.def(
      "openmp_runtime_path",
      [] {
        Dl_info info{};
        if (dladdr(reinterpret_cast<void*>(&omp_get_max_threads), &info) == 0 ||
            info.dli_fname == nullptr) {
          return std::string();
        }
        return std::string(info.dli_fname);
      },
      "The file of the OpenMP runtime the extension uses ('' if unknown).");
}

}  // namespace recemb::python
