// A dynamic table beside the static table, on the same ids, in one run (docs/performance.md,
// "Dynamic tables"): one table of dim 64 holding the workload's bytes (8 MiB; 1 GiB with
// RECEMB_BENCH_LARGE=1, 4 GiB with RECEMB_BENCH_HUGE=1), 4096 bags x 20 int64 ids, uniform and
// Zipf (bench/workload.h), 1 and 2 threads.
//
//   BM_<kind>/lookup/<workload>              the pure lookup
//   BM_<kind>/<optimizer>/<workload>         lookup + apply_gradients (adagrad, rowwise_adagrad)
//   BM_dynamic_admitting/adagrad/<workload>  the step with admission and eviction at work:
//       min_count 2, ttl_steps 8, capacity = the static table's rows, starting empty
//   BM_dynamic_full_{lru,lfu}/adagrad/<workload>  a full table evicting to admit: capacity = an
//       eighth of the rows (full_capacity), when_full evict_least_recent / evict_least_frequent,
//       every key of [0, rows) admitted before timing (the table full of the last ones)
// kind: static (vocabulary_size = rows), or dynamic (capacity = rows, every key of [0, rows)
// admitted before timing, so that both read the same rows). Each static benchmark is followed by
// its dynamic twin: compare them as ratios (bench/README.md).
//
// Counters as embedding_bench's (Mrows/s, uniq), and for dynamic tables: keys (held at the end),
// evicted/step and admitted/step (per timed step). Memory: --memory=<keys> builds one table of
// that many keys at 80% of capacity, dim 64, Adagrad, and prints one JSON line: the RSS growth
// against the rows' and slots' bytes, per key.
#include <algorithm>
#include <benchmark/benchmark.h>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <sys/resource.h>
#include <vector>

#include "recemb/recemb.h"

#include "benchmark_main.h"
#include "workload.h"

namespace recemb_bench {
namespace {

constexpr float kInitialValue = 0.01f;
// Keys admitted per prefill step (one training lookup of that many distinct keys).
constexpr int64_t kPrefillKeys = int64_t{1} << 20;

enum class Kind { kStatic, kDynamic, kAdmitting, kFullLeastRecent, kFullLeastFrequent };

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kStatic:
      return "static";
    case Kind::kDynamic:
      return "dynamic";
    case Kind::kAdmitting:
      return "dynamic_admitting";
    case Kind::kFullLeastRecent:
      return "dynamic_full_lru";
    case Kind::kFullLeastFrequent:
      return "dynamic_full_lfu";
  }
  return "";
}

// An eighth of the rows, but room for two batches' keys (a lookup's distinct keys must fit), and
// at most half the rows, so that the table fills up (the 8 MiB table: half).
int64_t full_capacity(const Workload& workload) {
  return std::min(workload.rows / 2, std::max(workload.rows / 8, 2 * workload.ids_per_feature()));
}

recemb::Embedding make_embedding(const Workload& workload, Kind kind,
                                 const std::string& optimizer) {
  recemb::TableConfig table{.name = "t0",
                            .dim = workload.dim,
                            .initializer = recemb::Constant{.value = kInitialValue},
                            .combiner = recemb::Combiner::kSum};
  if (kind == Kind::kStatic) {
    table.vocabulary_size = workload.rows;
  } else if (kind == Kind::kDynamic) {
    table.dynamic_vocabulary = recemb::DynamicVocabulary{.capacity = workload.rows};
  } else if (kind == Kind::kAdmitting) {
    table.dynamic_vocabulary =
        recemb::DynamicVocabulary{.capacity = workload.rows, .min_count = 2, .ttl_steps = 8};
  } else {
    table.dynamic_vocabulary = recemb::DynamicVocabulary{
        .capacity = full_capacity(workload),
        .when_full = kind == Kind::kFullLeastRecent ? recemb::WhenFull::kEvictLeastRecent
                                                    : recemb::WhenFull::kEvictLeastFrequent};
  }
  return recemb::Embedding({table}, {{.name = "f0", .table = "t0"}},
                           {.optimizer = recemb::parse_optimizer(optimizer),
                            .num_threads = workload.threads,
                            .seed = 1});
}

