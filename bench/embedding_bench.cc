// Throughput of recemb::Embedding's lookup and fused backward on one table, next to what this
// machine's memory allows: a plain prefetching gather (the roofline of the lookup), a plain
// gather + SGD scatter (the roofline of lookup + SGD) and a sequential read.
//
// Workload (as shared/reference/baseline-measurements.md): one table of R = table_bytes / (4 dim)
// float32 rows, one feature, batches of B = 4096 bags x L ids (int64, DenseIds of shape [B, L]),
// sum combiner. Ids come from a pool of 2^22 ids generated in advance and used in turn: uniform
// over [0, R), or Zipf: a continuous power law with density ~ x^-1.05 over ranks, rank r -> row
// (r * 2654435761) mod R so hot rows are scattered.
//
// Every benchmark reports items_processed = rows looked up, bytes_processed, and the counters
// Mrows/s, GB/s (1e9 bytes) and, for id streams, uniq (the share of distinct ids in one batch).
// Bytes per looked-up row: dim * 4 for a gather; for lookup + update the nominal traffic
// dim * 4 * (1 gather + 2 read/write of the row + 2 per slot of width dim), as the baseline counts
// it (every id, no de-duplication): SGD 3, Adagrad 5, Adam 7 times the row, row-wise Adagrad 3.
//
// cache:warm runs batch after batch; cache:cold reads a 48 MiB buffer (1.5x the L3) before each
// batch, outside the timed region, so the table starts out of the caches.
//
// The default set is small (it is smoke-run in CI); RECEMB_BENCH_LARGE=1 adds the 1 GiB tables
// (and a 1 GiB sequential read), RECEMB_BENCH_FULL=1 the whole dim x bag-size matrix for lookup +
// update. bench/README.md explains how to run it; docs/performance.md has the figures.
#include <algorithm>
#include <benchmark/benchmark.h>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <random>
#include <span>
#include <string>
#include <sys/mman.h>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "recemb/recemb.h"

namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kBatchSize = 4096;             // bags per batch
constexpr int64_t kPoolSize = int64_t{1} << 22;  // ids generated in advance (32 MiB of int64)
constexpr int64_t kPrefetchDistance = 16;        // rows ahead, as the library's kernels
constexpr double kZipfExponent = 1.05;
constexpr uint64_t kZipfScatter = 2654435761u;  // rank -> row multiplier (a prime)
constexpr int64_t kEvictBytes = 48 * kMiB;      // read before a cold batch
constexpr int64_t kUniqueSampleBatches = 4;     // batches averaged for the uniq counter
constexpr float kGradientScale = 1e-3f;         // the fixed gradient is uniform in +-this
constexpr int kCacheLineFloats = 16;

// The plain loops are compiled for AVX-512, AVX2 and baseline x86-64 and the best one the CPU
// supports is picked at load time (GCC/Clang function multi-versioning), so that they show what
// the machine can do, whatever ISA the library itself was built for.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define RECEMB_BENCH_BEST_ISA __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define RECEMB_BENCH_BEST_ISA
#endif

bool env_flag(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' && std::strcmp(value, "0") != 0;
}

enum class IdDistribution { kUniform, kZipf };
enum class CacheState { kWarm, kCold };

const char* distribution_name(IdDistribution distribution) {
  return distribution == IdDistribution::kUniform ? "uniform" : "zipf";
}

std::string bytes_name(int64_t bytes) {
  return bytes % kGiB == 0 ? std::to_string(bytes / kGiB) + "GiB"
                           : std::to_string(bytes / kMiB) + "MiB";
}

// One point of the benchmark matrix.
struct Case {
  int64_t table_bytes = 8 * kMiB;
  int64_t dim = 64;
  int64_t bag_size = 20;
  IdDistribution ids = IdDistribution::kUniform;
  int threads = 1;
  CacheState cache = CacheState::kWarm;

