// The main of a Google Benchmark program whose benchmarks are registered at run time (their list
// depends on the workload matrix and on RECEMB_BENCH_* variables, which BENCHMARK_MAIN()'s static
// registration cannot follow).
#ifndef RECEMB_BENCH_BENCHMARK_MAIN_H_
#define RECEMB_BENCH_BENCHMARK_MAIN_H_

#include <benchmark/benchmark.h>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "kernels/simd_target.h"

namespace recemb_bench {

// BENCHMARK_MAIN()'s body with register_benchmarks() called once the flags are parsed. Returns
// the process's exit status: 1 on an unrecognised flag, 2 on an unknown RECEMB_BENCH_SIMD_TARGET.
//
// RECEMB_BENCH_SIMD_TARGET=AVX2 (a name of kernels/simd_target.h's simd_target_name) runs the
// library's kernels on that instruction set instead of the best one this CPU has, as on a CPU
// without the better ones (an AMD Zen 3 measured on a Zen 4: bench/peer/README.md). The
// context's simd_target says which ran. The plain loops of roofline_bench are not the library's
// kernels: they keep their own dispatch.
template <class Register>
int run_benchmarks(int argc, char** argv, Register&& register_benchmarks) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  std::unique_ptr<recemb::internal::ScopedSimdTarget> forced;
  if (const char* wanted = std::getenv("RECEMB_BENCH_SIMD_TARGET")) {
    std::string names;
    for (const recemb::internal::SimdTarget target : recemb::internal::supported_simd_targets()) {
      const std::string name = recemb::internal::simd_target_name(target);
      if (name == wanted) forced = std::make_unique<recemb::internal::ScopedSimdTarget>(target);
      names += " " + name;
    }
    if (forced == nullptr) {
      std::fprintf(stderr, "RECEMB_BENCH_SIMD_TARGET=%s: not a target this CPU runs (it runs:%s)\n",
                   wanted, names.c_str());
      return 2;
    }
  }
  benchmark::AddCustomContext("simd_target", recemb::internal::simd_target_name(
                                                 recemb::internal::dispatched_simd_target()));
  register_benchmarks();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace recemb_bench

#endif  // RECEMB_BENCH_BENCHMARK_MAIN_H_