// Admits every key of [0, rows) by training lookups of `chunk` keys with zero gradients (rows
// stay as they are).
void prefill(recemb::Embedding& embedding, int64_t rows, int64_t dim,
             int64_t chunk = kPrefillKeys) {
  std::vector<int64_t> keys;
  std::vector<float> activations;
  recemb::LookupBatch batch;
  const std::span<const float> no_gradient[] = {{}};
  for (int64_t first = 0; first < rows; first += chunk) {
    const int64_t n = std::min(chunk, rows - first);
    keys.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) keys[static_cast<size_t>(i)] = first + i;
    activations.resize(static_cast<size_t>(n * dim));
    const recemb::FeatureInput input =
        recemb::DenseIds{.ids = std::span<const int64_t>(keys), .shape = {n}};
    const std::span<float> outputs[] = {activations};
    embedding.lookup(std::span(&input, 1), outputs, batch);
    embedding.apply_gradients(batch, no_gradient);
  }
}

// One training step of each batch of the workload's id stream: a full table then evicts at its
// steady rate (after the prefill it holds the last keys, the Zipf tail's, and would evict faster).
void warm_up(recemb::Embedding& embedding, const Workload& workload) {
  const IdStream stream(workload);
  std::vector<float> activations(static_cast<size_t>(kBatchSize * workload.dim));
  const std::span<float> outputs[] = {activations};
  const std::span<const float> gradients[] = {gradient_for(kBatchSize, workload.dim)};
  recemb::LookupBatch batch;
  for (int64_t step = 0; step < stream.num_steps(); ++step) {
    const recemb::FeatureInput input = recemb::DenseIds{
        .ids = std::span<const int64_t>(stream.feature_ids(step, 0),
                                        static_cast<size_t>(workload.ids_per_feature())),
        .shape = {kBatchSize, workload.bag_size}};
    embedding.lookup(std::span(&input, 1), outputs, batch);
    embedding.apply_gradients(batch, gradients);
  }
}

struct Cached {
  std::unique_ptr<recemb::Embedding> embedding;
  std::string key;
};

recemb::Embedding& embedding_for(const Workload& workload, Kind kind,
                                 const std::string& optimizer) {
  static Cached cached;
  const std::string wanted = workload.name() + kind_name(kind) + optimizer;
  if (cached.embedding == nullptr || cached.key != wanted) {
    cached.embedding.reset();  // free the previous tables first
    cached.embedding =
        std::make_unique<recemb::Embedding>(make_embedding(workload, kind, optimizer));
    if (kind == Kind::kDynamic) prefill(*cached.embedding, workload.rows, workload.dim);
    if (kind == Kind::kFullLeastRecent || kind == Kind::kFullLeastFrequent) {
      prefill(*cached.embedding, workload.rows, workload.dim,
              std::min(kPrefillKeys, std::max<int64_t>(full_capacity(workload) / 2, 1)));
      warm_up(*cached.embedding, workload);
    }
    cached.key = wanted;
  }
  return *cached.embedding;
}

void BM_Step(benchmark::State& state, Workload workload, Kind kind, std::string step) {
  const IdStream stream(workload);
  const bool lookup_only = step == "lookup";
  recemb::Embedding& embedding = embedding_for(workload, kind, lookup_only ? "sgd" : step);
  std::vector<float> activations(static_cast<size_t>(kBatchSize * workload.dim));
  const std::vector<float>& gradient = gradient_for(kBatchSize, workload.dim);
  const std::span<float> outputs[] = {activations};
  const std::span<const float> gradients[] = {gradient};
  recemb::LookupBatch batch;
  const bool dynamic = kind != Kind::kStatic;
  const recemb::VocabularyStats before =
      dynamic ? embedding.vocabulary_stats("t0") : recemb::VocabularyStats{};
  int64_t next = 0;
  int64_t steps = 0;
  for (auto _ : state) {
    const recemb::FeatureInput input = recemb::DenseIds{
        .ids = std::span<const int64_t>(stream.feature_ids(next, 0),
                                        static_cast<size_t>(workload.ids_per_feature())),
        .shape = {kBatchSize, workload.bag_size}};
    if (lookup_only) {
      embedding.lookup(std::span(&input, 1), outputs);
    } else {
      embedding.lookup(std::span(&input, 1), outputs, batch);
      benchmark::DoNotOptimize(activations.data());
      embedding.apply_gradients(batch, gradients);
    }
    benchmark::ClobberMemory();
    next = (next + 1) % stream.num_steps();
    ++steps;
  }
  report(state, workload.ids_per_step(), bytes_per_row(step, workload.dim),
         stream.unique_fraction());
  if (dynamic) {
    const recemb::VocabularyStats after = embedding.vocabulary_stats("t0");
    const auto per_step = [&](int64_t count) {
      return static_cast<double>(count) / static_cast<double>(std::max<int64_t>(steps, 1));
    };
    state.counters["keys"] = static_cast<double>(after.size);
    state.counters["evicted/step"] = per_step(after.evicted - before.evicted);
    state.counters["admitted/step"] = per_step(after.inserted - before.inserted);
  }
}

