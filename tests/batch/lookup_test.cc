// What the two lookups share (src/batch/lookup.cc): element counts against plain loops, the exact
// messages of the call checks, and the kernel input of a normalised feature.
#include "batch/lookup.h"

#include <cstdint>
#include <gtest/gtest.h>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "recemb/error.h"

#include "batch/input_layout.h"
#include "testing/error_of.h"

namespace recemb::internal {
namespace {

using test::error_of;

TEST(LookupChecksTest, NumValuesIsTheProductOfTheExtents) {
  EXPECT_EQ(num_values(std::vector<int64_t>{}), 1);
  EXPECT_EQ(num_values(std::vector<int64_t>{4, 0, 3}), 0);
  std::mt19937_64 rng(23);
  for (int i = 0; i < 100; ++i) {
    std::vector<int64_t> shape(std::uniform_int_distribution<size_t>(1, 5)(rng));
    int64_t expected = 1;
    for (int64_t& extent : shape) {
      extent = std::uniform_int_distribution<int64_t>(1, 40)(rng);
      expected *= extent;
    }
    EXPECT_EQ(num_values(shape), expected);
  }
}

TEST(LookupChecksTest, FeatureCountMustMatch) {
  check_feature_count(3, 3, "lookup inputs");
  check_feature_count(0, 0, "lookup inputs");
  EXPECT_EQ(error_of<InvalidArgument>([] { check_feature_count(4, 3, "lookup inputs"); }),
            "lookup inputs: expected one per feature (4), got 3");
  EXPECT_EQ(
      error_of<InvalidArgument>([] { check_feature_count(2, 5, "apply_gradients gradients"); }),
      "apply_gradients gradients: expected one per feature (2), got 5");
}

TEST(LookupChecksTest, ActivationBufferMustHoldTheActivationShape) {
  const FeatureConfig history{.name = "history", .table = "items", .max_sequence_length = 2};
  const std::vector<int64_t> shape = {3, 2, 4};
  check_activation_buffer(history, shape, 24);
  check_activation_buffer(history, std::vector<int64_t>{0, 5}, 0);
  for (const size_t size : {size_t{0}, size_t{7}, size_t{23}, size_t{25}}) {
    EXPECT_EQ(error_of<InvalidArgument>([&] { check_activation_buffer(history, shape, size); }),
              "feature 'history': activation buffer holds " + std::to_string(size) +
                  " floats, expected [3, 2, 4] = 24");
  }
}

// Ids of shape [2^62, 0] (no ids at all) give activations of [2^62, dim] floats: the product
// wraps (to 0 for dim 4), so an empty buffer was accepted.
TEST(LookupChecksTest, AnActivationShapeBeyondInt64IsRefusedNotWrapped) {
  const FeatureConfig clicks{.name = "clicks", .table = "items"};
  const int64_t huge = int64_t{1} << 62;
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{huge, 4}, std::vector<int64_t>{huge + 2, 3},
        std::vector<int64_t>{huge, 2, 8}}) {
    for (const size_t size : {size_t{0}, size_t{8}}) {
      EXPECT_EQ(error_of<InvalidArgument>([&] { check_activation_buffer(clicks, shape, size); }),
                "feature 'clicks': activation shape " + shape_string(shape) +
                    " has more values than an int64 counts; give fewer examples");
    }
  }
  // A zero extent makes the product 0 wherever it is, however large the others.
  check_activation_buffer(clicks, std::vector<int64_t>{huge, 4, 0}, 0);
  EXPECT_EQ(num_values(std::vector<int64_t>{huge, 4, 0}), 0);
  // The largest products that fit.
  check_activation_buffer(clicks, std::vector<int64_t>{huge, 1}, static_cast<size_t>(huge));
  EXPECT_EQ(num_values(std::vector<int64_t>{huge - 1, 2}), 2 * (huge - 1));
}

TEST(LookupTest, PoolInputBorrowsTheFeatureAndTheTable) {
  CsrFeature csr{.activation_shape = {2, 3},
                 .offsets = {0, 2, 3},
                 .ids = {4, 1, 4},
                 .weights = {0.5f, 2.0f, 1.0f},
                 .bag_scales = {0.4f, 1.0f}};
  const std::vector<float> rows(15);
  const TableConfig table{
      .name = "t",
      .vocabulary_size = 5,
      .dim = 3,
      .quantization_config = QuantizationConfig{.num_buckets = 3, .lower = -1, .upper = 1}};
  const PoolInput input = pool_input(csr, table, rows.data());
  EXPECT_EQ(std::get<const float*>(input.table), rows.data());
  EXPECT_EQ(input.dim, 3);
  EXPECT_EQ(input.offsets, csr.offsets.data());
  EXPECT_EQ(input.ids, csr.ids.data());
  EXPECT_EQ(input.weights, csr.weights.data());
  EXPECT_EQ(input.bag_scales, csr.bag_scales.data());
  EXPECT_EQ(input.quantization, &*table.quantization_config);

  // Unweighted bags and a table without simulated quantization: no weights, rows used as stored.
  csr.weights.clear();
  const TableConfig plain{.name = "p", .vocabulary_size = 5, .dim = 3};
  const PoolInput unweighted = pool_input(csr, plain, rows.data());
  EXPECT_EQ(unweighted.weights, nullptr);
  EXPECT_EQ(unweighted.quantization, nullptr);
}

}  // namespace
}  // namespace recemb::internal
