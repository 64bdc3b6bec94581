// Reading and writing one rank's table parts at their places in a whole-variable file
// (src/checkpoint/part_io.cc): every row-wise, column-wise and whole part of a random table,
// written by its own writer into one file, gives the table's row-major bytes; reading a part back
// gives its rows and columns, and only those below a row limit.
#include "checkpoint/part_io.h"

#include <filesystem>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <random>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "recemb/error.h"

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
std::vector<float> values_of(const TablePart& part, const std::vector<float>& table) {
  std::vector<float> values;
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
          .values = values};
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
                                   .values = values};
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
                read_part_rows(
                    support::InputFile::open(directory / "a.f32"), part,
                    {.name = "parameters", .width = kWidth, .columns = kWidth, .values = out}, 2);
              }),
              HasSubstr("a.f32' is truncated"));
}

}  // namespace
}  // namespace recemb::internal
