// Training steps of a sharded Embedding: its tables split into shards in one process, or spread
// over the ranks of an MPI job, against the same workload on one shard.
//
// Workload (the same for every configuration): 8 tables of 2^20 rows x dim 64 (256 MiB each, 2 GiB
// of weights) with Adagrad (TF's defaults; one accumulator per weight: 2 GiB more), sum combiner,
// one feature per table; a global batch of B = 4096 examples x L = 20 ids per feature (DenseIds
// [B, L], int64, uniform over the rows, fixed seed). One step is lookup(inputs, activations,
// batch) then apply_gradients(batch, gradients) with random gradients (uniform in +-1e-3). Four
// global batches, with their gradients, are generated in advance and used in turn; under MPI rank q
// takes examples [q B / size, (q + 1) B / size) of each, so every run sees the same global batches.
//
// Not a Google Benchmark program: its iteration counts depend on timing, so they would differ
// between ranks, and every step is a collective. Here each configuration runs `--warmup` steps,
// then `--repetitions` times `--steps` timed steps; a repetition's time is the slowest rank's
// (the ranks synchronize before each repetition), and the figures are from the median repetition.
//
//   sharded_bench [--shards 1,2,4] [--strategy row_wise]      in-process: world size 1, each
//                                                             shard count in turn
//   mpirun -np 2 sharded_bench --mpi                          shards = ranks; rank 0 prints
//   sharded_bench --smoke                                     seconds: 4096-row tables, B = 256
//
// One line per configuration: mode, shards, strategy (table_wise for 1 shard: the unsharded
// engine, whole tables and no exchange, whatever --strategy says), ranks, threads per rank, ms per
// step, steps/s, examples/s (global), millions of looked-up rows/s (B x L x 8 per step, every id
// counted), the speed relative to the 1-shard run (when this run has one, or --reference gives its
// steps/s), MB (1e6 bytes) a rank sends to the other ranks per step and ms per step it spends
// inside the Embedding's collectives (both the largest over the ranks, averaged over the timed
// steps; counted by a Communicator wrapped around the real one; in one process the "exchange" is a
// copy), and the seconds it took to build the Embedding (allocate and initialize the tables and
// slots). bench/README.md explains how to run it; docs/performance.md ("Sharding") has the figures.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "recemb/communicator.h"
#include "recemb/error.h"
#include "recemb/recemb.h"

#include "mpi_timing.h"

