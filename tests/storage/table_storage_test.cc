#include "storage/table_storage.h"

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <new>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "recemb/error.h"

#include "testing/error_of.h"

namespace recemb::internal {
namespace {

TEST(TableStorageTest, LayoutAndVariablesByName) {
  TableStorage storage("video", 10, 4, {{"accumulators", 4, 0.1f}, {"rowwise", 1, 2.0f}});
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

// parameter_bytes: the parameters' memory in the table's type, every row (checkpoints write it).
TEST(TableStorageTest, ParameterBytesAreTheRowsInTheTablesType) {
  TableStorage full("full", 5, 3, {});
  EXPECT_EQ(full.parameter_bytes().data(), reinterpret_cast<std::byte*>(full.row(0)));
  EXPECT_EQ(full.parameter_bytes().size(), 5u * 3u * 4u);
  TableStorage half("half", 5, 3, {{"accumulators", 3, 0.1f}}, DType::kBFloat16);
  const std::vector<float> values = {1.0f,    -2.0f, 0.5f, 3.0f,  0.25f, -1.5f, 7.0f, 8.0f,
                                     -0.125f, 4.0f,  6.0f, 10.0f, -3.0f, 2.5f,  1.25f};
  half.write_rows(0, 5, values.data());
  const std::span<const std::byte> bytes = std::as_const(half).parameter_bytes();
  ASSERT_EQ(bytes.size(), 5u * 3u * 2u);
  EXPECT_EQ(bytes.data(), reinterpret_cast<const std::byte*>(half.half_row(0)));
  for (size_t i = 0; i < values.size(); ++i) {  // these values are exact in bfloat16
    uint16_t bits = 0;
    std::memcpy(&bits, bytes.data() + 2 * i, 2);
    EXPECT_EQ(std::bit_cast<float>(static_cast<uint32_t>(bits) << 16), values[i]) << i;
  }
}

TEST(TableStorageTest, InitializeSlotsTouchesOnlyTheBlock) {
  TableStorage storage("video", 6, 2, {{"accumulators", 2, 0.1f}, {"rowwise", 1, 2.0f}});
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

// Sizes beyond x86-64's 128 TiB of user address space: no system can map them, whatever its
// overcommit policy.
TEST(TableStorageTest, MemoryThatCannotBeAllocatedIsAnErrorNamingTheTableAndBytes) {
  using ::testing::AllOf;
  using ::testing::HasSubstr;
  const int64_t rows = 1'000'000'000'000;  // 10^12 rows of 64 floats + 64 + 1: 516 TB
  const std::string message = test::error_of<ResourceExhausted>([&] {
    TableStorage("huge", rows, 64, {{"accumulators", 64, 0.1f}, {"rowwise", 1, 0.0f}});
  });
  EXPECT_THAT(message,
              AllOf(HasSubstr("table 'huge': cannot allocate 516000000000000 bytes (480562.4 GiB) "
                              "for 1000000000000 rows of 129 values"),
                    HasSubstr("lower vocabulary_size or dim")));
  // The parameters alone: whose byte count would not fit in size_t (it wrapped around to 0).
  const int64_t too_many = int64_t{1} << 62;
  EXPECT_THAT(test::error_of<ResourceExhausted>([&] { TableStorage("wrap", too_many, 1, {}); }),
              HasSubstr("table 'wrap': cannot allocate more than 9223372036854775807 bytes"));
  // A std::bad_alloc, as code that catches allocation failures expects.
  EXPECT_THROW(TableStorage("huge", rows, 64, {}), std::bad_alloc);
}

}  // namespace
}  // namespace recemb::internal
