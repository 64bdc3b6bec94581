// What this machine's memory allows for recemb's workloads (bench/workload.h): the denominators of
// the efficiency figures of embedding_bench, measured with plain C++ loops over plain arrays.
//
//   BM_SequentialRead/bytes:N/threads:T        streaming read of an N-byte float array.
//   BM_Gather/<workload>/prefetch:P/interleave:K  the lookup's roofline: out[bag] = sum of the
//       bag's rows, the F tables laid end to end in one array (as one table of the same bytes).
//   BM_GatherUpdate/<optimizer>/<workload>/...  the training step's roofline: the same gather,
//       then every looked-up row (every id: no de-duplication) updated with its bag's gradient by
//       the plain per-row update of sgd, adagrad, rowwise_adagrad or adam (lazy; see update_row).
//   BM_GatherSumUpdate/<optimizer>/<workload>/...  the same with recemb's semantics: the step's
//       ids grouped by row (a plain LSD radix sort of (row, index) pairs, in the timed loop), each
//       distinct row's gradient summed in index order and the row updated once. Beside
//       BM_GatherUpdate it is the ceiling of each semantics on a workload (docs/performance.md).
//   BM_KeyedGather/<layout>/<workload>  the gather of int64 keys in three layouts of a dynamic
//       table (a separate index; keys beside their rows; the same read at each key's hash
//       position only, the bound of such layouts): see "Keyed gathers" below.
//
// The loops are built to be as fast as anyone here has made a gather: multi-versioned
// (target_clones: the best ISA the CPU has is picked at load time, whatever the library was built
// for), the row width a compile-time constant (accumulators in registers), tables on transparent
// huge pages (madvise(MADV_HUGEPAGE); the `thp` counter is the share of the table that
// AnonHugePages reports), every cache line of the row P ids ahead prefetched into the L2 (the
// prefetch stream runs straight through bag boundaries, so P = 64 is three bags ahead at L = 20), K
// bags summed side by side (more independent loads in flight), and worker threads that spin briefly
// before sleeping (a 4096-id batch takes about as long as waking a sleeping thread on this VM).
// With T threads the gather splits the bags into T ranges; the update gives each thread the ids of
// its own 1/T of the rows, so no row is written by two threads. RECEMB_BENCH_TUNE=1 registers every
// P in {0, 16, 32, 64} and K in {1, 2, 4}; without it only the best setting found (kBestPrefetch,
// kBestInterleave) is.
#include <algorithm>
#include <atomic>
#include <benchmark/benchmark.h>
#include <bit>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <sys/mman.h>
#include <thread>
#include <utility>
#include <vector>

#include "benchmark_main.h"
#include "util/key_hash.h"
#include "workload.h"

namespace recemb_bench {
namespace {

// The best setting of the gather on this machine (RECEMB_BENCH_TUNE=1; bench/README.md).
constexpr int64_t kBestPrefetch = 64;
constexpr int kBestInterleave = 4;
constexpr int kCacheLineFloats = 16;
constexpr float kLearningRate = 0.01f;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define RECEMB_BENCH_BEST_ISA __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define RECEMB_BENCH_BEST_ISA
#endif

// ---------------------------------------------------------------------------------------------
// Memory and threads.

// A zero-filled anonymous mapping advised to use transparent huge pages, as the library maps its
// tables (src/storage/float_buffer.cc).
class HugeBuffer {
 public:
  explicit HugeBuffer(int64_t num_floats) : bytes_(static_cast<size_t>(num_floats) * 4) {
    void* memory =
        mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) throw std::bad_alloc();
    madvise(memory, bytes_, MADV_HUGEPAGE);
    data_ = static_cast<float*>(memory);
  }
  ~HugeBuffer() { munmap(data_, bytes_); }
  HugeBuffer(const HugeBuffer&) = delete;
  HugeBuffer& operator=(const HugeBuffer&) = delete;

  float* data() { return data_; }
  int64_t size() const { return static_cast<int64_t>(bytes_ / 4); }

 private:
  size_t bytes_;
  float* data_;
};

// run(task) calls task(t) for t in [0, num_threads), t = 0 on the calling thread, and returns when
// all have returned. Helpers spin between runs for a while (about 100 us), then sleep on a
// condition variable, so a benchmark's back-to-back batches pay no wake-up and the helpers take no
// CPU once the benchmark is over; the caller waits for the helpers the same way. (std::atomic::wait
// was tried first: with libstdc++ 12 a 2-thread batch of 4096 ids then took tens of milliseconds.)
class Workers {
 public:
  explicit Workers(int num_threads) {
    for (int t = 1; t < num_threads; ++t) helpers_.emplace_back([this, t] { loop(t); });
  }
  ~Workers() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      generation_.fetch_add(1, std::memory_order_release);
    }
    start_.notify_all();
    for (std::thread& helper : helpers_) helper.join();
  }
  Workers(const Workers&) = delete;
  Workers& operator=(const Workers&) = delete;

  void run(const std::function<void(int)>& task) {
    if (helpers_.empty()) {
      task(0);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      task_ = &task;
      unfinished_.store(static_cast<int>(helpers_.size()), std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
    }
    start_.notify_all();
    task(0);
    for (int spin = 0; spin < kSpins; ++spin) {
      if (unfinished_.load(std::memory_order_acquire) == 0) return;
      pause();
    }
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return unfinished_.load(std::memory_order_acquire) == 0; });
  }

 private:
  static constexpr int kSpins = 4096;

  static void pause() {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }

  void loop(int thread) {
    uint64_t seen = 0;
    while (true) {
      bool started = false;
      for (int spin = 0; spin < kSpins && !started; ++spin) {
        started = generation_.load(std::memory_order_acquire) != seen;
        if (!started) pause();
      }
      const std::function<void(int)>* task = nullptr;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        start_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
        if (stopping_) return;
        seen = generation_.load(std::memory_order_relaxed);
        task = task_;
      }
      (*task)(thread);
      bool last = false;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        last = unfinished_.fetch_sub(1, std::memory_order_release) == 1;
      }
      if (last) done_.notify_one();
    }
  }

  std::vector<std::thread> helpers_;
  std::mutex mutex_;
  std::condition_variable start_;
  std::condition_variable done_;
  const std::function<void(int)>* task_ = nullptr;  // guarded by mutex_
  std::atomic<uint64_t> generation_{0};             // written under mutex_, spun on without it
  std::atomic<int> unfinished_{0};
  bool stopping_ = false;  // guarded by mutex_
};

