// The key of a string id (recemb/string_key.h): XXH3-64 with seed 0, as a signed int64.
#include "recemb/string_key.h"

#include <cstddef>
#include <cstdint>
#include <gtest/gtest.h>
#include <string>
#include <string_view>

namespace recemb {
namespace {

// xxHash's sanity-test buffer (xxhsum's BMK_fillTestBuffer): byte i is the top byte of
// 2654435761 * 11400714785074694797^i (mod 2^64).
std::string sanity_buffer(size_t size) {
  std::string buffer(size, '\0');
  uint64_t generator = 2654435761u;
  for (char& byte : buffer) {
    byte = static_cast<char>(generator >> 56);
    generator *= 11400714785074694797ull;
  }
  return buffer;
}

TEST(StringKeyTest, IsXxh3OfTheBytesAsTwosComplement) {
  // XXH3_64bits(sanity buffer prefix, seed 0), from xxHash's own test vectors: sizes on every
  // code path, hashes with the top bit clear and set.
  struct Known {
    size_t size;
    uint64_t hash;
  };
  const Known known_values[] = {
      {0, 0x2d06800538d394c2},   {1, 0xc44bdff4074eecdb},   {6, 0x27b56a84cd2d7325},
      {12, 0xa713daf0dfbb77e7},  {24, 0xa3fe70bf9d3510eb},  {48, 0x397da259ecba1f11},
      {195, 0xcd94217ee362ec3a}, {403, 0xcdeb804d65c6dea4}, {2048, 0xdd59e2c3a5f038e0}};
  const std::string buffer = sanity_buffer(2048);
  for (const Known& known : known_values) {
    EXPECT_EQ(string_key(std::string_view(buffer).substr(0, known.size)),
              static_cast<int64_t>(known.hash))
        << "size " << known.size;
  }
  EXPECT_LT(string_key(std::string_view(buffer).substr(0, 1)), 0);  // 0xc4...: negative
}

TEST(StringKeyTest, HashesEveryByteIncludingZeros) {
  const std::string with_zero("a\0b", 3);
  EXPECT_NE(string_key(with_zero), string_key("a"));
  EXPECT_NE(string_key(with_zero), string_key(std::string("a\0c", 3)));
  EXPECT_NE(string_key(std::string("\0", 1)), string_key(""));
  EXPECT_EQ(string_key(with_zero), string_key(std::string_view("xa\0b", 4).substr(1)));
}

}  // namespace
}  // namespace recemb
