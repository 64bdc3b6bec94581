// PartAccess (src/embedding/parts.cc): the parts a rank holds, as the checkpoint code sees them.
// For every strategy, in one process and on 2 ranks (threads), the parts' rows and columns put at
// their places give exactly what read_variable gathers, every table row is held by some part, and
// a write through a part's span is what read_variable then returns.
#include "embedding/parts.h"

#include <gtest/gtest.h>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "recemb/embedding.h"

namespace recemb::internal {
namespace {

struct Case {
  std::string name;
  int ranks;
  std::optional<PlacementOptions> placement;
};

std::vector<TableConfig> tables() {
  return {{.name = "a", .vocabulary_size = 11, .dim = 5},
          {.name = "b",
           .vocabulary_size = 7,
           .dim = 3,
           .optimizer = RowwiseAdagrad{.initial_accumulator_value = 0.3f}}};
}

// One rank: writes through its parts a value naming each entry's table, variable, row and column,
// then checks that read_variable (gathering every rank's parts) returns exactly those values.
void check_rank(const Case& test_case, std::shared_ptr<Communicator> communicator) {
  Embedding layer(tables(), {{.name = "fa", .table = "a"}, {.name = "fb", .table = "b"}},
                  {.optimizer = Adam{},
                   .seed = 5,
                   .placement = test_case.placement,
                   .communicator = communicator});
  if (communicator) {
    EXPECT_EQ(&PartAccess::communicator(layer), communicator.get());
  }
  EXPECT_EQ(PartAccess::communicator(layer).rank(), layer.rank());
  EXPECT_EQ(PartAccess::communicator(layer).size(), layer.world_size());
  size_t index = 0;
  for (const LocalPart<float>& local : PartAccess::local_parts(layer)) {
    EXPECT_EQ(local.part.rank, layer.rank());
    const TableConfig& config = layer.tables()[local.part.table];
    ASSERT_EQ(local.variables.size(), layer.variable_names(config.name).size());
    for (size_t v = 0; v < local.variables.size(); ++v) {
      const PartVariable<float>& variable = local.variables[v];
      EXPECT_EQ(variable.name, layer.variable_names(config.name)[v]);
      const std::span<float> values = variable.floats();
      ASSERT_EQ(values.size(), static_cast<size_t>(local.part.rows * variable.columns));
      for (int64_t l = 0; l < local.part.rows; ++l) {
        for (int64_t c = 0; c < variable.columns; ++c) {
          const int64_t row = local.part.global_row(l);
          values[static_cast<size_t>(l * variable.columns + c)] =
              static_cast<float>(1000 * local.part.table + 100 * v + row) +
              0.01f * static_cast<float>(variable.first_column + c);
        }
      }
    }
    ++index;
  }
  EXPECT_EQ(index, PartAccess::local_parts(std::as_const(layer)).size());
  for (const TableConfig& config : layer.tables()) {
    const auto table = static_cast<size_t>(&config - layer.tables().data());
    for (size_t v = 0; v < layer.variable_names(config.name).size(); ++v) {
      const std::string name = layer.variable_names(config.name)[v];
      int64_t width = 1;
      const std::vector<int64_t> shape = layer.variable_shape(config.name, name);
      if (shape.size() > 1) width = shape[1];
      std::vector<float> values(static_cast<size_t>(config.vocabulary_size * width));
      layer.read_variable(config.name, name, values);
      std::vector<float> expected(values.size());
      for (int64_t row = 0; row < config.vocabulary_size; ++row) {
        for (int64_t c = 0; c < width; ++c) {
          expected[static_cast<size_t>(row * width + c)] =
              static_cast<float>(1000 * table + 100 * v + static_cast<size_t>(row)) +
              0.01f * static_cast<float>(c);
        }
      }
      EXPECT_EQ(values, expected) << test_case.name << " " << config.name << "/" << name;
    }
  }
}

TEST(PartAccessTest, PartsAreTheTablesRowsAndColumnsInEveryPlacement) {
  const std::vector<Case> cases = {
      {"whole", 1, std::nullopt},
      {"rows3_in1", 1, PlacementOptions{.num_shards = 3, .strategy = ShardingStrategy::kRowWise}},
      {"rows3_on2", 2, PlacementOptions{.num_shards = 3, .strategy = ShardingStrategy::kRowWise}},
      {"columns2_on2", 2,
       PlacementOptions{.num_shards = 2,
                        .strategy = ShardingStrategy::kColumnWise,
                        .table_strategies = {{"b", ShardingStrategy::kTableWise}}}},
      {"tables2_on2", 2,
       PlacementOptions{.num_shards = 2, .strategy = ShardingStrategy::kTableWise}},
      {"replicated_on2", 2,
       PlacementOptions{.num_shards = 2, .strategy = ShardingStrategy::kReplicated}},
  };
  for (const Case& test_case : cases) {
    SCOPED_TRACE(test_case.name);
    if (test_case.ranks == 1) {
      check_rank(test_case, nullptr);
      continue;
    }
    std::vector<std::shared_ptr<Communicator>> communicators =
        in_process_communicators(test_case.ranks);
    std::vector<std::thread> threads;
    for (int r = 0; r < test_case.ranks; ++r) {
      threads.emplace_back(
          [&, r] { check_rank(test_case, communicators[static_cast<size_t>(r)]); });
    }
    for (std::thread& thread : threads) thread.join();
  }
}

}  // namespace
}  // namespace recemb::internal
