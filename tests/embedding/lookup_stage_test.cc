// The routed path (src/embedding/lookup_stage.h): for every placement, shard count and rank count,
// an Embedding gives the same activations and, after several steps, the same tables and slots as
// the single-shard engine fed the global batch (the ranks' batches concatenated), for every
// optimizer. Ranks are threads connected by in_process_communicators, so these tests run under
// the sanitizers. Under mpirun with RECEMB_TEST_MPI=1 in the environment, each process is one rank
// of MPI_COMM_WORLD instead: the runs whose rank count equals the group's size go through MPI (each
// process checks its own rank's results), the others are skipped (tests/CMakeLists.txt).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <functional>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "recemb/recemb.h"

#include "testing/error_of.h"
#include "testing/random_batches.h"

namespace recemb {
namespace {

using test::Bag;
using test::OwnedInput;

// |a - b| <= 1e-5 * max(1, |b|): a row-wise part's sums run in another order than the single
// engine's (docs/scaling.md); everything else is equal.
constexpr double kTolerance = 1e-5;

::testing::AssertionResult near(std::span<const float> actual, std::span<const float> expected) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << actual.size() << " values, expected " << expected.size();
  }
  for (size_t i = 0; i < actual.size(); ++i) {
    const double error = std::abs(double{actual[i]} - double{expected[i]}) /
                         std::max(1.0, std::abs(double{expected[i]}));
    if (!(error <= kTolerance)) {
      return ::testing::AssertionFailure() << "index " << i << ": " << actual[i] << " vs "
                                           << expected[i] << " (scaled error " << error << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

bool under_mpi() {
  const char* value = std::getenv("RECEMB_TEST_MPI");
  return value != nullptr && std::string(value) == "1";
}

// Whether this process can run a test of `ranks` ranks: always with threads; under MPI only when
// the group has that size.
bool can_run(int ranks) { return !under_mpi() || mpi_communicator()->size() == ranks; }

struct Problem {
  std::vector<TableConfig> tables;
  std::vector<FeatureConfig> features;
  std::vector<int64_t> id_ranges;  // per table: its ids are drawn from [0, range)
};

// Three tables of awkward sizes (7 rows: fewer than some shard counts' rows per shard; dim 3:
// fewer columns than 4 shards), five features: shared tables, every combiner, a sequence feature.
// `dynamic`: tables a and c are dynamic (docs/semantics.md section 7), a admitting keys seen
// twice, c forgetting keys not seen for 2 steps; their keys are drawn from the same ranges.
Problem make_problem(const Optimizer& optimizer, bool dynamic = false) {
  Problem p;
  p.tables = {
      {.name = "a", .vocabulary_size = 53, .dim = 8, .combiner = Combiner::kSum},
      {.name = "b", .vocabulary_size = 7, .dim = 3, .combiner = Combiner::kSqrtn},
      {.name = "c", .vocabulary_size = 211, .dim = 16, .combiner = Combiner::kMean},
  };
  for (const TableConfig& table : p.tables) p.id_ranges.push_back(table.vocabulary_size);
  if (dynamic) {
    p.tables[0].vocabulary_size = 0;
    p.tables[0].dynamic_vocabulary = DynamicVocabulary{.capacity = 1000, .min_count = 2};
    p.tables[2].vocabulary_size = 0;
    p.tables[2].dynamic_vocabulary = DynamicVocabulary{.capacity = 1000, .ttl_steps = 2};
  }
  for (TableConfig& table : p.tables) table.optimizer = optimizer;
  p.features = {
      {.name = "f0", .table = "a"}, {.name = "f1", .table = "c"},
      {.name = "f2", .table = "b"}, {.name = "f3", .table = "a", .max_sequence_length = 3},
      {.name = "f4", .table = "c"},
  };
  return p;
}

// One rank's batch of every feature, as bags.
using Batch = std::vector<std::vector<Bag>>;

Batch random_batch(std::mt19937_64& rng, const Problem& p, int64_t batch_size) {
  Batch batch;
  for (const FeatureConfig& feature : p.features) {
    const auto table = std::find_if(p.tables.begin(), p.tables.end(),
                                    [&](const TableConfig& t) { return t.name == feature.table; });
    batch.push_back(test::random_bags(
        rng, batch_size,
        {.vocabulary_size = p.id_ranges[static_cast<size_t>(table - p.tables.begin())],
         .max_length = 5,
         .weighted = true}));
  }
  return batch;
}

std::vector<OwnedInput> inputs_of(const Batch& batch) {
  std::vector<OwnedInput> inputs;
  for (const std::vector<Bag>& bags : batch) inputs.push_back(OwnedInput::ragged(bags, true));
  return inputs;
}

// Activations or gradients: one array per feature.
using Arrays = std::vector<std::vector<float>>;

Arrays activation_arrays(const Embedding& layer, const std::vector<FeatureInput>& inputs) {
  Arrays arrays;
  for (size_t f = 0; f < inputs.size(); ++f) {
    int64_t size = 1;
    for (const int64_t extent : layer.activation_shape(f, inputs[f])) size *= extent;
    arrays.emplace_back(static_cast<size_t>(size));
  }
  return arrays;
}

template <class T>
std::vector<std::span<T>> spans_of(std::vector<std::vector<float>>& arrays) {
  return {arrays.begin(), arrays.end()};
}

// Every variable of every table, whole; a dynamic table's keys (as floats: they are small),
// parameters and slots.
std::vector<std::vector<float>> read_all(const Embedding& layer) {
  std::vector<std::vector<float>> all;
  for (const TableConfig& table : layer.tables()) {
    if (table.dynamic_vocabulary) {
      const DynamicTableContents contents = layer.read_dynamic_table(table.name);
      all.emplace_back(contents.keys.begin(), contents.keys.end());
      all.push_back(contents.parameters);
      for (const auto& [name, values] : contents.slots) all.push_back(values);
      continue;
    }
    for (const std::string& variable : layer.variable_names(table.name)) {
      int64_t size = 1;
      for (const int64_t extent : layer.variable_shape(table.name, variable)) size *= extent;
      all.emplace_back(static_cast<size_t>(size));
      layer.read_variable(table.name, variable, all.back());
    }
  }
  return all;
}

// What one run produces: per step, each rank's activations; at the end, every variable.
struct RunResult {
  std::vector<std::vector<Arrays>> activations;  // [step][rank]
  std::vector<std::vector<float>> variables;     // rank 0's reading
};

// How a run interleaves lookups and updates.
enum class Schedule {
  kSerial,             // lookup t, apply t
  kPipelined,          // prefetch t+1, apply t, finish_lookup t+1
  kLookupBeforeApply,  // lookup t+1, apply t: what a one-step-stale pipeline must give
};

struct RunSetup {
  Optimizer optimizer;
  PlacementOptions placement;
  Schedule schedule = Schedule::kSerial;
  PipelineStaleness pipeline_staleness = PipelineStaleness::kNone;
  int ranks = 1;
  int threads = 1;
  int steps = 4;
  int64_t batch_size = 6;  // per rank
};

// The batches and gradients of rank r at step s, the same for every run of a test.
struct Data {
  std::vector<std::vector<Batch>> batches;  // [step][rank]
  std::vector<std::vector<Arrays>> gradients;
};

Data make_data(const Problem& p, const RunSetup& setup, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Data data;
  for (int s = 0; s < setup.steps; ++s) {
    data.batches.emplace_back();
    for (int r = 0; r < setup.ranks; ++r) {
      data.batches.back().push_back(random_batch(rng, p, setup.batch_size));
    }
  }
  // Gradients need the activation shapes: build them from a throwaway single-shard layer.
  Embedding shapes(p.tables, p.features, {.optimizer = setup.optimizer});
  for (int s = 0; s < setup.steps; ++s) {
    data.gradients.emplace_back();
    for (int r = 0; r < setup.ranks; ++r) {
      const std::vector<OwnedInput> owned = inputs_of(data.batches[s][r]);
      Arrays gradients = activation_arrays(shapes, test::views_of(owned));
      for (std::vector<float>& g : gradients) g = test::random_gradient(rng, g.size());
      data.gradients.back().push_back(std::move(gradients));
    }
  }
  return data;
}

// The ranks' arrays of one feature concatenated: the global batch's.
Batch concatenate(const std::vector<Batch>& per_rank) {
  Batch global = per_rank[0];
  for (size_t r = 1; r < per_rank.size(); ++r) {
    for (size_t f = 0; f < global.size(); ++f) {
      global[f].insert(global[f].end(), per_rank[r][f].begin(), per_rank[r][f].end());
    }
  }
  return global;
}

Arrays concatenate(const std::vector<Arrays>& per_rank) {
  Arrays global = per_rank[0];
  for (size_t r = 1; r < per_rank.size(); ++r) {
    for (size_t f = 0; f < global.size(); ++f) {
      global[f].insert(global[f].end(), per_rank[r][f].begin(), per_rank[r][f].end());
    }
  }
  return global;
}

// Rank `rank`'s side of a run.
void run_rank(const Problem& p, const RunSetup& setup, const Data& data,
              std::shared_ptr<Communicator> communicator, RunResult& run) {
  Embedding layer(p.tables, p.features,
                  {.optimizer = setup.optimizer,
                   .num_threads = setup.threads,
                   .seed = 7,
                   .placement = setup.placement,
                   .communicator = communicator,
                   .pipeline_staleness = setup.pipeline_staleness});
  const int rank = layer.rank();
  // Per step: its inputs (kept alive while a prefetch may read them), activations and batch.
  std::vector<std::vector<OwnedInput>> owned;
  std::vector<std::vector<FeatureInput>> inputs;
  for (int s = 0; s < setup.steps; ++s) {
    owned.push_back(inputs_of(data.batches[s][rank]));
    inputs.push_back(test::views_of(owned.back()));
    run.activations[s][rank] = activation_arrays(layer, inputs.back());
  }
  std::vector<LookupBatch> batches(static_cast<size_t>(setup.steps));
  auto lookup = [&](int s) {
    layer.lookup(inputs[s], spans_of<float>(run.activations[s][rank]), batches[s]);
  };
  auto prefetch = [&](int s) {
    layer.prefetch(inputs[s], spans_of<float>(run.activations[s][rank]), batches[s]);
  };
  auto apply = [&](int s) {
    Arrays gradients = data.gradients[s][rank];
    layer.apply_gradients(batches[s], spans_of<const float>(gradients));
  };
  for (int s = 0; s < setup.steps; ++s) {
    const bool last = s + 1 == setup.steps;
    switch (setup.schedule) {
      case Schedule::kSerial:
        lookup(s);
        apply(s);
        break;
      case Schedule::kPipelined:
        if (s == 0) {
          prefetch(0);
          layer.finish_lookup(batches[0]);
        }
        if (!last) prefetch(s + 1);
        apply(s);
        if (!last) layer.finish_lookup(batches[s + 1]);
        break;
      case Schedule::kLookupBeforeApply:
        if (s == 0) lookup(0);
        if (!last) lookup(s + 1);
        apply(s);
        break;
    }
  }
  std::vector<std::vector<float>> variables = read_all(layer);  // collective
  if (rank == 0 || under_mpi()) run.variables = std::move(variables);
}

RunResult run_sharded(const Problem& p, const RunSetup& setup, const Data& data) {
  RunResult run;
  run.activations.assign(setup.steps, std::vector<Arrays>(setup.ranks));
  if (setup.ranks == 1 || under_mpi()) {  // the other ranks' activations stay empty under MPI
    run_rank(p, setup, data, setup.ranks == 1 ? nullptr : mpi_communicator(), run);
    return run;
  }
  std::vector<std::shared_ptr<Communicator>> communicators = in_process_communicators(setup.ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < setup.ranks; ++r) {
    threads.emplace_back([&, r] { run_rank(p, setup, data, communicators[r], run); });
  }
  for (std::thread& thread : threads) thread.join();
  return run;
}

// The single-shard engine on the global batches.
RunResult run_single(const Problem& p, const RunSetup& setup, const Data& data) {
  Embedding layer(p.tables, p.features,
                  {.optimizer = setup.optimizer, .num_threads = 1, .seed = 7});
  RunResult run;
  LookupBatch batch;
  for (int s = 0; s < setup.steps; ++s) {
    const std::vector<OwnedInput> owned = inputs_of(concatenate(data.batches[s]));
    const std::vector<FeatureInput> inputs = test::views_of(owned);
    Arrays activations = activation_arrays(layer, inputs);
    layer.lookup(inputs, spans_of<float>(activations), batch);
    Arrays gradients = concatenate(data.gradients[s]);
    layer.apply_gradients(batch, spans_of<const float>(gradients));
    run.activations.push_back({std::move(activations)});
  }
  run.variables = read_all(layer);
  return run;
}

struct Case {
  std::string name;
  Optimizer optimizer;
};

std::vector<Case> optimizer_cases() {
  return {
      {"sgd", Sgd{.learning_rate = 0.1f}},
      {"adagrad", Adagrad{.learning_rate = 0.1f}},
      {"adagrad_momentum",
       AdagradMomentum{.learning_rate = 0.05f, .momentum = 0.9f, .use_nesterov = true}},
      {"lazy_adam", Adam{.learning_rate = 0.05f}},
      {"dense_adam", Adam{.learning_rate = 0.05f, .lazy_adam = false}},
      {"ftrl", Ftrl{.learning_rate = 0.1f, .beta = 0.5f}},
      {"rowwise_adagrad", RowwiseAdagrad{.learning_rate = 0.1f}},
      {"sgd_clipped_decayed", Sgd{.learning_rate = 0.1f,
                                  .common = {.clip_weight_min = -0.3f,
                                             .clip_weight_max = 0.3f,
                                             .weight_decay_factor = 0.01f,
                                             .clip_gradient_min = -0.5f,
                                             .clip_gradient_max = 0.5f}}},
  };
}

struct ShardLayout {
  std::string name;
  ShardingStrategy strategy;
  int shards;
  int ranks;
};

std::vector<ShardLayout> layouts() {
  std::vector<ShardLayout> all;
  for (const auto& [name, strategy] : std::vector<std::pair<std::string, ShardingStrategy>>{
           {"table_wise", ShardingStrategy::kTableWise},
           {"row_wise", ShardingStrategy::kRowWise},
           {"column_wise", ShardingStrategy::kColumnWise},
           {"replicated", ShardingStrategy::kReplicated},
           {"auto", ShardingStrategy::kAuto}}) {
    for (const auto& [shards, ranks] :
         std::vector<std::pair<int, int>>{{3, 1}, {2, 2}, {4, 2}, {3, 3}, {4, 4}}) {
      all.push_back(
          {name + "_" + std::to_string(shards) + "shards_" + std::to_string(ranks) + "ranks",
           strategy, shards, ranks});
    }
  }
  return all;
}

// Static tables, then with two tables dynamic.
class ShardedEquivalence : public ::testing::TestWithParam<std::tuple<Case, ShardLayout, bool>> {};

TEST_P(ShardedEquivalence, MatchesTheSingleShardEngine) {
  const auto& [c, layout, dynamic] = GetParam();
  if (layout.strategy == ShardingStrategy::kColumnWise &&
      std::holds_alternative<RowwiseAdagrad>(c.optimizer)) {
    GTEST_SKIP() << "column_wise cannot split RowwiseAdagrad tables (tested below)";
  }
  if (!can_run(layout.ranks)) GTEST_SKIP() << "another MPI group size";
  const Problem p = make_problem(c.optimizer, dynamic);
  const RunSetup setup{.optimizer = c.optimizer,
                       .placement = {.num_shards = layout.shards, .strategy = layout.strategy},
                       .ranks = layout.ranks};
  const Data data = make_data(p, setup, 1234);
  const RunResult expected = run_single(p, setup, data);
  const RunResult actual = run_sharded(p, setup, data);
  for (int s = 0; s < setup.steps; ++s) {
    // Each rank's activations are its slice of the single engine's for the global batch (an array
    // of a feature holds as many values as its gradient).
    for (size_t f = 0; f < p.features.size(); ++f) {
      size_t offset = 0;
      for (int r = 0; r < setup.ranks; ++r) {
        const size_t size = data.gradients[s][r][f].size();
        if (!actual.activations[s][r].empty()) {  // empty: another process's rank
          EXPECT_TRUE(near(actual.activations[s][r][f],
                           std::span(expected.activations[s][0][f]).subspan(offset, size)))
              << "step " << s << " rank " << r << " feature " << p.features[f].name;
        }
        offset += size;
      }
    }
  }
  ASSERT_EQ(actual.variables.size(), expected.variables.size());
  for (size_t v = 0; v < expected.variables.size(); ++v) {
    EXPECT_TRUE(near(actual.variables[v], expected.variables[v])) << "variable " << v;
  }
  // The tables moved: a comparison of untrained tables would prove little.
  Embedding untrained(p.tables, p.features, {.optimizer = c.optimizer, .seed = 7});
  EXPECT_NE(read_all(untrained)[0], expected.variables[0]);
}

INSTANTIATE_TEST_SUITE_P(AllPlacements, ShardedEquivalence,
                         ::testing::Combine(::testing::ValuesIn(optimizer_cases()),
                                            ::testing::ValuesIn(layouts()), ::testing::Bool()),
                         [](const auto& test_info) {
                           return std::get<0>(test_info.param).name + "_" +
                                  std::get<1>(test_info.param).name +
                                  (std::get<2>(test_info.param) ? "_dynamic" : "");
                         });

TEST(ShardedStep, TableAndColumnWiseAreBitwiseEqualToTheSingleShardEngine) {
  // Their parts pool and update with the same kernels on the same values in the same order.
  for (const ShardingStrategy strategy :
       {ShardingStrategy::kTableWise, ShardingStrategy::kColumnWise}) {
    const Optimizer optimizer = Adagrad{.learning_rate = 0.1f};
    const Problem p = make_problem(optimizer);
    const RunSetup setup{
        .optimizer = optimizer, .placement = {.num_shards = 2, .strategy = strategy}, .ranks = 2};
    if (!can_run(setup.ranks)) GTEST_SKIP() << "another MPI group size";
    const Data data = make_data(p, setup, 99);
    EXPECT_EQ(run_sharded(p, setup, data).variables, run_single(p, setup, data).variables)
        << sharding_strategy_name(strategy);
  }
}

// One rank that counts the all-to-alls it is asked for and the bytes they send.
class CountingCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string_view name() const override { return "counting"; }
  void all_to_all(std::span<const std::byte> send, std::span<const int64_t> send_counts,
                  std::vector<std::byte>& recv, std::span<int64_t> recv_counts) override {
    ++all_to_alls;
    bytes += static_cast<int64_t>(send.size());
    local_->all_to_all(send, send_counts, recv, recv_counts);
  }
  void all_gather(std::span<const std::byte> send, std::vector<std::byte>& recv,
                  std::span<int64_t> recv_counts) override {
    local_->all_gather(send, recv, recv_counts);
  }

  int64_t all_to_alls = 0;
  int64_t bytes = 0;

 private:
  std::shared_ptr<Communicator> local_ = local_communicator();
};

TEST(ShardedStep, OneProcessHoldingItsTablesWholeExchangesNothingAndMatchesBitwise) {
  const Optimizer optimizer = Adagrad{.learning_rate = 0.1f};
  const Problem p = make_problem(optimizer);
  const RunSetup single{.optimizer = optimizer, .steps = 3};
  const Data data = make_data(p, single, 17);
  const RunResult expected = run_single(p, single, data);
  struct Plan {
    PlacementOptions placement;
    bool whole;  // every table whole on the one rank
  };
  for (const Plan& plan :
       {Plan{{.num_shards = 1}, true},
        Plan{{.num_shards = 3, .strategy = ShardingStrategy::kTableWise}, true},
        Plan{{.num_shards = 2, .strategy = ShardingStrategy::kReplicated}, true},
        Plan{{.num_shards = 1, .strategy = ShardingStrategy::kColumnWise}, true},
        Plan{{.num_shards = 2, .strategy = ShardingStrategy::kRowWise}, false}}) {
    SCOPED_TRACE(std::string(sharding_strategy_name(plan.placement.strategy)) + " over " +
                 std::to_string(plan.placement.num_shards));
    RunSetup setup = single;
    setup.placement = plan.placement;
    const auto counting = std::make_shared<CountingCommunicator>();
    RunResult run;
    run.activations.assign(setup.steps, std::vector<Arrays>(1));
    run_rank(p, setup, data, counting, run);
    if (plan.whole) {
      EXPECT_EQ(counting->all_to_alls, 0);
      EXPECT_EQ(run.activations, expected.activations);
      EXPECT_EQ(run.variables, expected.variables);
    } else {
      // Ids, pooled rows and gradient rows: three all-to-alls a step, all sending bytes.
      EXPECT_EQ(counting->all_to_alls, 3 * setup.steps);
      EXPECT_GT(counting->bytes, 0);
      EXPECT_EQ(run.variables.size(), expected.variables.size());
    }
  }
}

TEST(ShardedStep, BitwiseIdenticalForAnyThreadCountAndRunToRun) {
  const Optimizer optimizer = Adam{.learning_rate = 0.05f};
  const Problem p = make_problem(optimizer);
  RunSetup setup{.optimizer = optimizer,
                 .placement = {.num_shards = 4, .strategy = ShardingStrategy::kRowWise},
                 .ranks = 2,
                 .batch_size = 3000};  // enough ids for the worker threads to take part
  if (!can_run(setup.ranks)) GTEST_SKIP() << "another MPI group size";
  const Data data = make_data(p, setup, 5);
  const RunResult one_thread = run_sharded(p, setup, data);
  setup.threads = 3;
  const RunResult three_threads = run_sharded(p, setup, data);
  const RunResult again = run_sharded(p, setup, data);
  EXPECT_EQ(one_thread.variables, three_threads.variables);
  EXPECT_EQ(three_threads.variables, again.variables);
  EXPECT_EQ(one_thread.activations, three_threads.activations);
}

class Pipelining : public ::testing::TestWithParam<ShardLayout> {
 protected:
  // Five Adagrad steps on two threads, the tables placed as the layout says.
  RunSetup setup_for(const ShardLayout& layout) {
    return {.optimizer = optimizer,
            .placement = {.num_shards = layout.shards, .strategy = layout.strategy},
            .ranks = layout.ranks,
            .threads = 2,
            .steps = 5};
  }
  const Optimizer optimizer = Adagrad{.learning_rate = 0.2f};
};

TEST_P(Pipelining, WithoutStalenessEqualsSerialBitwise) {
  const Problem p = make_problem(optimizer);
  RunSetup setup = setup_for(GetParam());
  if (!can_run(setup.ranks)) GTEST_SKIP() << "another MPI group size";
  const Data data = make_data(p, setup, 77);
  const RunResult serial = run_sharded(p, setup, data);
  setup.schedule = Schedule::kPipelined;
  const RunResult pipelined = run_sharded(p, setup, data);
  EXPECT_EQ(pipelined.activations, serial.activations);
  EXPECT_EQ(pipelined.variables, serial.variables);
}

TEST_P(Pipelining, OneStepStaleReadsTheRowsBeforeTheCurrentUpdate) {
  const Problem p = make_problem(optimizer);
  RunSetup setup = setup_for(GetParam());
  if (!can_run(setup.ranks)) GTEST_SKIP() << "another MPI group size";
  const Data data = make_data(p, setup, 78);
  const RunResult serial = run_sharded(p, setup, data);
  setup.schedule = Schedule::kLookupBeforeApply;
  const RunResult reference = run_sharded(p, setup, data);
  setup.schedule = Schedule::kPipelined;
  setup.pipeline_staleness = PipelineStaleness::kOneStep;
  const RunResult stale = run_sharded(p, setup, data);
  EXPECT_EQ(stale.activations, reference.activations);
  EXPECT_NE(stale.activations, serial.activations);  // stale rows do show
  EXPECT_EQ(stale.variables, serial.variables);      // the same updates (fixed gradients)
}

INSTANTIATE_TEST_SUITE_P(
    SomePlacements, Pipelining,
    ::testing::Values(ShardLayout{"single", ShardingStrategy::kAuto, 1, 1},
                      ShardLayout{"row_wise_3shards_1rank", ShardingStrategy::kRowWise, 3, 1},
                      ShardLayout{"row_wise_2shards_2ranks", ShardingStrategy::kRowWise, 2, 2},
                      ShardLayout{"mixed_3shards_3ranks", ShardingStrategy::kAuto, 3, 3}),
    [](const auto& test_info) { return test_info.param.name; });

TEST(Pipelining, APrefetchOfABadInputThrowsAtFinishAndChangesNothing) {
  const Problem p = make_problem(Sgd{});
  Embedding layer(p.tables, p.features, {.optimizer = Sgd{}});
  std::mt19937_64 rng(4);
  Batch bad = random_batch(rng, p, 3);
  bad[1][2].ids = {-1};
  const std::vector<OwnedInput> owned = inputs_of(bad);
  const std::vector<FeatureInput> inputs = test::views_of(owned);
  Arrays activations = activation_arrays(layer, inputs);
  const std::vector<std::vector<float>> before = read_all(layer);
  LookupBatch batch;
  layer.prefetch(inputs, spans_of<float>(activations), batch);
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { layer.finish_lookup(batch); }),
              ::testing::HasSubstr("feature 'f1'"));
  EXPECT_FALSE(batch.applicable());
  EXPECT_EQ(read_all(layer), before);
  EXPECT_THAT(test::error_of<FailedPrecondition>([&] { layer.finish_lookup(batch); }),
              ::testing::HasSubstr("prefetch"));
  LookupBatch never_prefetched;
  EXPECT_THAT(test::error_of<FailedPrecondition>([&] { layer.finish_lookup(never_prefetched); }),
              ::testing::HasSubstr("prefetch"));
}