  int64_t rows() const { return table_bytes / (4 * dim); }
  int64_t ids_per_batch() const { return kBatchSize * bag_size; }
  std::string name() const {
    return "table:" + bytes_name(table_bytes) + "/dim:" + std::to_string(dim) +
           "/bag:" + std::to_string(bag_size) + "/ids:" + distribution_name(ids) +
           "/threads:" + std::to_string(threads) +
           "/cache:" + (cache == CacheState::kWarm ? "warm" : "cold");
  }
};

// ---------------------------------------------------------------------------------------------
// Memory and threads for the plain loops.

// A zero-filled anonymous mapping advised to use transparent huge pages, as the library maps its
// tables (src/storage/float_buffer.cc), so that the roofline runs on the same kind of pages.
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

// A fixed set of threads for the plain loops: run(fn) calls fn(t) for t in [0, num_threads), t = 0
// on the calling thread, and returns when all have returned. Helpers sleep between runs, so they
// take no CPU from the other benchmarks.
class Workers {
 public:
  explicit Workers(int num_threads) {
    for (int t = 1; t < num_threads; ++t) helpers_.emplace_back([this, t] { loop(t); });
  }
  ~Workers() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_all();
    for (std::thread& helper : helpers_) helper.join();
  }
  Workers(const Workers&) = delete;
  Workers& operator=(const Workers&) = delete;

  int num_threads() const { return static_cast<int>(helpers_.size()) + 1; }

  void run(const std::function<void(int)>& task) {
    if (helpers_.empty()) {
      task(0);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      task_ = &task;
      unfinished_ = helpers_.size();
      ++generation_;
    }
    ready_.notify_all();
    task(0);
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return unfinished_ == 0; });
  }

 private:
  void loop(int thread) {
    uint64_t seen = 0;
    while (true) {
      const std::function<void(int)>* task = nullptr;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        ready_.wait(lock, [&] { return stopping_ || generation_ != seen; });
        if (stopping_) return;
        seen = generation_;
        task = task_;
      }
      (*task)(thread);
      std::lock_guard<std::mutex> lock(mutex_);
      if (--unfinished_ == 0) done_.notify_one();
    }
  }

  std::vector<std::thread> helpers_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::condition_variable done_;
  const std::function<void(int)>* task_ = nullptr;
  size_t unfinished_ = 0;
  uint64_t generation_ = 0;
  bool stopping_ = false;
};

// [begin, end) of part `part` of `count` split into `parts` nearly equal pieces.
std::pair<int64_t, int64_t> split(int64_t count, int part, int parts) {
  return {count * part / parts, count * (part + 1) / parts};
}

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

void evict_caches() {
  static const std::vector<float> buffer(static_cast<size_t>(kEvictBytes / 4), 1.0f);
  benchmark::DoNotOptimize(sum_floats(buffer.data(), static_cast<int64_t>(buffer.size())));
}

// ---------------------------------------------------------------------------------------------
// Id pools and batches, cached for the table size at hand (the pools of the previous table size
// are freed when the size changes).

std::vector<int64_t> make_id_pool(int64_t rows, IdDistribution distribution) {
  std::mt19937_64 random(distribution == IdDistribution::kUniform ? 1 : 2);
  std::vector<int64_t> ids(static_cast<size_t>(kPoolSize));
  if (distribution == IdDistribution::kUniform) {
    std::uniform_int_distribution<int64_t> uniform(0, rows - 1);
    for (int64_t& id : ids) id = uniform(random);
    return ids;
  }
  // Inverse CDF of the density ~ x^-s on [1, rows + 1): x = (1 + u ((rows + 1)^(1-s) -
  // 1))^(1/(1-s)), rank = floor(x) - 1.
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const double power = 1.0 - kZipfExponent;
  const double top = std::pow(static_cast<double>(rows) + 1.0, power);
  for (int64_t& id : ids) {
    const double x = std::pow(1.0 + uniform(random) * (top - 1.0), 1.0 / power);
    const int64_t rank = std::clamp<int64_t>(static_cast<int64_t>(x) - 1, 0, rows - 1);
    id = static_cast<int64_t>(static_cast<uint64_t>(rank) * kZipfScatter %
                              static_cast<uint64_t>(rows));
  }
  return ids;
}

