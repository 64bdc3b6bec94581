// Serving models (recemb/serving.h): export time, open time with and without verification, and
// lookup throughput of float32, float16 and int8 models, next to Embedding::lookup of the same
// table; the same for a dynamic table holding the same rows under keys = row ids; and the dynamic
// table's index (serving/key_rows.h) alone.
//
// Model: one table of dim 64 holding 256 MiB of float32 (2^20 rows; also 1 GiB, 2^22 rows, with
// RECEMB_BENCH_LARGE=1, and 4 GiB, 2^24 rows, with RECEMB_BENCH_HUGE=1), one feature, sum combiner.
// Exported as float32, float16 and int8 it makes files of 256, 128 and 72 MiB (x4 for 1 GiB) in the
// system's temporary directory, removed at exit.
//
//   BM_Export/dtype:D/table:S              export_serving_model (encode, write, fsync, rename);
//                                          bytes = the file.
//   BM_Open/dtype:D/table:S/verify:V/cache:C
//                                          ServingModel::open with verify V, then the model is
//                                          destroyed (unmapped). cache:warm: the file is in the
//                                          page cache; cache:cold: its pages are dropped from it
//                                          before each open (posix_fadvise DONTNEED, not timed),
//                                          so the file is read from the disk. bytes = the file.
//   BM_ServingLookup/dtype:D/table:S/threads:T
//                                          ServingModel::lookup of B = 4096 bags x L = 20 int64
//                                          ids (DenseIds [4096, 20]) uniform over the rows; T
//                                          threads look up their own batches concurrently in the
//                                          one model (a lookup runs on its calling thread).
//   BM_EmbeddingLookup/table:S/threads:T   Embedding::lookup of the same ids in the float32 table
//                                          the models were exported from, num_threads = T.
//   .../vocabulary:dynamic                 BM_Open (verify:checksums, cache:warm) and
//                                          BM_ServingLookup of a model whose table is dynamic: the
//                                          static table's rows under keys 0 .. rows - 1, looked up
//                                          by the same ids (every key present). Open includes
//                                          building the key index.
//   BM_KeyRowsBuild/keys:N, BM_KeyRowsFind/keys:N
//                                          the index of N random int64 keys (1e6, 1e7): building
//                                          it (what open adds), and finding B L keys, half of them
//                                          absent (items = keys found).
// Lookups report items = rows looked up, Mrows/s, and GB/s = rows x the stored row's bytes (256
// for float32, 128 for float16, 72 for int8). Rates use wall-clock time.
// bench/README.md explains how to run it; docs/performance.md has the figures.
#include <algorithm>
#include <benchmark/benchmark.h>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <unistd.h>
#include <utility>
#include <vector>

#include "recemb/recemb.h"
#include "recemb/serving.h"

#include "benchmark_main.h"
#include "serving/key_rows.h"

namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kDim = 64;
constexpr int64_t kBatchSize = 4096;
constexpr int64_t kBagSize = 20;
constexpr int64_t kIdsPerBatch = kBatchSize * kBagSize;
constexpr int64_t kPoolSize = int64_t{1} << 22;  // ids generated in advance

constexpr recemb::ServingDtype kDtypes[] = {
    recemb::ServingDtype::kFloat32, recemb::ServingDtype::kFloat16, recemb::ServingDtype::kInt8};

bool env_flag(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' && std::strcmp(value, "0") != 0;
}

std::string bytes_name(int64_t bytes) {
  return bytes % kGiB == 0 ? std::to_string(bytes / kGiB) + "GiB"
                           : std::to_string(bytes / kMiB) + "MiB";
}

int64_t rows_of(int64_t table_bytes) { return table_bytes / (kDim * 4); }

int64_t row_bytes(recemb::ServingDtype dtype) {
  switch (dtype) {
    case recemb::ServingDtype::kFloat32:
      return kDim * 4;
    case recemb::ServingDtype::kFloat16:
      return kDim * 2;
    case recemb::ServingDtype::kInt8:
      return kDim + 8;
  }
  return 0;
}

