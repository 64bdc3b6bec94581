#include "embedding/table_state.h"

#include <cstddef>
#include <gtest/gtest.h>
#include <random>
#include <span>
#include <vector>

#include "support/thread_pool.h"

namespace recemb::internal {
namespace {

// The seed a dynamic part would initialise rows from (these parts are static).
constexpr uint64_t kTableSeed = 3;

TableConfig video() {
  return {.name = "video", .vocabulary_size = 6, .dim = 2, .initializer = RowId{.offset = 0.5f}};
}

TablePart whole(const TableConfig& table) {
  return {.rows = table.vocabulary_size, .num_columns = table.dim, .whole = true};
}

// The segment of a whole feature with its gradient (empty: the zeros, one row for every bag).
ContributionSegment segment_of(const RequestSection& section, std::span<const float> gradient,
                               const float* zeros, int64_t dim) {
  return {.section = &section,
          .gradient = gradient.empty() ? zeros : gradient.data(),
          .gradient_stride = gradient.empty() ? 0 : dim};
}

TEST(TableStateTest, SlotsFollowTheOptimizer) {
  EXPECT_EQ(
      TableState(video(), whole(video()), std::nullopt, kTableSeed).storage().slot_specs().size(),
      0u);
  TableState adagrad(video(), whole(video()), Adagrad{.initial_accumulator_value = 0.25f},
                     kTableSeed);
  ASSERT_EQ(adagrad.storage().slot_specs().size(), 1u);
  adagrad.initialize(0, 0, 6);
  EXPECT_EQ(adagrad.storage().variable("accumulators")->data()[11], 0.25f);
  EXPECT_EQ(adagrad.storage().row(4)[1], 4.5f);
  const RowVariables v = adagrad.variables(0);
  EXPECT_EQ(v.num_slots, 1);
  EXPECT_EQ(v.slot_widths[0], 2);
  EXPECT_EQ(v.parameters, adagrad.storage().row(0));
}

TEST(TableStateTest, OnlyNonLazyAdamUpdatesAllRows) {
  EXPECT_FALSE(TableState(video(), whole(video()), Adam{}, kTableSeed).updates_all_rows());
  EXPECT_TRUE(
      TableState(video(), whole(video()), Adam{.lazy_adam = false}, kTableSeed).updates_all_rows());
  EXPECT_FALSE(TableState(video(), whole(video()), Sgd{}, kTableSeed).updates_all_rows());
  EXPECT_FALSE(TableState(video(), whole(video()), std::nullopt, kTableSeed).updates_all_rows());
}

TEST(TableStateTest, ContributionsCarryGainsSourcesAndOrder) {
  for (const bool every_row : {false, true}) {
    SCOPED_TRACE(every_row ? "every row" : "lazy");
    // A table large enough that its 2 touched rows are sparse (RowGrouping::build).
    TableConfig large = video();
    large.vocabulary_size = 1 << 20;
    TableState state(large, whole(large),
                     every_row ? Optimizer{Adam{.lazy_adam = false}} : Optimizer{Sgd{}},
                     kTableSeed);
    // Feature 0: bags {3, 1} (weights 2, 4, scale 0.5) and {} ; feature 1 (unused by this table);
    // feature 2: one bag {3}, no weights, scale 1, gradient given as empty (zeros).
    std::vector<CsrFeature> batch(3);
    batch[0] = {.activation_shape = {2, 2},
                .offsets = {0, 2, 2},
                .ids = {3, 1},
                .weights = {2.0f, 4.0f},
                .bag_scales = {0.5f, 1.0f}};
    batch[2] = {.activation_shape = {1, 2}, .offsets = {0, 1}, .ids = {3}, .bag_scales = {1.0f}};
    const std::vector<float> gradient0{1, 2, 3, 4};
    const std::vector<float> zeros(2, 0.0f);
    const std::vector<std::span<const float>> gradients{gradient0, {}, {}};
    const RequestSection view0 = local_view(batch[0]);
    const RequestSection view2 = local_view(batch[2]);
    const std::vector<ContributionSegment> segments{
        segment_of(view0, gradients[0], zeros.data(), 2),
        segment_of(view2, gradients[2], zeros.data(), 2)};
    state.gather_contributions(segments);
    const RowGrouping& grouping = state.grouping();
    ASSERT_EQ(grouping.unique_rows().size(), 2u);
    EXPECT_EQ(grouping.unique_rows()[0], 1);
    EXPECT_EQ(grouping.unique_rows()[1], 3);
    // Row 3: feature 0's contribution before feature 2's.
    EXPECT_EQ(grouping.order()[1], 0u);
    EXPECT_EQ(grouping.order()[2], 2u);
    // As listed: id 3 and id 1 of feature 0, then id 3 of feature 2.
    const Contributions c = state.contributions();
    EXPECT_EQ(c.rows[0], 3);
    EXPECT_EQ(c.rows[1], 1);
    EXPECT_EQ(c.rows[2], 3);
    EXPECT_EQ(c.gains[0], 1.0f);  // 2 * 0.5
    EXPECT_EQ(c.gains[1], 2.0f);  // 4 * 0.5
    EXPECT_EQ(c.gains[2], 1.0f);
    EXPECT_EQ(c.sources[0], gradient0.data());
    EXPECT_EQ(c.sources[1], gradient0.data());
    EXPECT_EQ(c.sources[2], zeros.data());
    // In grouping order: row 1 (id 1 of feature 0), then row 3 (id 3 of feature 0, id 3 of
    // feature 2). Row 1 is single, so sorted only for a table that updates every row.
    // (In a dense table every row is shared: sparse_update_test and row_grouping_test.)
    if (every_row) {
      EXPECT_EQ(c.sorted_gains[0], 2.0f);
      EXPECT_EQ(c.sorted_sources[0], gradient0.data());
    }
    EXPECT_EQ(c.sorted_gains[1], 1.0f);
    EXPECT_EQ(c.sorted_gains[2], 1.0f);
    EXPECT_EQ(c.sorted_sources[1], gradient0.data());
    EXPECT_EQ(c.sorted_sources[2], zeros.data());
    EXPECT_EQ(std::vector<uint32_t>(grouping.single_contributions().begin(),
                                    grouping.single_contributions().end()),
              std::vector<uint32_t>{1});
    EXPECT_EQ(std::vector<uint32_t>(grouping.shared_rows().begin(), grouping.shared_rows().end()),
              std::vector<uint32_t>{1});
  }
}

// Features large enough that a pool lists their bags in parallel tasks: every contribution in
// (feature, bag, position) order with its weight times its bag's scale and its bag's gradient row
// (or the zeros for a feature without a gradient), checked against a plain loop.
TEST(TableStateTest, PoolListsLargeFeaturesInOrder) {
  constexpr int64_t kDim = 3;
  std::mt19937_64 random(29);
  std::vector<CsrFeature> batch(3);
  std::vector<std::vector<float>> gradient_values(3);
  for (size_t f = 0; f < batch.size(); ++f) {
    CsrFeature& csr = batch[f];
    csr.offsets = {0};
    const int64_t num_bags = 5000 + 1000 * static_cast<int64_t>(f);
    for (int64_t b = 0; b < num_bags; ++b) {
      const int64_t size = static_cast<int64_t>(random() % 9);  // 0 to 8 ids, 4 on average
      for (int64_t j = 0; j < size; ++j) {
        csr.ids.push_back(static_cast<int64_t>(random() % 100000));
        if (f != 1) csr.weights.push_back(static_cast<float>(random() % 1000) / 100.0f);
      }
      csr.offsets.push_back(static_cast<int64_t>(csr.ids.size()));
      csr.bag_scales.push_back(1.0f / static_cast<float>(1 + random() % 5));
    }
    csr.activation_shape = {num_bags, kDim};
    if (f != 2) {
      gradient_values[f].resize(static_cast<size_t>(num_bags * kDim));
      for (float& g : gradient_values[f]) g = static_cast<float>(random() % 100) - 50.0f;
    }
  }
  const std::vector<std::span<const float>> gradients{gradient_values[0], gradient_values[1], {}};
  const std::vector<float> zeros(kDim, 0.0f);
  TableConfig config{.name = "large", .vocabulary_size = 100000, .dim = kDim};
  TableState state(config, whole(config), Sgd{}, kTableSeed);
  support::ThreadPool pool(2);
  std::vector<RequestSection> views;
  for (CsrFeature& csr : batch) views.push_back(local_view(csr));
  std::vector<ContributionSegment> segments;
  for (size_t f = 0; f < batch.size(); ++f) {
    segments.push_back(segment_of(views[f], gradients[f], zeros.data(), kDim));
  }
  state.gather_contributions(segments, &pool);

  std::vector<int64_t> rows;
  std::vector<float> gains;
  std::vector<const float*> sources;
  for (size_t f = 0; f < batch.size(); ++f) {
    const CsrFeature& csr = batch[f];
    ASSERT_GT(csr.ids.size(), 16384u);  // at least two listing tasks
    for (int64_t b = 0; b < csr.num_bags(); ++b) {
      for (int64_t j = csr.offsets[static_cast<size_t>(b)];
           j < csr.offsets[static_cast<size_t>(b) + 1]; ++j) {
        const auto index = static_cast<size_t>(j);
        rows.push_back(csr.ids[index]);
        const float weight = csr.weights.empty() ? 1.0f : csr.weights[index];
        gains.push_back(weight * csr.bag_scales[static_cast<size_t>(b)]);
        sources.push_back(gradients[f].empty() ? zeros.data() : gradients[f].data() + b * kDim);
      }
    }
  }
  const Contributions c = state.contributions();
  ASSERT_EQ(state.grouping().order().size(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    ASSERT_EQ(c.rows[i], rows[i]) << "contribution " << i;
    ASSERT_EQ(c.gains[i], gains[i]) << "contribution " << i;
    ASSERT_EQ(c.sources[i], sources[i]) << "contribution " << i;
  }
}

TEST(TableStateTest, ReceivedSectionsListTheirGradientRowsInSectionOrder) {
  // Part 1 of a row-wise table over 3 shards: local row l is table row 3 * l + 1.
  const TableConfig table{.name = "t", .vocabulary_size = 30, .dim = 4};
  const TablePart part{.strategy = ShardingStrategy::kRowWise,
                       .shard = 1,
                       .rows = 10,
                       .row_stride = 3,
                       .num_columns = 4};
  TableState state(table, part, Sgd{}, kTableSeed);
  std::mt19937_64 random(31);
  // Two received sections (from two ranks) of random bags, weighted and not, with their packed
  // gradient rows: row i is section bag i's, whatever the sender's bag index.
  std::vector<std::vector<std::byte>> buffers;
  std::vector<RequestSection> sections;
  std::vector<std::vector<float>> rows;
  for (const bool weighted : {true, false}) {
    const int64_t num_bags = 3 + static_cast<int64_t>(random() % 4);
    std::vector<int64_t> sizes;
    int64_t num_ids = 0;
    for (int64_t i = 0; i < num_bags; ++i) {
      sizes.push_back(1 + static_cast<int64_t>(random() % 3));
      num_ids += sizes.back();
    }
    buffers.emplace_back(request_section_bytes(num_bags, num_ids, weighted));
    RequestSection section =
        start_request_section(buffers.back().data(), num_bags, num_ids, weighted);
    int64_t next = 0;
    for (int64_t i = 0; i < num_bags; ++i) {
      section.bags[i] = 2 * i + 1;
      section.scales[i] = 0.25f * static_cast<float>(1 + random() % 4);
      for (int64_t j = 0; j < sizes[static_cast<size_t>(i)]; ++j) {
        section.ids[next] = static_cast<int64_t>(random() % 10);
        if (weighted) section.weights[next] = static_cast<float>(random() % 7) + 0.5f;
        ++next;
      }
      section.offsets[i + 1] = next;
    }
    sections.push_back(section);
    rows.emplace_back(static_cast<size_t>(num_bags * 4));
    for (float& value : rows.back()) value = static_cast<float>(random() % 100) - 50.0f;
  }
  const std::vector<ContributionSegment> segments{
      {.section = &sections[0], .gradient = rows[0].data(), .gradient_stride = 4},
      {.section = &sections[1], .gradient = rows[1].data(), .gradient_stride = 4}};
  state.gather_contributions(segments);

  const Contributions c = state.contributions();
  size_t n = 0;
  for (size_t s = 0; s < sections.size(); ++s) {
    const RequestSection& section = sections[s];
    for (int64_t i = 0; i < section.num_bags; ++i) {
      for (int64_t j = section.offsets[i]; j < section.offsets[i + 1]; ++j) {
        const double weight = section.weights == nullptr ? 1.0 : section.weights[j];
        EXPECT_EQ(c.rows[n], section.ids[j]) << n;
        EXPECT_EQ(static_cast<double>(c.gains[n]), weight * section.scales[i]) << n;
        EXPECT_EQ(c.sources[n], rows[s].data() + i * 4) << n;
        ++n;
      }
    }
  }
  EXPECT_EQ(state.grouping().order().size(), n);
  // Rows are grouped over the part's 10 local rows.
  for (const int64_t row : state.grouping().unique_rows()) EXPECT_LT(row, 10);
}

TEST(TableStateTest, APartInitialisesItsRowsAndColumnsOfTheTable) {
  const TableConfig table{
      .name = "t", .vocabulary_size = 7, .dim = 5, .initializer = TruncatedNormal{}};
  const TablePart rows{.strategy = ShardingStrategy::kRowWise,
                       .shard = 2,
                       .rows = 2,
                       .row_stride = 3,
                       .num_columns = 5};
  TableState row_part(table, rows, Adagrad{}, kTableSeed);
  row_part.initialize(0, 0, 2);
  const TablePart columns{.strategy = ShardingStrategy::kColumnWise,
                          .shard = 1,
                          .rows = 7,
                          .first_column = 3,
                          .num_columns = 2};
  TableState column_part(table, columns, Adagrad{}, kTableSeed);
  column_part.initialize(0, 0, 7);
  TableState whole_table(table, whole(table), Adagrad{}, kTableSeed);
  whole_table.initialize(0, 0, 7);
  EXPECT_EQ(row_part.columns(), 5);
  EXPECT_EQ(column_part.columns(), 2);
  EXPECT_EQ(column_part.storage().variable("accumulators")->span().size(), 14u);
  for (int64_t local = 0; local < 2; ++local) {
    for (int64_t d = 0; d < 5; ++d) {
      EXPECT_EQ(row_part.storage().row(local)[d], whole_table.storage().row(3 * local + 2)[d]);
    }
  }
  for (int64_t row = 0; row < 7; ++row) {
    for (int64_t d = 0; d < 2; ++d) {
      EXPECT_EQ(column_part.storage().row(row)[d], whole_table.storage().row(row)[3 + d]);
    }
  }
}

}  // namespace
}  // namespace recemb::internal
