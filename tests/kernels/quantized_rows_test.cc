// The float16 and int8 row formats: conversions against references written from IEEE 754 and the
// format's definition (double arithmetic, brute force over all binary16 values), the documented
// error bounds, and pooling of such rows (kernels/pool.h) against float64 and against the float32
// path.
#include "kernels/quantized_rows.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <gtest/gtest.h>
#include <limits>
#include <random>
#include <vector>

#include "kernels/half_precision.h"
#include "kernels/pool.h"
#include "kernels/simd_target.h"

namespace recemb::internal {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// One value through the rows' float16 encoder (kernels/half_precision.h), which
// encode_float16_rows uses.
uint16_t float_to_float16(float value) {
  uint16_t code = 0;
  encode_half_values_nearest(DType::kFloat16, &value, 1, &code);
  return code;
}

// The value of a binary16 bit pattern, from the definition: (-1)^s * 2^(e - 15) * (1 + m / 1024),
// or 2^-14 * m / 1024 for e = 0; e = 31 is infinity (m = 0) or NaN.
double reference_half(uint16_t bits) {
  const int sign = bits >> 15;
  const int exponent = (bits >> 10) & 31;
  const int mantissa = bits & 1023;
  double magnitude;
  if (exponent == 31) {
    magnitude = mantissa == 0 ? std::numeric_limits<double>::infinity()
                              : std::numeric_limits<double>::quiet_NaN();
  } else if (exponent == 0) {
    magnitude = std::ldexp(mantissa, -24);
  } else {
    magnitude = std::ldexp(1024 + mantissa, exponent - 25);
  }
  return sign ? -magnitude : magnitude;
}

// Round to nearest binary16, ties to the even pattern, by search over all finite non-negative
// patterns (their values increase with the pattern); infinity at or beyond 65520.
uint16_t reference_to_half(float value) {
  if (std::isnan(value)) return 0x7e00;
  const uint16_t sign = std::signbit(value) ? 0x8000 : 0;
  const double magnitude = std::abs(static_cast<double>(value));
  if (magnitude >= 65520.0) return sign | 0x7c00;
  uint16_t low = 0, high = 0x7bff;  // the largest finite pattern, 65504
  while (low < high) {              // the first pattern whose value is >= magnitude
    const auto middle = static_cast<uint16_t>((low + high) / 2);
    if (reference_half(middle) < magnitude) {
      low = static_cast<uint16_t>(middle + 1);
    } else {
      high = middle;
    }
  }
  uint16_t nearest = low;
  if (low > 0) {
    const double above = reference_half(low) - magnitude;
    const double below = magnitude - reference_half(static_cast<uint16_t>(low - 1));
    if (below < above || (below == above && (low & 1) != 0))
      nearest = static_cast<uint16_t>(low - 1);
  }
  return sign | nearest;
}

bool same_value(float a, double b) {
  return (std::isnan(a) && std::isnan(b)) ||
         (static_cast<double>(a) == b && std::signbit(a) == std::signbit(b));
}

TEST(Float16Test, DecodesEveryPatternExactly) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto half = static_cast<uint16_t>(bits);
    EXPECT_TRUE(same_value(float16_to_float(half), reference_half(half)))
        << "pattern " << std::hex << bits << ": " << float16_to_float(half) << " vs "
        << reference_half(half);
  }
}

TEST(Float16Test, EveryPatternRoundTrips) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto half = static_cast<uint16_t>(bits);
    const uint16_t again = float_to_float16(float16_to_float(half));
    if ((bits & 0x7c00) == 0x7c00 && (bits & 0x3ff) != 0) {
      EXPECT_EQ(again & 0x7c00, 0x7c00) << "NaN pattern " << std::hex << bits;
      EXPECT_NE(again & 0x3ff, 0) << "NaN pattern " << std::hex << bits;
    } else {
      EXPECT_EQ(again, half) << "pattern " << std::hex << bits;
    }
  }
}