// [begin, end) of part `part` of `count` split into `parts` nearly equal pieces.
std::pair<int64_t, int64_t> split(int64_t count, int part, int parts) {
  return {count * part / parts, count * (part + 1) / parts};
}

// ---------------------------------------------------------------------------------------------
// The plain loops. Bodies are templates on the row width, inlined into one multi-versioned
// dispatcher per loop, so that every ISA clone gets its own copy of every width.

// Sum of n floats with 16 independent partial sums (a single float sum would not vectorise
// without -ffast-math).
RECEMB_BENCH_BEST_ISA float sum_floats(const float* values, int64_t n) {
  constexpr int64_t kLanes = 16;
  float lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t lane = 0; lane < kLanes; ++lane) lanes[lane] += values[i + lane];
  }
  float sum = 0.0f;
  for (; i < n; ++i) sum += values[i];
  for (const float lane : lanes) sum += lane;
  return sum;
}

// Into the L2 (prefetcht1): more misses in flight than the L1's fill buffers allow (as
// kernels/prefetch.h's forward kernel).
template <int64_t kDim>
[[gnu::always_inline]] inline void prefetch_row(const float* row) {
  for (int64_t d = 0; d < kDim; d += kCacheLineFloats) __builtin_prefetch(row + d, 0, 2);
}

// out[b] = sum of the rows of bag b for bags [first_bag, last_bag) of ids ([bags, L], row ids of
// `table`), kInterleave bags at a time, the row `distance` ids ahead prefetched (0: none).
template <int64_t kDim, int kInterleave>
[[gnu::always_inline]] inline void gather_bags(const float* __restrict table,
                                               const int64_t* __restrict ids, int64_t bag_size,
                                               int64_t first_bag, int64_t last_bag,
                                               int64_t distance, float* __restrict out) {
  const int64_t* ahead = ids + first_bag * bag_size;
  const int64_t* const end = ids + last_bag * bag_size;
  const int64_t* const warm_end = distance > 0 ? std::min(ahead + distance, end) : ahead;
  for (; ahead < warm_end; ++ahead) prefetch_row<kDim>(table + *ahead * kDim);
  const auto prefetch_next = [&] {
    if (distance > 0 && ahead < end) {
      prefetch_row<kDim>(table + *ahead * kDim);
      ++ahead;
    }
  };
  int64_t b = first_bag;
  for (; b + kInterleave <= last_bag; b += kInterleave) {
    float acc[kInterleave][kDim] = {};
    for (int64_t position = 0; position < bag_size; ++position) {
      for (int k = 0; k < kInterleave; ++k) {
        prefetch_next();
        const float* __restrict row = table + ids[(b + k) * bag_size + position] * kDim;
        for (int64_t d = 0; d < kDim; ++d) acc[k][d] += row[d];
      }
    }
    for (int k = 0; k < kInterleave; ++k) std::copy_n(acc[k], kDim, out + (b + k) * kDim);
  }
  for (; b < last_bag; ++b) {
    float acc[kDim] = {};
    for (int64_t position = 0; position < bag_size; ++position) {
      prefetch_next();
      const float* __restrict row = table + ids[b * bag_size + position] * kDim;
      for (int64_t d = 0; d < kDim; ++d) acc[d] += row[d];
    }
    std::copy_n(acc, kDim, out + b * kDim);
  }
}

template <int64_t kDim>
[[gnu::always_inline]] inline void gather_width(const float* table, const int64_t* ids,
                                                int64_t bag_size, int64_t first_bag,
                                                int64_t last_bag, int64_t distance, int interleave,
                                                float* out) {
  switch (interleave) {
    case 2:
      gather_bags<kDim, 2>(table, ids, bag_size, first_bag, last_bag, distance, out);
      break;
    case 4:
      gather_bags<kDim, 4>(table, ids, bag_size, first_bag, last_bag, distance, out);
      break;
    default:
      gather_bags<kDim, 1>(table, ids, bag_size, first_bag, last_bag, distance, out);
  }
}

// dim is 16, 64 or 128 (the only widths registered).
RECEMB_BENCH_BEST_ISA void gather(const float* table, int64_t dim, const int64_t* ids,
                                  int64_t bag_size, int64_t first_bag, int64_t last_bag,
                                  int64_t distance, int interleave, float* out) {
  switch (dim) {
    case 16:
      gather_width<16>(table, ids, bag_size, first_bag, last_bag, distance, interleave, out);
      break;
    case 64:
      gather_width<64>(table, ids, bag_size, first_bag, last_bag, distance, interleave, out);
      break;
    default:
      gather_width<128>(table, ids, bag_size, first_bag, last_bag, distance, interleave, out);
  }
}

enum class Update { kSgd, kAdagrad, kRowwiseAdagrad, kAdam };

Update update_of(const std::string& name) {
  if (name == "adagrad") return Update::kAdagrad;
  if (name == "rowwise_adagrad") return Update::kRowwiseAdagrad;
  if (name == "adam") return Update::kAdam;
  return Update::kSgd;
}

int num_slots(Update update) {
  return update == Update::kSgd ? 0 : update == Update::kAdam ? 2 : 1;
}

