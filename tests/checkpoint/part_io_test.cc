// Reading and writing one rank's table parts at their places in a whole-variable file
// (src/checkpoint/part_io.cc): every row-wise, column-wise and whole part of a random table,
// written by its own writer into one file, gives the table's row-major bytes; reading a part back
// gives its rows and columns, and only those below a row limit; 16-bit parts as they are, and reads
// that convert between types round each value to nearest.
#include "checkpoint/part_io.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <random>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "recemb/error.h"

#include "reference/half_grid.h"
#include "testing/error_of.h"
#include "testing/files.h"
#include "testing/temporary_directory.h"

namespace recemb::internal {
namespace {

namespace fs = std::filesystem;
using test::TemporaryDirectory;
using ::testing::HasSubstr;

constexpr int64_t kRows = 23;
constexpr int64_t kWidth = 5;

struct Layout {
  std::string name;
  ShardingStrategy strategy;
  int shards;
};

// The parts of a kRows x kWidth table split `shards` ways (as placement/partition.h does).
std::vector<TablePart> parts_of(const Layout& layout) {
  std::vector<TablePart> parts;
  for (int s = 0; s < layout.shards; ++s) {
    TablePart part{.strategy = layout.strategy, .shard = s, .rows = kRows, .num_columns = kWidth};
    if (layout.strategy == ShardingStrategy::kRowWise) {
      part.row_stride = layout.shards;
      part.rows = kRows / layout.shards + (s < kRows % layout.shards ? 1 : 0);
    } else if (layout.strategy == ShardingStrategy::kColumnWise) {
      part.num_columns = kWidth / layout.shards + (s < kWidth % layout.shards ? 1 : 0);
      part.first_column =
          s * (kWidth / layout.shards) + std::min<int64_t>(s, kWidth % layout.shards);
    }
    parts.push_back(part);
  }
  return parts;
}

// The part's values taken from a row-major table, by the plain definition.
template <class T>
std::vector<T> values_of(const TablePart& part, const std::vector<T>& table) {
  std::vector<T> values;
  for (int64_t local = 0; local < part.rows; ++local) {
    const int64_t row =
        part.strategy == ShardingStrategy::kRowWise ? local * part.row_stride + part.shard : local;
    for (int64_t c = 0; c < part.num_columns; ++c) {
      values.push_back(table[static_cast<size_t>(row * kWidth + part.first_column + c)]);
    }
  }
  return values;
}

PartVariable<const float> variable_of(const TablePart& part, std::span<const float> values) {
  return {.name = "parameters",
          .width = kWidth,
          .first_column = part.first_column,
          .columns = part.num_columns,
          .bytes = std::as_bytes(values)};
}

class PartIoTest : public ::testing::TestWithParam<Layout> {};

TEST_P(PartIoTest, PartsWrittenSeparatelyMakeTheTableAndReadBackTheirRows) {
  TemporaryDirectory directory;
  std::mt19937_64 rng(51);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> table(kRows * kWidth);
  for (float& value : table) value = uniform(rng);
  const fs::path path = directory / "t0.parameters.f32";
  create_sized_file(path, table.size() * sizeof(float));
  EXPECT_EQ(test::read_bytes(path), std::vector<std::byte>(table.size() * sizeof(float)));

  const std::vector<TablePart> parts = parts_of(GetParam());
  for (const TablePart& part : parts) {
    const std::vector<float> values = values_of(part, table);
    write_part_rows(path, part, variable_of(part, values));
  }
  EXPECT_EQ(test::read_bytes(path), test::read_bytes([&] {
              test::write_bytes(directory / "expected", std::as_bytes(std::span(table)));
              return directory / "expected";
            }()));

  const support::InputFile file = support::InputFile::open(path);
  for (const int64_t limit : {kRows, int64_t{10}, int64_t{0}}) {
    for (const TablePart& part : parts) {
      const std::vector<float> expected = values_of(part, table);
      std::vector<float> values(expected.size(), -7.0f);
      PartVariable<float> variable{.name = "parameters",
                                   .width = kWidth,
                                   .first_column = part.first_column,
                                   .columns = part.num_columns,
                                   .bytes = std::as_writable_bytes(std::span(values))};
      read_part_rows(file, part, variable, limit);
      for (int64_t local = 0; local < part.rows; ++local) {
        const bool loaded = part.global_row(local) < limit;
        for (int64_t c = 0; c < part.num_columns; ++c) {
          const auto i = static_cast<size_t>(local * part.num_columns + c);
          EXPECT_EQ(values[i], loaded ? expected[i] : -7.0f)
              << "shard " << part.shard << " row " << local << " limit " << limit;
        }
      }
    }
  }
}

// A bfloat16 part's parameters over `bytes` (PartVariable<const float> to write, <float> to read).
template <class Float>
PartVariable<Float> bfloat16_variable(const TablePart& part,
                                      std::span<typename PartVariable<Float>::Byte> bytes) {
  return {.name = "parameters",
          .width = kWidth,
          .first_column = part.first_column,
          .columns = part.num_columns,
          .dtype = DType::kBFloat16,
          .bytes = bytes};
}

// Random finite 16-bit values of `dtype` (random bit patterns, the non-finite ones and those
// beyond `limit` in magnitude skipped).
std::vector<uint16_t> random_halves(DType dtype, size_t n, double limit, std::mt19937_64& rng) {
  std::vector<uint16_t> halves;
  while (halves.size() < n) {
    const auto bits = static_cast<uint16_t>(rng());
    const bool finite =
        dtype == DType::kBFloat16 ? (bits & 0x7f80u) != 0x7f80u : (bits & 0x7c00u) != 0x7c00u;
    if (finite && std::fabs(reference::value_of(dtype, bits)) < limit) halves.push_back(bits);
  }
  return halves;
}

TEST_P(PartIoTest, SixteenBitPartsAreWrittenAndReadAsTheyAre) {
  TemporaryDirectory directory;
  std::mt19937_64 rng(52);
  const std::vector<uint16_t> table = random_halves(DType::kBFloat16, kRows * kWidth, 1e30, rng);
  const fs::path path = directory / "t0.parameters.bf16";
  create_sized_file(path, table.size() * sizeof(uint16_t));
  const std::vector<TablePart> parts = parts_of(GetParam());
  for (const TablePart& part : parts) {
    const std::vector<uint16_t> values = values_of(part, table);
    write_part_rows(path, part,
                    bfloat16_variable<const float>(part, std::as_bytes(std::span(values))));
  }
  test::write_bytes(directory / "expected", std::as_bytes(std::span(table)));
  EXPECT_EQ(test::read_bytes(path), test::read_bytes(directory / "expected"));

  const support::InputFile file = support::InputFile::open(path);
  for (const TablePart& part : parts) {
    const std::vector<uint16_t> expected = values_of(part, table);
    std::vector<uint16_t> values(expected.size(), 0x7777);
    read_part_rows(file, part,
                   bfloat16_variable<float>(part, std::as_writable_bytes(std::span(values))), 10);
    for (int64_t local = 0; local < part.rows; ++local) {
      for (int64_t c = 0; c < part.num_columns; ++c) {
        const auto i = static_cast<size_t>(local * part.num_columns + c);
        EXPECT_EQ(values[i], part.global_row(local) < 10 ? expected[i] : 0x7777)
            << "shard " << part.shard << " row " << local;
      }
    }
  }
}

// Reading a file of one type into a part of another: each value exactly as float32, then rounded
// to nearest (ties to even) in the part's type (tests/reference/half_grid.h); rows at or beyond
// the limit unchanged.
TEST_P(PartIoTest, ConvertedReadsRoundEachValueToNearest) {
  struct Conversion {
    DType file;
    DType part;
  };
  for (const Conversion conversion :
       {Conversion{DType::kFloat32, DType::kBFloat16}, Conversion{DType::kFloat32, DType::kFloat16},
        Conversion{DType::kBFloat16, DType::kFloat32}, Conversion{DType::kFloat16, DType::kFloat32},
        Conversion{DType::kFloat16, DType::kBFloat16},
        Conversion{DType::kBFloat16, DType::kFloat16}}) {
    SCOPED_TRACE(std::string(dtype_name(conversion.file)) + " -> " +
                 std::string(dtype_name(conversion.part)));
    TemporaryDirectory directory;
    std::mt19937_64 rng(53);
    // The file's values (below float16's largest value, so that every conversion holds them).
    std::vector<double> file_values;
    const fs::path path = directory / "values";
    if (conversion.file == DType::kFloat32) {
      std::uniform_real_distribution<float> uniform(-60000.0f, 60000.0f);
      std::vector<float> floats(kRows * kWidth);
      for (float& value : floats) value = uniform(rng) * (rng() % 2 == 0 ? 1e-6f : 1.0f);
      test::write_bytes(path, std::as_bytes(std::span(floats)));
      file_values.assign(floats.begin(), floats.end());
    } else {
      const std::vector<uint16_t> halves =
          random_halves(conversion.file, kRows * kWidth, 65504.0, rng);
      test::write_bytes(path, std::as_bytes(std::span(halves)));
      for (uint16_t bits : halves)
        file_values.push_back(reference::value_of(conversion.file, bits));
    }
    const support::InputFile file = support::InputFile::open(path);
    for (const TablePart& part : parts_of(GetParam())) {
      const std::vector<double> expected = values_of(part, file_values);
      std::vector<float> floats(expected.size(), -7.0f);
      std::vector<uint16_t> halves(expected.size(), 0x7777);
      PartVariable<float> variable{.name = "parameters",
                                   .width = kWidth,
                                   .first_column = part.first_column,
                                   .columns = part.num_columns,
                                   .dtype = conversion.part};
      variable.bytes = conversion.part == DType::kFloat32
                           ? std::as_writable_bytes(std::span(floats))
                           : std::as_writable_bytes(std::span(halves));
      read_converted_part_rows(file, part, variable, conversion.file, 10);
      for (int64_t local = 0; local < part.rows; ++local) {
        const bool loaded = part.global_row(local) < 10;
        for (int64_t c = 0; c < part.num_columns; ++c) {
          const auto i = static_cast<size_t>(local * part.num_columns + c);
          if (conversion.part == DType::kFloat32) {
            EXPECT_EQ(floats[i], loaded ? expected[i] : -7.0f) << "row " << local;
          } else if (loaded) {
            EXPECT_EQ(reference::value_of(conversion.part, halves[i]),
                      reference::round_to_nearest(conversion.part, expected[i]))
                << "row " << local << " value " << expected[i];
          } else {
            EXPECT_EQ(halves[i], 0x7777) << "row " << local;
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, PartIoTest,
                         ::testing::Values(Layout{"whole", ShardingStrategy::kTableWise, 1},
                                           Layout{"rows1", ShardingStrategy::kRowWise, 1},
                                           Layout{"rows4", ShardingStrategy::kRowWise, 4},
                                           Layout{"columns2", ShardingStrategy::kColumnWise, 2},
                                           Layout{"columns5", ShardingStrategy::kColumnWise, 5}),
                         [](const auto& test_info) { return test_info.param.name; });

TEST(PartIoTest, ErrorsNameTheFile) {
  TemporaryDirectory directory;
  create_sized_file(directory / "a.f32", 8);
  EXPECT_THAT(test::error_of<std::system_error>([&] { create_sized_file(directory / "a.f32", 8); }),
              HasSubstr("create '" + (directory / "a.f32").string() + "'"));
  const TablePart part{.rows = 2, .num_columns = kWidth};
  const std::vector<float> values(2 * kWidth);
  EXPECT_THAT(test::error_of<std::system_error>([&] {
                write_part_rows(directory / "missing.f32", part, variable_of(part, values));
              }),
              HasSubstr("open '" + (directory / "missing.f32").string() + "'"));
  // A file shorter than the rows: the read names it.
  std::vector<float> out(2 * kWidth);
  EXPECT_THAT(test::error_of<DataLoss>([&] {
                read_part_rows(support::InputFile::open(directory / "a.f32"), part,
                               {.name = "parameters",
                                .width = kWidth,
                                .columns = kWidth,
                                .bytes = std::as_writable_bytes(std::span(out))},
                               2);
              }),
              HasSubstr("a.f32' is truncated"));
}

}  // namespace
}  // namespace recemb::internal
