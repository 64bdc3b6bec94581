#include "kernels/row_grouping.h"

#include <algorithm>
#include <gtest/gtest.h>
#include <map>
#include <numeric>
#include <random>
#include <vector>

namespace recemb::internal {
namespace {

// A row size that makes RowGrouping::build list the single contributions apart at any density.
constexpr int64_t kSinglesApart = int64_t{1} << 30;

// Checks the grouping against std::stable_sort of the contribution indices by row.
void expect_grouping_matches_stable_sort(const std::vector<int64_t>& rows, int64_t vocabulary,
                                         support::ThreadPool* pool = nullptr) {
  RowGrouping grouping;
  grouping.build(rows, vocabulary, kSinglesApart, pool);
  std::vector<uint32_t> expected(rows.size());
  std::iota(expected.begin(), expected.end(), 0u);
  std::stable_sort(expected.begin(), expected.end(),
                   [&](uint32_t a, uint32_t b) { return rows[a] < rows[b]; });
  ASSERT_TRUE(std::equal(expected.begin(), expected.end(), grouping.order().begin(),
                         grouping.order().end()));
  std::vector<int64_t> unique(rows);
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  ASSERT_TRUE(std::equal(unique.begin(), unique.end(), grouping.unique_rows().begin(),
                         grouping.unique_rows().end()));
  ASSERT_EQ(grouping.segment_starts().size(), unique.size() + 1);
  for (size_t k = 0; k < unique.size(); ++k) {
    for (uint32_t i = grouping.segment_starts()[k]; i < grouping.segment_starts()[k + 1]; ++i) {
      ASSERT_EQ(rows[grouping.order()[i]], unique[k]);
    }
  }
  EXPECT_EQ(grouping.segment_starts().back(), rows.size());
  // Single contributions and shared rows, counted with a plain map.
  std::map<int64_t, int> count;
  for (const int64_t r : rows) ++count[r];
  std::vector<uint32_t> expected_singles;
  for (uint32_t i = 0; i < rows.size(); ++i) {
    if (count[rows[i]] == 1) expected_singles.push_back(i);
  }
  std::vector<uint32_t> expected_shared;
  for (uint32_t k = 0; k < unique.size(); ++k) {
    if (count[unique[k]] > 1) expected_shared.push_back(k);
  }
  EXPECT_TRUE(std::equal(expected_singles.begin(), expected_singles.end(),
                         grouping.single_contributions().begin(),
                         grouping.single_contributions().end()));
  EXPECT_TRUE(std::equal(expected_shared.begin(), expected_shared.end(),
                         grouping.shared_rows().begin(), grouping.shared_rows().end()));
}

TEST(RowGroupingTest, MatchesStableSortAcrossKeyWidths) {
  for (const int64_t vocabulary : {int64_t{1}, int64_t{2}, int64_t{255}, int64_t{256}, int64_t{257},
                                   int64_t{70000}, int64_t{1} << 33}) {
    const uint64_t seed = 99 + static_cast<uint64_t>(vocabulary);
    SCOPED_TRACE(::testing::Message() << "vocabulary " << vocabulary << " seed " << seed);
    std::mt19937_64 random(seed);
    std::uniform_int_distribution<int64_t> row(0, vocabulary - 1);
    std::vector<int64_t> rows(5000);
    for (int64_t& r : rows) r = row(random);
    expect_grouping_matches_stable_sort(rows, vocabulary);
  }
}

// Inputs large enough to be split across the pool's threads, with rows that repeat across the
// chunk boundaries (a group spanning two chunks), at packed (< 2^32) and wide row widths.
TEST(RowGroupingTest, PoolGivesTheSameGrouping) {
  for (const int threads : {2, 3}) {
    support::ThreadPool pool(threads);
    for (const int64_t vocabulary :
         {int64_t{5}, int64_t{3000}, int64_t{1} << 24, int64_t{1} << 40}) {
      SCOPED_TRACE(::testing::Message() << "threads " << threads << " vocabulary " << vocabulary);
      std::mt19937_64 random(7 + static_cast<uint64_t>(vocabulary));
      std::uniform_int_distribution<int64_t> row(0, vocabulary - 1);
      std::vector<int64_t> rows(100000);
      for (int64_t& r : rows) r = row(random);
      expect_grouping_matches_stable_sort(rows, vocabulary, &pool);
    }
  }
}

// The pool splits the rows by their top bits into one part per thread: parts of very different
// sizes (one digit holding most rows, every row the same, rows only in the lowest and highest
// digits) still give the stable order.
TEST(RowGroupingTest, PoolGivesTheSameGroupingForSkewedRows) {
  support::ThreadPool pool(2);
  const int64_t vocabulary = int64_t{1} << 24;
  std::mt19937_64 random(2024);
  std::uniform_int_distribution<int64_t> low_row(0, 4095);  // one top digit
  std::uniform_int_distribution<int64_t> any_row(0, vocabulary - 1);
  std::vector<int64_t> mostly_one_digit(100000);
  for (size_t i = 0; i < mostly_one_digit.size(); ++i) {
    mostly_one_digit[i] = i % 10 == 0 ? any_row(random) : low_row(random);
  }
  const std::vector<int64_t> all_same(70000, 12345);
  std::vector<int64_t> ends(90000);
  for (size_t i = 0; i < ends.size(); ++i) {
    ends[i] = i % 3 == 0 ? vocabulary - 1 - low_row(random) : low_row(random);
  }
  for (const std::vector<int64_t>* rows :
       std::vector<const std::vector<int64_t>*>{&mostly_one_digit, &all_same, &ends}) {
    SCOPED_TRACE(::testing::Message() << "first row " << rows->front());
    expect_grouping_matches_stable_sort(*rows, vocabulary, &pool);
  }
}

// Rows closer than kMinSingleRowGapBytes on average: every row is listed as shared, in order.
TEST(RowGroupingTest, DenseTableListsEveryRowAsShared) {
  const std::vector<int64_t> rows{4, 4, 1, 9, 4, 1, 7};
  const int64_t vocabulary = 10;
  for (const int64_t row_bytes :
       {int64_t{0}, int64_t{256}, RowGrouping::kMinSingleRowGapBytes * 4 / vocabulary}) {
    RowGrouping grouping;
    grouping.build(rows, vocabulary, row_bytes);
    EXPECT_TRUE(grouping.single_contributions().empty()) << "row bytes " << row_bytes;
    EXPECT_EQ(std::vector<uint32_t>(grouping.shared_rows().begin(), grouping.shared_rows().end()),
              (std::vector<uint32_t>{0, 1, 2, 3}));
  }
  // Just sparse enough: 4 unique rows, more than 4 * kMinSingleRowGapBytes in the table.
  RowGrouping grouping;
  grouping.build(rows, vocabulary, RowGrouping::kMinSingleRowGapBytes * 4 / vocabulary + 1);
  EXPECT_EQ(std::vector<uint32_t>(grouping.single_contributions().begin(),
                                  grouping.single_contributions().end()),
            (std::vector<uint32_t>{3, 6}));
}

TEST(RowGroupingTest, EmptyAndReuse) {
  RowGrouping grouping;
  grouping.build({}, 10, kSinglesApart);
  EXPECT_TRUE(grouping.unique_rows().empty());
  ASSERT_EQ(grouping.segment_starts().size(), 1u);
  const std::vector<int64_t> rows{4, 4, 1, 9, 4, 1};
  grouping.build(rows, 10, kSinglesApart);
  EXPECT_EQ(std::vector<int64_t>(grouping.unique_rows().begin(), grouping.unique_rows().end()),
            (std::vector<int64_t>{1, 4, 9}));
  EXPECT_EQ(std::vector<uint32_t>(grouping.order().begin(), grouping.order().end()),
            (std::vector<uint32_t>{2, 5, 0, 1, 4, 3}));
  EXPECT_EQ(std::vector<uint32_t>(grouping.shared_rows().begin(), grouping.shared_rows().end()),
            (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(std::vector<uint32_t>(grouping.single_contributions().begin(),
                                  grouping.single_contributions().end()),
            (std::vector<uint32_t>{3}));
  expect_grouping_matches_stable_sort({3, 2, 1}, 4);
}

}  // namespace
}  // namespace recemb::internal
