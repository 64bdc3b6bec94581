// float_text and double_text: the text reads back as the same value for random floats and doubles
// of every magnitude, and no shorter text would (the last digit cannot be dropped).
#include "support/number_text.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <gtest/gtest.h>
#include <limits>
#include <random>
#include <string>

namespace recemb::support {
namespace {

template <class T>
T read_back(const std::string& text) {
  T value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  EXPECT_EQ(error, std::errc()) << text;
  EXPECT_EQ(end, text.data() + text.size()) << text;
  return value;
}

// The text with its last significant digit dropped (a shorter candidate), or "" when no nonzero
// digit would be left.
std::string without_last_digit(const std::string& text) {
  const size_t exponent = text.find('e');
  std::string mantissa = text.substr(0, exponent);
  mantissa.pop_back();
  if (!mantissa.empty() && mantissa.back() == '.') mantissa.pop_back();
  if (mantissa.find_first_of("123456789") == std::string::npos) return "";
  return mantissa + (exponent == std::string::npos ? "" : text.substr(exponent));
}

TEST(NumberTextTest, FloatsReadBackExactlyFromTheirShortestText) {
  std::mt19937 random(7);
  for (int i = 0; i < 100000; ++i) {
    const uint32_t bits = static_cast<uint32_t>(random());
    float value = 0.0f;
    std::memcpy(&value, &bits, sizeof value);
    if (!std::isfinite(value)) continue;
    const std::string text = float_text(value);
    ASSERT_EQ(read_back<float>(text), value) << text;
    const std::string shorter = without_last_digit(text);
    if (!shorter.empty()) {
      EXPECT_NE(read_back<float>(shorter), value) << text << " vs " << shorter;
    }
  }
}

TEST(NumberTextTest, DoublesReadBackExactly) {
  std::mt19937_64 random(11);
  for (int i = 0; i < 100000; ++i) {
    const uint64_t bits = random();
    double value = 0.0;
    std::memcpy(&value, &bits, sizeof value);
    if (!std::isfinite(value)) continue;
    ASSERT_EQ(read_back<double>(double_text(value)), value) << double_text(value);
  }
}

TEST(NumberTextTest, ShortFormsAndSpecialValues) {
  EXPECT_EQ(float_text(0.1f), "0.1");
  EXPECT_EQ(float_text(1e-7f), "1e-07");
  EXPECT_EQ(float_text(-2.5f), "-2.5");
  EXPECT_EQ(float_text(std::numeric_limits<float>::max()), "3.4028235e+38");
  EXPECT_EQ(float_text(std::numeric_limits<float>::infinity()), "inf");
  EXPECT_EQ(float_text(-std::numeric_limits<float>::infinity()), "-inf");
  EXPECT_EQ(float_text(std::numeric_limits<float>::quiet_NaN()), "nan");
  EXPECT_EQ(double_text(0.1), "0.1");
  EXPECT_EQ(double_text(1.0 / 3.0), "0.3333333333333333");
}

}  // namespace
}  // namespace recemb::support
