// Throughput of recemb::Embedding, through the public API, over the workload matrix of
// bench/workload.h: dims 16/64/128; 8 MiB of tables (1 GiB, 4 GiB behind env flags); uniform and
// Zipf ids; bags of 1 and 20; 1 table, or 26 tables (26 features, one per table) holding the same
// bytes; batches of 4096 bags per feature; 1 and 2 threads (EmbeddingOptions::num_threads).
//
//   BM_Lookup/<workload>                    Embedding::lookup(inputs, activations), the pure
//       lookup (validation and normalisation of the ids, the pooled gather).
//   BM_LookupAndUpdate/<optimizer>/<workload>  the training step: lookup(inputs, activations,
//       batch) then apply_gradients(batch, gradients) with a fixed random gradient, for sgd,
//       adagrad, rowwise_adagrad and adam (lazy), TF's default hyperparameters.
//   BM_Lookup/dtype:<T>/<workload>, BM_LookupAndUpdate/<optimizer>/dtype:<T>/<workload>  the same
//       with the table's rows in T (bfloat16, float16; TableConfig::dtype): one table of dim 64,
//       bags of 20, the SGD, Adagrad and row-wise Adagrad steps; the same rows as the float32
//       table, in half its bytes.
//
// Counters: Mrows/s (ids looked up per second, F x B x L per step), GB/s (nominal bytes per row,
// workload.h's bytes_per_row), uniq (distinct ids / ids of one feature's batch), thp (the share of
// the first table that AnonHugePages reports). roofline_bench measures the plain loops of the same
// workloads under the same names; bench/matrix.py runs both and prints the fraction of the
// roofline.
//
// Tables are filled by the Constant initializer (a fill runs at memory speed; TruncatedNormal
// builds ~75 MB/s per thread, minutes for 4 GiB). One Embedding is alive at a time: the benchmarks
// of one table shape, thread count and optimizer are registered together and share it (BM_Lookup
// uses the sgd one).
//
// `embedding_bench --peak_memory=<optimizer> [--peak_memory_mib=N] [--peak_memory_steps=S]` runs
// no benchmark: it builds one table of N MiB (default 1536) of dim 64 with that optimizer, trains
// S steps (default 50) of 4096 x 20 uniform ids on 2 threads and prints one JSON line: the bytes of
// the variables (table + slots, from variable_shape), getrusage's ru_maxrss before building and at
// the end, and the target 1.1 x variables + 64 MiB. Run it in a fresh process (ru_maxrss only
// grows).
#include <algorithm>
#include <benchmark/benchmark.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <sys/resource.h>
#include <tuple>
#include <vector>

#include "recemb/recemb.h"

#include "benchmark_main.h"
#include "workload.h"