namespace {

using recemb_bench::slowest;
using recemb_bench::synchronize;

constexpr int kNumBatches = 4;           // global batches generated in advance, used in turn
constexpr float kGradientScale = 1e-3f;  // gradients are uniform in +-this
constexpr uint64_t kIdSeed = 1;          // of the ids (the same on every rank)
constexpr uint64_t kGradientSeed = 2;    // of the gradients
constexpr uint64_t kEmbeddingSeed = 1;   // EmbeddingOptions::seed

struct Workload {
  int num_tables = 8;
  int64_t rows = int64_t{1} << 20;  // per table
  int64_t dim = 64;
  int64_t global_batch = 4096;  // examples, over all ranks
  int64_t bag = 20;             // ids per example and feature
};

struct Flags {
  std::vector<int> shards = {};  // empty: {1, 2, 4} in-process, {ranks} with --mpi
  recemb::ShardingStrategy strategy = recemb::ShardingStrategy::kRowWise;
  int steps = 10;
  int warmup = 3;
  int repetitions = 5;
  int threads = 0;  // per rank; 0: this host's cores divided by the ranks (all on this host)
  bool mpi = false;
  std::optional<double> reference = {};  // steps/s of the 1-shard run
  Workload workload = {};
};

constexpr const char* kUsage =
    "usage: sharded_bench [--shards 1,2,4] [--strategy row_wise] [--steps N] [--warmup N]\n"
    "                     [--repetitions N] [--threads N] [--rows N] [--reference STEPS_PER_S]\n"
    "                     [--mpi] [--smoke]\n";

[[noreturn]] void usage_error(const std::string& message) {
  std::string usage = kUsage;
  usage.pop_back();  // its final newline: main adds one
  throw recemb::InvalidArgument(message + "\n" + usage);
}

// An integer in [min, max].
int64_t parse_int(std::string_view flag, const std::string& text, int64_t min,
                  int64_t max = std::numeric_limits<int>::max()) {
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || value < min || value > max) {
    usage_error(std::string(flag) + ": '" + text + "' is not an integer in [" +
                std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return value;
}

recemb::ShardingStrategy parse_strategy(const std::string& text) {
  try {
    return recemb::parse_sharding_strategy(text);
  } catch (const recemb::InvalidArgument& error) {
    usage_error(std::string("--strategy: ") + error.what());
  }
}

Flags parse_flags(int argc, char** argv) {
  Flags flags;
  bool smoke = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(std::string(flag) + " needs a value");
      return argv[++i];
    };
    if (flag == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (flag == "--shards") {
      flags.shards.clear();
      const std::string list = value();
      for (size_t first = 0; first <= list.size();) {
        size_t last = list.find(',', first);
        if (last == std::string::npos) last = list.size();
        flags.shards.push_back(
            static_cast<int>(parse_int(flag, list.substr(first, last - first), 1)));
        first = last + 1;
      }
    } else if (flag == "--strategy") {
      flags.strategy = parse_strategy(value());
    } else if (flag == "--steps") {
      flags.steps = static_cast<int>(parse_int(flag, value(), 1));
    } else if (flag == "--warmup") {
      flags.warmup = static_cast<int>(parse_int(flag, value(), 0));
    } else if (flag == "--repetitions") {
      flags.repetitions = static_cast<int>(parse_int(flag, value(), 1));
    } else if (flag == "--threads") {
      flags.threads = static_cast<int>(parse_int(flag, value(), 1));
    } else if (flag == "--rows") {
      flags.workload.rows = parse_int(flag, value(), 1, std::numeric_limits<int64_t>::max());
    } else if (flag == "--reference") {
      const std::string text = value();
      char* end = nullptr;
      const double steps_per_second = std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0' || !(steps_per_second > 0)) {
        usage_error("--reference: '" + text + "' is not a positive number");
      }
      flags.reference = steps_per_second;
    } else if (flag == "--mpi") {
      flags.mpi = true;
    } else if (flag == "--smoke" || flag.starts_with("--benchmark_min_time")) {
      // --benchmark_min_time=...: what `make bench-smoke` passes to every benchmark program.
      smoke = true;
    } else {
      usage_error("unknown flag '" + std::string(flag) + "'");
    }
  }
  if (smoke) {
    flags.workload.rows = 4096;
    flags.workload.global_batch = 256;
    flags.steps = 2;
    flags.warmup = 1;
    flags.repetitions = 1;
  }
  return flags;
}

// ---------------------------------------------------------------------------------------------
// The data of one rank: its slice of each global batch, and the gradients of its examples.

struct RankData {
  int64_t batch = 0;  // examples of this rank
  // [kNumBatches][feature]: ids [batch, bag], gradients [batch, dim]
  std::vector<std::vector<std::vector<int64_t>>> ids;
  std::vector<std::vector<std::vector<float>>> gradients;
  std::vector<std::vector<recemb::FeatureInput>> inputs;
  std::vector<std::vector<std::span<const float>>> gradient_spans;
  std::vector<std::vector<float>> activations;  // [feature]: [batch, dim]
  std::vector<std::span<float>> activation_spans;
};

RankData make_rank_data(const Workload& w, int rank, int ranks) {
  RankData data;
  data.batch = w.global_batch / ranks;
  const auto tables = static_cast<size_t>(w.num_tables);
  std::mt19937_64 id_random(kIdSeed);
  std::mt19937 gradient_random(kGradientSeed);
  std::uniform_int_distribution<int64_t> uniform_id(0, w.rows - 1);
  std::uniform_real_distribution<float> uniform_gradient(-kGradientScale, kGradientScale);
  const int64_t first_example = rank * data.batch;
  data.ids.resize(kNumBatches);
  data.gradients.resize(kNumBatches);
  data.inputs.resize(kNumBatches);
  data.gradient_spans.resize(kNumBatches);
  for (int b = 0; b < kNumBatches; ++b) {
    for (size_t t = 0; t < tables; ++t) {
      // The whole global batch is drawn on every rank, so the ranks' slices make up the same
      // batches as the in-process run's.
      std::vector<int64_t>& ids = data.ids[b].emplace_back();
      std::vector<float>& gradient = data.gradients[b].emplace_back();
      for (int64_t example = 0; example < w.global_batch; ++example) {
        const bool mine = example >= first_example && example < first_example + data.batch;
        for (int64_t j = 0; j < w.bag; ++j) {
          const int64_t id = uniform_id(id_random);
          if (mine) ids.push_back(id);
        }
        for (int64_t d = 0; d < w.dim; ++d) {
          const float value = uniform_gradient(gradient_random);
          if (mine) gradient.push_back(value);
        }
      }
    }
    for (size_t t = 0; t < tables; ++t) {
      data.inputs[b].push_back(recemb::DenseIds{.ids = std::span<const int64_t>(data.ids[b][t]),
                                                .shape = {data.batch, w.bag}});
      data.gradient_spans[b].emplace_back(data.gradients[b][t]);
    }
  }
  data.activations.assign(tables, std::vector<float>(static_cast<size_t>(data.batch * w.dim)));
  for (std::vector<float>& activation : data.activations) {
    data.activation_spans.emplace_back(activation);
  }
  return data;
}

