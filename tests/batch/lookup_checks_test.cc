// The lookup call checks (src/batch/lookup_checks.cc): element counts against plain loops, and the
// exact messages that Embedding::lookup and ServingModel::lookup share.
#include "batch/lookup_checks.h"

#include <cstdint>
#include <gtest/gtest.h>
#include <random>
#include <string>
#include <vector>

#include "recemb/error.h"

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

}  // namespace
}  // namespace recemb::internal