// The per-row updates, with the engine's default hyperparameters (optimizer.h), g = the bag's
// gradient:
//   sgd:             w -= lr g
//   adagrad:         a += g^2;  w -= lr g / sqrt(a)                       (a starts at 0.1)
//   rowwise_adagrad: a += mean(g^2);  w -= lr g / sqrt(a + 1e-16)         (one a per row)
//   adam (lazy):     m = 0.9 m + 0.1 g;  v = 0.999 v + 0.001 g^2;  w -= lr m / sqrt(v + 1e-14)
// with 1/sqrt computed by inverse_sqrt.
struct UpdateArrays {
  float* weights = nullptr;
  float* slot0 = nullptr;  // [rows, dim], or [rows] for rowwise_adagrad
  float* slot1 = nullptr;  // adam's v
};

// 1 / sqrt(x) for x > 0: the classic bit-trick estimate and three Newton steps (relative error
// about 1e-7). Unlike std::sqrt it vectorises without -fno-math-errno (which the library is built
// with, the benchmarks are not: errno rules out SIMD sqrt), and it is cheaper than sqrt + divide,
// so the update's roofline stays a bound.
[[gnu::always_inline]] inline float inverse_sqrt(float x) {
  float y = std::bit_cast<float>(0x5f375a86 - (std::bit_cast<int32_t>(x) >> 1));
  for (int step = 0; step < 3; ++step) y = y * (1.5f - 0.5f * x * y * y);
  return y;
}

// The rows to update are prefetched into the L2 too, as the library's update kernels do
// (kernels/sparse_update.h): on an AMD Zen 4, prefetching them for writing into the L1 stalled
// the loop on the L1's miss buffers.
template <int64_t kDim, Update kUpdate>
[[gnu::always_inline]] inline void prefetch_update(const UpdateArrays& arrays, int64_t row) {
  prefetch_row<kDim>(arrays.weights + row * kDim);
  if constexpr (kUpdate == Update::kAdagrad || kUpdate == Update::kAdam) {
    prefetch_row<kDim>(arrays.slot0 + row * kDim);
  }
  if constexpr (kUpdate == Update::kAdam) prefetch_row<kDim>(arrays.slot1 + row * kDim);
  if constexpr (kUpdate == Update::kRowwiseAdagrad) __builtin_prefetch(arrays.slot0 + row, 0, 2);
}

template <int64_t kDim>
[[gnu::always_inline]] inline void update_rowwise_adagrad(float* __restrict w, float& a,
                                                          const float* __restrict g) {
  float squares[kCacheLineFloats] = {};
  for (int64_t d = 0; d < kDim; d += kCacheLineFloats) {
    for (int lane = 0; lane < kCacheLineFloats; ++lane) squares[lane] += g[d + lane] * g[d + lane];
  }
  float sum = 0.0f;
  for (const float square : squares) sum += square;
  a += sum / static_cast<float>(kDim);
  const float step = kLearningRate * inverse_sqrt(a + 1e-16f);
  for (int64_t d = 0; d < kDim; ++d) w[d] -= step * g[d];
}

template <int64_t kDim, Update kUpdate>
[[gnu::always_inline]] inline void update_row(const UpdateArrays& arrays, int64_t row,
                                              const float* __restrict g) {
  float* __restrict w = arrays.weights + row * kDim;
  if constexpr (kUpdate == Update::kSgd) {
    for (int64_t d = 0; d < kDim; ++d) w[d] -= kLearningRate * g[d];
  } else if constexpr (kUpdate == Update::kAdagrad) {
    float* __restrict a = arrays.slot0 + row * kDim;
    for (int64_t d = 0; d < kDim; ++d) {
      a[d] += g[d] * g[d];
      w[d] -= kLearningRate * g[d] * inverse_sqrt(a[d]);
    }
  } else if constexpr (kUpdate == Update::kRowwiseAdagrad) {
    update_rowwise_adagrad<kDim>(w, arrays.slot0[row], g);
  } else {
    float* __restrict m = arrays.slot0 + row * kDim;
    float* __restrict v = arrays.slot1 + row * kDim;
    for (int64_t d = 0; d < kDim; ++d) {
      m[d] = 0.9f * m[d] + 0.1f * g[d];
      v[d] = 0.999f * v[d] + 0.001f * g[d] * g[d];
      w[d] -= kLearningRate * m[d] * inverse_sqrt(v[d] + 1e-14f);
    }
  }
}

// The buffers of a thread's grouping of its items by row (BM_GatherSumUpdate), grown once.
struct RowGroups {
  int row_bits = 0;              // bits of the largest row
  std::vector<uint64_t> keys;    // row << 32 | item, sorted by row, items increasing within a row
  std::vector<uint64_t> spare;   // the radix sort's other buffer
  std::vector<uint32_t> starts;  // the first key of each distinct row, then the number of keys
};

// Sorts the items [0, n) by row: a stable LSD radix sort of row << 32 | item over the row's
// bits, 11 at a time.
inline void group_by_row(const int64_t* rows, int64_t n, RowGroups& groups) {
  constexpr int kDigitBits = 11;
  groups.keys.resize(static_cast<size_t>(n));
  groups.spare.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    groups.keys[static_cast<size_t>(i)] =
        static_cast<uint64_t>(rows[i]) << 32 | static_cast<uint64_t>(i);
  }
  for (int shift = 32; shift < 32 + groups.row_bits; shift += kDigitBits) {
    uint32_t offsets[1 << kDigitBits] = {};
    for (const uint64_t key : groups.keys) ++offsets[(key >> shift) & ((1 << kDigitBits) - 1)];
    uint32_t sum = 0;
    for (uint32_t& offset : offsets) sum += std::exchange(offset, sum);
    for (const uint64_t key : groups.keys) {
      groups.spare[offsets[(key >> shift) & ((1 << kDigitBits) - 1)]++] = key;
    }
    groups.keys.swap(groups.spare);
  }
  groups.starts.clear();
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t key = groups.keys[static_cast<size_t>(i)];
    if (i == 0 || key >> 32 != groups.keys[static_cast<size_t>(i - 1)] >> 32) {
      groups.starts.push_back(static_cast<uint32_t>(i));
    }
  }
  groups.starts.push_back(static_cast<uint32_t>(n));
}

