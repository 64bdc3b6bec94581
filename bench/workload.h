// The workload matrix shared by embedding_bench (the engine, through the public API) and
// roofline_bench (plain loops over the same data): both programs enumerate the same workloads,
// generate the same ids for them and name them the same way, so that bench/matrix.py can join a
// workload's engine figure with its roofline by name.
//
// A workload: F tables (1, or 26 as DLRM's 26 sparse features) holding `table` bytes of float32 in
// total (split evenly over the F tables), row width dim; one feature per table; each step looks up
// B = 4096 bags x L ids (int64, DenseIds [B, L]) per feature, sum combiner. Ids come from a pool of
// 2^22 ids generated in advance: uniform over a table's R rows, or Zipf (density ~ rank^-1.05, rank
// r stored at row (r * 2654435761) mod R, so hot rows are scattered). The pool is cut into segments
// of B x L ids; feature f of step k reads segment (k F + f) mod (number of segments).
#ifndef RECEMB_BENCH_WORKLOAD_H_
#define RECEMB_BENCH_WORKLOAD_H_

#include <algorithm>
#include <benchmark/benchmark.h>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace recemb_bench {

inline constexpr int64_t kMiB = int64_t{1} << 20;
inline constexpr int64_t kGiB = int64_t{1} << 30;
inline constexpr int64_t kBatchSize = 4096;             // bags per feature per step
inline constexpr int64_t kPoolSize = int64_t{1} << 22;  // ids generated in advance (32 MiB)
inline constexpr int64_t kDlrmTables = 26;
inline constexpr double kZipfExponent = 1.05;
inline constexpr uint64_t kZipfScatter = 2654435761u;  // rank -> row multiplier (a prime)
inline constexpr int64_t kUniqueSampleSegments = 4;    // segments averaged for the uniq counter
inline constexpr float kGradientScale = 1e-3f;         // the fixed gradient is uniform in +-this

inline bool env_flag(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' && std::strcmp(value, "0") != 0;
}

