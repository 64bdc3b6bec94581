// FBGEMM's CPU embedding kernels on the workloads of recemb's embedding_bench and serving_bench,
// through FBGEMM's public API (fbgemm/FbgemmEmbedding.h): the peer of bench/peer/README.md. Built
// by bench/peer/build_fbgemm.sh against a FBGEMM tree the user provides; not part of recemb's
// build.
//
// Workloads and ids come from recemb's bench/workload.h (included, not re-implemented): the same
// table shapes (RECEMB_BENCH_LARGE=1 adds 1 GiB, RECEMB_BENCH_HUGE=1 4 GiB), 4096 bags x L int64
// ids per feature, the same uniform and Zipf id pools cut into the same per-step segments, the same
// fixed gradient, and the same workload names, so that bench/peer/compare.sh joins a workload's
// FBGEMM figure with embedding_bench's and roofline_bench's by name.
//
//   BM_FbgemmLookup/<workload>     GenerateEmbeddingSpMDM<float, int64_t> (sum pooling, no
//       weights, offsets, prefetch 16): out[bag] = sum of the bag's rows, per feature.
//   BM_FbgemmLookupAndUpdate/rowwise_adagrad/<workload>  the lookup above, then
//       GenerateRowWiseSparseAdaGradFused<int64_t> (prefetch 16) with the bag's gradient: every
//       occurrence of a row updates it (no de-duplication), h += mean(g^2),
//       w -= lr g / (sqrt(h) + eps).
//   BM_FbgemmServingLookup/dtype:<int8|float16>/table:<T>/threads:<N>  the serving lookup:
//       GenerateEmbeddingSpMDM<uint8_t, int64_t> over fused row-wise 8-bit rows (dim bytes, then
//       a float scale and bias: 72 bytes at dim 64, the size of recemb's int8 rows), or
//       GenerateEmbeddingSpMDM<uint16_t, int64_t> over IEEE half rows; dim 64, one table, uniform
//       ids, L = 20 (serving_bench's workload).
//
// With N threads the bags of each feature are split into N contiguous ranges, one per OpenMP
// thread (as FBGEMM's own benchmarks and PyTorch's parallel_for split a batch); the row-wise
// Adagrad update then runs Hogwild: two threads may update the same row at once (FBGEMM's fused
// kernel has no other mode). Tables are anonymous mappings advised to use transparent huge pages
// (madvise(MADV_HUGEPAGE)), as recemb's tables; the `thp` counter is the share backed by them.
// Counters are workload.h's (Mrows/s, GB/s, uniq); rates use wall-clock time.
#include <algorithm>
#include <atomic>
#include <benchmark/benchmark.h>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fbgemm/FbgemmEmbedding.h>
#include <fbgemm/Utils.h>
#include <functional>
#include <new>
#include <omp.h>
#include <string>
#include <sys/mman.h>
#include <tuple>
#include <vector>

#include "benchmark_main.h"
#include "workload.h"

namespace recemb_bench {
namespace {

constexpr int kPrefetch = 16;           // FBGEMM's default prefetch distance, in ids
constexpr float kInitialValue = 0.01f;  // embedding_bench's Constant initializer
constexpr float kInitialAccumulator = 0.1f;
constexpr float kLearningRate = 0.01f;
constexpr float kEpsilon = 1e-8f;
constexpr float kInt8Scale = 1e-4f;               // dequantised value = byte * scale + bias
constexpr uint16_t kHalfOfInitialValue = 0x211f;  // 0.01 as IEEE half

// An anonymous mapping of `count` T advised to use transparent huge pages, then filled with
// `value` (which faults every page in).
template <class T>
class HugePagesArray {
 public:
  HugePagesArray(int64_t count, T value) : bytes_(static_cast<size_t>(count) * sizeof(T)) {
    void* memory =
        mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) throw std::bad_alloc();
    madvise(memory, bytes_, MADV_HUGEPAGE);
    data_ = static_cast<T*>(memory);
    std::fill_n(data_, count, value);
  }
  ~HugePagesArray() { munmap(data_, bytes_); }
  HugePagesArray(const HugePagesArray&) = delete;
  HugePagesArray& operator=(const HugePagesArray&) = delete;

  T* data() { return data_; }

