// The main of a Google Benchmark program whose benchmarks are registered at run time (their list
// depends on the workload matrix and on RECEMB_BENCH_* variables, which BENCHMARK_MAIN()'s static
// registration cannot follow).
#ifndef RECEMB_BENCH_BENCHMARK_MAIN_H_
#define RECEMB_BENCH_BENCHMARK_MAIN_H_

#include <benchmark/benchmark.h>

namespace recemb_bench {

// BENCHMARK_MAIN()'s body with register_benchmarks() called once the flags are parsed. Returns
// the process's exit status: 1 on an unrecognised flag.
template <class Register>
int run_benchmarks(int argc, char** argv, Register&& register_benchmarks) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  register_benchmarks();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace recemb_bench

#endif  // RECEMB_BENCH_BENCHMARK_MAIN_H_
