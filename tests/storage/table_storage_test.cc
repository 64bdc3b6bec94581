#include "storage/table_storage.h"

#include <gtest/gtest.h>

namespace recemb::internal {
namespace {

TEST(TableStorageTest, LayoutAndVariablesByName) {
  TableStorage storage(10, 4, {{"accumulators", 4, 0.1f}, {"rowwise", 1, 2.0f}});
  EXPECT_EQ(storage.num_rows(), 10);
  EXPECT_EQ(storage.dim(), 4);
  ASSERT_NE(storage.variable("parameters"), nullptr);
  EXPECT_EQ(storage.variable("parameters")->size(), 40u);
  EXPECT_EQ(storage.variable("accumulators")->size(), 40u);
  EXPECT_EQ(storage.variable("rowwise")->size(), 10u);
  EXPECT_EQ(storage.variable("momenta"), nullptr);
  EXPECT_EQ(storage.variable_width("parameters"), 4);
  EXPECT_EQ(storage.variable_width("rowwise"), 1);
  EXPECT_EQ(storage.row(3), storage.variable("parameters")->data() + 12);
  ASSERT_EQ(storage.slot_bases().size(), 2u);
  EXPECT_EQ(storage.slot_bases()[1], storage.variable("rowwise")->data());
}

TEST(TableStorageTest, InitializeSlotsTouchesOnlyTheBlock) {
  TableStorage storage(6, 2, {{"accumulators", 2, 0.1f}, {"rowwise", 1, 2.0f}});
  storage.initialize_slots(2, 3);
  const float* accumulators = storage.variable("accumulators")->data();
  const float* rowwise = storage.variable("rowwise")->data();
  for (int64_t r = 0; r < 6; ++r) {
    const bool inside = r >= 2 && r < 5;
    EXPECT_EQ(accumulators[2 * r], inside ? 0.1f : 0.0f) << r;
    EXPECT_EQ(accumulators[2 * r + 1], inside ? 0.1f : 0.0f) << r;
    EXPECT_EQ(rowwise[r], inside ? 2.0f : 0.0f) << r;
  }
}

}  // namespace
}  // namespace recemb::internal
