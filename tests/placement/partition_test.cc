// Partition (src/placement/partition.h): for every strategy, uniform or mixed per table, and
// shard/rank counts with K < W, K > W, K not a multiple of W, vocabulary < K and dim < K, the two
// views of the parts agree, the parts are the ones placement.h describes, they cover every value of
// every table exactly once (a replicated table: once per rank), and the sections are listed in the
// documented order. The expected parts are derived from the header texts, not from the planner.
#include "placement/partition.h"

#include <algorithm>
#include <cstdint>
#include <gtest/gtest.h>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "recemb/config.h"
#include "recemb/placement.h"

namespace recemb::internal {
namespace {

// Four tables of awkward sizes: "tiny" has fewer rows and columns than most shard counts, "wide"
// more columns than rows, "unused" no feature. Features interleave the tables, and two tables have
// two features, so "features in feature order" is not "features grouped by table".
std::vector<TableConfig> make_tables() {
  return {
      {.name = "big", .vocabulary_size = 37, .dim = 5},
      {.name = "tiny", .vocabulary_size = 2, .dim = 1},
      {.name = "wide", .vocabulary_size = 11, .dim = 9},
      {.name = "unused", .vocabulary_size = 4, .dim = 3},
  };
}

std::vector<FeatureConfig> make_features() {
  return {
      {.name = "f0", .table = "big"},  {.name = "f1", .table = "wide"},
      {.name = "f2", .table = "tiny"}, {.name = "f3", .table = "big"},
      {.name = "f4", .table = "wide"},
  };
}

// A part as placement.h and partition.h describe it, without the indices.
struct ExpectedPart {
  int shard;
  int rank;
  int64_t rows;
  int64_t row_stride;
  int64_t first_column;
  int64_t num_columns;
};

// The parts of `table`, in shard order (replicated: rank order). A table-wise table's shard is the
// planner's choice, so it is passed in.
std::vector<ExpectedPart> expected_parts(const TableConfig& table, ShardingStrategy strategy,
                                         int table_wise_shard, int num_shards, int world_size) {
  std::vector<ExpectedPart> parts;
  switch (strategy) {
    case ShardingStrategy::kTableWise:
      parts.push_back({table_wise_shard, table_wise_shard % world_size, table.vocabulary_size, 1, 0,
                       table.dim});
      break;
    case ShardingStrategy::kReplicated:
      for (int rank = 0; rank < world_size; ++rank) {
        parts.push_back({rank, rank, table.vocabulary_size, 1, 0, table.dim});
      }
      break;
    case ShardingStrategy::kRowWise:
      // Row r on shard r % K; shards without rows are left out.
      for (int s = 0; s < num_shards; ++s) {
        int64_t rows = 0;
        for (int64_t r = 0; r < table.vocabulary_size; ++r) rows += r % num_shards == s ? 1 : 0;
        if (rows > 0) parts.push_back({s, s % world_size, rows, num_shards, 0, table.dim});
      }
      break;
    case ShardingStrategy::kColumnWise: {
      // D / K columns each, plus one for the first D % K shards, contiguous in shard order.
      int64_t first = 0;
      for (int s = 0; s < num_shards; ++s) {
        const int64_t columns = table.dim / num_shards + (s < table.dim % num_shards ? 1 : 0);
        if (columns > 0) {
          parts.push_back({s, s % world_size, table.vocabulary_size, 1, first, columns});
        }
        first += columns;
      }
      break;
    }
    case ShardingStrategy::kAuto:
      ADD_FAILURE() << "a plan never holds kAuto";
  }
  return parts;
}

bool same_part(const TablePart& a, const TablePart& b) {
  return a.table == b.table && a.strategy == b.strategy && a.shard == b.shard && a.rank == b.rank &&
         a.index_on_rank == b.index_on_rank && a.index_in_table == b.index_in_table &&
         a.rows == b.rows && a.row_stride == b.row_stride && a.first_column == b.first_column &&
         a.num_columns == b.num_columns;
}

struct StrategyCase {
  std::string name;
  ShardingStrategy strategy;  // of every table not in per_table
  std::map<std::string, ShardingStrategy> per_table;
};

std::vector<StrategyCase> strategy_cases() {
  return {
      {"table_wise", ShardingStrategy::kTableWise, {}},
      {"row_wise", ShardingStrategy::kRowWise, {}},
      {"column_wise", ShardingStrategy::kColumnWise, {}},
      {"replicated", ShardingStrategy::kReplicated, {}},
      {"auto", ShardingStrategy::kAuto, {}},
      {"mixed",
       ShardingStrategy::kTableWise,
       {{"big", ShardingStrategy::kRowWise},
        {"wide", ShardingStrategy::kColumnWise},
        {"tiny", ShardingStrategy::kReplicated}}},
      {"mixed_no_table_wise",
       ShardingStrategy::kColumnWise,
       {{"big", ShardingStrategy::kReplicated},
        {"wide", ShardingStrategy::kRowWise},
        {"unused", ShardingStrategy::kRowWise}}},
  };
}

struct Counts {
  int num_shards;  // K
  int world_size;  // W
};

// K == W, K < W, K > W (multiple and not), K = 1, W = 1; K = 3, 5, 7 > vocabulary 2 and, for
// K = 5, 7, > dim 3 and 1.
std::vector<Counts> counts_cases() {
  return {{1, 1}, {3, 1}, {1, 3}, {2, 2}, {2, 4}, {3, 5}, {4, 2},
          {5, 2}, {3, 3}, {5, 3}, {7, 3}, {7, 4}, {10, 3}};
}

class PartitionTest : public ::testing::TestWithParam<std::tuple<StrategyCase, Counts>> {
 protected:
  void SetUp() override {
    const auto& [strategies, counts] = GetParam();
    placement_ = plan_placement(tables_, features_, Sgd{},
                                {.num_shards = counts.num_shards,
                                 .strategy = strategies.strategy,
                                 .table_strategies = strategies.per_table});
  }