// Embedding::agree_on_error with a prefetch in flight on every rank: it waits for the prefetch's
// exchange, then agrees; an error on one rank throws "rank 1: ..." on both, and the prefetched
// lookups still complete, equal to plain lookups.
TEST(Pipelining, AgreeOnErrorWaitsForThePrefetchAndThrowsOnEveryRank) {
  if (under_mpi()) GTEST_SKIP() << "in-process ranks only";
  const Problem p = make_problem(Sgd{});
  constexpr int kRanks = 2;
  std::vector<std::shared_ptr<Communicator>> communicators = in_process_communicators(kRanks);
  std::vector<std::string> messages(kRanks);
  std::vector<Arrays> prefetched(kRanks), looked_up(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      Embedding layer(
          p.tables, p.features,
          {.optimizer = Sgd{},
           .num_threads = 1,
           .placement = PlacementOptions{.num_shards = 2, .strategy = ShardingStrategy::kRowWise},
           .communicator = communicators[r]});
      std::mt19937_64 rng(static_cast<uint64_t>(90 + r));
      const std::vector<OwnedInput> owned = inputs_of(random_batch(rng, p, 4));
      const std::vector<FeatureInput> inputs = test::views_of(owned);
      prefetched[r] = activation_arrays(layer, inputs);
      LookupBatch batch;
      layer.prefetch(inputs, spans_of<float>(prefetched[r]), batch);
      layer.agree_on_error(nullptr);  // no error anywhere: returns
      messages[r] = test::error_of<InvalidArgument>([&] {
        layer.agree_on_error(r == 1 ? std::make_exception_ptr(InvalidArgument("bad shape"))
                                    : nullptr);
      });
      layer.finish_lookup(batch);
      looked_up[r] = activation_arrays(layer, inputs);
      layer.lookup(inputs, spans_of<float>(looked_up[r]));
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(messages[r], "rank 1: bad shape") << "rank " << r;
    EXPECT_EQ(prefetched[r], looked_up[r]) << "rank " << r;
  }
}