// The batches of one bag size over a pool: batch k is pool[k * B * L, (k + 1) * B * L).
struct Batches {
  std::vector<recemb::FeatureInput> inputs;  // one DenseIds [B, L] per batch
  std::vector<const int64_t*> ids;           // the same batches as raw pointers
  double unique_fraction = 0.0;              // distinct ids / ids, averaged over a few batches
};

struct IdPool {
  std::vector<int64_t> ids;
  std::map<int64_t, Batches> batches;  // by bag size
};

const Batches& batches_for(const Case& c) {
  static std::map<std::pair<int64_t, IdDistribution>, IdPool> pools;
  std::erase_if(pools, [&](const auto& entry) { return entry.first.first != c.rows(); });
  IdPool& pool = pools[{c.rows(), c.ids}];
  if (pool.ids.empty()) pool.ids = make_id_pool(c.rows(), c.ids);
  Batches& batches = pool.batches[c.bag_size];
  if (!batches.inputs.empty()) return batches;
  const int64_t per_batch = c.ids_per_batch();
  const int64_t num_batches = kPoolSize / per_batch;
  for (int64_t k = 0; k < num_batches; ++k) {
    const int64_t* first = pool.ids.data() + k * per_batch;
    batches.ids.push_back(first);
    batches.inputs.emplace_back(
        recemb::DenseIds{.ids = std::span<const int64_t>(first, static_cast<size_t>(per_batch)),
                         .shape = {kBatchSize, c.bag_size}});
  }
  const int64_t sampled = std::min(kUniqueSampleBatches, num_batches);
  std::vector<int64_t> sorted;
  for (int64_t k = 0; k < sampled; ++k) {
    sorted.assign(batches.ids[k], batches.ids[k] + per_batch);
    std::sort(sorted.begin(), sorted.end());
    const auto distinct = std::unique(sorted.begin(), sorted.end()) - sorted.begin();
    batches.unique_fraction += static_cast<double>(distinct) / static_cast<double>(per_batch);
  }
  batches.unique_fraction /= static_cast<double>(sampled);
  return batches;
}

// ---------------------------------------------------------------------------------------------
// Cached tables: at most one Embedding and one plain table are alive; building another frees the
// previous one first.

recemb::Embedding& embedding_for(const Case& c, const std::string& optimizer) {
  static std::unique_ptr<recemb::Embedding> embedding;
  static std::tuple<int64_t, int64_t, int, std::string> key;
  const auto wanted = std::make_tuple(c.rows(), c.dim, c.threads, optimizer);
  if (embedding == nullptr || key != wanted) {
    embedding.reset();
    embedding = std::make_unique<recemb::Embedding>(
        std::vector<recemb::TableConfig>{{.name = "table",
                                          .vocabulary_size = c.rows(),
                                          .dim = c.dim,
                                          .combiner = recemb::Combiner::kSum}},
        std::vector<recemb::FeatureConfig>{{.name = "feature", .table = "table"}},
        recemb::EmbeddingOptions{.optimizer = recemb::optimizer_from_name(optimizer),
                                 .num_threads = c.threads,
                                 .seed = 1});
    key = wanted;
  }
  return *embedding;
}

HugeBuffer& plain_table_for(const Case& c) {
  static std::unique_ptr<HugeBuffer> table;
  const int64_t floats = c.rows() * c.dim;
  if (table == nullptr || table->size() != floats) {
    table.reset();
    table = std::make_unique<HugeBuffer>(floats);
    std::mt19937 random(3);
    std::uniform_real_distribution<float> uniform(-0.1f, 0.1f);
    for (int64_t i = 0; i < floats; ++i) table->data()[i] = uniform(random);
  }
  return *table;
}