// Updates rows[i] with gradient[bags[i]] for i in [0, n) (bags null: bag = i / bag_size), the row
// `distance` items ahead prefetched. With `groups`, each distinct row once, with the sum of its
// items' gradients in item order (the rows `distance` distinct rows ahead prefetched).
template <int64_t kDim, Update kUpdate>
[[gnu::always_inline]] inline void update_items(const UpdateArrays& arrays, const float* gradient,
                                                const int64_t* rows, const int64_t* bags,
                                                int64_t bag_size, int64_t n, int64_t distance,
                                                RowGroups* groups) {
  auto bag_of = [&](int64_t i) { return bags != nullptr ? bags[i] : i / bag_size; };
  if (groups != nullptr) {
    group_by_row(rows, n, *groups);
    const uint64_t* keys = groups->keys.data();
    const uint32_t* starts = groups->starts.data();
    const auto distinct = static_cast<int64_t>(groups->starts.size()) - 1;
    for (int64_t k = 0; k < std::min(distance, distinct); ++k) {
      prefetch_update<kDim, kUpdate>(arrays, static_cast<int64_t>(keys[starts[k]] >> 32));
    }
    alignas(64) float sum[kDim];
    for (int64_t k = 0; k < distinct; ++k) {
      if (k + distance < distinct) {
        prefetch_update<kDim, kUpdate>(arrays,
                                       static_cast<int64_t>(keys[starts[k + distance]] >> 32));
      }
      std::fill_n(sum, kDim, 0.0f);
      for (uint32_t j = starts[k]; j < starts[k + 1]; ++j) {
        const float* g = gradient + bag_of(static_cast<int64_t>(keys[j] & 0xffffffffu)) * kDim;
        for (int64_t d = 0; d < kDim; ++d) sum[d] += g[d];
      }
      update_row<kDim, kUpdate>(arrays, static_cast<int64_t>(keys[starts[k]] >> 32), sum);
    }
    return;
  }
  for (int64_t i = 0; i < std::min(distance, n); ++i) {
    prefetch_update<kDim, kUpdate>(arrays, rows[i]);
  }
  for (int64_t i = 0; i < n; ++i) {
    if (i + distance < n) prefetch_update<kDim, kUpdate>(arrays, rows[i + distance]);
    update_row<kDim, kUpdate>(arrays, rows[i], gradient + bag_of(i) * kDim);
  }
}

template <int64_t kDim>
[[gnu::always_inline]] inline void update_width(Update update, const UpdateArrays& arrays,
                                                const float* gradient, const int64_t* rows,
                                                const int64_t* bags, int64_t bag_size, int64_t n,
                                                int64_t distance, RowGroups* groups) {
  switch (update) {
    case Update::kSgd:
      update_items<kDim, Update::kSgd>(arrays, gradient, rows, bags, bag_size, n, distance, groups);
      break;
    case Update::kAdagrad:
      update_items<kDim, Update::kAdagrad>(arrays, gradient, rows, bags, bag_size, n, distance,
                                           groups);
      break;
    case Update::kRowwiseAdagrad:
      update_items<kDim, Update::kRowwiseAdagrad>(arrays, gradient, rows, bags, bag_size, n,
                                                  distance, groups);
      break;
    case Update::kAdam:
      update_items<kDim, Update::kAdam>(arrays, gradient, rows, bags, bag_size, n, distance,
                                        groups);
      break;
  }
}

RECEMB_BENCH_BEST_ISA void update(Update kind, int64_t dim, const UpdateArrays& arrays,
                                  const float* gradient, const int64_t* rows, const int64_t* bags,
                                  int64_t bag_size, int64_t n, int64_t distance,
                                  RowGroups* groups) {
  switch (dim) {
    case 16:
      update_width<16>(kind, arrays, gradient, rows, bags, bag_size, n, distance, groups);
      break;
    case 64:
      update_width<64>(kind, arrays, gradient, rows, bags, bag_size, n, distance, groups);
      break;
    default:
      update_width<128>(kind, arrays, gradient, rows, bags, bag_size, n, distance, groups);
  }
}

// ---------------------------------------------------------------------------------------------
// The plain tables (one alive at a time: a new shape frees the previous one first) and the ids of
// a step as row ids of the F tables laid end to end.

// Cheap, not constant, values in [-0.05, 0.05).
void fill_table(float* values, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t hash = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
    values[i] = static_cast<float>(hash >> 40) * (0.1f / 16777216.0f) - 0.05f;
  }
}

struct PlainTables {
  std::unique_ptr<HugeBuffer> weights;
  std::vector<std::unique_ptr<HugeBuffer>> slots;
  Update slots_of = Update::kSgd;
  double huge_fraction = -1.0;

  UpdateArrays arrays() {
    return {.weights = weights->data(),
            .slot0 = slots.empty() ? nullptr : slots[0]->data(),
            .slot1 = slots.size() < 2 ? nullptr : slots[1]->data()};
  }
};