// Values on and next to every rounding decision: midpoints between neighbouring binary16 values
// (ties), one float ulp either side of them, and the overflow threshold.
std::vector<float> float16_edge_values() {
  std::vector<float> values{
      0.0f,         -0.0f,    65504.0f,   65519.996f,
      65520.0f,     65536.0f, 1e30f,      std::numeric_limits<float>::denorm_min(),
      0x1p-25f,     0x1p-24f, 0x1.8p-25f, 0x1p-14f,
      0x1.ffcp-15f, kInf};
  for (uint16_t bits = 0; bits < 0x7bff; bits = static_cast<uint16_t>(bits + 7)) {
    const double middle = (reference_half(bits) + reference_half(bits + 1)) / 2;
    const auto tie = static_cast<float>(middle);  // exact: 12 significant bits
    for (const float x : {tie, std::nextafter(tie, 0.0f), std::nextafter(tie, kInf)}) {
      values.push_back(x);
      values.push_back(-x);
    }
  }
  return values;
}

TEST(Float16Test, EncodesAsRoundToNearestEven) {
  std::vector<float> values = float16_edge_values();
  std::mt19937_64 rng(17);
  std::uniform_real_distribution<float> exponent(-30.0f, 17.0f);
  for (int i = 0; i < 100000; ++i) {
    const float x = std::exp2(exponent(rng));
    values.push_back(i % 2 == 0 ? x : -x);
  }
  for (const float x : values) {
    EXPECT_EQ(float_to_float16(x), reference_to_half(x)) << std::hexfloat << x;
  }
  EXPECT_EQ(float_to_float16(kNaN) & 0x7c00, 0x7c00);
  EXPECT_NE(float_to_float16(kNaN) & 0x3ff, 0);
}

// The documented bound: |decode(encode(x)) - x| <= max(2^-11 |x|, 2^-25) for |x| < 65520.
double float16_bound(float x) { return std::max(std::ldexp(std::abs(double{x}), -11), 0x1p-25); }

TEST(Float16Test, RowsEncodeWithinTheDocumentedBound) {
  std::mt19937_64 rng(23);
  std::uniform_real_distribution<float> exponent(-28.0f, 15.9f);
  const int64_t num_rows = 37, dim = 19;
  std::vector<float> rows(num_rows * dim);
  for (float& x : rows) x = (rng() % 2 ? 1.0f : -1.0f) * std::exp2(exponent(rng));
  std::vector<uint16_t> out(rows.size());
  EXPECT_EQ(encode_float16_rows(rows.data(), num_rows, dim, out.data()), std::nullopt);
  double worst = 0.0;  // the measured error as a share of the bound
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(out[i], reference_to_half(rows[i])) << i;
    const double error = std::abs(reference_half(out[i]) - rows[i]);
    EXPECT_LE(error, float16_bound(rows[i])) << "value " << rows[i];
    worst = std::max(worst, error / float16_bound(rows[i]));
  }
  EXPECT_GT(worst, 0.5) << "the bound is far from tight: the test data misses the bad cases";
}

TEST(Float16Test, RowsReportTheFirstValueThatCannotBeEncoded) {
  std::vector<float> rows(24, 0.75f);
  std::vector<uint16_t> out(rows.size());
  rows[13] = 65520.0f;
  rows[17] = kNaN;
  EXPECT_EQ(encode_float16_rows(rows.data(), 4, 6, out.data()), 13);
  rows[13] = -65519.0f;  // rounds to -65504: encodable
  EXPECT_EQ(encode_float16_rows(rows.data(), 4, 6, out.data()), 17);
  rows[17] = -kInf;
  EXPECT_EQ(encode_float16_rows(rows.data(), 4, 6, out.data()), 17);
  rows[17] = 1.0f;
  EXPECT_EQ(encode_float16_rows(rows.data(), 4, 6, out.data()), std::nullopt);
  EXPECT_EQ(out[13], 0xfbff);
}

// ------------------------------------------------------------------------------------------------
// int8 rows.

struct Int8Decoded {
  double scale;
  double bias;
  std::vector<double> values;
};

// Reads a row of the format as documented: dim codes, then float scale and float bias.
Int8Decoded reference_int8(const uint8_t* row, int64_t dim) {
  float scale, bias;
  std::memcpy(&scale, row + dim, 4);
  std::memcpy(&bias, row + dim + 4, 4);
  Int8Decoded decoded{scale, bias, {}};
  for (int64_t d = 0; d < dim; ++d) decoded.values.push_back(row[d] * double{scale} + bias);
  return decoded;
}