// The fixed gradient d(loss)/d(activations), [B, dim].
const std::vector<float>& gradient_for(int64_t dim) {
  static std::map<int64_t, std::vector<float>> gradients;
  std::vector<float>& gradient = gradients[dim];
  if (gradient.empty()) {
    std::mt19937 random(4);
    std::uniform_real_distribution<float> uniform(-kGradientScale, kGradientScale);
    gradient.resize(static_cast<size_t>(kBatchSize * dim));
    for (float& value : gradient) value = uniform(random);
  }
  return gradient;
}

// ---------------------------------------------------------------------------------------------
// Reporting.

void report(benchmark::State& state, int64_t rows_per_iteration, int64_t bytes_per_row,
            double unique_fraction) {
  const auto iterations = static_cast<int64_t>(state.iterations());
  const int64_t rows = iterations * rows_per_iteration;
  const int64_t bytes = rows * bytes_per_row;
  state.SetItemsProcessed(rows);
  state.SetBytesProcessed(bytes);
  state.counters["Mrows/s"] =
      benchmark::Counter(static_cast<double>(rows) * 1e-6, benchmark::Counter::kIsRate);
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(bytes) * 1e-9, benchmark::Counter::kIsRate);
  if (unique_fraction >= 0.0) state.counters["uniq"] = unique_fraction;
}

// Bytes of nominal memory traffic per looked-up row (see the top comment).
int64_t update_bytes_per_row(const std::string& optimizer, int64_t dim) {
  const int64_t row = dim * 4;
  if (optimizer == "sgd") return 3 * row;
  if (optimizer == "adagrad") return 5 * row;
  if (optimizer == "adam") return 7 * row;
  if (optimizer == "rowwise_adagrad") return 3 * row + 2 * 4;
  return 3 * row;
}

// ---------------------------------------------------------------------------------------------
// The plain loops.

inline void prefetch_row(const float* row, int64_t dim, bool for_write) {
  for (int64_t d = 0; d < dim; d += kCacheLineFloats) {
    if (for_write) {
      __builtin_prefetch(row + d, 1, 3);
    } else {
      __builtin_prefetch(row + d, 0, 3);
    }
  }
}

// out[b] = sum of the rows of bag b, for bags [first_bag, last_bag) of a dense [B, L] id batch.
RECEMB_BENCH_BEST_ISA void gather_sum(const float* table, int64_t dim, const int64_t* ids,
                                      int64_t bag_size, int64_t first_bag, int64_t last_bag,
                                      float* out) {
  const int64_t end = last_bag * bag_size;
  for (int64_t b = first_bag; b < last_bag; ++b) {
    float* __restrict acc = out + b * dim;
    std::fill_n(acc, dim, 0.0f);
    for (int64_t j = b * bag_size; j < (b + 1) * bag_size; ++j) {
      if (j + kPrefetchDistance < end) {
        prefetch_row(table + ids[j + kPrefetchDistance] * dim, dim, false);
      }
      const float* __restrict row = table + ids[j] * dim;
      for (int64_t d = 0; d < dim; ++d) acc[d] += row[d];
    }
  }
}