PlainTables& plain_tables_for(const Workload& workload, Update update, bool with_slots) {
  static PlainTables tables;
  const int64_t floats = workload.total_rows() * workload.dim;
  if (!with_slots || tables.slots_of != update || tables.weights == nullptr ||
      tables.weights->size() != floats) {
    tables.slots.clear();
  }
  if (tables.weights == nullptr || tables.weights->size() != floats) {
    tables.weights.reset();
    tables.weights = std::make_unique<HugeBuffer>(floats);
    fill_table(tables.weights->data(), floats);
    tables.huge_fraction = huge_page_fraction(tables.weights->data());
  }
  if (with_slots && tables.slots.empty()) {
    for (int s = 0; s < num_slots(update); ++s) {
      const int64_t slot_floats =
          update == Update::kRowwiseAdagrad ? workload.total_rows() : floats;
      tables.slots.push_back(std::make_unique<HugeBuffer>(slot_floats));
      const float initial = update == Update::kAdagrad ? 0.1f : 0.0f;
      // Touch every page (a zero page would be shared and stay in the caches).
      std::fill_n(tables.slots.back()->data(), slot_floats, initial);
    }
    tables.slots_of = update;
  }
  return tables;
}

// The ids of up to a few steps, feature f's ids offset by f x rows.
struct StepIds {
  std::vector<std::vector<int64_t>> steps;  // one flat [F B, L] array per step
};

const StepIds& step_ids_for(const Workload& workload, const IdStream& stream) {
  static StepIds cached;
  static std::tuple<int64_t, IdDistribution, int64_t, int64_t> key;
  const auto wanted =
      std::make_tuple(workload.rows, workload.ids, workload.bag_size, workload.num_tables);
  if (!cached.steps.empty() && key == wanted) return cached;
  cached.steps.clear();
  constexpr int64_t kMaxIds = int64_t{1} << 23;  // 64 MiB of ids
  const int64_t num_steps =
      std::clamp<int64_t>(kMaxIds / workload.ids_per_step(), 1, stream.num_steps());
  for (int64_t k = 0; k < num_steps; ++k) {
    std::vector<int64_t>& ids = cached.steps.emplace_back();
    ids.reserve(static_cast<size_t>(workload.ids_per_step()));
    for (int64_t f = 0; f < workload.num_tables; ++f) {
      const int64_t* feature = stream.feature_ids(k, f);
      for (int64_t j = 0; j < workload.ids_per_feature(); ++j) {
        ids.push_back(feature[j] + f * workload.rows);
      }
    }
  }
  key = wanted;
  return cached;
}

// ---------------------------------------------------------------------------------------------
// Keyed gathers: what a dynamic table's lookup (int64 keys, not row ids) can cost in each layout,
// the keys being the hashes of the static workload's row ids (docs/performance.md, "Dynamic
// tables"). Every layout is at most 80% full, as the library's index.
//
//   index:        a hash index apart from the rows (64-byte buckets of 5 keys and their slots,
//                 linear probing over buckets, as storage/key_index.h), every key's bucket
//                 prefetched `distance` keys ahead; then the gather of BM_Gather by slot. Two
//                 random accesses a key.
//   beside_rows:  each row preceded by a 64-byte line holding its key (row stride dim + 16
//                 floats), the row's position found by linear probing from the key's hash
//                 position; the line and the row at that position prefetched `distance` keys
//                 ahead. One random access a key held at its hash position, more for the others.
//   beside_rows_at_home: the same table read at each key's hash position only (its key compared,
//                 the row summed whether it matched or not): the bound of every layout that finds
//                 a key in the lines of its row. Counter `at_home`: the share of keys found there.

constexpr double kKeyedLoad = 0.8;

int64_t key_of_row(int64_t row) {
  return static_cast<int64_t>(recemb::internal::mix_key(row ^ 0x5bd1e995));
}

struct KeyedIndex {
  static constexpr int kWidth = 5;
  static constexpr int64_t kEmpty = std::numeric_limits<int64_t>::min();  // no key is (bench)
  struct alignas(64) Bucket {
    int64_t keys[kWidth] = {kEmpty, kEmpty, kEmpty, kEmpty, kEmpty};
    uint32_t slots[kWidth] = {};
  };
  std::vector<Bucket> buckets;

  size_t home(int64_t key) const {
    return recemb::internal::scale_hash(recemb::internal::mix_key(key), buckets.size());
  }
  size_t next(size_t b) const { return b + 1 == buckets.size() ? 0 : b + 1; }
  void insert(int64_t key, uint32_t slot) {
    for (size_t b = home(key);; b = next(b)) {
      for (int e = 0; e < kWidth; ++e) {
        if (buckets[b].keys[e] == kEmpty) {
          buckets[b].keys[e] = key;
          buckets[b].slots[e] = slot;
          return;
        }
      }
    }
  }
  // The slot of a held key (every key searched is), searching from its home bucket.
  int64_t find_from(size_t home, int64_t key) const {
    for (size_t b = home;; b = next(b)) {
      unsigned matches = 0;
      for (int e = 0; e < kWidth; ++e) {
        matches |= static_cast<unsigned>(buckets[b].keys[e] == key) << e;
      }
      if (matches != 0) return buckets[b].slots[std::countr_zero(matches)];
    }
  }
};

// Rows with their keys beside them: position p's key at floats [p * stride, + 2), its row at
// [p * stride + 16, + dim).
struct KeysBesideRows {
  static constexpr int64_t kEmpty = std::numeric_limits<int64_t>::min();
  std::unique_ptr<HugeBuffer> buffer;
  int64_t positions = 0;
  int64_t stride = 0;  // floats

  int64_t key_at(int64_t p) const {
    int64_t key = 0;
    std::memcpy(&key, buffer->data() + p * stride, sizeof key);
    return key;
  }
  void set_key(int64_t p, int64_t key) {
    std::memcpy(buffer->data() + p * stride, &key, sizeof key);
  }
  int64_t home(int64_t key) const {
    return static_cast<int64_t>(recemb::internal::scale_hash(recemb::internal::mix_key(key),
                                                             static_cast<size_t>(positions)));
  }
};

// The keyed tables of one workload (one alive at a time, as the plain tables).
struct KeyedTables {
  int64_t rows = -1;
  int64_t dim = 0;
  KeyedIndex index;
  KeysBesideRows beside;
  double at_home = 0.0;
};