TEST(Pipelining, RejectsAStalenessThatIsNoEnumerator) {
  const Problem p = make_problem(Sgd{});
  EXPECT_THAT(test::error_of<InvalidArgument>([&] {
                Embedding layer(
                    p.tables, p.features,
                    {.optimizer = Sgd{}, .pipeline_staleness = static_cast<PipelineStaleness>(2)});
              }),
              ::testing::HasSubstr("PipelineStaleness value 2"));
}

TEST(ShardedStep, ReportsTheRankAndPlacement) {
  const Problem p = make_problem(Sgd{});
  Embedding layer(
      p.tables, p.features,
      {.optimizer = Sgd{},
       .placement = PlacementOptions{.num_shards = 3, .strategy = ShardingStrategy::kRowWise}});
  EXPECT_EQ(layer.rank(), 0);
  EXPECT_EQ(layer.world_size(), 1);
  EXPECT_EQ(layer.placement().num_shards, 3);
  EXPECT_EQ(layer.placement().tables[0].strategy, ShardingStrategy::kRowWise);
  EXPECT_FALSE(layer.has_whole_table("a"));
  EXPECT_THAT(
      test::error_of<FailedPrecondition>([&] { (void)layer.variable_data("a", "parameters"); }),
      ::testing::HasSubstr("read_variable"));
}