inline std::string env_string(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

enum class IdDistribution { kUniform, kZipf };

inline const char* distribution_name(IdDistribution distribution) {
  return distribution == IdDistribution::kUniform ? "uniform" : "zipf";
}

inline std::string bytes_name(int64_t bytes) {
  return bytes % kGiB == 0 ? std::to_string(bytes / kGiB) + "GiB"
                           : std::to_string(bytes / kMiB) + "MiB";
}

// "1e5" for 100000, else the decimal number.
inline std::string count_name(int64_t count) {
  int exponent = 0;
  int64_t mantissa = count;
  while (mantissa >= 10 && mantissa % 10 == 0) {
    mantissa /= 10;
    ++exponent;
  }
  return exponent >= 3 ? std::to_string(mantissa) + "e" + std::to_string(exponent)
                       : std::to_string(count);
}

struct Workload {
  std::string table = "8MiB";  // label: total table bytes ("8MiB", "1GiB") or rows ("1e5rows")
  int64_t rows = 0;            // rows per table
  int64_t dim = 64;
  int64_t bag_size = 20;  // L
  IdDistribution ids = IdDistribution::kUniform;
  int64_t num_tables = 1;  // F, one feature each
  int threads = 1;

  int64_t ids_per_feature() const { return kBatchSize * bag_size; }
  int64_t ids_per_step() const { return num_tables * ids_per_feature(); }
  int64_t bags_per_step() const { return num_tables * kBatchSize; }
  int64_t total_rows() const { return num_tables * rows; }
  std::string name() const {
    return "table:" + table + "/dim:" + std::to_string(dim) + "/bag:" + std::to_string(bag_size) +
           "/ids:" + distribution_name(ids) + "/tables:" + std::to_string(num_tables) +
           "/threads:" + std::to_string(threads);
  }
};

// The workload of `total_bytes` of tables (rows = total_bytes / (4 dim F)).
inline Workload workload_of_bytes(int64_t total_bytes, int64_t dim, int64_t num_tables) {
  return Workload{.table = bytes_name(total_bytes),
                  .rows = total_bytes / (4 * dim * num_tables),
                  .dim = dim,
                  .num_tables = num_tables};
}

// One table of `rows` rows (the row-count series).
inline Workload workload_of_rows(int64_t rows, int64_t dim) {
  return Workload{.table = count_name(rows) + "rows", .rows = rows, .dim = dim};
}

// The table shapes the programs register, from the environment (see bench/README.md):
//   default: 8 MiB; RECEMB_BENCH_LARGE=1 adds 1 GiB, RECEMB_BENCH_HUGE=1 adds 4 GiB;
//   RECEMB_BENCH_ROWS=1e5,1e6,... registers one table of each row count instead (dim
//   RECEMB_BENCH_ROWS_DIM, default 64; bag 20, uniform ids, one table).
// Every shape comes with dims 16/64/128 and 1 and 26 tables (one entry per shape; bag, ids and
// threads are filled in by the caller).
struct Shapes {
  std::vector<Workload> tables;  // bag, ids and threads not set
  bool row_series = false;
};

inline int64_t parse_count(const std::string& text) {
  return static_cast<int64_t>(std::llround(std::stod(text)));
}

inline Shapes registered_shapes() {
  Shapes shapes;
  const std::string rows = env_string("RECEMB_BENCH_ROWS");
  if (!rows.empty()) {
    shapes.row_series = true;
    const std::string dim_text = env_string("RECEMB_BENCH_ROWS_DIM");
    const int64_t dim = dim_text.empty() ? 64 : parse_count(dim_text);
    std::stringstream list(rows);
    std::string item;
    while (std::getline(list, item, ',')) {
      if (!item.empty()) shapes.tables.push_back(workload_of_rows(parse_count(item), dim));
    }
    return shapes;
  }
  std::vector<int64_t> sizes = {8 * kMiB};
  if (env_flag("RECEMB_BENCH_LARGE")) sizes.push_back(kGiB);
  if (env_flag("RECEMB_BENCH_HUGE")) sizes.push_back(4 * kGiB);
  for (const int64_t bytes : sizes) {
    for (const int64_t dim : {16, 64, 128}) {
      for (const int64_t num_tables : {int64_t{1}, kDlrmTables}) {
        shapes.tables.push_back(workload_of_bytes(bytes, dim, num_tables));
      }
    }
  }
  return shapes;
}

// ---------------------------------------------------------------------------------------------
// Ids.

inline std::vector<int64_t> make_id_pool(int64_t rows, IdDistribution distribution,
                                         int64_t size = kPoolSize) {
  std::mt19937_64 random(distribution == IdDistribution::kUniform ? 1 : 2);
  std::vector<int64_t> ids(static_cast<size_t>(size));
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

// The ids of a workload (a view of a cached pool: the pools of other row counts are freed when
// the row count changes).
class IdStream {
 public:
  explicit IdStream(const Workload& workload) : workload_(workload) {
    static std::map<std::pair<int64_t, IdDistribution>, std::vector<int64_t>> pools;
    static std::map<std::tuple<int64_t, IdDistribution, int64_t>, double> uniques;
    std::erase_if(pools, [&](const auto& entry) { return entry.first.first != workload.rows; });
    std::vector<int64_t>& pool = pools[{workload.rows, workload.ids}];
    if (pool.empty()) pool = make_id_pool(workload.rows, workload.ids);
    pool_ = pool.data();
    num_segments_ = kPoolSize / workload.ids_per_feature();
    const auto key = std::make_tuple(workload.rows, workload.ids, workload.bag_size);
    if (!uniques.contains(key)) {
      const int64_t sampled = std::min(kUniqueSampleSegments, num_segments_);
      double sum = 0.0;
      std::vector<int64_t> sorted;
      for (int64_t s = 0; s < sampled; ++s) {
        const int64_t* first = pool_ + s * workload.ids_per_feature();
        sorted.assign(first, first + workload.ids_per_feature());
        std::sort(sorted.begin(), sorted.end());
        const auto distinct = std::unique(sorted.begin(), sorted.end()) - sorted.begin();
        sum += static_cast<double>(distinct) / static_cast<double>(sorted.size());
      }
      uniques[key] = sum / static_cast<double>(sampled);
    }
    unique_fraction_ = uniques[key];
  }

  // Steps before the stream repeats.
  int64_t num_steps() const { return num_segments_; }
  // The B x L ids (rows of table f) of feature f in step k.
  const int64_t* feature_ids(int64_t step, int64_t feature) const {
    const int64_t segment = (step * workload_.num_tables + feature) % num_segments_;
    return pool_ + segment * workload_.ids_per_feature();
  }
  // Distinct ids / ids of one feature's batch, averaged over a few batches.
  double unique_fraction() const { return unique_fraction_; }

 private:
  Workload workload_;
  const int64_t* pool_ = nullptr;
  int64_t num_segments_ = 0;
  double unique_fraction_ = 0.0;
};

// The fixed gradient d(loss)/d(activations) of one step, [F B, dim] (feature-major).
inline const std::vector<float>& gradient_for(int64_t num_bags, int64_t dim) {
  static std::map<std::pair<int64_t, int64_t>, std::vector<float>> gradients;
  std::vector<float>& gradient = gradients[{num_bags, dim}];
  if (gradient.empty()) {
    std::mt19937 random(4);
    std::uniform_real_distribution<float> uniform(-kGradientScale, kGradientScale);
    gradient.resize(static_cast<size_t>(num_bags * dim));
    for (float& value : gradient) value = uniform(random);
  }
  return gradient;
}

// ---------------------------------------------------------------------------------------------
// Reporting.

// Nominal bytes of memory traffic per looked-up row (every id counts, no de-duplication): the
// gather reads the row once; an update then reads and writes the row and each slot of width dim:
// SGD 3, Adagrad 5, Adam 7 times the row, row-wise Adagrad 3 times plus its one-float slot read and
// written.
inline int64_t bytes_per_row(const std::string& step, int64_t dim) {
  const int64_t row = dim * 4;
  if (step == "sgd") return 3 * row;
  if (step == "adagrad") return 5 * row;
  if (step == "adam") return 7 * row;
  if (step == "rowwise_adagrad") return 3 * row + 2 * 4;
  return row;  // "lookup"
}

inline void report(benchmark::State& state, int64_t rows_per_iteration, int64_t bytes_per_row,
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
  state.counters["uniq"] = unique_fraction;
}

// The share of the mapping that holds `address` backed by transparent huge pages
// (AnonHugePages / Size in /proc/self/smaps), or -1 if it cannot be read.
inline double huge_page_fraction(const void* address) {
  std::ifstream smaps("/proc/self/smaps");
  const auto target = reinterpret_cast<uintptr_t>(address);
  std::string line;
  bool inside = false;
  double size_kb = 0.0;
  while (std::getline(smaps, line)) {
    uintptr_t begin = 0;
    uintptr_t end = 0;
    char dash = 0;
    std::istringstream fields(line);
    if (fields >> std::hex >> begin >> dash >> end && dash == '-') {
      inside = target >= begin && target < end;
      continue;
    }
    if (!inside) continue;
    std::istringstream values(line);
    std::string key;
    double kb = 0.0;
    values >> key >> kb;
    if (key == "Size:") size_kb = kb;
    if (key == "AnonHugePages:") return size_kb > 0.0 ? kb / size_kb : -1.0;
  }
  return -1.0;
}

// Rates use wall-clock time; the CPU column is the CPU time of all the process's threads (the
// engine's workers included), which shows how busy the second thread was.
inline void configure(benchmark::internal::Benchmark* benchmark) {
  benchmark->UseRealTime()->MeasureProcessCPUTime()->Unit(benchmark::kMicrosecond);
}

inline const std::vector<std::string> kOptimizers = {"sgd", "adagrad", "rowwise_adagrad", "adam"};

// Calls lookup(workload) for every lookup of the matrix and step(workload, optimizer) for every
// training step, in the same order in every program (bench/matrix.py joins them by name). Without
// `full` the steps are enumerated for dim 64, L = 20 only; a row series has uniform ids, L = 20 and
// Adagrad only.
template <class Lookup, class Step>
void for_each_workload(const Shapes& shapes, bool full, Lookup&& lookup, Step&& step) {
  auto in_series = [&](IdDistribution ids, int64_t bag_size) {
    return !shapes.row_series || (ids == IdDistribution::kUniform && bag_size == 20);
  };
  for (Workload workload : shapes.tables) {
    for (const int threads : {1, 2}) {
      workload.threads = threads;
      for (const IdDistribution ids : {IdDistribution::kUniform, IdDistribution::kZipf}) {
        for (const int64_t bag_size : {1, 20}) {
          if (!in_series(ids, bag_size)) continue;
          workload.ids = ids;
          workload.bag_size = bag_size;
          lookup(workload);
        }
      }
      for (const std::string& optimizer : kOptimizers) {
        if (shapes.row_series && optimizer != "adagrad") continue;
        for (const IdDistribution ids : {IdDistribution::kUniform, IdDistribution::kZipf}) {
          for (const int64_t bag_size : {1, 20}) {
            if (!in_series(ids, bag_size)) continue;
            if (!full && !shapes.row_series && (workload.dim != 64 || bag_size != 20)) continue;
            workload.ids = ids;
            workload.bag_size = bag_size;
            step(workload, optimizer);
          }
        }
      }
    }
  }
}

}  // namespace recemb_bench

#endif  // RECEMB_BENCH_WORKLOAD_H_