// The one alive (the step benchmarks free it: keyed and plain tables with slots of a 4 GiB
// workload would not fit beside each other).
KeyedTables& keyed_tables() {
  static KeyedTables tables;
  return tables;
}

KeyedTables& keyed_tables_for(const Workload& workload) {
  KeyedTables& tables = keyed_tables();
  if (tables.rows == workload.total_rows() && tables.dim == workload.dim) return tables;
  tables = KeyedTables{};
  const int64_t rows = workload.total_rows();
  const auto slots = static_cast<int64_t>(static_cast<double>(rows) / kKeyedLoad) + 1;
  tables.index.buckets.assign(static_cast<size_t>(slots / KeyedIndex::kWidth + 1), {});
  for (int64_t row = 0; row < rows; ++row) {
    tables.index.insert(key_of_row(row), static_cast<uint32_t>(row));
  }
  KeysBesideRows& beside = tables.beside;
  beside.positions = slots;
  beside.stride = workload.dim + kCacheLineFloats;
  beside.buffer = std::make_unique<HugeBuffer>(beside.positions * beside.stride);
  fill_table(beside.buffer->data(), beside.positions * beside.stride);
  for (int64_t p = 0; p < beside.positions; ++p) beside.set_key(p, KeysBesideRows::kEmpty);
  int64_t at_home = 0;
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t key = key_of_row(row);
    int64_t p = beside.home(key);
    at_home += beside.key_at(p) == KeysBesideRows::kEmpty;
    while (beside.key_at(p) != KeysBesideRows::kEmpty) p = p + 1 == beside.positions ? 0 : p + 1;
    beside.set_key(p, key);
  }
  tables.at_home = static_cast<double>(at_home) / static_cast<double>(rows);
  // The layouts must find what they hold: about 1,000 keys checked in each.
  for (int64_t row = 0; row < rows; row += std::max<int64_t>(1, rows / 1000)) {
    const int64_t key = key_of_row(row);
    int64_t p = beside.home(key);
    while (beside.key_at(p) != key && beside.key_at(p) != KeysBesideRows::kEmpty) {
      p = p + 1 == beside.positions ? 0 : p + 1;
    }
    if (tables.index.find_from(tables.index.home(key), key) != row || beside.key_at(p) != key) {
      std::fprintf(stderr, "roofline_bench: keyed tables lost the key of row %lld\n",
                   static_cast<long long>(row));
      std::abort();
    }
  }
  tables.rows = rows;
  tables.dim = workload.dim;
  return tables;
}

enum class KeyedLayout { kIndex, kBesideRows, kBesideRowsAtHome };

// out[b] = sum of the rows of bag b's keys, bags [first_bag, last_bag), from `beside`
// (kAtHome: each key's hash position only).
template <int64_t kDim, bool kAtHome>
[[gnu::always_inline]] inline void gather_beside_rows(const KeysBesideRows& beside,
                                                      const int64_t* __restrict keys,
                                                      int64_t bag_size, int64_t first_bag,
                                                      int64_t last_bag, int64_t distance,
                                                      float* __restrict out, int64_t& missed) {
  const float* table = beside.buffer->data();
  const int64_t end = last_bag * bag_size;
  // Each key hashed once: its home position computed when it is prefetched, kept in a ring.
  constexpr int64_t kRing = 256;  // > any distance registered
  int64_t homes[kRing];
  const auto prefetch = [&](int64_t j) {
    const int64_t home = beside.home(keys[j]);
    homes[j % kRing] = home;
    prefetch_row<kDim + kCacheLineFloats>(table + home * beside.stride);
  };
  const int64_t ahead = std::clamp<int64_t>(distance, 1, kRing);
  for (int64_t j = first_bag * bag_size; j < std::min(end, first_bag * bag_size + ahead); ++j) {
    prefetch(j);
  }
  for (int64_t b = first_bag; b < last_bag; ++b) {
    float acc[kDim] = {};
    for (int64_t position = 0; position < bag_size; ++position) {
      const int64_t j = b * bag_size + position;
      int64_t p = homes[j % kRing];
      if (j + ahead < end) prefetch(j + ahead);
      const int64_t key = keys[j];
      if constexpr (kAtHome) {
        missed += beside.key_at(p) != key;
      } else {
        while (beside.key_at(p) != key) p = p + 1 == beside.positions ? 0 : p + 1;
      }
      const float* __restrict row = table + p * beside.stride + kCacheLineFloats;
      for (int64_t d = 0; d < kDim; ++d) acc[d] += row[d];
    }
    std::copy_n(acc, kDim, out + b * kDim);
  }
}

template <int64_t kDim>
[[gnu::always_inline]] inline void gather_beside_width(const KeysBesideRows& beside, bool at_home,
                                                       const int64_t* keys, int64_t bag_size,
                                                       int64_t first_bag, int64_t last_bag,
                                                       int64_t distance, float* out,
                                                       int64_t& missed) {
  if (at_home) {
    gather_beside_rows<kDim, true>(beside, keys, bag_size, first_bag, last_bag, distance, out,
                                   missed);
  } else {
    gather_beside_rows<kDim, false>(beside, keys, bag_size, first_bag, last_bag, distance, out,
                                    missed);
  }
}

RECEMB_BENCH_BEST_ISA void gather_beside(const KeysBesideRows& beside, bool at_home, int64_t dim,
                                         const int64_t* keys, int64_t bag_size, int64_t first_bag,
                                         int64_t last_bag, int64_t distance, float* out,
                                         int64_t& missed) {
  switch (dim) {
    case 16:
      gather_beside_width<16>(beside, at_home, keys, bag_size, first_bag, last_bag, distance, out,
                              missed);
      break;
    case 64:
      gather_beside_width<64>(beside, at_home, keys, bag_size, first_bag, last_bag, distance, out,
                              missed);
      break;
    default:
      gather_beside_width<128>(beside, at_home, keys, bag_size, first_bag, last_bag, distance, out,
                               missed);
  }
}