 private:
  size_t bytes_;
  T* data_;
};

// Calls task(first_bag, last_bag) on `threads` OpenMP threads, each with its contiguous share of
// `bags` bags; the calling thread alone when threads == 1.
void for_bag_ranges(int threads, int64_t bags, const std::function<void(int64_t, int64_t)>& task) {
  if (threads == 1) {
    task(0, bags);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num();
    task(bags * t / threads, bags * (t + 1) / threads);
  }
}

// offsets[b] = b L for b in [0, B]: the bags of every feature (fixed length L).
std::vector<int32_t> bag_offsets(int64_t bag_size) {
  std::vector<int32_t> offsets(static_cast<size_t>(kBatchSize + 1));
  for (int64_t b = 0; b <= kBatchSize; ++b) offsets[static_cast<size_t>(b)] = b * bag_size;
  return offsets;
}

// The float tables of a workload laid end to end (table f at f rows dim), and the row-wise Adagrad
// accumulators; one set alive at a time. As in embedding_bench, the lookups and the training steps
// of a shape use different tables, so the lookups read the untrained rows their output check
// expects.
struct FloatTables {
  std::unique_ptr<HugePagesArray<float>> weights;
  std::unique_ptr<HugePagesArray<float>> accumulators;  // [F rows]
  double huge_fraction = -1.0;
};

FloatTables& float_tables_for(const Workload& workload, bool trained) {
  static FloatTables tables;
  static std::tuple<int64_t, int64_t, int64_t, bool> key;
  const auto wanted = std::make_tuple(workload.rows, workload.dim, workload.num_tables, trained);
  if (tables.weights == nullptr || key != wanted) {
    tables = FloatTables();  // free the previous shape's first
    tables.weights = std::make_unique<HugePagesArray<float>>(workload.total_rows() * workload.dim,
                                                             kInitialValue);
    tables.accumulators =
        std::make_unique<HugePagesArray<float>>(workload.total_rows(), kInitialAccumulator);
    tables.huge_fraction = huge_page_fraction(tables.weights->data());
    key = wanted;
  }
  return tables;
}

// Fails the benchmark if a kernel reported an out-of-range id (it returns false then).
void check(benchmark::State& state, const std::atomic<bool>& ok) {
  if (!ok.load()) state.SkipWithError("an FBGEMM kernel returned false (id out of range)");
}

// Fails the benchmark unless every pooled bag of `out` ([bags, dim]) is L times the one row value
// the table holds at each column (every row of the harness's tables is the same row):
// `row_value(d)`. This checks that every bag was written and summed its L ids.
template <class RowValue>
void check_pooled(benchmark::State& state, const std::vector<float>& out, int64_t dim,
                  int64_t bag_size, RowValue&& row_value) {
  constexpr float kTolerance = 1e-3f;  // relative: float16 rows hold 0.01 to 2e-4
  for (size_t i = 0; i < out.size(); ++i) {
    const float expected = static_cast<float>(bag_size) * row_value(static_cast<int64_t>(i) % dim);
    if (std::abs(out[i] - expected) > kTolerance * std::abs(expected)) {
      state.SkipWithError(("pooled value " + std::to_string(out[i]) + " at " + std::to_string(i) +
                           " is not " + std::to_string(expected))
                              .c_str());
      return;
    }
  }
}

void BM_FbgemmLookup(benchmark::State& state, Workload workload) {
  const IdStream stream(workload);
  FloatTables& tables = float_tables_for(workload, false);
  const auto kernel = fbgemm::GenerateEmbeddingSpMDM<float, int64_t, int32_t, float>(
      workload.dim, false, false, kPrefetch, false, true);
  const std::vector<int32_t> offsets = bag_offsets(workload.bag_size);
  std::vector<float> out(static_cast<size_t>(workload.bags_per_step() * workload.dim));
  std::atomic<bool> ok = true;
  int64_t step = 0;
  const std::function<void(int64_t, int64_t)> lookup = [&](int64_t first, int64_t last) {
    for (int64_t f = 0; f < workload.num_tables; ++f) {
      const float* table = tables.weights->data() + f * workload.rows * workload.dim;
      const int64_t* ids = stream.feature_ids(step, f) + first * workload.bag_size;
      float* bags_out = out.data() + (f * kBatchSize + first) * workload.dim;
      if (!kernel(last - first, (last - first) * workload.bag_size, workload.rows, table, ids,
                  offsets.data(), nullptr, bags_out)) {
        ok = false;
      }
    }
  };
  for (auto _ : state) {
    for_bag_ranges(workload.threads, kBatchSize, lookup);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
    step = (step + 1) % stream.num_steps();
  }
  check(state, ok);
  check_pooled(state, out, workload.dim, workload.bag_size, [](int64_t) { return kInitialValue; });
  report(state, workload.ids_per_step(), bytes_per_row("lookup", workload.dim),
         stream.unique_fraction());
  state.counters["thp"] = tables.huge_fraction;
}

void BM_FbgemmLookupAndUpdate(benchmark::State& state, Workload workload) {
  const IdStream stream(workload);
  FloatTables& tables = float_tables_for(workload, true);
  const auto lookup_kernel = fbgemm::GenerateEmbeddingSpMDM<float, int64_t, int32_t, float>(
      workload.dim, false, false, kPrefetch, false, true);
  const auto update_kernel = fbgemm::GenerateRowWiseSparseAdaGradFused<int64_t, int32_t, float>(
      static_cast<int>(workload.dim), kPrefetch, true);
  const std::vector<int32_t> offsets = bag_offsets(workload.bag_size);
  const std::vector<float>& gradient = gradient_for(workload.bags_per_step(), workload.dim);
  std::vector<float> out(static_cast<size_t>(workload.bags_per_step() * workload.dim));
  std::atomic<bool> ok = true;
  int64_t step = 0;
  const std::function<void(int64_t, int64_t)> lookup = [&](int64_t first, int64_t last) {
    for (int64_t f = 0; f < workload.num_tables; ++f) {
      const float* table = tables.weights->data() + f * workload.rows * workload.dim;
      const int64_t* ids = stream.feature_ids(step, f) + first * workload.bag_size;
      float* bags_out = out.data() + (f * kBatchSize + first) * workload.dim;
      if (!lookup_kernel(last - first, (last - first) * workload.bag_size, workload.rows, table,
                         ids, offsets.data(), nullptr, bags_out)) {
        ok = false;
      }
    }
  };
  // FBGEMM adds lr g / (sqrt(h) + eps): a descent step takes -lr.
  const std::function<void(int64_t, int64_t)> update = [&](int64_t first, int64_t last) {
    for (int64_t f = 0; f < workload.num_tables; ++f) {
      float* table = tables.weights->data() + f * workload.rows * workload.dim;
      float* accumulators = tables.accumulators->data() + f * workload.rows;
      const int64_t* ids = stream.feature_ids(step, f) + first * workload.bag_size;
      const float* bags_gradient = gradient.data() + (f * kBatchSize + first) * workload.dim;
      if (!update_kernel(last - first, (last - first) * workload.bag_size, workload.rows, table,
                         bags_gradient, accumulators, ids, offsets.data(), kEpsilon,
                         -kLearningRate)) {
        ok = false;
      }
    }
  };
  for (auto _ : state) {
    for_bag_ranges(workload.threads, kBatchSize, lookup);
    benchmark::DoNotOptimize(out.data());
    for_bag_ranges(workload.threads, kBatchSize, update);
    benchmark::ClobberMemory();
    step = (step + 1) % stream.num_steps();
  }
  check(state, ok);
  report(state, workload.ids_per_step(), bytes_per_row("rowwise_adagrad", workload.dim),
         stream.unique_fraction());
  state.counters["thp"] = tables.huge_fraction;
}

enum class ServingDtype { kInt8, kFloat16 };

// Bytes of one stored row: 8-bit rows carry their float scale and bias after the dim bytes.
int64_t serving_row_bytes(ServingDtype dtype, int64_t dim) {
  return dtype == ServingDtype::kInt8 ? dim + 2 * static_cast<int64_t>(sizeof(float)) : 2 * dim;
}

// One serving table of `rows` rows of dim `dim` in the stored format (every row the same: the
// speed does not depend on the values); one alive at a time.
struct ServingTable {
  std::unique_ptr<HugePagesArray<uint8_t>> bytes;
  double huge_fraction = -1.0;
};

ServingTable& serving_table_for(ServingDtype dtype, int64_t rows, int64_t dim) {
  static ServingTable table;
  static std::tuple<ServingDtype, int64_t, int64_t> key;
  const auto wanted = std::make_tuple(dtype, rows, dim);
  if (table.bytes == nullptr || key != wanted) {
    table = ServingTable();
    const int64_t row_bytes = serving_row_bytes(dtype, dim);
    std::vector<uint8_t> row(static_cast<size_t>(row_bytes));
    if (dtype == ServingDtype::kInt8) {
      for (int64_t d = 0; d < dim; ++d) row[static_cast<size_t>(d)] = static_cast<uint8_t>(d);
      const float scale_and_bias[2] = {kInt8Scale, kInitialValue};
      std::memcpy(row.data() + dim, scale_and_bias, sizeof(scale_and_bias));
    } else {
      for (int64_t d = 0; d < dim; ++d) std::memcpy(row.data() + 2 * d, &kHalfOfInitialValue, 2);
    }
    table.bytes = std::make_unique<HugePagesArray<uint8_t>>(rows * row_bytes, uint8_t{0});
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(table.bytes->data() + r * row_bytes, row.data(), row.size());
    }
    table.huge_fraction = huge_page_fraction(table.bytes->data());
    key = wanted;
  }
  return table;
}