TEST(ShardedStep, WriteVariableThenReadVariableRoundTripsEveryPlacement) {
  const Optimizer optimizer = Adagrad{};
  const Problem p = make_problem(optimizer);
  std::mt19937_64 rng(3);
  for (const ShardingStrategy strategy :
       {ShardingStrategy::kTableWise, ShardingStrategy::kRowWise, ShardingStrategy::kColumnWise,
        ShardingStrategy::kReplicated}) {
    Embedding layer(p.tables, p.features,
                    {.optimizer = optimizer,
                     .placement = PlacementOptions{.num_shards = 4, .strategy = strategy}});
    for (const TableConfig& table : p.tables) {
      for (const std::string& variable : layer.variable_names(table.name)) {
        std::vector<float> values =
            test::random_gradient(rng, static_cast<size_t>(table.vocabulary_size * table.dim));
        if (variable == "accumulators") {
          for (float& value : values) value = std::abs(value) + 0.5f;  // Adagrad's are > 0
        }
        layer.write_variable(table.name, variable, values);
        std::vector<float> back(values.size());
        layer.read_variable(table.name, variable, back);
        EXPECT_EQ(back, values) << table.name << " " << variable;
      }
    }
  }
}

TEST(ShardedStep, ColumnWiseRejectsRowwiseAdagrad) {
  const Problem p = make_problem(RowwiseAdagrad{});
  EXPECT_THAT(test::error_of<InvalidArgument>([&] {
                Embedding layer(p.tables, p.features,
                                {.optimizer = RowwiseAdagrad{},
                                 .placement = PlacementOptions{
                                     .num_shards = 2, .strategy = ShardingStrategy::kColumnWise}});
              }),
              ::testing::HasSubstr("column_wise"));
}