// Rows of many shapes: random ranges and offsets, all-negative, huge and tiny magnitudes, a
// constant row, and rows whose extremes are far from zero relative to their range.
std::vector<float> int8_test_rows(std::mt19937_64& rng, int64_t num_rows, int64_t dim) {
  std::vector<float> rows(num_rows * dim);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (int64_t r = 0; r < num_rows; ++r) {
    const float magnitude = std::exp2(static_cast<float>(static_cast<int>(r % 40) - 20));
    const float offset = r % 5 == 0 ? 1000.0f * magnitude : r % 5 == 1 ? -3.0f * magnitude : 0.0f;
    for (int64_t d = 0; d < dim; ++d) {
      rows[r * dim + d] = r == 7 ? 0.3f : offset + magnitude * unit(rng);
    }
  }
  return rows;
}

TEST(Int8RowsTest, EncodeWithinTheDocumentedBound) {
  for (const int64_t dim : {1, 2, 7, 64, 129}) {
    SCOPED_TRACE(::testing::Message() << "dim " << dim);
    std::mt19937_64 rng(31 + dim);
    const int64_t num_rows = 45;
    const std::vector<float> rows = int8_test_rows(rng, num_rows, dim);
    std::vector<uint8_t> out(num_rows * int8_row_bytes(dim), 0xab);
    EXPECT_EQ(encode_int8_rows(rows.data(), num_rows, dim, out.data()), std::nullopt);
    double worst = 0.0;
    for (int64_t r = 0; r < num_rows; ++r) {
      const float* row = rows.data() + r * dim;
      const uint8_t* encoded = out.data() + r * int8_row_bytes(dim);
      const float low = *std::min_element(row, row + dim);
      const float high = *std::max_element(row, row + dim);
      const Int8Decoded decoded = reference_int8(encoded, dim);
      EXPECT_EQ(decoded.bias, low) << "row " << r;
      EXPECT_EQ(decoded.scale, static_cast<float>((high - low) / 255.0f)) << "row " << r;
      const double bound = decoded.scale / 2 +
                           std::ldexp(std::max(std::abs(double{low}), std::abs(double{high})), -20);
      for (int64_t d = 0; d < dim; ++d) {
        const double error = std::abs(decoded.values[d] - row[d]);
        EXPECT_LE(error, bound) << "row " << r << " column " << d << " value " << row[d];
        if (decoded.scale > 0) worst = std::max(worst, error / (decoded.scale / 2));
        if (row[d] == low) {
          EXPECT_EQ(encoded[d], 0) << "row " << r;
        } else if (row[d] == high) {
          EXPECT_EQ(encoded[d], 255) << "row " << r;
        }
      }
      // The decoder the pooling kernel uses reads the same parameters.
      const Int8RowParameters parameters = int8_row_parameters(encoded, dim);
      EXPECT_EQ(parameters.scale, decoded.scale);
      EXPECT_EQ(parameters.bias, decoded.bias);
    }
    if (dim >= 64) {
      EXPECT_GT(worst, 0.9) << "the bound is far from tight";
    }
  }
}

TEST(Int8RowsTest, ConstantRowIsExact) {
  const std::vector<float> row(5, -2.5f);
  std::vector<uint8_t> out(int8_row_bytes(5));
  EXPECT_EQ(encode_int8_rows(row.data(), 1, 5, out.data()), std::nullopt);
  const Int8Decoded decoded = reference_int8(out.data(), 5);
  EXPECT_EQ(decoded.scale, 0.0);
  for (double value : decoded.values) EXPECT_EQ(value, -2.5);
}

TEST(Int8RowsTest, ReportTheFirstValueThatCannotBeEncoded) {
  std::vector<float> rows{0.5f, 1.0f, -1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f};  // [3, 3]
  std::vector<uint8_t> out(3 * int8_row_bytes(3));
  rows[5] = kNaN;
  rows[7] = kInf;
  EXPECT_EQ(encode_int8_rows(rows.data(), 3, 3, out.data()), 5);
  rows[5] = 1.0f;
  EXPECT_EQ(encode_int8_rows(rows.data(), 3, 3, out.data()), 7);
  rows[7] = 7.0f;
  rows[4] = -3e38f;  // finite, but max - min overflows: reported at the row's first column
  rows[3] = 3e38f;
  EXPECT_EQ(encode_int8_rows(rows.data(), 3, 3, out.data()), 3);
  rows[3] = 3.0f;
  EXPECT_EQ(encode_int8_rows(rows.data(), 3, 3, out.data()), std::nullopt);
}

// ------------------------------------------------------------------------------------------------
// Pooling float16 and int8 rows.

enum class Format { kFloat16, kInt8 };