template <class InType>
void serving_loop(benchmark::State& state, const Workload& workload, const InType* table,
                  bool is_int8) {
  const IdStream stream(workload);
  const auto kernel = fbgemm::GenerateEmbeddingSpMDM<InType, int64_t, int32_t, float>(
      workload.dim, false, false, kPrefetch, false, true);
  const std::vector<int32_t> offsets = bag_offsets(workload.bag_size);
  std::vector<float> out(static_cast<size_t>(kBatchSize * workload.dim));
  std::atomic<bool> ok = true;
  int64_t step = 0;
  const std::function<void(int64_t, int64_t)> lookup = [&](int64_t first, int64_t last) {
    if (!kernel(last - first, (last - first) * workload.bag_size, workload.rows, table,
                stream.feature_ids(step, 0) + first * workload.bag_size, offsets.data(), nullptr,
                out.data() + first * workload.dim)) {
      ok = false;
    }
  };
  for (auto _ : state) {
    for_bag_ranges(workload.threads, kBatchSize, lookup);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
    step = (step + 1) % stream.num_steps();
  }
  check(state, ok);
  // int8 rows: code d at column d, then scale and bias; float16 rows: 0.01 everywhere.
  check_pooled(state, out, workload.dim, workload.bag_size, [&](int64_t d) {
    return is_int8 ? static_cast<float>(d) * kInt8Scale + kInitialValue : kInitialValue;
  });
  const ServingDtype dtype = is_int8 ? ServingDtype::kInt8 : ServingDtype::kFloat16;
  report(state, workload.ids_per_step(), serving_row_bytes(dtype, workload.dim),
         stream.unique_fraction());
}