// ---------------------------------------------------------------------------------------------
// Timing.

using Clock = std::chrono::steady_clock;

// The communicator the Embedding is given: `inner`, counting what passes through it. Bytes are
// those sent to other ranks (a rank's part for itself is a copy in memory); seconds are the wall
// time inside the collectives, which includes waiting for the slowest rank to arrive.
class CountingCommunicator final : public recemb::Communicator {
 public:
  explicit CountingCommunicator(std::shared_ptr<recemb::Communicator> inner)
      : inner_(std::move(inner)) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string_view name() const override { return inner_->name(); }

  void all_to_all(std::span<const std::byte> send, std::span<const int64_t> send_counts,
                  std::vector<std::byte>& recv, std::span<int64_t> recv_counts) override {
    for (size_t q = 0; q < send_counts.size(); ++q) {
      if (static_cast<int>(q) != rank()) bytes_sent_ += send_counts[q];
    }
    const Clock::time_point start = Clock::now();
    inner_->all_to_all(send, send_counts, recv, recv_counts);
    seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
  }

  void all_gather(std::span<const std::byte> send, std::vector<std::byte>& recv,
                  std::span<int64_t> recv_counts) override {
    bytes_sent_ += static_cast<int64_t>(send.size()) * (size() - 1);
    const Clock::time_point start = Clock::now();
    inner_->all_gather(send, recv, recv_counts);
    seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
  }

  int64_t bytes_sent() const { return bytes_sent_; }
  double seconds() const { return seconds_; }
  void reset() {
    bytes_sent_ = 0;
    seconds_ = 0;
  }

 private:
  std::shared_ptr<recemb::Communicator> inner_;
  int64_t bytes_sent_ = 0;
  double seconds_ = 0;
};

struct Result {
  int shards = 0;
  recemb::ShardingStrategy strategy = recemb::ShardingStrategy::kTableWise;
  double seconds_per_step = 0;  // median repetition
  double build_seconds = 0;
  // Per timed step, the largest over the ranks: bytes sent to other ranks, seconds in collectives.
  double bytes_sent_per_step = 0;
  double communication_seconds_per_step = 0;
};

Result run(const Flags& flags, int shards,
           const std::shared_ptr<recemb::Communicator>& communicator, RankData& data, int threads) {
  const Workload& w = flags.workload;
  std::vector<recemb::TableConfig> tables;
  std::vector<recemb::FeatureConfig> features;
  for (int t = 0; t < w.num_tables; ++t) {
    tables.push_back({.name = "table" + std::to_string(t),
                      .vocabulary_size = w.rows,
                      .dim = w.dim,
                      .combiner = recemb::Combiner::kSum});
    features.push_back({.name = "feature" + std::to_string(t), .table = tables.back().name});
  }
  // One shard is the engine unsharded: whole tables, no routing (a row-wise plan with one shard
  // would still route every id through the exchange, to itself).
  const recemb::ShardingStrategy strategy =
      shards == 1 ? recemb::ShardingStrategy::kTableWise : flags.strategy;
  auto counting = std::make_shared<CountingCommunicator>(communicator);
  synchronize(*communicator);
  const Clock::time_point build_start = Clock::now();
  recemb::Embedding embedding(
      std::move(tables), std::move(features),
      {.optimizer = recemb::Adagrad{},
       .num_threads = threads,
       .seed = kEmbeddingSeed,
       .placement = recemb::PlacementOptions{.num_shards = shards, .strategy = strategy},
       .communicator = counting});
  const double build_seconds =
      slowest(*communicator, std::chrono::duration<double>(Clock::now() - build_start).count());

  recemb::LookupBatch batch;
  int next = 0;
  auto step = [&] {
    embedding.lookup(data.inputs[next], data.activation_spans, batch);
    embedding.apply_gradients(batch, data.gradient_spans[next]);
    next = (next + 1) % kNumBatches;
  };
  for (int s = 0; s < flags.warmup; ++s) step();
  counting->reset();
  std::vector<double> times;
  for (int r = 0; r < flags.repetitions; ++r) {
    synchronize(*communicator);
    const Clock::time_point start = Clock::now();
    for (int s = 0; s < flags.steps; ++s) step();
    times.push_back(
        slowest(*communicator, std::chrono::duration<double>(Clock::now() - start).count()));
  }
  const double timed_steps = static_cast<double>(flags.repetitions) * flags.steps;
  const double bytes_sent = static_cast<double>(counting->bytes_sent());
  const double communication_seconds = counting->seconds();
  std::sort(times.begin(), times.end());
  return {.shards = shards,
          .strategy = strategy,
          .seconds_per_step = times[times.size() / 2] / flags.steps,
          .build_seconds = build_seconds,
          .bytes_sent_per_step = slowest(*communicator, bytes_sent) / timed_steps,
          .communication_seconds_per_step =
              slowest(*communicator, communication_seconds) / timed_steps};
}