// slots[j] = the slot of keys[j] for j in [first, last), each key's bucket prefetched `distance`
// keys ahead (each key hashed once, as gather_beside_rows).
void find_in_index(const KeyedIndex& index, const int64_t* keys, int64_t first, int64_t last,
                   int64_t distance, int64_t* slots) {
  constexpr int64_t kRing = 256;
  size_t homes[kRing];
  const auto prefetch = [&](int64_t j) {
    const size_t home = index.home(keys[j]);
    homes[j % kRing] = home;
    __builtin_prefetch(&index.buckets[home], 0, 2);
  };
  const int64_t ahead = std::clamp<int64_t>(distance, 1, kRing);
  for (int64_t j = first; j < std::min(last, first + ahead); ++j) prefetch(j);
  for (int64_t j = first; j < last; ++j) {
    const size_t home = homes[j % kRing];
    if (j + ahead < last) prefetch(j + ahead);
    slots[j] = index.find_from(home, keys[j]);
  }
}

// ---------------------------------------------------------------------------------------------
// The benchmarks.

void BM_SequentialRead(benchmark::State& state, int64_t bytes, int threads) {
  HugeBuffer buffer(bytes / 4);
  std::fill_n(buffer.data(), buffer.size(), 1.0f);
  Workers workers(threads);
  std::vector<float> sums(static_cast<size_t>(threads));
  const std::function<void(int)> task = [&](int t) {
    const auto [begin, end] = split(buffer.size(), t, threads);
    sums[static_cast<size_t>(t)] = sum_floats(buffer.data() + begin, end - begin);
  };
  for (auto _ : state) {
    workers.run(task);
    benchmark::DoNotOptimize(sums.data());
  }
  const auto total = static_cast<int64_t>(state.iterations()) * bytes;
  state.SetBytesProcessed(total);
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(total) * 1e-9, benchmark::Counter::kIsRate);
  state.counters["thp"] = huge_page_fraction(buffer.data());
}

void BM_Gather(benchmark::State& state, Workload workload, int64_t distance, int interleave) {
  const IdStream stream(workload);
  const StepIds& step_ids = step_ids_for(workload, stream);
  PlainTables& tables = plain_tables_for(workload, Update::kSgd, false);
  const float* table = tables.weights->data();
  std::vector<float> out(static_cast<size_t>(workload.bags_per_step() * workload.dim));
  Workers workers(workload.threads);
  size_t next = 0;
  const std::function<void(int)> task = [&](int t) {
    const auto [first, last] = split(workload.bags_per_step(), t, workload.threads);
    gather(table, workload.dim, step_ids.steps[next].data(), workload.bag_size, first, last,
           distance, interleave, out.data());
  };
  for (auto _ : state) {
    workers.run(task);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
    next = (next + 1) % step_ids.steps.size();
  }
  report(state, workload.ids_per_step(), bytes_per_row("lookup", workload.dim),
         stream.unique_fraction());
  state.counters["thp"] = tables.huge_fraction;
}

// summed: BM_GatherSumUpdate (each distinct row once, its gradients summed), else BM_GatherUpdate.
void BM_GatherUpdate(benchmark::State& state, Workload workload, std::string optimizer,
                     int64_t distance, int interleave, bool summed) {
  keyed_tables() = KeyedTables{};
  const Update kind = update_of(optimizer);
  const IdStream stream(workload);
  const StepIds& step_ids = step_ids_for(workload, stream);
  PlainTables& tables = plain_tables_for(workload, kind, true);
  const UpdateArrays arrays = tables.arrays();
  const float* gradient = gradient_for(workload.bags_per_step(), workload.dim).data();
  std::vector<float> out(static_cast<size_t>(workload.bags_per_step() * workload.dim));
  // With several threads, thread t updates the ids of its 1/T of the rows: its (row, bag) pairs
  // of every step are listed here, before the timing, so the loop is the update alone.
  struct ThreadItems {
    std::vector<int64_t> rows;
    std::vector<int64_t> bags;
  };
  std::vector<std::vector<ThreadItems>> items(step_ids.steps.size());
  if (workload.threads > 1) {
    for (size_t s = 0; s < step_ids.steps.size(); ++s) {
      items[s].resize(static_cast<size_t>(workload.threads));
      for (int t = 0; t < workload.threads; ++t) {
        const auto [first_row, last_row] = split(workload.total_rows(), t, workload.threads);
        ThreadItems& mine = items[s][static_cast<size_t>(t)];
        for (int64_t j = 0; j < workload.ids_per_step(); ++j) {
          const int64_t row = step_ids.steps[s][static_cast<size_t>(j)];
          if (row >= first_row && row < last_row) {
            mine.rows.push_back(row);
            mine.bags.push_back(j / workload.bag_size);
          }
        }
      }
    }
  }
  std::vector<RowGroups> groups(static_cast<size_t>(workload.threads));
  for (RowGroups& mine : groups) {
    mine.row_bits =
        static_cast<int>(std::bit_width(static_cast<uint64_t>(workload.total_rows() - 1)));
  }
  Workers workers(workload.threads);
  size_t next = 0;
  const std::function<void(int)> gather_task = [&](int t) {
    const auto [first, last] = split(workload.bags_per_step(), t, workload.threads);
    gather(arrays.weights, workload.dim, step_ids.steps[next].data(), workload.bag_size, first,
           last, distance, interleave, out.data());
  };
  const std::function<void(int)> update_task = [&](int t) {
    if (workload.threads == 1) {
      update(kind, workload.dim, arrays, gradient, step_ids.steps[next].data(), nullptr,
             workload.bag_size, workload.ids_per_step(), distance, summed ? &groups[0] : nullptr);
      return;
    }
    const ThreadItems& mine = items[next][static_cast<size_t>(t)];
    update(kind, workload.dim, arrays, gradient, mine.rows.data(), mine.bags.data(),
           workload.bag_size, static_cast<int64_t>(mine.rows.size()), distance,
           summed ? &groups[static_cast<size_t>(t)] : nullptr);
  };
  for (auto _ : state) {
    workers.run(gather_task);
    benchmark::DoNotOptimize(out.data());
    workers.run(update_task);
    benchmark::ClobberMemory();
    next = (next + 1) % step_ids.steps.size();
  }
  report(state, workload.ids_per_step(), bytes_per_row(optimizer, workload.dim),
         stream.unique_fraction());
  state.counters["thp"] = tables.huge_fraction;
}