void BM_FbgemmServingLookup(benchmark::State& state, Workload workload, ServingDtype dtype) {
  ServingTable& table = serving_table_for(dtype, workload.rows, workload.dim);
  if (dtype == ServingDtype::kInt8) {
    serving_loop<uint8_t>(state, workload, table.bytes->data(), true);
  } else {
    serving_loop<uint16_t>(state, workload, reinterpret_cast<const uint16_t*>(table.bytes->data()),
                           false);
  }
  state.counters["thp"] = table.huge_fraction;
}

const char* isa_name(fbgemm::inst_set_t isa) {
  switch (isa) {
    case fbgemm::inst_set_t::avx2:
      return "avx2";
    case fbgemm::inst_set_t::avx512:
      return "avx512";
    case fbgemm::inst_set_t::avx512_ymm:
      return "avx512_ymm";
    case fbgemm::inst_set_t::avx512_vnni:
      return "avx512_vnni";
    case fbgemm::inst_set_t::avx512_vnni_ymm:
      return "avx512_vnni_ymm";
    default:
      return "other";
  }
}

// The lookups and row-wise Adagrad steps of embedding_bench's matrix (workload.h's enumeration,
// the other optimizers skipped: FBGEMM has no fused kernel for them), then the serving lookups of
// every single-table dim-64 shape, L = 20, uniform ids.
void register_all() {
  benchmark::AddCustomContext("fbgemm_isa", isa_name(fbgemm::fbgemmInstructionSet()));
  const bool full = env_flag("RECEMB_BENCH_FULL");
  const Shapes shapes = registered_shapes();
  for_each_workload(
      shapes, full,
      [](const Workload& workload) {
        configure(benchmark::RegisterBenchmark(("BM_FbgemmLookup/" + workload.name()).c_str(),
                                               BM_FbgemmLookup, workload));
      },
      [](const Workload& workload, const std::string& optimizer) {
        if (optimizer != "rowwise_adagrad") return;
        configure(benchmark::RegisterBenchmark(
            ("BM_FbgemmLookupAndUpdate/rowwise_adagrad/" + workload.name()).c_str(),
            BM_FbgemmLookupAndUpdate, workload));
      });
  for (Workload workload : shapes.tables) {
    if (shapes.row_series || workload.dim != 64 || workload.num_tables != 1) continue;
    for (const auto& [dtype, dtype_name] :
         {std::pair{ServingDtype::kInt8, "int8"}, std::pair{ServingDtype::kFloat16, "float16"}}) {
      for (const int threads : {1, 2}) {
        workload.threads = threads;
        const std::string name = std::string("BM_FbgemmServingLookup/dtype:") + dtype_name +
                                 "/table:" + workload.table + "/threads:" + std::to_string(threads);
        configure(
            benchmark::RegisterBenchmark(name.c_str(), BM_FbgemmServingLookup, workload, dtype));
      }
    }
  }
}

}  // namespace
}  // namespace recemb_bench

int main(int argc, char** argv) {
  return recemb_bench::run_benchmarks(argc, argv, recemb_bench::register_all);
}