// row -= lr * gradient[bag] for every id of the batch whose row is in [first_row, last_row): with
// one row range per thread, every row is written by one thread only (no locks, no data race);
// duplicates are applied one after the other (no de-duplication).
RECEMB_BENCH_BEST_ISA void sgd_scatter(float* table, int64_t dim, const int64_t* ids,
                                       int64_t bag_size, const float* gradient, float learning_rate,
                                       int64_t first_row, int64_t last_row) {
  const auto owned = [=](int64_t row) { return row >= first_row && row < last_row; };
  const int64_t end = kBatchSize * bag_size;
  for (int64_t b = 0; b < kBatchSize; ++b) {
    const float* __restrict g = gradient + b * dim;
    for (int64_t j = b * bag_size; j < (b + 1) * bag_size; ++j) {
      if (j + kPrefetchDistance < end && owned(ids[j + kPrefetchDistance])) {
        prefetch_row(table + ids[j + kPrefetchDistance] * dim, dim, true);
      }
      if (!owned(ids[j])) continue;
      float* __restrict row = table + ids[j] * dim;
      for (int64_t d = 0; d < dim; ++d) row[d] -= learning_rate * g[d];
    }
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
}

void BM_GatherRoofline(benchmark::State& state, Case c) {
  const Batches& batches = batches_for(c);
  const float* table = plain_table_for(c).data();
  std::vector<float> out(static_cast<size_t>(kBatchSize * c.dim));
  Workers workers(c.threads);
  size_t next = 0;
  const std::function<void(int)> task = [&](int t) {
    const auto [first, last] = split(kBatchSize, t, c.threads);
    gather_sum(table, c.dim, batches.ids[next], c.bag_size, first, last, out.data());
  };
  for (auto _ : state) {
    if (c.cache == CacheState::kCold) {
      state.PauseTiming();
      evict_caches();
      state.ResumeTiming();
    }
    workers.run(task);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
    next = (next + 1) % batches.ids.size();
  }
  report(state, c.ids_per_batch(), c.dim * 4, batches.unique_fraction);
}

void BM_Lookup(benchmark::State& state, Case c) {
  const Batches& batches = batches_for(c);
  // An SGD table, so that BM_LookupAndUpdate/sgd of the same shape reuses it.
  recemb::Embedding& embedding = embedding_for(c, "sgd");
  std::vector<float> activations(static_cast<size_t>(kBatchSize * c.dim));
  const std::span<float> outputs[] = {activations};
  size_t next = 0;
  for (auto _ : state) {
    if (c.cache == CacheState::kCold) {
      state.PauseTiming();
      evict_caches();
      state.ResumeTiming();
    }
    embedding.lookup(std::span<const recemb::FeatureInput>(&batches.inputs[next], 1), outputs);
    benchmark::DoNotOptimize(activations.data());
    benchmark::ClobberMemory();
    next = (next + 1) % batches.inputs.size();
  }
  report(state, c.ids_per_batch(), c.dim * 4, batches.unique_fraction);
}

// The plain loop lookup + SGD is compared with: the gather, then the scatter update.
void BM_GatherSgdRoofline(benchmark::State& state, Case c) {
  const Batches& batches = batches_for(c);
  float* table = plain_table_for(c).data();
  const float* gradient = gradient_for(c.dim).data();
  const float learning_rate = 0.01f;
  std::vector<float> out(static_cast<size_t>(kBatchSize * c.dim));
  Workers workers(c.threads);
  size_t next = 0;
  const std::function<void(int)> gather = [&](int t) {
    const auto [first, last] = split(kBatchSize, t, c.threads);
    gather_sum(table, c.dim, batches.ids[next], c.bag_size, first, last, out.data());
  };
  const std::function<void(int)> scatter = [&](int t) {
    const auto [first_row, last_row] = split(c.rows(), t, c.threads);
    sgd_scatter(table, c.dim, batches.ids[next], c.bag_size, gradient, learning_rate, first_row,
                last_row);
  };
  for (auto _ : state) {
    workers.run(gather);
    benchmark::DoNotOptimize(out.data());
    workers.run(scatter);
    benchmark::ClobberMemory();
    next = (next + 1) % batches.ids.size();
  }
  report(state, c.ids_per_batch(), update_bytes_per_row("sgd", c.dim), batches.unique_fraction);
}

void BM_LookupAndUpdate(benchmark::State& state, Case c, std::string optimizer) {
  const Batches& batches = batches_for(c);
  recemb::Embedding& embedding = embedding_for(c, optimizer);
  std::vector<float> activations(static_cast<size_t>(kBatchSize * c.dim));
  const std::span<float> outputs[] = {activations};
  const std::span<const float> gradients[] = {gradient_for(c.dim)};
  recemb::LookupBatch batch;
  size_t next = 0;
  for (auto _ : state) {
    embedding.lookup(std::span<const recemb::FeatureInput>(&batches.inputs[next], 1), outputs,
                     batch);
    benchmark::DoNotOptimize(activations.data());
    embedding.apply_gradients(batch, gradients);
    benchmark::ClobberMemory();
    next = (next + 1) % batches.inputs.size();
  }
  report(state, c.ids_per_batch(), update_bytes_per_row(optimizer, c.dim), batches.unique_fraction);
}

// ---------------------------------------------------------------------------------------------
// Registration. Benchmarks of one table shape and thread count are registered together, plain
// loop right before the engine, so both run minutes apart at most on this noisy machine and each
// table is built once.

// Rates use wall-clock time; the CPU column is the CPU time of all the process's threads (the
// engine's workers included), which shows how busy the second thread was.
void configure(benchmark::internal::Benchmark* benchmark) {
  benchmark->UseRealTime()->MeasureProcessCPUTime()->Unit(benchmark::kMicrosecond);
}

void register_all(bool large, bool full) {
  const std::vector<int64_t> read_sizes = {large ? kGiB : 64 * kMiB};
  for (const int64_t bytes : read_sizes) {
    for (const int threads : {1, 2}) {
      const std::string name =
          "BM_SequentialRead/bytes:" + bytes_name(bytes) + "/threads:" + std::to_string(threads);
      configure(benchmark::RegisterBenchmark(name.c_str(), BM_SequentialRead, bytes, threads));
    }
  }
  std::vector<int64_t> table_sizes = {8 * kMiB};
  if (large) table_sizes.push_back(kGiB);
  const std::vector<std::string> optimizers = {"sgd", "adagrad", "rowwise_adagrad", "adam"};
  for (const int64_t table_bytes : table_sizes) {
    for (const int64_t dim : {16, 64, 128}) {
      for (const int threads : {1, 2}) {
        Case c{.table_bytes = table_bytes, .dim = dim, .threads = threads};
        for (const IdDistribution ids : {IdDistribution::kUniform, IdDistribution::kZipf}) {
          for (const int64_t bag_size : {1, 20}) {
            c.ids = ids;
            c.bag_size = bag_size;
            // A cold L=1 batch is too short to be timed next to a 48 MiB eviction; a cold 1 GiB
            // table is no different from a warm one (it never fits in the caches).
            const bool with_cold = bag_size == 20 && table_bytes < kGiB;
            for (const CacheState cache : {CacheState::kWarm, CacheState::kCold}) {
              if (cache == CacheState::kCold && !with_cold) continue;
              c.cache = cache;
              configure(benchmark::RegisterBenchmark(("BM_GatherRoofline/" + c.name()).c_str(),
                                                     BM_GatherRoofline, c));
              configure(
                  benchmark::RegisterBenchmark(("BM_Lookup/" + c.name()).c_str(), BM_Lookup, c));
            }
          }
        }
        c.cache = CacheState::kWarm;
        if (!full && dim != 64) continue;
        for (const std::string& optimizer : optimizers) {
          for (const IdDistribution ids : {IdDistribution::kUniform, IdDistribution::kZipf}) {
            for (const int64_t bag_size : {1, 20}) {
              if (!full && bag_size != 20) continue;
              c.ids = ids;
              c.bag_size = bag_size;
              if (optimizer == "sgd") {
                configure(benchmark::RegisterBenchmark(("BM_GatherSgdRoofline/" + c.name()).c_str(),
                                                       BM_GatherSgdRoofline, c));
              }
              configure(benchmark::RegisterBenchmark(
                  ("BM_LookupAndUpdate/" + optimizer + "/" + c.name()).c_str(), BM_LookupAndUpdate,
                  c, optimizer));
            }
          }
        }
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  register_all(env_flag("RECEMB_BENCH_LARGE"), env_flag("RECEMB_BENCH_FULL"));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