void print_header(const Flags& flags) {
  const Workload& w = flags.workload;
  const double gib = static_cast<double>(w.num_tables * w.rows * w.dim * 4) / double(1 << 30);
  std::printf(
      "# %d tables x %lld rows x dim %lld, Adagrad (%.3g GiB weights + %.3g GiB slots), %s "
      "(1 shard: table_wise, the unsharded engine); "
      "global batch %lld x %lld ids per feature, uniform; %d warm-up + %d x %d timed steps, "
      "median of %d\n",
      w.num_tables, static_cast<long long>(w.rows), static_cast<long long>(w.dim), gib, gib,
      std::string(recemb::sharding_strategy_name(flags.strategy)).c_str(),
      static_cast<long long>(w.global_batch), static_cast<long long>(w.bag), flags.warmup,
      flags.repetitions, flags.steps, flags.repetitions);
  std::printf("%-10s %6s %-11s %5s %12s %8s %8s %11s %8s %10s %11s %12s %8s\n", "mode", "shards",
              "strategy", "ranks", "threads/rank", "ms/step", "steps/s", "examples/s", "Mrows/s",
              "vs 1 shard", "MB out/step", "comm ms/step", "build s");
}

void print_result(const Flags& flags, const Result& result, int ranks, int threads,
                  std::optional<double> reference) {
  const Workload& w = flags.workload;
  const double steps_per_second = 1.0 / result.seconds_per_step;
  const double examples = static_cast<double>(w.global_batch) * steps_per_second;
  const double rows = examples * static_cast<double>(w.bag * w.num_tables);
  char ratio[32] = "-";
  if (reference) std::snprintf(ratio, sizeof(ratio), "%.2f", steps_per_second / *reference);
  std::printf("%-10s %6d %-11s %5d %12d %8.2f %8.3f %11.0f %8.2f %10s %11.2f %12.2f %8.1f\n",
              flags.mpi ? "mpi" : "in-process", result.shards,
              std::string(recemb::sharding_strategy_name(result.strategy)).c_str(), ranks, threads,
              1e3 * result.seconds_per_step, steps_per_second, examples, rows / 1e6, ratio,
              result.bytes_sent_per_step / 1e6, 1e3 * result.communication_seconds_per_step,
              result.build_seconds);
  std::fflush(stdout);
}

int run_main(int argc, char** argv) {
  Flags flags = parse_flags(argc, argv);
  std::shared_ptr<recemb::Communicator> communicator =
      flags.mpi ? recemb::mpi_communicator() : recemb::local_communicator();
  const int rank = communicator->rank();
  const int ranks = communicator->size();
  if (flags.shards.empty()) {
    flags.shards = flags.mpi ? std::vector<int>{ranks} : std::vector<int>{1, 2, 4};
  }
  if (flags.workload.global_batch % ranks != 0) {
    usage_error("the global batch (" + std::to_string(flags.workload.global_batch) +
                ") does not split evenly over " + std::to_string(ranks) + " ranks");
  }
  // Under mpirun every rank of this host shares its cores.
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int threads = flags.threads > 0 ? flags.threads : std::max(1, cores / ranks);
  RankData data = make_rank_data(flags.workload, rank, ranks);
  if (rank == 0) print_header(flags);
  std::optional<double> reference = flags.reference;
  for (const int shards : flags.shards) {
    const Result result = run(flags, shards, communicator, data, threads);
    if (shards == 1 && ranks == 1 && !reference) reference = 1.0 / result.seconds_per_step;
    if (rank == 0) print_result(flags, result, ranks, threads, reference);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run_main(argc, argv);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "sharded_bench: %s\n", error.what());
    return 1;
  }
}