// Runs `body(rank, communicator)` on `ranks` threads and returns what each threw ("" if nothing).
std::vector<std::string> errors_on_ranks(
    int ranks, const std::function<void(int, std::shared_ptr<Communicator>)>& body) {
  std::vector<std::shared_ptr<Communicator>> communicators = in_process_communicators(ranks);
  std::vector<std::string> errors(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r, communicators[r]);
      } catch (const std::exception& error) {
        errors[r] = error.what();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  return errors;
}

TEST(ShardedStep, AnIdOutOfRangeOnOneRankFailsEveryRankNamingRankAndFeature) {
  const Optimizer optimizer = Sgd{};
  const Problem p = make_problem(optimizer);
  std::vector<std::vector<float>> before(3), after(3);
  const std::vector<std::string> errors = errors_on_ranks(3, [&](int rank, auto communicator) {
    Embedding layer(
        p.tables, p.features,
        {.optimizer = optimizer,
         .placement = PlacementOptions{.num_shards = 3, .strategy = ShardingStrategy::kRowWise},
         .communicator = communicator});
    std::mt19937_64 rng(static_cast<uint64_t>(rank));
    Batch batch = random_batch(rng, p, 4);
    if (rank == 1) batch[2][1].ids = {2, 7};  // table "b" has 7 rows
    const std::vector<OwnedInput> owned = inputs_of(batch);
    const std::vector<FeatureInput> inputs = test::views_of(owned);
    Arrays activations = activation_arrays(layer, inputs);
    before[rank] = read_all(layer)[0];
    LookupBatch kept;
    try {
      layer.lookup(inputs, spans_of<float>(activations), kept);
    } catch (...) {
      after[rank] = read_all(layer)[0];  // still collective: every rank gets here
      throw;
    }
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_THAT(errors[r], ::testing::HasSubstr("rank 1: feature 'f2'")) << "rank " << r;
    EXPECT_THAT(errors[r], ::testing::HasSubstr("7")) << "rank " << r;
    EXPECT_EQ(before[r], after[r]);
  }
}

TEST(ShardedStep, DifferentConfigsOnTheRanksAreRejectedAtConstruction) {
  const Problem p = make_problem(Sgd{});
  const std::vector<std::string> errors = errors_on_ranks(2, [&](int rank, auto communicator) {
    std::vector<TableConfig> tables = p.tables;
    if (rank == 1) tables[2].dim = 17;
    Embedding layer(tables, p.features,
                    {.optimizer = Sgd{},
                     .placement = PlacementOptions{.num_shards = 2},
                     .communicator = communicator});
  });
  for (const std::string& error : errors) {
    EXPECT_THAT(error, ::testing::HasSubstr("rank 1's tables, features"));
  }
}

TEST(ShardedStep, WriteVariableRejectsDifferentValuesOnTheRanks) {
  const Problem p = make_problem(Sgd{});
  std::vector<std::vector<float>> before(2), after(2);
  const std::vector<std::string> errors = errors_on_ranks(2, [&](int rank, auto communicator) {
    Embedding layer(
        p.tables, p.features,
        {.optimizer = Sgd{},
         .placement = PlacementOptions{.num_shards = 2, .strategy = ShardingStrategy::kReplicated},
         .communicator = communicator});
    before[rank] = read_all(layer)[0];
    std::vector<float> values(53 * 8, 0.5f);
    if (rank == 1) values[17] = 0.25f;
    try {
      layer.write_variable("a", "parameters", values);
    } catch (...) {
      after[rank] = read_all(layer)[0];
      throw;
    }
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_THAT(errors[r], ::testing::HasSubstr("rank 1's values for table 'a' variable "
                                                "'parameters' differ from rank 0's"));
    EXPECT_EQ(before[r], after[r]);
  }
}

TEST(ShardedStep, AnInvalidConfigOnOneRankFailsEveryRank) {
  const Problem p = make_problem(Sgd{});
  const std::vector<std::string> errors = errors_on_ranks(2, [&](int rank, auto communicator) {
    std::vector<TableConfig> tables = p.tables;
    if (rank == 0) tables[0].dim = 0;
    Embedding layer(tables, p.features, {.optimizer = Sgd{}, .communicator = communicator});
  });
  for (const std::string& error : errors) {
    EXPECT_THAT(error, ::testing::HasSubstr("rank 0: table 'a'"));
  }
}

}  // namespace
}  // namespace recemb
