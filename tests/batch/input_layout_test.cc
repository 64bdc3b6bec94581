// The checks of an input's shape and the layouts they give (input_layout.h), for every input kind,
// against expectations written out by hand from docs/semantics.md ("2. Inputs"); the walks over
// the entries are tested through normalize_feature (csr_feature_test.cc).
#include "batch/input_layout.h"

#include <cstdint>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <string>
#include <vector>

#include "recemb/error.h"

#include "testing/error_of.h"

namespace recemb::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const TableConfig kTable{.name = "t", .vocabulary_size = 10, .dim = 3};

struct Expected {
  int64_t num_rows;
  int64_t sequence_length;
  std::vector<int64_t> activation_shape;
};

void expect_layout(const FeatureConfig& feature, const FeatureInput& input,
                   const Expected& expected) {
  const InputLayout layout = resolve_layout({feature, kTable, input});
  EXPECT_EQ(layout.num_rows, expected.num_rows);
  EXPECT_EQ(layout.sequence_length, expected.sequence_length);
  EXPECT_EQ(layout.num_bags(), expected.sequence_length > 0
                                   ? expected.num_rows * expected.sequence_length
                                   : expected.num_rows);
  std::vector<int64_t> shape = {99};
  write_activation_shape(layout, kTable.dim, shape);
  EXPECT_EQ(shape, expected.activation_shape);
  EXPECT_EQ(activation_shape(feature, kTable, input), expected.activation_shape);
}

TEST(InputLayoutTest, EachInputKindMapsToRowsOrASequence) {
  const FeatureConfig plain{.name = "f", .table = "t"};
  const FeatureConfig sequence{.name = "f", .table = "t", .max_sequence_length = 4};
  const std::vector<int64_t> ids(24, 1);
  {
    SCOPED_TRACE("dense");
    expect_layout(plain, DenseIds{.ids = ids, .shape = {24}}, {24, 0, {24, 3}});
    expect_layout(plain, DenseIds{.ids = ids, .shape = {6, 4}}, {6, 0, {6, 3}});
    expect_layout(plain, DenseIds{.ids = ids, .shape = {2, 3, 4}}, {6, 0, {2, 3, 3}});
    expect_layout(sequence, DenseIds{.ids = ids, .shape = {6, 4}}, {6, 4, {6, 4, 3}});
    // Rank 3 is never a sequence: max_sequence_length is ignored, as TF does.
    expect_layout(sequence, DenseIds{.ids = ids, .shape = {2, 3, 4}}, {6, 0, {2, 3, 3}});
  }
  const std::vector<int32_t> splits = {0, 5, 5, 24};
  const RaggedIds ragged{.values = ids, .row_splits = std::span<const int32_t>(splits)};
  {
    SCOPED_TRACE("ragged");
    expect_layout(plain, ragged, {3, 0, {3, 3}});
    expect_layout(sequence, ragged, {3, 4, {3, 4, 3}});
  }
  {
    SCOPED_TRACE("sparse");
    const std::vector<int64_t> indices = {0, 0, 3, 1};
    const std::vector<int64_t> values = {1, 2};
    expect_layout(plain, SparseIds{.indices = indices, .values = values, .dense_shape = {5, 9}},
                  {5, 0, {5, 3}});
    expect_layout(sequence, SparseIds{.indices = indices, .values = values, .dense_shape = {5, 9}},
                  {5, 4, {5, 4, 3}});
    const std::vector<int64_t> indices3 = {0, 0, 0};
    expect_layout(sequence,
                  SparseIds{.indices = indices3,
                            .values = std::span<const int64_t>(values).first(1),
                            .dense_shape = {2, 3, 7}},
                  {6, 0, {2, 3, 3}});
  }
  {
    SCOPED_TRACE("output_shape");
    // As many bags as rows: a reshape, whatever max_sequence_length says.
    expect_layout({.name = "f", .table = "t", .max_sequence_length = 9, .output_shape = {3, 1}},
                  ragged, {3, 0, {3, 1, 3}});
    // A multiple of the rows: a sequence of that length.
    expect_layout({.name = "f", .table = "t", .output_shape = {3, 2}}, ragged, {3, 2, {3, 2, 3}});
  }
}

