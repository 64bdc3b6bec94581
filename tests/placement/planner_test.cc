#include "placement/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "recemb/error.h"
#include "recemb/placement.h"

#include "testing/error_of.h"

namespace recemb {
namespace {

using test::error_of;
using ::testing::AllOf;
using ::testing::HasSubstr;

// Bytes of `rows` x `columns` of a table with `optimizer`, from the header's formula, with the
// slot counts written out per optimizer (not taken from the library).
int64_t reference_bytes(const std::optional<Optimizer>& optimizer, int64_t rows, int64_t columns) {
  int64_t full_slots = 0;
  int64_t row_slots = 0;
  if (optimizer) {
    if (std::holds_alternative<RowwiseAdagrad>(*optimizer)) {
      row_slots = 1;
    } else if (std::holds_alternative<Adagrad>(*optimizer)) {
      full_slots = 1;
    } else if (!std::holds_alternative<Sgd>(*optimizer)) {
      full_slots = 2;  // AdagradMomentum, Adam, Ftrl
    }
  }
  return 4 * rows * (columns * (1 + full_slots) + row_slots);
}

struct Problem {
  std::vector<TableConfig> tables;
  std::vector<FeatureConfig> features;
  std::optional<Optimizer> global_optimizer;
  PlacementOptions options;

  Placement plan() const { return plan_placement(tables, features, global_optimizer, options); }