  int world_size() const { return std::get<1>(GetParam()).world_size; }
  int num_shards() const { return std::get<1>(GetParam()).num_shards; }

  const std::vector<TableConfig> tables_ = make_tables();
  const std::vector<FeatureConfig> features_ = make_features();
  Placement placement_;
};

TEST_P(PartitionTest, PartsAreTheOnesThePlacementDescribes) {
  const Partition partition(placement_, tables_, features_, world_size());
  EXPECT_EQ(partition.world_size(), world_size());
  for (size_t t = 0; t < tables_.size(); ++t) {
    SCOPED_TRACE("table " + tables_[t].name);
    const ShardingStrategy strategy = placement_.tables[t].strategy;
    const int table_wise_shard =
        placement_.tables[t].shards.empty() ? -1 : placement_.tables[t].shards.front().shard;
    const std::vector<ExpectedPart> expected =
        expected_parts(tables_[t], strategy, table_wise_shard, num_shards(), world_size());
    const std::span<const TablePart> parts = partition.table_parts(t);
    ASSERT_EQ(parts.size(), expected.size());
    for (size_t i = 0; i < parts.size(); ++i) {
      SCOPED_TRACE("part " + std::to_string(i));
      const TablePart& part = parts[i];
      EXPECT_EQ(part.table, t);
      EXPECT_EQ(part.strategy, strategy);
      EXPECT_EQ(part.index_in_table, i);
      EXPECT_EQ(part.shard, expected[i].shard);
      EXPECT_EQ(part.rank, expected[i].rank);
      EXPECT_EQ(part.rows, expected[i].rows);
      EXPECT_EQ(part.row_stride, expected[i].row_stride);
      EXPECT_EQ(part.first_column, expected[i].first_column);
      EXPECT_EQ(part.num_columns, expected[i].num_columns);
      const bool whole =
          part.rows == tables_[t].vocabulary_size && part.num_columns == tables_[t].dim;
      EXPECT_EQ(part.whole, whole);
      if (strategy == ShardingStrategy::kTableWise || strategy == ShardingStrategy::kReplicated) {
        EXPECT_TRUE(part.whole);
      }
      if (strategy != ShardingStrategy::kReplicated) {
        EXPECT_EQ(part.rank, part.shard % world_size());
      }
    }
  }
}

TEST_P(PartitionTest, EveryPartAppearsOnceInEachView) {
  const Partition partition(placement_, tables_, features_, world_size());
  size_t in_tables = 0;
  for (size_t t = 0; t < tables_.size(); ++t) {
    for (const TablePart& part : partition.table_parts(t)) {
      ++in_tables;
      ASSERT_GE(part.rank, 0);
      ASSERT_LT(part.rank, world_size());
      const std::span<const TablePart> on_rank = partition.rank_parts(part.rank);
      ASSERT_LT(part.index_on_rank, on_rank.size());
      EXPECT_TRUE(same_part(on_rank[part.index_on_rank], part))
          << "table " << t << " shard " << part.shard;
    }
  }
  size_t in_ranks = 0;
  for (int rank = 0; rank < world_size(); ++rank) {
    const std::span<const TablePart> parts = partition.rank_parts(rank);
    for (size_t i = 0; i < parts.size(); ++i) {
      ++in_ranks;
      const TablePart& part = parts[i];
      EXPECT_EQ(part.rank, rank);
      EXPECT_EQ(part.index_on_rank, i);
      ASSERT_LT(part.table, tables_.size());
      const std::span<const TablePart> of_table = partition.table_parts(part.table);
      ASSERT_LT(part.index_in_table, of_table.size());
      EXPECT_TRUE(same_part(of_table[part.index_in_table], part))
          << "rank " << rank << " part " << i;
      // (table, shard) order.
      if (i > 0) {
        EXPECT_LT(std::tie(parts[i - 1].table, parts[i - 1].shard),
                  std::tie(part.table, part.shard))
            << "rank " << rank << " part " << i;
      }
    }
  }
  // Both views hold the same number of parts, each found in the other: the same parts, once each.
  EXPECT_EQ(in_tables, in_ranks);
}

TEST_P(PartitionTest, PartsCoverEveryValueOfEveryTableExactlyOnce) {
  const Partition partition(placement_, tables_, features_, world_size());
  for (size_t t = 0; t < tables_.size(); ++t) {
    SCOPED_TRACE("table " + tables_[t].name);
    const int64_t rows = tables_[t].vocabulary_size;
    const int64_t dim = tables_[t].dim;
    const bool replicated = placement_.tables[t].strategy == ShardingStrategy::kReplicated;
    // covered[rank][row * dim + column]; without replication every part counts as rank 0.
    std::vector<std::vector<int>> covered(static_cast<size_t>(replicated ? world_size() : 1),
                                          std::vector<int>(static_cast<size_t>(rows * dim), 0));
    for (const TablePart& part : partition.table_parts(t)) {
      ASSERT_GE(part.rows, 1);
      ASSERT_GE(part.num_columns, 1);
      ASSERT_GE(part.first_column, 0);
      ASSERT_LE(part.first_column + part.num_columns, dim);
      std::vector<int>& grid = covered[static_cast<size_t>(replicated ? part.rank : 0)];
      for (int64_t local = 0; local < part.rows; ++local) {
        const int64_t row = part.global_row(local);
        ASSERT_GE(row, 0) << "shard " << part.shard << " local row " << local;
        ASSERT_LT(row, rows) << "shard " << part.shard << " local row " << local;
        for (int64_t c = part.first_column; c < part.first_column + part.num_columns; ++c) {
          ++grid[static_cast<size_t>(row * dim + c)];
        }
      }
    }
    for (size_t r = 0; r < covered.size(); ++r) {
      for (size_t v = 0; v < covered[r].size(); ++v) {
        ASSERT_EQ(covered[r][v], 1) << "rank " << r << " row " << v / static_cast<size_t>(dim)
                                    << " column " << v % static_cast<size_t>(dim);
      }
    }
  }
}

TEST_P(PartitionTest, SectionsListPartsThenFeaturesInOrder) {
  const Partition partition(placement_, tables_, features_, world_size());
  for (int rank = 0; rank < world_size(); ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    // Parts in the rank's order; for each, the features of its table in feature order.
    std::vector<std::pair<size_t, size_t>> expected;
    const std::span<const TablePart> parts = partition.rank_parts(rank);
    for (size_t p = 0; p < parts.size(); ++p) {
      for (size_t f = 0; f < features_.size(); ++f) {
        if (features_[f].table == tables_[parts[p].table].name) expected.emplace_back(p, f);
      }
    }
    const std::span<const Section> sections = partition.sections(rank);
    ASSERT_EQ(sections.size(), expected.size());
    for (size_t i = 0; i < sections.size(); ++i) {
      EXPECT_EQ(sections[i].part, expected[i].first) << "section " << i;
      EXPECT_EQ(sections[i].feature, expected[i].second) << "section " << i;
    }
  }
}

TEST_P(PartitionTest, SectionIndexFindsEverySection) {
  const Partition partition(placement_, tables_, features_, world_size());
  size_t found = 0;
  for (size_t t = 0; t < tables_.size(); ++t) {
    for (const TablePart& part : partition.table_parts(t)) {
      const std::span<const Section> sections = partition.sections(part.rank);
      for (size_t f = 0; f < features_.size(); ++f) {
        if (features_[f].table != tables_[t].name) continue;
        const size_t index = partition.section_index(part, f);
        ASSERT_LT(index, sections.size()) << "table " << t << " shard " << part.shard << " f" << f;
        EXPECT_EQ(sections[index].part, part.index_on_rank);
        EXPECT_EQ(sections[index].feature, f);
        ++found;
      }
    }
  }
  size_t total = 0;
  for (int rank = 0; rank < world_size(); ++rank) total += partition.sections(rank).size();
  EXPECT_EQ(found, total);  // every section is some (part, feature)'s
}

INSTANTIATE_TEST_SUITE_P(AllStrategiesAndCounts, PartitionTest,
                         ::testing::Combine(::testing::ValuesIn(strategy_cases()),
                                            ::testing::ValuesIn(counts_cases())),
                         [](const auto& test_info) {
                           const Counts counts = std::get<1>(test_info.param);
                           return std::get<0>(test_info.param).name + "_" +
                                  std::to_string(counts.num_shards) + "shards_" +
                                  std::to_string(counts.world_size) + "ranks";
                         });

TEST(Partition, RankWithoutPartsHasNoSections) {
  // One table-wise table over 2 shards, 4 ranks: ranks 2 and 3 hold nothing.
  const std::vector<TableConfig> tables = {{.name = "t", .vocabulary_size = 5, .dim = 2}};
  const std::vector<FeatureConfig> features = {{.name = "a", .table = "t"},
                                               {.name = "b", .table = "t"}};
  const Partition partition(
      plan_placement(tables, features, Sgd{},
                     {.num_shards = 2, .strategy = ShardingStrategy::kTableWise}),
      tables, features, 4);
  ASSERT_EQ(partition.table_parts(0).size(), 1u);
  EXPECT_EQ(partition.table_parts(0)[0].rank, 0);
  EXPECT_EQ(partition.sections(0).size(), 2u);
  for (const int rank : {1, 2, 3}) {
    EXPECT_TRUE(partition.rank_parts(rank).empty()) << "rank " << rank;
    EXPECT_TRUE(partition.sections(rank).empty()) << "rank " << rank;
  }
}

}  // namespace
}  // namespace recemb::internal
