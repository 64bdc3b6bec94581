// XXH3-64 checksums, one-shot and streaming, and their hex form (format/checksum.h).
#include "format/checksum.h"

#include <cstddef>
#include <cstdint>
#include <gtest/gtest.h>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace recemb::format {
namespace {

// xxHash's sanity-test buffer (xxhsum's BMK_fillTestBuffer): byte i is the top byte of
// 2654435761 * 11400714785074694797^i (mod 2^64).
std::vector<std::byte> sanity_buffer(size_t size) {
  std::vector<std::byte> buffer(size);
  uint64_t generator = 2654435761u;
  for (std::byte& byte : buffer) {
    byte = static_cast<std::byte>(generator >> 56);
    generator *= 11400714785074694797ull;
  }
  return buffer;
}

struct KnownValue {
  size_t size;
  uint64_t checksum;
};

// XXH3_64bits(sanity buffer prefix, seed 0), from xxHash's own test vectors; the sizes cover every
// code path (1-3, 4-8, 9-16, 17-128, 129-240 bytes, and one to three 1 KiB blocks with full and
// overlapping last stripes).
const std::vector<KnownValue> kKnownValues = {
    {0, 0x2d06800538d394c2},    {1, 0xc44bdff4074eecdb},    {6, 0x27b56a84cd2d7325},
    {12, 0xa713daf0dfbb77e7},   {24, 0xa3fe70bf9d3510eb},   {48, 0x397da259ecba1f11},
    {80, 0xbcdefbbb2c47c90a},   {195, 0xcd94217ee362ec3a},  {403, 0xcdeb804d65c6dea4},
    {512, 0x617e49599013cb6b},  {2048, 0xdd59e2c3a5f038e0}, {2240, 0x6e73a90539cf2948},
    {2367, 0xcb37aeb9e5d361ed},
};

TEST(ChecksumTest, MatchesXxh3KnownValues) {
  const std::vector<std::byte> buffer = sanity_buffer(2367);
  for (const KnownValue& known : kKnownValues) {
    EXPECT_EQ(checksum(std::span(buffer).first(known.size)), known.checksum)
        << "size " << known.size;
  }
}

TEST(ChecksumTest, StreamingEqualsOneShotOverRandomSplits) {
  std::mt19937_64 rng(301);
  std::vector<std::byte> data(100000);
  for (std::byte& byte : data) byte = static_cast<std::byte>(rng());
  for (int trial = 0; trial < 50; ++trial) {
    const size_t size = std::uniform_int_distribution<size_t>(0, data.size())(rng);
    const std::span<const std::byte> whole = std::span(data).first(size);
    StreamingChecksum streaming;
    size_t offset = 0;
    while (offset < size) {
      // Pieces from 0 bytes up to several of XXH3's 256-byte internal buffers.
      const size_t piece =
          std::min(size - offset, std::uniform_int_distribution<size_t>(0, 2000)(rng));
      streaming.update(whole.subspan(offset, piece));
      offset += piece;
    }
    EXPECT_EQ(streaming.digest(), checksum(whole)) << "trial " << trial << " size " << size;
  }
  // digest() does not end the stream.
  StreamingChecksum streaming;
  streaming.update(std::span(data).first(10));
  EXPECT_EQ(streaming.digest(), checksum(std::span(data).first(10)));
  streaming.update(std::span(data).subspan(10, 990));
  EXPECT_EQ(streaming.digest(), checksum(std::span(data).first(1000)));
  EXPECT_EQ(StreamingChecksum().digest(), 0x2d06800538d394c2u);
}

TEST(ChecksumTest, HexRoundTrips) {
  EXPECT_EQ(checksum_to_hex(0x2d06800538d394c2), "2d06800538d394c2");
  EXPECT_EQ(checksum_to_hex(0), "0000000000000000");
  EXPECT_EQ(checksum_to_hex(0xffffffffffffffff), "ffffffffffffffff");
  std::mt19937_64 rng(7);
  for (int i = 0; i < 100; ++i) {
    const uint64_t value = rng() >> (i % 64);
    uint64_t parsed = 0;
    ASSERT_TRUE(parse_checksum(checksum_to_hex(value), parsed)) << value;
    EXPECT_EQ(parsed, value);
  }
}

TEST(ChecksumTest, ParseRejectsAnythingButSixteenLowercaseHexDigits) {
  const std::vector<std::string> bad_texts = {"",
                                              "2d06800538d394c",
                                              "2d06800538d394c20",
                                              "2D06800538D394C2",
                                              "2d06800538d394cg",
                                              " 2d06800538d394c",
                                              "0x2d06800538d394",
                                              std::string("2d06800538d394\0"
                                                          "2",
                                                          16)};
  for (const std::string& bad : bad_texts) {
    uint64_t parsed = 42;
    EXPECT_FALSE(parse_checksum(bad, parsed)) << bad;
    EXPECT_EQ(parsed, 42u) << "left unchanged on failure: " << bad;
  }
}

}  // namespace
}  // namespace recemb::format
