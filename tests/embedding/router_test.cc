// Router (src/embedding/router.h): for every strategy and shard/rank counts, each id of random
// batches (empty bags, weighted and not) reaches the sections of exactly the parts that hold its
// row, at the local row the placement says, with its bag, weight and scale; sections a rank sends
// itself for a part holding its table whole are views of the batch; and the sections read from the
// delivered messages are the ones the senders wrote. The expected sections are built from
// placement.h's text (row r on shard r % K at r / K; every column range and copy gets every id),
// not from the router.
#include "embedding/router.h"

#include <cstddef>
#include <cstdint>
#include <gtest/gtest.h>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "recemb/config.h"
#include "recemb/placement.h"

#include "placement/partition.h"

namespace recemb::internal {
namespace {

std::vector<TableConfig> make_tables() {
  return {{.name = "big", .vocabulary_size = 37, .dim = 5},
          {.name = "tiny", .vocabulary_size = 2, .dim = 3},
          {.name = "wide", .vocabulary_size = 11, .dim = 9}};
}

std::vector<FeatureConfig> make_features() {
  return {{.name = "f0", .table = "big"},
          {.name = "f1", .table = "wide"},
          {.name = "f2", .table = "tiny"},
          {.name = "f3", .table = "big"}};
}

std::vector<size_t> feature_tables() { return {0, 2, 1, 0}; }

// Random bags of 0 to 4 ids (about one in five empty); weighted for odd features.
std::vector<CsrFeature> random_batch(const std::vector<TableConfig>& tables, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::vector<CsrFeature> batch;
  const std::vector<size_t> table_of = feature_tables();
  for (size_t f = 0; f < table_of.size(); ++f) {
    CsrFeature& csr = batch.emplace_back();
    const int64_t rows = tables[table_of[f]].vocabulary_size;
    const int64_t num_bags = 1 + static_cast<int64_t>(random() % 9);
    csr.offsets = {0};
    for (int64_t b = 0; b < num_bags; ++b) {
      const int64_t size = static_cast<int64_t>(random() % 5);
      for (int64_t j = 0; j < size; ++j) {
        csr.ids.push_back(static_cast<int64_t>(random() % static_cast<uint64_t>(rows)));
        if (f % 2 == 1) csr.weights.push_back(0.5f + static_cast<float>(random() % 8));
      }
      csr.offsets.push_back(static_cast<int64_t>(csr.ids.size()));
      csr.bag_scales.push_back(1.0f / static_cast<float>(1 + random() % 4));
    }
    csr.activation_shape = {num_bags, tables[table_of[f]].dim};
  }
  return batch;
}

// One (bag, local row, weight) of a section, and a section as a list of them per bag.
struct Entry {
  int64_t bag;
  float scale;
  std::vector<int64_t> rows;
  std::vector<float> weights;
};

// What `part` receives of `csr` by placement.h: every id of a row it holds, at its local row, in
// bag order; bags without such ids left out.
std::vector<Entry> expected_entries(const CsrFeature& csr, const TablePart& part) {
  std::vector<Entry> entries;
  for (int64_t b = 0; b < csr.num_bags(); ++b) {
    Entry entry{
        .bag = b, .scale = csr.bag_scales[static_cast<size_t>(b)], .rows = {}, .weights = {}};
    for (int64_t j = csr.offsets[static_cast<size_t>(b)];
         j < csr.offsets[static_cast<size_t>(b) + 1]; ++j) {
      const int64_t id = csr.ids[static_cast<size_t>(j)];
      const bool row_wise = part.strategy == ShardingStrategy::kRowWise;
      if (row_wise && id % part.row_stride != part.shard) continue;
      entry.rows.push_back(row_wise ? id / part.row_stride : id);
      entry.weights.push_back(csr.weights.empty() ? 1.0f : csr.weights[static_cast<size_t>(j)]);
    }
    if (!entry.rows.empty()) entries.push_back(entry);
  }
  return entries;
}

std::vector<Entry> entries_of(const RequestSection& section) {
  std::vector<Entry> entries;
  for (int64_t i = 0; i < section.num_bags; ++i) {
    Entry entry{.bag = section.bag(i), .scale = section.scales[i], .rows = {}, .weights = {}};
    for (int64_t j = section.offsets[i]; j < section.offsets[i + 1]; ++j) {
      entry.rows.push_back(section.ids[j]);
      entry.weights.push_back(section.weights == nullptr ? 1.0f : section.weights[j]);
    }
    if (!entry.rows.empty()) entries.push_back(entry);  // a view keeps its empty bags
  }
  return entries;
}

void expect_same(const std::vector<Entry>& actual, const std::vector<Entry>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_EQ(actual[i].bag, expected[i].bag) << "entry " << i;
    EXPECT_EQ(actual[i].scale, expected[i].scale) << "entry " << i;
    EXPECT_EQ(actual[i].rows, expected[i].rows) << "entry " << i;
    EXPECT_EQ(actual[i].weights, expected[i].weights) << "entry " << i;
  }
}

struct Layout {
  std::string name;
  ShardingStrategy strategy;
  int num_shards;
  int world_size;
};

class RouterTest : public ::testing::TestWithParam<Layout> {
 protected:
  RouterTest()
      : tables_(make_tables()),
        features_(make_features()),
        partition_(
            plan_placement(tables_, features_, Sgd{},
                           {.num_shards = GetParam().num_shards, .strategy = GetParam().strategy}),
            tables_, features_, GetParam().world_size) {}