void register_all() {
  const Shapes shapes = registered_shapes();
  for (Workload workload : shapes.tables) {
    if (workload.dim != 64 || workload.num_tables != 1) continue;
    workload.bag_size = 20;
    for (const int threads : {1, 2}) {
      workload.threads = threads;
      for (const std::string step : {"lookup", "adagrad", "rowwise_adagrad"}) {
        for (const IdDistribution ids : {IdDistribution::kUniform, IdDistribution::kZipf}) {
          workload.ids = ids;
          for (const Kind kind : {Kind::kStatic, Kind::kDynamic}) {
            configure(benchmark::RegisterBenchmark(
                ("BM_" + std::string(kind_name(kind)) + "/" + step + "/" + workload.name()).c_str(),
                BM_Step, workload, kind, step));
          }
        }
      }
      workload.ids = IdDistribution::kZipf;
      for (const Kind kind : {Kind::kAdmitting, Kind::kFullLeastRecent, Kind::kFullLeastFrequent}) {
        configure(benchmark::RegisterBenchmark(
            ("BM_" + std::string(kind_name(kind)) + "/adagrad/" + workload.name()).c_str(), BM_Step,
            workload, kind, std::string("adagrad")));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// --memory=<keys>: bytes per key beyond the rows and slots.

int64_t max_resident_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // kilobytes on Linux
}

int memory(int64_t keys) {
  const int64_t rss_before = max_resident_bytes();
  Workload workload = workload_of_rows(keys * 5 / 4, 64);  // keys at 80% of the capacity
  workload.threads = 2;
  recemb::Embedding embedding = make_embedding(workload, Kind::kDynamic, "adagrad");
  // Small chunks: the prefill's own buffers (ids, activations) stay small beside the table.
  prefill(embedding, keys, workload.dim, int64_t{1} << 14);
  const int64_t rss_after = max_resident_bytes();
  // The rows and slots the keys use (the free capacity's rows are never touched: mapped lazily).
  const int64_t row_bytes = 2 * workload.dim * 4;  // parameters + accumulators
  const double beyond =
      static_cast<double>(rss_after - rss_before - keys * row_bytes) / static_cast<double>(keys);
  std::printf(
      "{\"keys\": %lld, \"capacity\": %lld, \"row_and_slot_bytes_per_key\": %lld, "
      "\"rss_growth_bytes\": %lld, \"bytes_per_key_beyond_rows_and_slots\": %.1f, "
      "\"size\": %lld}\n",
      static_cast<long long>(keys), static_cast<long long>(workload.rows),
      static_cast<long long>(row_bytes), static_cast<long long>(rss_after - rss_before), beyond,
      static_cast<long long>(embedding.vocabulary_stats("t0").size));
  return 0;
}

}  // namespace
}  // namespace recemb_bench

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view argument(argv[i]);
    if (argument.starts_with("--memory=")) {
      return recemb_bench::memory(recemb_bench::parse_count(std::string(argument.substr(9))));
    }
  }
  return recemb_bench::run_benchmarks(argc, argv, recemb_bench::register_all);
}