// The dynamic table of make_embedding's rows: key k holds row k.
recemb::Embedding make_dynamic_embedding(const recemb::Embedding& static_table,
                                         int64_t table_bytes) {
  const int64_t rows = rows_of(table_bytes);
  recemb::Embedding embedding({{.name = "table",
                                .dim = kDim,
                                .combiner = recemb::Combiner::kSum,
                                .dynamic_vocabulary = recemb::DynamicVocabulary{.capacity = rows}}},
                              {{.name = "feature", .table = "table"}},
                              recemb::EmbeddingOptions{.num_threads = 2});
  recemb::DynamicTableContents contents;
  contents.keys.resize(static_cast<size_t>(rows));
  for (int64_t k = 0; k < rows; ++k) contents.keys[static_cast<size_t>(k)] = k;
  contents.parameters.resize(static_cast<size_t>(rows * kDim));
  static_table.read_variable("table", "parameters", contents.parameters);
  embedding.write_dynamic_table("table", contents);
  return embedding;
}

recemb::Embedding make_embedding(int64_t table_bytes, int threads) {
  return recemb::Embedding({{.name = "table",
                             .vocabulary_size = rows_of(table_bytes),
                             .dim = kDim,
                             .combiner = recemb::Combiner::kSum}},
                           {{.name = "feature", .table = "table"}},
                           recemb::EmbeddingOptions{.num_threads = threads, .seed = 1});
}

// The Embedding of the current table size (2 worker threads) and its exported models; building
// another size frees the previous one and removes its files. Thread-safe: the threads of a
// multi-threaded benchmark all ask for it before their timed loop.
class Models {
 public:
  static Models& of(int64_t table_bytes) {
    static std::unique_ptr<Models> models;
    const std::lock_guard<std::mutex> lock(mutex_);
    if (models == nullptr || models->table_bytes_ != table_bytes) {
      models.reset();
      models.reset(new Models(table_bytes));
    }
    return *models;
  }
  ~Models() {
    std::error_code ignored;
    std::filesystem::remove_all(directory_, ignored);
  }
  Models(const Models&) = delete;
  Models& operator=(const Models&) = delete;

  recemb::Embedding& embedding(int threads) {
    if (threads == 2) return embedding_;
    if (!single_threaded_) single_threaded_.emplace(make_embedding(table_bytes_, 1));  // same seed
    return *single_threaded_;
  }
  std::filesystem::path path(recemb::ServingDtype dtype, bool dynamic = false) const {
    return directory_ / (std::string(recemb::serving_dtype_name(dtype)) +
                         (dynamic ? "-dynamic" : "") + ".recemb");
  }
  void export_model(recemb::ServingDtype dtype, bool dynamic = false) {
    if (dynamic && !dynamic_embedding_) {
      dynamic_embedding_.emplace(make_dynamic_embedding(embedding_, table_bytes_));
    }
    recemb::export_serving_model(dynamic ? *dynamic_embedding_ : embedding_, path(dtype, dynamic),
                                 {.dtype = dtype});
    exported_[{dtype, dynamic}] = true;
  }
  // The model file, exported on first use.
  std::filesystem::path file(recemb::ServingDtype dtype, bool dynamic = false) {
    if (!exported_[{dtype, dynamic}]) export_model(dtype, dynamic);
    return path(dtype, dynamic);
  }
  // The model opened, on first use.
  const recemb::ServingModel& model(recemb::ServingDtype dtype, bool dynamic = false) {
    const std::lock_guard<std::mutex> lock(mutex_);
    auto found = models_.find({dtype, dynamic});
    if (found == models_.end()) {
      found =
          models_
              .emplace(std::pair(dtype, dynamic), recemb::ServingModel::open(file(dtype, dynamic)))
              .first;
    }
    return found->second;
  }
  // Batch k: DenseIds [B, L] over ids [k B L, (k + 1) B L) of the pool, uniform over the rows.
  const std::vector<recemb::FeatureInput>& batches() const { return batches_; }

 private:
  explicit Models(int64_t table_bytes)
      : table_bytes_(table_bytes),
        directory_(std::filesystem::temp_directory_path() /
                   ("recemb-serving-bench-" + std::to_string(::getpid()))),
        embedding_(make_embedding(table_bytes, 2)) {
    std::filesystem::create_directories(directory_);
    std::mt19937_64 random(1);
    std::uniform_int_distribution<int64_t> uniform(0, rows_of(table_bytes) - 1);
    ids_.resize(static_cast<size_t>(kPoolSize));
    for (int64_t& id : ids_) id = uniform(random);
    for (int64_t k = 0; k < kPoolSize / kIdsPerBatch; ++k) {
      batches_.emplace_back(recemb::DenseIds{
          .ids = std::span<const int64_t>(ids_).subspan(static_cast<size_t>(k * kIdsPerBatch),
                                                        static_cast<size_t>(kIdsPerBatch)),
          .shape = {kBatchSize, kBagSize}});
    }
  }