struct PoolCase {
  Format format;
  int64_t dim;
  bool weighted;
  bool quantized;
};

class QuantizedPoolTest : public ::testing::TestWithParam<PoolCase> {};

// The pooling kernel reads each format's rows exactly as documented: on every SIMD target the same
// bits, which match a float64 reference over the rows decoded by this test's own decoders, and
// bitwise the float32 path over a float32 table holding the values those rows decode to (same
// summation order).
TEST_P(QuantizedPoolTest, MatchesReferenceAndTheFloat32Path) {
  const PoolCase c = GetParam();
  const uint64_t seed = 4321 + static_cast<uint64_t>(c.dim) * 4 + (c.weighted ? 2 : 0) +
                        (c.format == Format::kInt8 ? 1 : 0);
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  const int64_t vocabulary = 60;
  std::uniform_real_distribution<float> value(-1.5f, 1.5f);
  std::vector<float> table(vocabulary * c.dim);
  for (float& x : table) x = value(rng);

  std::vector<uint16_t> halves;
  std::vector<uint8_t> bytes;
  std::vector<double> decoded;  // by the test's reference decoders
  TableRows rows;
  if (c.format == Format::kFloat16) {
    halves.resize(table.size());
    ASSERT_EQ(encode_float16_rows(table.data(), vocabulary, c.dim, halves.data()), std::nullopt);
    for (uint16_t half : halves) decoded.push_back(reference_half(half));
    rows = Float16Rows{halves.data()};
  } else {
    bytes.resize(vocabulary * int8_row_bytes(c.dim));
    ASSERT_EQ(encode_int8_rows(table.data(), vocabulary, c.dim, bytes.data()), std::nullopt);
    for (int64_t r = 0; r < vocabulary; ++r) {
      const Int8Decoded row = reference_int8(bytes.data() + r * int8_row_bytes(c.dim), c.dim);
      decoded.insert(decoded.end(), row.values.begin(), row.values.end());
    }
    rows = Int8Rows{bytes.data()};
  }
  // Bags of 0..40 ids (longer than the prefetch distance), duplicates likely; bag 3 empty.
  std::vector<int64_t> offsets{0}, ids;
  std::vector<float> weights, scales;
  std::uniform_int_distribution<int64_t> length(0, 40), id(0, vocabulary - 1);
  for (int b = 0; b < 30; ++b) {
    const int64_t n = b == 3 ? 0 : length(rng);
    for (int64_t j = 0; j < n; ++j) {
      ids.push_back(id(rng));
      if (c.weighted) weights.push_back(value(rng));
    }
    offsets.push_back(static_cast<int64_t>(ids.size()));
    scales.push_back(b % 3 == 0 ? 1.0f : value(rng));
  }
  const QuantizationConfig quantization{.num_buckets = 5, .lower = -1.0f, .upper = 1.2f};
  const QuantizationConfig* simulated = c.quantized ? &quantization : nullptr;
  PoolInput input{.table = rows,
                  .dim = c.dim,
                  .offsets = offsets.data(),
                  .ids = ids.data(),
                  .weights = c.weighted ? weights.data() : nullptr,
                  .bag_scales = scales.data(),
                  .quantization = simulated};
  // Every SIMD target gives the same bits (the float32 path's, below).
  std::vector<float> out(30 * c.dim, 99.0f);
  for (const SimdTarget target : supported_simd_targets()) {
    const ScopedSimdTarget scoped(target);
    std::vector<float> on_target(30 * c.dim, 99.0f);
    pool_bags(input, 0, 13, on_target.data());  // in two pieces, as the parallel lookup does
    pool_bags(input, 13, 30, on_target.data());
    if (target != supported_simd_targets().front()) {
      ASSERT_EQ(std::memcmp(on_target.data(), out.data(), out.size() * sizeof(float)), 0)
          << simd_target_name(target);
    }
    out = on_target;
  }

  for (int b = 0; b < 30; ++b) {
    for (int64_t d = 0; d < c.dim; ++d) {
      double expected = 0.0, magnitude = 0.0;
      for (int64_t j = offsets[b]; j < offsets[b + 1]; ++j) {
        double x = decoded[ids[j] * c.dim + d];
        if (c.quantized) {
          const double step = (1.2 - -1.0) / 4;
          x = std::floor((std::clamp(x, -1.0, 1.2) - -1.0) / step + 0.5) * step + -1.0;
        }
        const double weight = c.weighted ? weights[j] : 1.0;
        expected += weight * x;
        magnitude += std::abs(weight * x);
      }
      expected *= scales[b];
      const double tolerance = 1e-6 * (1.0 + std::abs(scales[b]) * magnitude);
      EXPECT_NEAR(out[b * c.dim + d], expected, tolerance) << "bag " << b << " column " << d;
    }
  }
  for (int64_t d = 0; d < c.dim; ++d) EXPECT_EQ(out[3 * c.dim + d], 0.0f);

  // The float32 path over the decoded values gives the same bits.
  std::vector<float> as_float32(decoded.size());
  for (size_t i = 0; i < decoded.size(); ++i) {
    if (c.format == Format::kFloat16) {
      as_float32[i] = static_cast<float>(decoded[i]);  // exact
    } else {  // the kernel's float arithmetic: code * scale + bias, rounded twice
      const int64_t r = static_cast<int64_t>(i) / c.dim, d = static_cast<int64_t>(i) % c.dim;
      const uint8_t* row = bytes.data() + r * int8_row_bytes(c.dim);
      const Int8RowParameters p = int8_row_parameters(row, c.dim);
      as_float32[i] = static_cast<float>(row[d]) * p.scale + p.bias;
    }
  }
  input.table = static_cast<const float*>(as_float32.data());
  std::vector<float> float32_out(out.size(), -7.0f);
  pool_bags(input, 0, 30, float32_out.data());
  EXPECT_EQ(std::memcmp(out.data(), float32_out.data(), out.size() * sizeof(float)), 0);
}