namespace recemb_bench {
namespace {

constexpr float kInitialValue = 0.01f;

recemb::Embedding make_embedding(const Workload& workload, const std::string& optimizer,
                                 recemb::DType dtype) {
  std::vector<recemb::TableConfig> tables;
  std::vector<recemb::FeatureConfig> features;
  for (int64_t f = 0; f < workload.num_tables; ++f) {
    tables.push_back({.name = "t" + std::to_string(f),
                      .vocabulary_size = workload.rows,
                      .dim = workload.dim,
                      .initializer = recemb::Constant{.value = kInitialValue},
                      .combiner = recemb::Combiner::kSum,
                      .dtype = dtype});
    features.push_back({.name = "f" + std::to_string(f), .table = "t" + std::to_string(f)});
  }
  return recemb::Embedding(std::move(tables), std::move(features),
                           recemb::EmbeddingOptions{
                               .optimizer = recemb::parse_optimizer(optimizer),
                               .num_threads = workload.threads,
                               .seed = 1,
                           });
}

struct CachedEmbedding {
  std::unique_ptr<recemb::Embedding> embedding;
  double huge_fraction = -1.0;
};

CachedEmbedding& embedding_for(const Workload& workload, const std::string& optimizer,
                               recemb::DType dtype) {
  static CachedEmbedding cached;
  static std::tuple<int64_t, int64_t, int64_t, int, std::string, recemb::DType> key;
  const auto wanted = std::make_tuple(workload.rows, workload.dim, workload.num_tables,
                                      workload.threads, optimizer, dtype);
  if (cached.embedding == nullptr || key != wanted) {
    cached.embedding.reset();  // free the previous tables first
    cached.embedding =
        std::make_unique<recemb::Embedding>(make_embedding(workload, optimizer, dtype));
    cached.huge_fraction = huge_page_fraction(
        dtype == recemb::DType::kFloat32
            ? static_cast<const void*>(cached.embedding->variable_data("t0", "parameters").data())
            : cached.embedding->half_parameter_data("t0").data());
    key = wanted;
  }
  return cached;
}

// The inputs of every step of the stream: [step][feature].
std::vector<std::vector<recemb::FeatureInput>> inputs_for(const Workload& workload,
                                                          const IdStream& stream) {
  std::vector<std::vector<recemb::FeatureInput>> steps(static_cast<size_t>(stream.num_steps()));
  for (int64_t k = 0; k < stream.num_steps(); ++k) {
    for (int64_t f = 0; f < workload.num_tables; ++f) {
      steps[static_cast<size_t>(k)].emplace_back(recemb::DenseIds{
          .ids = std::span<const int64_t>(stream.feature_ids(k, f),
                                          static_cast<size_t>(workload.ids_per_feature())),
          .shape = {kBatchSize, workload.bag_size}});
    }
  }
  return steps;
}

void BM_Lookup(benchmark::State& state, Workload workload, recemb::DType dtype) {
  const IdStream stream(workload);
  const auto steps = inputs_for(workload, stream);
  CachedEmbedding& cached = embedding_for(workload, "sgd", dtype);
  std::vector<float> activations(static_cast<size_t>(workload.bags_per_step() * workload.dim));
  std::vector<std::span<float>> outputs;
  for (int64_t f = 0; f < workload.num_tables; ++f) {
    outputs.emplace_back(activations.data() + f * kBatchSize * workload.dim,
                         static_cast<size_t>(kBatchSize * workload.dim));
  }
  size_t next = 0;
  for (auto _ : state) {
    cached.embedding->lookup(steps[next], outputs);
    benchmark::DoNotOptimize(activations.data());
    benchmark::ClobberMemory();
    next = (next + 1) % steps.size();
  }
  report(state, workload.ids_per_step(), bytes_per_row("lookup", workload.dim),
         stream.unique_fraction());
  state.counters["thp"] = cached.huge_fraction;
}

void BM_LookupAndUpdate(benchmark::State& state, Workload workload, std::string optimizer,
                        recemb::DType dtype) {
  const IdStream stream(workload);
  const auto steps = inputs_for(workload, stream);
  CachedEmbedding& cached = embedding_for(workload, optimizer, dtype);
  std::vector<float> activations(static_cast<size_t>(workload.bags_per_step() * workload.dim));
  const std::vector<float>& gradient = gradient_for(workload.bags_per_step(), workload.dim);
  std::vector<std::span<float>> outputs;
  std::vector<std::span<const float>> gradients;
  for (int64_t f = 0; f < workload.num_tables; ++f) {
    const int64_t offset = f * kBatchSize * workload.dim;
    const auto size = static_cast<size_t>(kBatchSize * workload.dim);
    outputs.emplace_back(activations.data() + offset, size);
    gradients.emplace_back(gradient.data() + offset, size);
  }
  recemb::LookupBatch batch;
  size_t next = 0;
  for (auto _ : state) {
    cached.embedding->lookup(steps[next], outputs, batch);
    benchmark::DoNotOptimize(activations.data());
    cached.embedding->apply_gradients(batch, gradients);
    benchmark::ClobberMemory();
    next = (next + 1) % steps.size();
  }
  report(state, workload.ids_per_step(), bytes_per_row(optimizer, workload.dim),
         stream.unique_fraction());
  state.counters["thp"] = cached.huge_fraction;
}

// The 16-bit tables measured beside the float32 ones: one table of dim 64, bags of 20 (the same
// rows, so half the bytes), the lookup and the SGD, Adagrad and row-wise Adagrad steps.
bool has_16_bit_variants(const Workload& workload) {
  return workload.num_tables == 1 && workload.dim == 64 && workload.bag_size == 20;
}
constexpr recemb::DType k16BitTypes[] = {recemb::DType::kBFloat16, recemb::DType::kFloat16};

// Registration: per table shape and thread count, the lookups, then each optimizer's steps (one
// Embedding each), each float32 and, where has_16_bit_variants, then in each 16-bit type
// (".../dtype:bfloat16/<workload>"). Without RECEMB_BENCH_FULL the steps are registered for dim
// 64, L = 20 only.
void register_all() {
  const bool full = env_flag("RECEMB_BENCH_FULL");
  const Shapes shapes = registered_shapes();
  for_each_workload(
      shapes, full,
      [](const Workload& workload) {
        configure(benchmark::RegisterBenchmark(("BM_Lookup/" + workload.name()).c_str(), BM_Lookup,
                                               workload, recemb::DType::kFloat32));
        if (!has_16_bit_variants(workload)) return;
        for (const recemb::DType dtype : k16BitTypes) {
          const std::string name =
              "BM_Lookup/dtype:" + std::string(recemb::dtype_name(dtype)) + "/" + workload.name();
          configure(benchmark::RegisterBenchmark(name.c_str(), BM_Lookup, workload, dtype));
        }
      },
      [](const Workload& workload, const std::string& optimizer) {
        configure(benchmark::RegisterBenchmark(
            ("BM_LookupAndUpdate/" + optimizer + "/" + workload.name()).c_str(), BM_LookupAndUpdate,
            workload, optimizer, recemb::DType::kFloat32));
        if (!has_16_bit_variants(workload) || optimizer == "adam") {
          return;
        }
        for (const recemb::DType dtype : k16BitTypes) {
          const std::string name = "BM_LookupAndUpdate/" + optimizer +
                                   "/dtype:" + std::string(recemb::dtype_name(dtype)) + "/" +
                                   workload.name();
          configure(benchmark::RegisterBenchmark(name.c_str(), BM_LookupAndUpdate, workload,
                                                 optimizer, dtype));
        }
      });
}

// ---------------------------------------------------------------------------------------------
// --peak_memory: resident memory while training vs the variables' bytes.

int64_t max_resident_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // kilobytes on Linux
}

// The value of `--name=value` in argv, or "" (and `found` false).
std::string flag_value(int argc, char** argv, std::string_view name, bool& found) {
  const std::string prefix = "--" + std::string(name) + "=";
  for (int i = 1; i < argc; ++i) {
    const std::string_view argument(argv[i]);
    if (argument.starts_with(prefix)) {
      found = true;
      return std::string(argument.substr(prefix.size()));
    }
  }
  found = false;
  return {};
}

int peak_memory(const std::string& optimizer, int64_t table_mib, int64_t num_steps) {
  const int64_t rss_before = max_resident_bytes();
  Workload workload = workload_of_bytes(table_mib * kMiB, 64, 1);
  workload.threads = 2;
  // A few distinct batches, used in turn (their ids count in the peak: keep them small).
  const int64_t num_batches = std::min<int64_t>(num_steps, 4);
  const std::vector<int64_t> ids =
      make_id_pool(workload.rows, IdDistribution::kUniform, num_batches * workload.ids_per_step());
  const std::vector<float>& gradient = gradient_for(workload.bags_per_step(), workload.dim);
  std::vector<float> activations(gradient.size());
  const std::span<float> outputs[] = {activations};
  const std::span<const float> gradients[] = {gradient};
  recemb::Embedding embedding = make_embedding(workload, optimizer, recemb::DType::kFloat32);
  int64_t variable_bytes = 0;
  for (const std::string& variable : embedding.variable_names("t0")) {
    int64_t floats = 1;
    for (const int64_t extent : embedding.variable_shape("t0", variable)) floats *= extent;
    variable_bytes += floats * 4;
  }
  recemb::LookupBatch batch;
  for (int64_t step = 0; step < num_steps; ++step) {
    const recemb::FeatureInput input = recemb::DenseIds{
        .ids = std::span<const int64_t>(ids.data() + step % num_batches * workload.ids_per_step(),
                                        static_cast<size_t>(workload.ids_per_step())),
        .shape = {kBatchSize, workload.bag_size}};
    embedding.lookup(std::span<const recemb::FeatureInput>(&input, 1), outputs, batch);
    embedding.apply_gradients(batch, gradients);
  }
  const int64_t rss_peak = max_resident_bytes();
  const double limit = 1.1 * static_cast<double>(variable_bytes) + 64.0 * kMiB;
  std::printf(
      "{\"optimizer\": \"%s\", \"table_mib\": %lld, \"steps\": %lld, \"variable_bytes\": %lld, "
      "\"rss_before_bytes\": %lld, \"max_rss_bytes\": %lld, \"ratio\": %.4f, "
      "\"limit_bytes\": %.0f, \"within_limit\": %s}\n",
      optimizer.c_str(), static_cast<long long>(table_mib), static_cast<long long>(num_steps),
      static_cast<long long>(variable_bytes), static_cast<long long>(rss_before),
      static_cast<long long>(rss_peak),
      static_cast<double>(rss_peak) / static_cast<double>(variable_bytes), limit,
      static_cast<double>(rss_peak) <= limit ? "true" : "false");
  return 0;
}

}  // namespace
}  // namespace recemb_bench

int main(int argc, char** argv) {
  bool peak = false;
  const std::string optimizer = recemb_bench::flag_value(argc, argv, "peak_memory", peak);
  if (peak) {
    bool found = false;
    const std::string mib = recemb_bench::flag_value(argc, argv, "peak_memory_mib", found);
    const std::string steps = recemb_bench::flag_value(argc, argv, "peak_memory_steps", found);
    return recemb_bench::peak_memory(optimizer, mib.empty() ? 1536 : std::stoll(mib),
                                     steps.empty() ? 50 : std::stoll(steps));
  }
  return recemb_bench::run_benchmarks(argc, argv, recemb_bench::register_all);
}