  const std::optional<Optimizer>& optimizer_of(size_t t) const {
    return tables[t].optimizer ? tables[t].optimizer : global_optimizer;
  }
  double rate_of(size_t t) const {
    double rate = 0;
    for (const FeatureConfig& f : features) {
      if (f.table != tables[t].name) continue;
      const auto it = options.expected_lookups.find(f.name);
      rate += it == options.expected_lookups.end() ? 1.0 : it->second;
    }
    return rate;
  }
  int64_t whole_bytes(size_t t) const {
    return reference_bytes(optimizer_of(t), tables[t].vocabulary_size, tables[t].dim);
  }
};

// Checks every part of every table against the contract of its strategy: which (row, column)
// values each shard holds (every value exactly once, or once per shard when replicated), the
// parts' rows, bytes and expected lookups, and the shard summaries as a plain recount.
void expect_consistent(const Problem& p, const Placement& plan) {
  const int k = p.options.num_shards;
  ASSERT_EQ(plan.num_shards, k);
  ASSERT_EQ(plan.tables.size(), p.tables.size());
  std::vector<ShardSummary> recount(static_cast<size_t>(k));
  for (size_t t = 0; t < p.tables.size(); ++t) {
    const TablePlacement& table = plan.tables[t];
    const int64_t rows = p.tables[t].vocabulary_size;
    const int64_t dim = p.tables[t].dim;
    const double rate = p.rate_of(t);
    SCOPED_TRACE(table.table + " " + std::string(sharding_strategy_name(table.strategy)));
    EXPECT_EQ(table.table, p.tables[t].name);
    EXPECT_NE(table.strategy, ShardingStrategy::kAuto);
    const bool by_row = table.strategy == ShardingStrategy::kRowWise;
    std::vector<int> holders(static_cast<size_t>(rows * dim), 0);
    for (size_t i = 0; i < table.shards.size(); ++i) {
      const TableShard& part = table.shards[i];
      if (i > 0) {
        EXPECT_LT(table.shards[i - 1].shard, part.shard);
      }
      ASSERT_GE(part.shard, 0);
      ASSERT_LT(part.shard, k);
      ASSERT_GE(part.first_column, 0);
      ASSERT_LE(part.first_column + part.num_columns, dim);
      EXPECT_GE(part.num_columns, 1);
      int64_t owned_rows = 0;
      for (int64_t r = 0; r < rows; ++r) {
        if (by_row && r % k != part.shard) continue;
        ++owned_rows;
        for (int64_t c = part.first_column; c < part.first_column + part.num_columns; ++c) {
          ++holders[static_cast<size_t>(r * dim + c)];
        }
      }
      EXPECT_EQ(part.rows, owned_rows);
      EXPECT_GE(part.rows, 1);
      EXPECT_EQ(part.bytes, reference_bytes(p.optimizer_of(t), part.rows, part.num_columns));
      double expected_lookups = rate;
      if (by_row)
        expected_lookups = rate * static_cast<double>(owned_rows) / static_cast<double>(rows);
      if (table.strategy == ShardingStrategy::kReplicated) expected_lookups = rate / k;
      EXPECT_NEAR(part.expected_lookups, expected_lookups, 1e-12 * (1 + rate));
      ShardSummary& s = recount[static_cast<size_t>(part.shard)];
      ++s.num_tables;
      s.rows += part.rows;
      s.bytes += part.bytes;
      s.expected_lookups += part.expected_lookups;
    }
    const int copies = table.strategy == ShardingStrategy::kReplicated ? k : 1;
    EXPECT_EQ(std::count(holders.begin(), holders.end(), copies),
              static_cast<std::ptrdiff_t>(holders.size()));
  }
  ASSERT_EQ(plan.shards.size(), static_cast<size_t>(k));
  for (int s = 0; s < k; ++s) {
    const ShardSummary& summary = plan.shards[static_cast<size_t>(s)];
    EXPECT_EQ(summary.shard, s);
    EXPECT_EQ(summary.num_tables, recount[static_cast<size_t>(s)].num_tables);
    EXPECT_EQ(summary.rows, recount[static_cast<size_t>(s)].rows);
    EXPECT_EQ(summary.bytes, recount[static_cast<size_t>(s)].bytes);
    EXPECT_NEAR(summary.expected_lookups, recount[static_cast<size_t>(s)].expected_lookups, 1e-9);
  }
}

Problem small_problem(int num_shards) {
  return Problem{
      .tables = {{.name = "video", .vocabulary_size = 10, .dim = 7},
                 {.name = "user", .vocabulary_size = 2, .dim = 2, .optimizer = RowwiseAdagrad{}},
                 {.name = "ad", .vocabulary_size = 5, .dim = 3, .optimizer = Adam{}}},
      .features = {{.name = "watched", .table = "video"},
                   {.name = "liked", .table = "video"},
                   {.name = "user_id", .table = "user"},
                   {.name = "ad_id", .table = "ad"}},
      .global_optimizer = Adagrad{},
      .options = {.num_shards = num_shards,
                  .expected_lookups = {{"watched", 12.5}, {"user_id", 3.0}}}};
}

TEST(PlanPlacementTest, TableWiseHoldsWholeTablesOnOneShard) {
  Problem p = small_problem(3);
  p.options.strategy = ShardingStrategy::kTableWise;
  const Placement plan = p.plan();
  expect_consistent(p, plan);
  for (size_t t = 0; t < 3; ++t) {
    EXPECT_EQ(plan.tables[t].strategy, ShardingStrategy::kTableWise);
    ASSERT_EQ(plan.tables[t].shards.size(), 1u);
  }
  // video: 10 * 4 * 7 * 2 = 560 bytes (Adagrad), 13.5 lookups; ad: 5 * 4 * 3 * 3 = 180 (Adam);
  // user: 2 * 4 * (2 + 1) = 24 (RowwiseAdagrad), 3 lookups.
  EXPECT_EQ(plan.tables[0].shards[0].bytes, 560);
  EXPECT_EQ(plan.tables[1].shards[0].bytes, 24);
  EXPECT_EQ(plan.tables[2].shards[0].bytes, 180);
  EXPECT_DOUBLE_EQ(plan.tables[0].shards[0].expected_lookups, 13.5);
  // Loads: video 560/764 + 13.5*28/(13.5*28 + 3*8 + 12) = 0.733 + 0.913, largest, first on 0;
  // ad 0.236 + 0.029 on 1; user 0.031 + 0.058 on 2.
  EXPECT_EQ(plan.tables[0].shards[0].shard, 0);
  EXPECT_EQ(plan.tables[2].shards[0].shard, 1);
  EXPECT_EQ(plan.tables[1].shards[0].shard, 2);
}

TEST(PlanPlacementTest, RowWiseIsModSharding) {
  Problem p = small_problem(3);
  p.options.strategy = ShardingStrategy::kRowWise;
  const Placement plan = p.plan();
  expect_consistent(p, plan);
  // video: rows {0,3,6,9}, {1,4,7}, {2,5,8}; user (2 rows): shards 0 and 1 only.
  ASSERT_EQ(plan.tables[0].shards.size(), 3u);
  EXPECT_EQ(plan.tables[0].shards[0].rows, 4);
  EXPECT_EQ(plan.tables[0].shards[1].rows, 3);
  EXPECT_EQ(plan.tables[0].shards[2].bytes, 3 * 7 * 4 * 2);
  EXPECT_DOUBLE_EQ(plan.tables[0].shards[0].expected_lookups, 13.5 * 4 / 10);
  ASSERT_EQ(plan.tables[1].shards.size(), 2u);
  EXPECT_EQ(plan.tables[1].shards[1].shard, 1);
  EXPECT_EQ(plan.tables[1].shards[1].rows, 1);
}

TEST(PlanPlacementTest, ColumnWiseSplitsTheDimEvenly) {
  Problem p = small_problem(3);
  p.tables[1].optimizer = Adagrad{};  // RowwiseAdagrad cannot be split by columns (below)
  p.options.strategy = ShardingStrategy::kColumnWise;
  const Placement plan = p.plan();
  expect_consistent(p, plan);
  // video dim 7: [0, 3), [3, 5), [5, 7); user dim 2: [0, 1), [1, 2) and nothing on shard 2, each
  // part with its columns of the accumulators.
  ASSERT_EQ(plan.tables[0].shards.size(), 3u);
  EXPECT_EQ(plan.tables[0].shards[1].first_column, 3);
  EXPECT_EQ(plan.tables[0].shards[1].num_columns, 2);
  EXPECT_EQ(plan.tables[0].shards[2].first_column, 5);
  ASSERT_EQ(plan.tables[1].shards.size(), 2u);
  EXPECT_EQ(plan.tables[1].shards[1].first_column, 1);
  EXPECT_EQ(plan.tables[1].shards[1].bytes, 2 * 4 * (1 + 1));
  EXPECT_DOUBLE_EQ(plan.tables[1].shards[1].expected_lookups, 3.0);
}

TEST(PlanPlacementTest, ColumnWiseRejectsRowwiseSlotsUnlessTheDimIsOne) {
  Problem p = small_problem(2);
  p.options.table_strategies = {{"user", ShardingStrategy::kColumnWise}};
  EXPECT_THAT(
      error_of<InvalidArgument>([&] { p.plan(); }),
      AllOf(HasSubstr("table 'user'"), HasSubstr("column_wise"), HasSubstr("RowwiseAdagrad")));
  p.tables[1].dim = 1;  // one column: nothing to split
  EXPECT_EQ(p.plan().tables[1].strategy, ShardingStrategy::kColumnWise);
}

TEST(PlanPlacementTest, ReplicatedCopiesEveryTableToEveryShard) {
  Problem p = small_problem(4);
  p.options.strategy = ShardingStrategy::kReplicated;
  const Placement plan = p.plan();
  expect_consistent(p, plan);
  for (const ShardSummary& s : plan.shards) {
    EXPECT_EQ(s.num_tables, 3);
    EXPECT_EQ(s.bytes, 560 + 24 + 180);
    EXPECT_DOUBLE_EQ(s.expected_lookups, (13.5 + 3 + 1) / 4);
  }
}

TEST(PlanPlacementTest, TablesWithoutAnyOptimizerHaveNoSlots) {
  Problem p = small_problem(2);
  p.global_optimizer.reset();
  p.options.strategy = ShardingStrategy::kTableWise;
  const Placement plan = p.plan();
  expect_consistent(p, plan);
  EXPECT_EQ(plan.tables[0].shards[0].bytes, 10 * 7 * 4);
  EXPECT_EQ(plan.tables[2].shards[0].bytes, 5 * 3 * 4 * 3);  // its own Adam
}

TEST(PlanPlacementTest, AutoSpreadsTablesLargerThanAFairShare) {
  Problem p{.tables = {{.name = "big", .vocabulary_size = 1000, .dim = 8},
                       {.name = "a", .vocabulary_size = 100, .dim = 8},
                       {.name = "b", .vocabulary_size = 90, .dim = 8},
                       {.name = "c", .vocabulary_size = 80, .dim = 8}},
            .features = {{.name = "fa", .table = "a"},
                         {.name = "fb", .table = "b"},
                         {.name = "fc", .table = "c"},
                         {.name = "fbig", .table = "big"}},
            .global_optimizer = Sgd{},
            .options = {.num_shards = 2}};
  const Placement plan = p.plan();
  expect_consistent(p, plan);
  EXPECT_EQ(plan.tables[0].strategy, ShardingStrategy::kRowWise);
  // a, b, c are table-wise; greedily: a on 0 (after big's even halves), b on 1, c on 1.
  EXPECT_EQ(plan.tables[1].shards[0].shard, 0);
  EXPECT_EQ(plan.tables[2].shards[0].shard, 1);
  EXPECT_EQ(plan.tables[3].shards[0].shard, 1);
}

TEST(PlanPlacementTest, AutoSpreadsHotTables) {
  Problem p{.tables = {{.name = "cold", .vocabulary_size = 1000, .dim = 8},
                       {.name = "hot", .vocabulary_size = 10, .dim = 8},
                       {.name = "warm", .vocabulary_size = 900, .dim = 8}},
            .features = {{.name = "c", .table = "cold"},
                         {.name = "h", .table = "hot"},
                         {.name = "w", .table = "warm"}},
            .options = {.num_shards = 2, .expected_lookups = {{"h", 50.0}}}};
  const Placement plan = p.plan();
  expect_consistent(p, plan);
  EXPECT_EQ(plan.tables[0].strategy, ShardingStrategy::kRowWise);  // 1000 > 1910 / 2 rows
  EXPECT_EQ(plan.tables[1].strategy, ShardingStrategy::kRowWise);  // 50 of 52 lookups
  EXPECT_EQ(plan.tables[2].strategy, ShardingStrategy::kTableWise);

  p.options.num_shards = 1;
  const Placement single = p.plan();
  expect_consistent(p, single);
  for (const TablePlacement& table : single.tables) {
    EXPECT_EQ(table.strategy, ShardingStrategy::kTableWise);
  }
}

TEST(PlanPlacementTest, OverridesWin) {
  Problem p = small_problem(3);
  p.options.strategy = ShardingStrategy::kRowWise;
  p.options.table_strategies = {{"user", ShardingStrategy::kReplicated},
                                {"ad", ShardingStrategy::kColumnWise}};
  const Placement plan = p.plan();
  expect_consistent(p, plan);
  EXPECT_EQ(plan.tables[0].strategy, ShardingStrategy::kRowWise);
  EXPECT_EQ(plan.tables[1].strategy, ShardingStrategy::kReplicated);
  EXPECT_EQ(plan.tables[2].strategy, ShardingStrategy::kColumnWise);
}

Problem random_problem(uint32_t seed) {
  std::mt19937 rng(seed);
  const auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  Problem p;
  p.options.num_shards = static_cast<int>(uniform(1, 6));
  const std::vector<std::optional<Optimizer>> optimizers = {
      std::nullopt, Sgd{}, Adagrad{}, Adam{}, RowwiseAdagrad{}, Ftrl{}};
  p.global_optimizer = optimizers[static_cast<size_t>(uniform(0, 5))];
  const int64_t num_tables = uniform(1, 12);
  for (int64_t t = 0; t < num_tables; ++t) {
    const std::string name = "t" + std::to_string(t);
    p.tables.push_back({.name = name,
                        .vocabulary_size = uniform(1, uniform(0, 1) ? 40 : 400),
                        .dim = uniform(1, 12),
                        .optimizer = optimizers[static_cast<size_t>(uniform(0, 5))]});
    for (int64_t f = uniform(1, 3); f > 0; --f) {
      const std::string feature = name + "_f" + std::to_string(f);
      p.features.push_back({.name = feature, .table = name});
      if (uniform(0, 1)) {
        p.options.expected_lookups[feature] = std::uniform_real_distribution<double>(0, 40)(rng);
      }
    }
  }
  return p;
}

// load(shard) as the header defines it, recomputed from the parts.
std::vector<double> shard_loads(const Problem& p, const Placement& plan) {
  double total_bytes = 0;
  double total_lookup_bytes = 0;
  for (size_t t = 0; t < p.tables.size(); ++t) {
    total_bytes += static_cast<double>(p.whole_bytes(t));
    total_lookup_bytes += p.rate_of(t) * static_cast<double>(p.tables[t].dim) * 4;
  }
  std::vector<double> loads(static_cast<size_t>(p.options.num_shards), 0.0);
  for (const TablePlacement& table : plan.tables) {
    for (const TableShard& part : table.shards) {
      loads[static_cast<size_t>(part.shard)] +=
          static_cast<double>(part.bytes) / total_bytes +
          (total_lookup_bytes > 0 ? part.expected_lookups * static_cast<double>(part.num_columns) *
                                        4 / total_lookup_bytes
                                  : 0.0);
    }
  }
  return loads;
}

TEST(PlanPlacementTest, AutoBalancesRandomConfigs) {
  for (uint32_t seed = 1; seed <= 200; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Problem p = random_problem(seed);
    const Placement plan = p.plan();
    expect_consistent(p, plan);
    EXPECT_EQ(format_placement(p.plan()), format_placement(plan));  // deterministic

    // Slack: the largest table-wise table, plus one row of every row-wise table.
    double largest_table_wise = 0;
    double row_wise_rows = 0;
    for (size_t t = 0; t < p.tables.size(); ++t) {
      const TablePlacement& table = plan.tables[t];
      ASSERT_TRUE(table.strategy == ShardingStrategy::kTableWise ||
                  table.strategy == ShardingStrategy::kRowWise);
      const int64_t rows = p.tables[t].vocabulary_size;
      const TableShard one_row{.rows = 1,
                               .num_columns = p.tables[t].dim,
                               .bytes = reference_bytes(p.optimizer_of(t), 1, p.tables[t].dim),
                               .expected_lookups = p.rate_of(t) / static_cast<double>(rows)};
      const double row_load = shard_loads(
          p, {.num_shards = 1, .tables = {{.table = table.table, .shards = {one_row}}}})[0];
      if (table.strategy == ShardingStrategy::kTableWise) {
        largest_table_wise = std::max(largest_table_wise, row_load * static_cast<double>(rows));
      } else {
        row_wise_rows += row_load;
      }
    }
    const std::vector<double> loads = shard_loads(p, plan);
    double mean = 0;
    for (const double load : loads) mean += load / static_cast<double>(loads.size());
    for (const double load : loads) {
      EXPECT_LE(load, mean + largest_table_wise + row_wise_rows + 1e-9);
    }

    // Without lookups the load is bytes alone: the bound holds for bytes.
    for (const FeatureConfig& f : p.features) p.options.expected_lookups[f.name] = 0;
    const Placement by_bytes = p.plan();
    expect_consistent(p, by_bytes);
    int64_t total = 0;
    int64_t most = 0;
    for (const ShardSummary& s : by_bytes.shards) {
      total += s.bytes;
      most = std::max(most, s.bytes);
    }
    int64_t bytes_slack = 0;
    for (size_t t = 0; t < p.tables.size(); ++t) {
      const TablePlacement& table = by_bytes.tables[t];
      if (table.strategy == ShardingStrategy::kTableWise) {
        bytes_slack = std::max(bytes_slack, p.whole_bytes(t));
      }
    }
    for (size_t t = 0; t < p.tables.size(); ++t) {
      if (by_bytes.tables[t].strategy == ShardingStrategy::kRowWise) {
        bytes_slack += reference_bytes(p.optimizer_of(t), 1, p.tables[t].dim);
      }
    }
    EXPECT_LE(static_cast<double>(most),
              static_cast<double>(total) / p.options.num_shards + static_cast<double>(bytes_slack));
  }
}

TEST(PlanPlacementTest, RandomOverridesAreHonoured) {
  for (uint32_t seed = 1; seed <= 100; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Problem p = random_problem(seed);
    std::mt19937 rng(seed + 1000);
    for (const TableConfig& table : p.tables) {
      const auto strategy =
          static_cast<ShardingStrategy>(std::uniform_int_distribution<int>(0, 4)(rng));
      const std::optional<Optimizer>& optimizer =
          table.optimizer ? table.optimizer : p.global_optimizer;
      const bool rowwise_slots =
          optimizer && std::holds_alternative<RowwiseAdagrad>(*optimizer) && table.dim > 1;
      if (strategy == ShardingStrategy::kColumnWise && rowwise_slots) continue;  // rejected
      if (strategy != ShardingStrategy::kAuto) p.options.table_strategies[table.name] = strategy;
    }
    const Placement plan = p.plan();
    expect_consistent(p, plan);
    for (const TablePlacement& table : plan.tables) {
      const auto it = p.options.table_strategies.find(table.table);
      if (it != p.options.table_strategies.end()) {
        EXPECT_EQ(table.strategy, it->second);
      }
    }
  }
}

TEST(PlanPlacementTest, PlansUpToKMaxNumShards) {
  Problem p = small_problem(kMaxNumShards);
  p.options.strategy = ShardingStrategy::kRowWise;
  const Placement plan = p.plan();
  EXPECT_EQ(plan.shards.size(), size_t{kMaxNumShards});
  expect_consistent(p, plan);
}

TEST(PlanPlacementTest, ErrorsNameTheItem) {
  const auto message = [](const std::function<void(Problem&)>& change) {
    Problem p = small_problem(2);
    change(p);
    return error_of<InvalidArgument>([&] { p.plan(); });
  };
  for (const int shards : {-3, 0, kMaxNumShards + 1, 1000000000}) {
    EXPECT_EQ(message([&](Problem& p) { p.options.num_shards = shards; }),
              "PlacementOptions.num_shards must be in [1, 65536], got " + std::to_string(shards));
  }
  EXPECT_THAT(message([](Problem& p) { p.options.strategy = static_cast<ShardingStrategy>(7); }),
              AllOf(HasSubstr("PlacementOptions.strategy"), HasSubstr("7")));
  EXPECT_THAT(message([](Problem& p) {
                p.options.table_strategies["videos"] = ShardingStrategy::kRowWise;
              }),
              AllOf(HasSubstr("table_strategies"), HasSubstr("no table 'videos'")));
  EXPECT_THAT(message([](Problem& p) {
                p.options.table_strategies["user"] = static_cast<ShardingStrategy>(-1);
              }),
              AllOf(HasSubstr("table_strategies['user']"), HasSubstr("-1")));
  EXPECT_THAT(message([](Problem& p) { p.options.expected_lookups["video"] = 1.0; }),
              AllOf(HasSubstr("expected_lookups"), HasSubstr("no feature 'video'")));
  EXPECT_THAT(message([](Problem& p) { p.options.expected_lookups["liked"] = -0.5; }),
              AllOf(HasSubstr("expected_lookups['liked']"), HasSubstr("-0.5")));
  EXPECT_THAT(message([](Problem& p) {
                p.options.expected_lookups["liked"] = std::numeric_limits<double>::quiet_NaN();
              }),
              AllOf(HasSubstr("expected_lookups['liked']"), HasSubstr("nan")));
  EXPECT_THAT(message([](Problem& p) {
                p.options.expected_lookups["liked"] = std::numeric_limits<double>::infinity();
              }),
              AllOf(HasSubstr("expected_lookups['liked']"), HasSubstr("inf")));
  EXPECT_THAT(message([](Problem& p) {
                p.options.expected_lookups["liked"] = std::numeric_limits<double>::max();
                p.options.expected_lookups["watched"] = std::numeric_limits<double>::max();
              }),
              AllOf(HasSubstr("expected_lookups"), HasSubstr("overflows")));
  EXPECT_THAT(message([](Problem& p) { p.features[0].table = "movie"; }),
              AllOf(HasSubstr("feature 'watched'"), HasSubstr("'movie'")));
  EXPECT_THAT(message([](Problem& p) { p.global_optimizer = Adam{.beta_1 = 2.0f}; }),
              HasSubstr("beta_1"));
  EXPECT_THAT(message([](Problem& p) {
                p.tables[0].vocabulary_size = int64_t{1} << 40;
                p.tables[0].dim = int64_t{1} << 20;
              }),
              AllOf(HasSubstr("table 'video'"), HasSubstr("overflows")));
  EXPECT_THAT(
      error_of<InvalidArgument>([] { sharding_strategy_name(static_cast<ShardingStrategy>(9)); }),
      HasSubstr("9"));
}

TEST(ShardingStrategyName, ParsesEveryNameBackAndListsTheValidOnes) {
  for (const ShardingStrategy strategy :
       {ShardingStrategy::kAuto, ShardingStrategy::kTableWise, ShardingStrategy::kRowWise,
        ShardingStrategy::kColumnWise, ShardingStrategy::kReplicated}) {
    EXPECT_EQ(parse_sharding_strategy(sharding_strategy_name(strategy)), strategy);
  }
  EXPECT_EQ(sharding_strategy_name(ShardingStrategy::kColumnWise), "column_wise");
  EXPECT_THAT(error_of<InvalidArgument>([] { parse_sharding_strategy("rows"); }),
              AllOf(HasSubstr("unknown sharding strategy 'rows'"),
                    HasSubstr("'auto', 'table_wise', 'row_wise', 'column_wise', 'replicated'")));
}

TEST(PlanValidPlacementTest, PlansAsPlanPlacementAndValidatesOnlyTheOptions) {
  std::mt19937_64 random(41);
  for (int trial = 0; trial < 20; ++trial) {
    Problem p = small_problem(1 + static_cast<int>(random() % 4));
    // Not column-wise: it rejects the RowwiseAdagrad table.
    const ShardingStrategy strategies[] = {ShardingStrategy::kAuto, ShardingStrategy::kTableWise,
                                           ShardingStrategy::kRowWise,
                                           ShardingStrategy::kReplicated};
    p.options.strategy = strategies[random() % 4];
    p.options.expected_lookups["liked"] = static_cast<double>(random() % 50) / 10.0;
    const Placement expected = p.plan();
    const Placement actual =
        internal::plan_valid_placement(p.tables, p.features, p.global_optimizer, p.options);
    EXPECT_EQ(format_placement(actual), format_placement(expected)) << "trial " << trial;
  }
  Problem p = small_problem(2);
  p.options.num_shards = 0;
  EXPECT_THAT(error_of<InvalidArgument>([&] {
                internal::plan_valid_placement(p.tables, p.features, p.global_optimizer, p.options);
              }),
              HasSubstr("num_shards"));
}

// The numbers of the lines of `text` after the line starting with `header`, up to an empty line.
std::vector<std::vector<std::string>> rows_after(const std::string& text,
                                                 const std::string& header) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line) && line.rfind(header, 0) != 0) {
  }
  std::vector<std::vector<std::string>> rows;
  while (std::getline(in, line) && !line.empty()) {
    std::istringstream fields(line);
    rows.emplace_back();
    for (std::string field; fields >> field;) rows.back().push_back(field);
  }
  return rows;
}