// The keyed gathers (above: the layouts).
void BM_KeyedGather(benchmark::State& state, Workload workload, KeyedLayout layout) {
  const IdStream stream(workload);
  const StepIds& step_ids = step_ids_for(workload, stream);
  KeyedTables& keyed = keyed_tables_for(workload);
  const float* table = layout == KeyedLayout::kIndex
                           ? plain_tables_for(workload, Update::kSgd, false).weights->data()
                           : nullptr;
  std::vector<std::vector<int64_t>> keys(step_ids.steps.size());
  for (size_t s = 0; s < keys.size(); ++s) {
    for (const int64_t row : step_ids.steps[s]) keys[s].push_back(key_of_row(row));
  }
  std::vector<int64_t> slots(static_cast<size_t>(workload.ids_per_step()));
  std::vector<float> out(static_cast<size_t>(workload.bags_per_step() * workload.dim));
  std::vector<int64_t> missed(static_cast<size_t>(workload.threads), 0);
  Workers workers(workload.threads);
  size_t next = 0;
  const std::function<void(int)> task = [&](int t) {
    const auto [first, last] = split(workload.bags_per_step(), t, workload.threads);
    const int64_t* step_keys = keys[next].data();
    if (layout == KeyedLayout::kIndex) {
      find_in_index(keyed.index, step_keys, first * workload.bag_size, last * workload.bag_size,
                    kBestPrefetch / 2, slots.data());
      gather(table, workload.dim, slots.data(), workload.bag_size, first, last, kBestPrefetch,
             kBestInterleave, out.data());
    } else {
      gather_beside(keyed.beside, layout == KeyedLayout::kBesideRowsAtHome, workload.dim, step_keys,
                    workload.bag_size, first, last, kBestPrefetch, out.data(),
                    missed[static_cast<size_t>(t)]);
    }
  };
  for (auto _ : state) {
    workers.run(task);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
    next = (next + 1) % keys.size();
  }
  report(state, workload.ids_per_step(), bytes_per_row("lookup", workload.dim),
         stream.unique_fraction());
  state.counters["at_home"] = keyed.at_home;
}

// ---------------------------------------------------------------------------------------------
// Registration: the workloads of embedding_bench (workload.h), each shape's benchmarks together so
// that a table is built once.

void register_all() {
  const bool full = env_flag("RECEMB_BENCH_FULL");
  const bool tune = env_flag("RECEMB_BENCH_TUNE");
  const Shapes shapes = registered_shapes();
  if (!shapes.row_series) {
    const int64_t read_bytes =
        env_flag("RECEMB_BENCH_LARGE") || env_flag("RECEMB_BENCH_HUGE") ? kGiB : 64 * kMiB;
    for (const int threads : {1, 2}) {
      const std::string name = "BM_SequentialRead/bytes:" + bytes_name(read_bytes) +
                               "/threads:" + std::to_string(threads);
      configure(benchmark::RegisterBenchmark(name.c_str(), BM_SequentialRead, read_bytes, threads));
    }
  }
  std::vector<std::pair<int64_t, int>> settings = {{kBestPrefetch, kBestInterleave}};
  if (tune) {
    settings.clear();
    for (const int64_t distance : {0, 16, 32, 64}) {
      for (const int interleave : {1, 2, 4}) settings.emplace_back(distance, interleave);
    }
  }
  const std::string best = "/prefetch:" + std::to_string(kBestPrefetch) +
                           "/interleave:" + std::to_string(kBestInterleave);
  for_each_workload(
      shapes, full,
      [&](const Workload& workload) {
        for (const auto& [distance, interleave] : settings) {
          const std::string suffix =
              "/prefetch:" + std::to_string(distance) + "/interleave:" + std::to_string(interleave);
          configure(benchmark::RegisterBenchmark(("BM_Gather/" + workload.name() + suffix).c_str(),
                                                 BM_Gather, workload, distance, interleave));
        }
        if (workload.num_tables != 1 || workload.bag_size != 20) return;
        for (const auto& [layout, name] :
             {std::pair{KeyedLayout::kIndex, "index"},
              std::pair{KeyedLayout::kBesideRows, "beside_rows"},
              std::pair{KeyedLayout::kBesideRowsAtHome, "beside_rows_at_home"}}) {
          configure(benchmark::RegisterBenchmark(
              ("BM_KeyedGather/" + std::string(name) + "/" + workload.name()).c_str(),
              BM_KeyedGather, workload, layout));
        }
      },
      [&](const Workload& workload, const std::string& optimizer) {
        for (const bool summed : {false, true}) {
          const std::string name =
              std::string(summed ? "BM_GatherSumUpdate/" : "BM_GatherUpdate/") + optimizer + "/" +
              workload.name() + best;
          configure(benchmark::RegisterBenchmark(name.c_str(), BM_GatherUpdate, workload, optimizer,
                                                 kBestPrefetch, kBestInterleave, summed));
        }
      });
}

}  // namespace
}  // namespace recemb_bench

int main(int argc, char** argv) {
  return recemb_bench::run_benchmarks(argc, argv, recemb_bench::register_all);
}