  int world_size() const { return GetParam().world_size; }

  std::vector<TableConfig> tables_;
  std::vector<FeatureConfig> features_;
  Partition partition_;
};

TEST_P(RouterTest, LocateMapsEveryIdToItsPartAndBack) {
  const Router router(partition_, feature_tables(), 0);
  for (size_t t = 0; t < tables_.size(); ++t) {
    const std::span<const TablePart> parts = partition_.table_parts(t);
    for (int64_t id = 0; id < tables_[t].vocabulary_size; ++id) {
      const Router::Location location = router.locate(t, id);
      ASSERT_LT(location.part, parts.size());
      const TablePart& part = parts[location.part];
      if (part.strategy == ShardingStrategy::kRowWise) {
        EXPECT_EQ(part.shard, id % part.row_stride) << "id " << id;
      } else {
        EXPECT_EQ(location.part, 0u);
      }
      ASSERT_LT(location.row, part.rows);
      EXPECT_EQ(part.global_row(location.row), id);
    }
  }
}

TEST_P(RouterTest, LocalViewsAreExactlyTheWholePartsOfThisRank) {
  for (int rank = 0; rank < world_size(); ++rank) {
    const Router router(partition_, feature_tables(), rank);
    for (size_t t = 0; t < tables_.size(); ++t) {
      const TablePart* expected = nullptr;
      for (const TablePart& part : partition_.table_parts(t)) {
        const bool whole =
            part.rows == tables_[t].vocabulary_size && part.num_columns == tables_[t].dim;
        EXPECT_EQ(router.is_local_view(part), whole && part.rank == rank);
        if (whole && part.rank == rank) expected = &part;
      }
      EXPECT_EQ(router.local_whole_part(t), expected);
    }
  }
}

TEST_P(RouterTest, EveryIdReachesThePartsHoldingItsRowAndIsReadBackUnchanged) {
  const std::vector<size_t> table_of = feature_tables();
  // Every rank routes its own batch; the messages are then delivered as an all-to-all would.
  std::vector<std::vector<CsrFeature>> batches;
  std::vector<Router> routers;
  std::vector<Requests> sent(static_cast<size_t>(world_size()));
  for (int rank = 0; rank < world_size(); ++rank) {
    batches.push_back(random_batch(tables_, 100 + static_cast<uint64_t>(rank)));
  }
  for (int rank = 0; rank < world_size(); ++rank) {
    routers.emplace_back(partition_, table_of, rank);
    std::vector<CsrFeature>& batch = batches[static_cast<size_t>(rank)];
    routers.back().route(batch, sent[static_cast<size_t>(rank)]);
    const Requests& requests = sent[static_cast<size_t>(rank)];
    ASSERT_EQ(requests.sections.size(), static_cast<size_t>(world_size()));
    for (int q = 0; q < world_size(); ++q) {
      const std::span<const Section> layout = partition_.sections(q);
      ASSERT_EQ(requests.sections[static_cast<size_t>(q)].size(), layout.size());
      for (size_t k = 0; k < layout.size(); ++k) {
        SCOPED_TRACE("rank " + std::to_string(rank) + " to " + std::to_string(q) + " section " +
                     std::to_string(k));
        const TablePart& part = partition_.rank_parts(q)[layout[k].part];
        const CsrFeature& csr = batch[layout[k].feature];
        const RequestSection& section = requests.sections[static_cast<size_t>(q)][k];
        const bool view = q == rank && part.rows == tables_[part.table].vocabulary_size &&
                          part.num_columns == tables_[part.table].dim;
        if (view) {
          EXPECT_EQ(section.bags, nullptr);
          EXPECT_EQ(section.ids, csr.ids.data());
          EXPECT_EQ(section.num_bags, csr.num_bags());
        } else {
          EXPECT_NE(section.bags, nullptr);
        }
        expect_same(entries_of(section), expected_entries(csr, part));
      }
    }
  }
  // What rank r reads is what every rank q wrote for it.
  for (int rank = 0; rank < world_size(); ++rank) {
    Requests received;
    received.message.counts.assign(static_cast<size_t>(world_size()), 0);
    for (int q = 0; q < world_size(); ++q) {
      const Message& from = sent[static_cast<size_t>(q)].message;
      const auto begin = from.bytes.begin() + static_cast<ptrdiff_t>(from.offset(rank));
      received.message.bytes.insert(received.message.bytes.end(), begin,
                                    begin + from.counts[static_cast<size_t>(rank)]);
      received.message.counts[static_cast<size_t>(q)] = from.counts[static_cast<size_t>(rank)];
    }
    routers[static_cast<size_t>(rank)].read(sent[static_cast<size_t>(rank)], received);
    for (int q = 0; q < world_size(); ++q) {
      const std::span<const Section> layout = partition_.sections(rank);
      for (size_t k = 0; k < layout.size(); ++k) {
        SCOPED_TRACE("rank " + std::to_string(rank) + " from " + std::to_string(q) + " section " +
                     std::to_string(k));
        const TablePart& part = partition_.rank_parts(rank)[layout[k].part];
        const CsrFeature& csr = batches[static_cast<size_t>(q)][layout[k].feature];
        expect_same(entries_of(received.sections[static_cast<size_t>(q)][k]),
                    expected_entries(csr, part));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Placements, RouterTest,
    ::testing::Values(Layout{"table_wise_1_shard_1_rank", ShardingStrategy::kTableWise, 1, 1},
                      Layout{"table_wise_3_shards_2_ranks", ShardingStrategy::kTableWise, 3, 2},
                      Layout{"row_wise_3_shards_1_rank", ShardingStrategy::kRowWise, 3, 1},
                      Layout{"row_wise_4_shards_2_ranks", ShardingStrategy::kRowWise, 4, 2},
                      Layout{"row_wise_1_shard_1_rank", ShardingStrategy::kRowWise, 1, 1},
                      Layout{"column_wise_2_shards_2_ranks", ShardingStrategy::kColumnWise, 2, 2},
                      Layout{"column_wise_4_shards_3_ranks", ShardingStrategy::kColumnWise, 4, 3},
                      Layout{"replicated_2_ranks", ShardingStrategy::kReplicated, 2, 2},
                      Layout{"replicated_1_rank", ShardingStrategy::kReplicated, 3, 1}),
    [](const auto& test_info) { return test_info.param.name; });

}  // namespace
}  // namespace recemb::internal