TEST(FormatPlacementTest, PrintsShardTotalsAndParts) {
  Problem p = random_problem(7);
  p.tables[0].name = "a_table_name_longer_than_its_column";
  p.tables[0].optimizer = Sgd{};  // splittable by columns whatever the global optimizer
  for (FeatureConfig& f : p.features) {
    if (f.table == "t0") f.table = p.tables[0].name;
  }
  p.options.num_shards = 3;
  p.options.table_strategies = {{p.tables[0].name, ShardingStrategy::kColumnWise}};
  const Placement plan = p.plan();
  const std::string text = format_placement(plan);

  const auto shard_rows = rows_after(text, "shard");
  ASSERT_EQ(shard_rows.size(), 4u);  // three shards and the total
  int64_t rows_total = 0;
  int64_t bytes_total = 0;
  double lookups_total = 0;
  for (int s = 0; s < 3; ++s) {
    int tables = 0;
    int64_t rows = 0;
    int64_t bytes = 0;
    double lookups = 0;
    for (const TablePlacement& table : plan.tables) {
      for (const TableShard& part : table.shards) {
        if (part.shard != s) continue;
        ++tables;
        rows += part.rows;
        bytes += part.bytes;
        lookups += part.expected_lookups;
      }
    }
    const std::vector<std::string>& fields = shard_rows[static_cast<size_t>(s)];
    ASSERT_EQ(fields.size(), 5u);
    EXPECT_EQ(fields[0], std::to_string(s));
    EXPECT_EQ(fields[1], std::to_string(tables));
    EXPECT_EQ(fields[2], std::to_string(rows));
    EXPECT_EQ(fields[3], std::to_string(bytes));
    EXPECT_NEAR(std::stod(fields[4]), lookups, 0.005 + 1e-9);
    rows_total += rows;
    bytes_total += bytes;
    lookups_total += lookups;
  }
  EXPECT_EQ(shard_rows[3][0], "total");
  EXPECT_EQ(shard_rows[3][1], std::to_string(p.tables.size()));
  EXPECT_EQ(shard_rows[3][2], std::to_string(rows_total));
  EXPECT_EQ(shard_rows[3][3], std::to_string(bytes_total));
  EXPECT_NEAR(std::stod(shard_rows[3][4]), lookups_total, 0.005 + 1e-9);

  const auto part_rows = rows_after(text, "table");
  size_t i = 0;
  for (const TablePlacement& table : plan.tables) {
    for (const TableShard& part : table.shards) {
      ASSERT_LT(i, part_rows.size());
      const std::vector<std::string>& fields = part_rows[i++];
      ASSERT_EQ(fields.size(), 7u);
      EXPECT_EQ(fields[0], table.table);
      EXPECT_EQ(fields[1], sharding_strategy_name(table.strategy));
      EXPECT_EQ(fields[2], std::to_string(part.shard));
      EXPECT_EQ(fields[3], std::to_string(part.rows));
      EXPECT_EQ(fields[4], "[" + std::to_string(part.first_column) + "," +
                               std::to_string(part.first_column + part.num_columns) + ")");
      EXPECT_EQ(fields[5], std::to_string(part.bytes));
      EXPECT_NEAR(std::stod(fields[6]), part.expected_lookups, 0.005 + 1e-9);
    }
  }
  EXPECT_EQ(i, part_rows.size());
}

}  // namespace
}  // namespace recemb