  static inline std::mutex mutex_;
  int64_t table_bytes_;
  std::filesystem::path directory_;
  recemb::Embedding embedding_;
  std::optional<recemb::Embedding> single_threaded_;
  std::optional<recemb::Embedding> dynamic_embedding_;  // built on first use
  // By (dtype, dynamic).
  std::map<std::pair<recemb::ServingDtype, bool>, bool> exported_;
  std::map<std::pair<recemb::ServingDtype, bool>, recemb::ServingModel> models_;
  std::vector<int64_t> ids_;
  std::vector<recemb::FeatureInput> batches_;
};

// Drops the file's pages from the page cache (it was fsynced by the export, so they are clean).
void evict_from_page_cache(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

void report_bytes(benchmark::State& state, int64_t bytes_per_iteration) {
  const auto bytes = static_cast<int64_t>(state.iterations()) * bytes_per_iteration;
  state.SetBytesProcessed(bytes);
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(bytes) * 1e-9, benchmark::Counter::kIsRate);
}

void report_rows(benchmark::State& state, int64_t bytes_per_row) {
  const auto rows = static_cast<int64_t>(state.iterations()) * kIdsPerBatch;
  state.SetItemsProcessed(rows);
  state.counters["Mrows/s"] =
      benchmark::Counter(static_cast<double>(rows) * 1e-6, benchmark::Counter::kIsRate);
  report_bytes(state, kIdsPerBatch * bytes_per_row);
}

void BM_Export(benchmark::State& state, int64_t table_bytes, recemb::ServingDtype dtype) {
  Models& models = Models::of(table_bytes);
  for (auto _ : state) {
    models.export_model(dtype);
  }
  report_bytes(state, static_cast<int64_t>(std::filesystem::file_size(models.path(dtype))));
}

void BM_Open(benchmark::State& state, int64_t table_bytes, recemb::ServingDtype dtype, bool verify,
             bool cold, bool dynamic) {
  Models& models = Models::of(table_bytes);
  const std::filesystem::path file = models.file(dtype, dynamic);
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      evict_from_page_cache(file);
      state.ResumeTiming();
    }
    const recemb::ServingModel model = recemb::ServingModel::open(file, {.verify = verify});
    benchmark::DoNotOptimize(&model);
  }
  report_bytes(state, static_cast<int64_t>(std::filesystem::file_size(file)));
}

void BM_ServingLookup(benchmark::State& state, int64_t table_bytes, recemb::ServingDtype dtype,
                      bool dynamic) {
  Models& models = Models::of(table_bytes);
  const recemb::ServingModel& model = models.model(dtype, dynamic);
  const std::vector<recemb::FeatureInput>& batches = models.batches();
  std::vector<float> activations(static_cast<size_t>(kBatchSize * kDim));
  const std::span<float> outputs[] = {activations};
  // Threads start at different batches, as independent requests would.
  size_t next = static_cast<size_t>(state.thread_index()) * batches.size() / 2;
  for (auto _ : state) {
    model.lookup(std::span(&batches[next % batches.size()], 1), outputs);
    benchmark::DoNotOptimize(activations.data());
    benchmark::ClobberMemory();
    ++next;
  }
  report_rows(state, row_bytes(dtype));
}

void BM_EmbeddingLookup(benchmark::State& state, int64_t table_bytes, int threads) {
  Models& models = Models::of(table_bytes);
  recemb::Embedding& embedding = models.embedding(threads);
  const std::vector<recemb::FeatureInput>& batches = models.batches();
  std::vector<float> activations(static_cast<size_t>(kBatchSize * kDim));
  const std::span<float> outputs[] = {activations};
  size_t next = 0;
  for (auto _ : state) {
    embedding.lookup(std::span(&batches[next % batches.size()], 1), outputs);
    benchmark::DoNotOptimize(activations.data());
    benchmark::ClobberMemory();
    ++next;
  }
  report_rows(state, kDim * 4);
}

// `n` distinct random int64 keys, sorted (the index's input), and a batch of B L keys to find: the
// first half drawn from the keys, the rest random (absent but for a chance in 2^64 / n).
struct KeySet {
  std::vector<int64_t> keys;
  std::vector<int64_t> probes;
};

