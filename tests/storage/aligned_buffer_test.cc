#include "storage/aligned_buffer.h"

#include <cstdint>
#include <gtest/gtest.h>
#include <new>
#include <utility>

namespace recemb::internal {
namespace {

TEST(AlignedBufferTest, SmallBufferIsZeroedAndAligned) {
  FloatBuffer buffer(1000);
  ASSERT_EQ(buffer.size(), 1000u);
  EXPECT_FALSE(buffer.mapped());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % 64, 0u);
  for (const float value : buffer.span()) EXPECT_EQ(value, 0.0f);
}

TEST(AlignedBufferTest, LargeBufferIsMappedZeroedAndWritable) {
  const size_t size = (size_t{3} << 20) / sizeof(float) + 7;  // 3 MiB and a bit
  FloatBuffer buffer(size);
  EXPECT_TRUE(buffer.mapped());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % 64, 0u);
  for (size_t i = 0; i < size; i += 4099) EXPECT_EQ(buffer.data()[i], 0.0f);
  buffer.data()[size - 1] = 3.5f;
  EXPECT_EQ(buffer.span().back(), 3.5f);
}

TEST(AlignedBufferTest, MoveTransfersOwnership) {
  FloatBuffer a(16);
  a.data()[3] = 2.0f;
  float* data = a.data();
  FloatBuffer b(std::move(a));
  EXPECT_EQ(b.data(), data);
  EXPECT_EQ(b.data()[3], 2.0f);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from state is specified
  FloatBuffer c(4);
  c = std::move(b);
  EXPECT_EQ(c.data(), data);
  EXPECT_EQ(c.size(), 16u);
}

// 2^62 floats are 2^64 bytes: the byte count wrapped around to 0, a 0-byte allocation succeeded
// and zero-filling 2^62 floats into it crashed.
TEST(AlignedBufferTest, ASizeWhoseBytesOverflowIsBadAlloc) {
  EXPECT_THROW(FloatBuffer(size_t{1} << 62), std::bad_alloc);
  EXPECT_THROW(FloatBuffer(SIZE_MAX), std::bad_alloc);
}

// A 16-bit table's rows: the same memory rules for half the bytes a value.
TEST(AlignedBufferTest, HalfBufferIsZeroedAlignedAndSizedInHalves) {
  const size_t size = (size_t{3} << 20) / sizeof(uint16_t) + 5;
  HalfBuffer buffer(size);
  EXPECT_TRUE(buffer.mapped());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % 64, 0u);
  for (size_t i = 0; i < size; i += 4099) EXPECT_EQ(buffer.data()[i], 0u);
  buffer.data()[size - 1] = 0x3f80u;
  EXPECT_EQ(buffer.span().back(), 0x3f80u);
  HalfBuffer small(10);
  EXPECT_FALSE(small.mapped());
  for (const uint16_t value : small.span()) EXPECT_EQ(value, 0u);
  EXPECT_THROW(HalfBuffer(size_t{1} << 63), std::bad_alloc);
}

TEST(AlignedBufferTest, EmptyBuffer) {
  FloatBuffer buffer(0);
  EXPECT_EQ(buffer.size(), 0u);
  EXPECT_TRUE(buffer.span().empty());
}

}  // namespace
}  // namespace recemb::internal