std::string layout_error(const FeatureConfig& feature, const FeatureInput& input) {
  return test::error_of<InvalidArgument>([&] { resolve_layout({feature, kTable, input}); });
}

TEST(InputLayoutTest, ShapeErrorsNameTheFeatureAndWhatDoesNotFit) {
  const FeatureConfig feature{.name = "clicks", .table = "t"};
  const std::vector<int64_t> ids = {1, 2, 3, 4, 5, 6};
  EXPECT_THAT(layout_error(feature, DenseIds{.ids = ids, .shape = {4, 2}}),
              HasSubstr("feature 'clicks' (table 't'): dense shape [4, 2] needs 8 ids but 6"));
  EXPECT_THAT(layout_error({.name = "clicks", .table = "t", .max_sequence_length = -2},
                           DenseIds{.ids = ids, .shape = {6}}),
              HasSubstr("max_sequence_length -2 is negative"));
  EXPECT_THAT(layout_error(feature, RaggedIds{.values = ids}), HasSubstr("row_splits is empty"));
  EXPECT_THAT(layout_error(feature, SparseIds{.indices = ids, .values = ids, .dense_shape = {8}}),
              HasSubstr("sparse dense_shape [8] has rank 1"));
  EXPECT_THAT(layout_error({.name = "clicks", .table = "t", .output_shape = {4}},
                           DenseIds{.ids = ids, .shape = {6}}),
              HasSubstr("output_shape [4] (4 bags) matches neither the input's 6 bags"));
  const std::vector<int64_t> splits = {0, 3, 6};
  EXPECT_THAT(
      layout_error({.name = "clicks", .table = "t", .max_sequence_length = int64_t{1} << 62},
                   RaggedIds{.values = ids, .row_splits = std::span<const int64_t>(splits)}),
      HasSubstr("max_sequence_length 4611686018427387904 times batch size 2 is too large"));
  EXPECT_THAT(test::error_of<InvalidArgument>([&] {
                const DenseIds input{.ids = ids, .shape = {6}};
                fail_feature({feature, kTable, input}, "what went wrong");
              }),
              HasSubstr("feature 'clicks' (table 't'): what went wrong"));
}

TEST(InputLayoutTest, DescribeEntryLocatesStorageEntries) {
  const FeatureConfig feature{.name = "f", .table = "t"};
  const std::vector<int64_t> ids(12, 1);
  const auto describe = [&](const FeatureInput& input, int64_t i) {
    return describe_entry({feature, kTable, input}, i);
  };
  EXPECT_EQ(describe(DenseIds{.ids = ids, .shape = {12}}, 7), "example 7");
  EXPECT_EQ(describe(DenseIds{.ids = ids, .shape = {3, 4}}, 7), "example 1, position 3");
  EXPECT_EQ(describe(DenseIds{.ids = ids, .shape = {2, 3, 2}}, 7), "example [1, 0], position 1");
  const std::vector<int64_t> splits = {0, 5, 5, 12};
  const RaggedIds ragged{.values = ids, .row_splits = std::span<const int64_t>(splits)};
  EXPECT_EQ(describe(ragged, 0), "example 0, position 0");
  EXPECT_EQ(describe(ragged, 5), "example 2, position 0");  // past the empty example 1
  EXPECT_EQ(describe(ragged, 11), "example 2, position 6");
  const std::vector<int64_t> indices = {0, 1, 3, 0, 3, 5};
  const SparseIds sparse{
      .indices = indices, .values = std::span<const int64_t>(ids).first(3), .dense_shape = {4, 6}};
  EXPECT_EQ(describe(sparse, 2), "entry [3, 5]");
  EXPECT_EQ(sparse_index(sparse, 1), "[3, 0]");
  EXPECT_EQ(num_ids(input_ids(sparse)), 3u);
  EXPECT_EQ(num_ids(input_ids(ragged)), 12u);
}

TEST(InputLayoutTest, ShapeStringListsTheExtents) {
  EXPECT_EQ(shape_string(std::vector<int64_t>{}), "[]");
  EXPECT_EQ(shape_string(std::vector<int64_t>{7}), "[7]");
  EXPECT_EQ(shape_string(std::vector<int64_t>{3, 0, -2, int64_t{1} << 40}),
            "[3, 0, -2, 1099511627776]");
}

}  // namespace
}  // namespace recemb::internal