const KeySet& key_set(int64_t n) {
  static std::map<int64_t, KeySet> sets;
  KeySet& set = sets[n];
  if (set.keys.empty()) {
    std::mt19937_64 random(static_cast<uint64_t>(n));
    set.keys.resize(static_cast<size_t>(n));
    for (int64_t& key : set.keys) key = static_cast<int64_t>(random());
    std::sort(set.keys.begin(), set.keys.end());
    set.keys.erase(std::unique(set.keys.begin(), set.keys.end()), set.keys.end());
    std::uniform_int_distribution<size_t> pick(0, set.keys.size() - 1);
    for (int64_t j = 0; j < kIdsPerBatch; ++j) {
      set.probes.push_back(j % 2 == 0 ? set.keys[pick(random)] : static_cast<int64_t>(random()));
    }
  }
  return set;
}

void BM_KeyRowsBuild(benchmark::State& state, int64_t n) {
  const KeySet& set = key_set(n);
  for (auto _ : state) {
    const recemb::internal::KeyRows index(set.keys);
    benchmark::DoNotOptimize(&index);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * n);
}

void BM_KeyRowsFind(benchmark::State& state, int64_t n) {
  const KeySet& set = key_set(n);
  const recemb::internal::KeyRows index(set.keys);
  std::vector<int64_t> rows(set.probes.size());
  for (auto _ : state) {
    index.find(set.probes, rows.data());
    benchmark::DoNotOptimize(rows.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * kIdsPerBatch);
  state.counters["bytes/key"] = static_cast<double>(index.memory_bytes()) / static_cast<double>(n);
}

// Benchmarks of one table size are registered together, so its models are built once.
void register_all(bool large, bool huge) {
  std::vector<int64_t> table_sizes = {256 * kMiB};
  if (large) table_sizes.push_back(kGiB);
  if (huge) table_sizes.push_back(4 * kGiB);
  for (const int64_t table_bytes : table_sizes) {
    const std::string table = "/table:" + bytes_name(table_bytes);
    for (const recemb::ServingDtype dtype : kDtypes) {
      const std::string name = std::string("/dtype:") + std::string(serving_dtype_name(dtype));
      benchmark::RegisterBenchmark(("BM_Export" + name + table).c_str(), BM_Export, table_bytes,
                                   dtype)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime()
          ->Iterations(3);
      for (const bool verify : {true, false}) {
        for (const bool cold : {false, true}) {
          const std::string suffix =
              std::string(verify ? "/verify:checksums" : "/verify:header_only") +
              (cold ? "/cache:cold" : "/cache:warm");
          benchmark::RegisterBenchmark(("BM_Open" + name + table + suffix).c_str(), BM_Open,
                                       table_bytes, dtype, verify, cold, false)
              ->Unit(benchmark::kMillisecond)
              ->UseRealTime();
        }
      }
      benchmark::RegisterBenchmark(
          ("BM_Open" + name + table + "/verify:checksums/cache:warm/vocabulary:dynamic").c_str(),
          BM_Open, table_bytes, dtype, true, false, true)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
      for (const bool dynamic : {false, true}) {
        benchmark::RegisterBenchmark(("BM_ServingLookup" + name + table +
                                      (dynamic ? "/vocabulary:dynamic" : "/vocabulary:static"))
                                         .c_str(),
                                     BM_ServingLookup, table_bytes, dtype, dynamic)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime()
            ->Threads(1)
            ->Threads(2);
      }
    }
    for (const int threads : {1, 2}) {
      benchmark::RegisterBenchmark(
          ("BM_EmbeddingLookup" + table + "/threads:" + std::to_string(threads)).c_str(),
          BM_EmbeddingLookup, table_bytes, threads)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
    }
  }
  for (const int64_t n : {int64_t{1'000'000}, int64_t{10'000'000}}) {
    const std::string keys = "/keys:" + std::to_string(n);
    benchmark::RegisterBenchmark(("BM_KeyRowsBuild" + keys).c_str(), BM_KeyRowsBuild, n)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("BM_KeyRowsFind" + keys).c_str(), BM_KeyRowsFind, n)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  }
}

}  // namespace

int main(int argc, char** argv) {
  return recemb_bench::run_benchmarks(argc, argv, [] {
    register_all(env_flag("RECEMB_BENCH_LARGE"), env_flag("RECEMB_BENCH_HUGE"));
  });
}