// The vector kernels decode every float16 value as float16_to_float does (subnormals, zeros of
// both signs, the largest values), on every SIMD target: each finite half pooled alone, in rows of
// 16 and of 7 (a narrower vector and its tail).
TEST(Float16PoolTest, EveryFloat16DecodesExactlyOnEveryTarget) {
  std::vector<uint16_t> halves;
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    if ((bits & 0x7c00u) != 0x7c00u) halves.push_back(static_cast<uint16_t>(bits));  // finite
  }
  for (const int64_t dim : {16, 7}) {
    const auto rows = static_cast<int64_t>(halves.size()) / dim;
    std::vector<int64_t> offsets, ids;
    for (int64_t r = 0; r <= rows; ++r) offsets.push_back(r);
    for (int64_t r = 0; r < rows; ++r) ids.push_back(rows - 1 - r);  // not in order
    const std::vector<float> scales(static_cast<size_t>(rows), 1.0f);
    const PoolInput input{.table = Float16Rows{halves.data()},
                          .dim = dim,
                          .offsets = offsets.data(),
                          .ids = ids.data(),
                          .bag_scales = scales.data()};
    for (const SimdTarget target : supported_simd_targets()) {
      const ScopedSimdTarget scoped(target);
      std::vector<float> out(static_cast<size_t>(rows * dim));
      pool_bags(input, 0, rows, out.data());
      for (int64_t b = 0; b < rows; ++b) {
        for (int64_t d = 0; d < dim; ++d) {
          const uint16_t half = halves[static_cast<size_t>(ids[b] * dim + d)];
          // +0.0 + x: a sum from zero, as pooling computes it (-0.0 becomes +0.0).
          const float expected = 0.0f + float16_to_float(half);
          ASSERT_EQ(std::bit_cast<uint32_t>(out[static_cast<size_t>(b * dim + d)]),
                    std::bit_cast<uint32_t>(expected))
              << simd_target_name(target) << " half 0x" << std::hex << half;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, QuantizedPoolTest,
                         ::testing::Values(PoolCase{Format::kFloat16, 1, false, false},
                                           PoolCase{Format::kFloat16, 3, true, false},
                                           PoolCase{Format::kFloat16, 17, false, false},
                                           PoolCase{Format::kFloat16, 64, true, false},
                                           PoolCase{Format::kFloat16, 130, true, true},
                                           PoolCase{Format::kInt8, 1, true, false},
                                           PoolCase{Format::kInt8, 5, false, false},
                                           PoolCase{Format::kInt8, 16, true, false},
                                           PoolCase{Format::kInt8, 64, false, false},
                                           PoolCase{Format::kInt8, 67, true, false},
                                           PoolCase{Format::kInt8, 33, true, true}));

}  // namespace
}  // namespace recemb::internal
