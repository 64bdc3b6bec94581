#include "placement/planner.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "recemb/embedding.h"
#include "recemb/error.h"
#include "recemb/placement.h"

#include "config/validate.h"
#include "optimizers/slot_spec.h"
#include "util/check.h"
#include "util/checked_math.h"
#include "util/enum_names.h"

namespace recemb {
namespace {

std::string quoted(const std::string& name) { return "'" + name + "'"; }

bool is_strategy(ShardingStrategy strategy) {
  switch (strategy) {
    case ShardingStrategy::kAuto:
    case ShardingStrategy::kTableWise:
    case ShardingStrategy::kRowWise:
    case ShardingStrategy::kColumnWise:
    case ShardingStrategy::kReplicated:
      return true;
  }
  return false;
}

void check_strategy(ShardingStrategy strategy, const std::string& owner) {
  if (!is_strategy(strategy)) {
    throw InvalidArgument(
        owner + ": not a ShardingStrategy value: " + std::to_string(static_cast<int>(strategy)));
  }
}

// The value of a byte count, which must fit in int64_t.
int64_t byte_count(std::optional<int64_t> bytes, const std::string& owner) {
  if (!bytes) throw InvalidArgument(owner + ": byte count overflows");
  return *bytes;
}

int64_t checked_add(int64_t a, int64_t b, const std::string& owner) {
  return byte_count(internal::checked_add(a, b), owner);
}

int64_t checked_multiply(int64_t a, int64_t b, const std::string& owner) {
  return byte_count(internal::checked_multiply(a, b), owner);
}

// Everything the planner needs about one table, with its bytes checked against overflow once so
// that every shard's part (never larger) and every sum below are safe.
struct TableFacts {
  int64_t rows;
  int64_t dim;
  int64_t full_width_slots;  // slots of width dim: split with the columns
  int64_t row_slots;         // floats per row in slots of width 1: held whole by every part
  double rate;               // ids per example, over the table's features
  int64_t bytes;             // of the whole table
  ShardingStrategy strategy;

  int64_t part_bytes(int64_t part_rows, int64_t columns) const {
    return 4 * part_rows * (columns * (1 + full_width_slots) + row_slots);
  }
};

std::vector<TableFacts> table_facts(const std::vector<TableConfig>& tables,
                                    const std::vector<FeatureConfig>& features,
                                    const std::optional<Optimizer>& global_optimizer,
                                    const PlacementOptions& options) {
  std::vector<TableFacts> facts;
  int64_t total_bytes = 0;
  for (const TableConfig& table : tables) {
    const std::string owner = "table " + quoted(table.name);
    TableFacts f{.rows = internal::table_rows(table),
                 .dim = table.dim,
                 .full_width_slots = 0,
                 .row_slots = 0,
                 .rate = 0.0,
                 .bytes = 0,
                 .strategy = options.strategy};
    const std::optional<Optimizer>& optimizer =
        internal::effective_optimizer(table, global_optimizer);
    if (optimizer) {
      for (const internal::SlotSpec& slot : internal::slot_specs(*optimizer, table.dim)) {
        // A width-1 slot of a dim-1 table is the same size either way.
        if (slot.width == table.dim) {
          ++f.full_width_slots;
        } else {
          f.row_slots += slot.width;
        }
      }
    }
    const int64_t floats_per_row =
        checked_add(checked_multiply(table.dim, 1 + f.full_width_slots, owner), f.row_slots, owner);
    f.bytes = checked_multiply(checked_multiply(f.rows, floats_per_row, owner), 4, owner);
    // Only a guard: no shard total, nor the sum over shards, exceeds the sum of bytes * K (a
    // replicated table counts on every shard), so every sum below stays in range.
    total_bytes =
        checked_add(total_bytes, checked_multiply(f.bytes, options.num_shards, owner), owner);
    if (const auto it = options.table_strategies.find(table.name);
        it != options.table_strategies.end()) {
      f.strategy = it->second;
    }
    // A row-wise slot is updated from the whole row's gradient (RowwiseAdagrad's mean of squares),
    // which no column range sees.
    if (f.strategy == ShardingStrategy::kColumnWise && f.row_slots > 0 && table.dim > 1) {
      throw InvalidArgument(
          owner +
          ": column_wise sharding cannot split a table whose optimizer "
          "keeps one slot value per row (RowwiseAdagrad): each column range "
          "would see only part of the row's gradient; use row_wise or table_wise");
    }
    facts.push_back(f);
  }
  for (const FeatureConfig& feature : features) {
    const auto it = options.expected_lookups.find(feature.name);
    const double rate = it == options.expected_lookups.end() ? 1.0 : it->second;
    const auto table = std::find_if(tables.begin(), tables.end(),
                                    [&](const TableConfig& t) { return t.name == feature.table; });
    facts[static_cast<size_t>(table - tables.begin())].rate += rate;
  }
  return facts;
}

void validate_options(const std::vector<TableConfig>& tables,
                      const std::vector<FeatureConfig>& features, const PlacementOptions& options) {
  if (options.num_shards < 1 || options.num_shards > kMaxNumShards) {
    throw InvalidArgument("PlacementOptions.num_shards must be in [1, " +
                          std::to_string(kMaxNumShards) + "], got " +
                          std::to_string(options.num_shards));
  }
  check_strategy(options.strategy, "PlacementOptions.strategy");
  for (const auto& [name, strategy] : options.table_strategies) {
    const std::string owner = "PlacementOptions.table_strategies[" + quoted(name) + "]";
    if (std::none_of(tables.begin(), tables.end(),
                     [&name = name](const TableConfig& t) { return t.name == name; })) {
      throw InvalidArgument(owner + ": there is no table " + quoted(name));
    }
    check_strategy(strategy, owner);
  }
  for (const auto& [name, rate] : options.expected_lookups) {
    const std::string owner = "PlacementOptions.expected_lookups[" + quoted(name) + "]";
    if (std::none_of(features.begin(), features.end(),
                     [&name = name](const FeatureConfig& f) { return f.name == name; })) {
      throw InvalidArgument(owner + ": there is no feature " + quoted(name));
    }
    if (!std::isfinite(rate) || rate < 0) {
      throw InvalidArgument(owner + ": must be finite and >= 0, got " + std::to_string(rate));
    }
  }
}

// The parts of a table that is not table-wise (whose shard the greedy pass chooses).
std::vector<TableShard> spread_parts(const TableFacts& f, int num_shards) {
  const int64_t k = num_shards;
  std::vector<TableShard> parts;
  for (int s = 0; s < num_shards; ++s) {
    TableShard part{.shard = s, .rows = f.rows, .num_columns = f.dim};
    switch (f.strategy) {
      case ShardingStrategy::kRowWise:
        part.rows = f.rows / k + (s < f.rows % k ? 1 : 0);
        part.expected_lookups =
            f.rate * static_cast<double>(part.rows) / static_cast<double>(f.rows);
        break;
      case ShardingStrategy::kColumnWise:
        part.num_columns = f.dim / k + (s < f.dim % k ? 1 : 0);
        part.first_column = s * (f.dim / k) + std::min<int64_t>(s, f.dim % k);
        part.expected_lookups = f.rate;
        break;
      case ShardingStrategy::kReplicated:
        part.expected_lookups = f.rate / static_cast<double>(k);
        break;
      case ShardingStrategy::kAuto:
      case ShardingStrategy::kTableWise:
        RECEMB_CHECK(false);
    }
    if (part.rows == 0 || part.num_columns == 0) continue;
    part.bytes = f.part_bytes(part.rows, part.num_columns);
    parts.push_back(part);
  }
  return parts;
}

}  // namespace

std::string_view sharding_strategy_name(ShardingStrategy strategy) {
  switch (strategy) {
    case ShardingStrategy::kAuto:
      return "auto";
    case ShardingStrategy::kTableWise:
      return "table_wise";
    case ShardingStrategy::kRowWise:
      return "row_wise";
    case ShardingStrategy::kColumnWise:
      return "column_wise";
    case ShardingStrategy::kReplicated:
      return "replicated";
  }
  throw InvalidArgument("not a ShardingStrategy value: " +
                        std::to_string(static_cast<int>(strategy)));
}

ShardingStrategy parse_sharding_strategy(std::string_view name) {
  constexpr ShardingStrategy kStrategies[] = {
      ShardingStrategy::kAuto, ShardingStrategy::kTableWise, ShardingStrategy::kRowWise,
      ShardingStrategy::kColumnWise, ShardingStrategy::kReplicated};
  return internal::parse_by_name(name, std::span<const ShardingStrategy>(kStrategies),
                                 sharding_strategy_name, "sharding strategy");
}

Placement plan_placement(const std::vector<TableConfig>& tables,
                         const std::vector<FeatureConfig>& features,
                         const std::optional<Optimizer>& global_optimizer,
                         const PlacementOptions& options) {
  EmbeddingOptions embedding_options;
  embedding_options.optimizer = global_optimizer;
  internal::validate_configs(tables, features, embedding_options);
  return internal::plan_valid_placement(tables, features, global_optimizer, options);
}

Placement internal::plan_valid_placement(const std::vector<TableConfig>& tables,
                                         const std::vector<FeatureConfig>& features,
                                         const std::optional<Optimizer>& global_optimizer,
                                         const PlacementOptions& options) {
  validate_options(tables, features, options);
  std::vector<TableFacts> facts = table_facts(tables, features, global_optimizer, options);

  double total_bytes = 0;
  double total_lookup_bytes = 0;
  for (const TableFacts& f : facts) {
    total_bytes += static_cast<double>(f.bytes);
    total_lookup_bytes += f.rate * static_cast<double>(f.dim) * 4;
  }
  if (!std::isfinite(total_lookup_bytes)) {
    throw InvalidArgument(
        "PlacementOptions.expected_lookups: the sum over tables of rate * dim * 4 overflows");
  }
  const double k = options.num_shards;
  for (TableFacts& f : facts) {
    if (f.strategy != ShardingStrategy::kAuto) continue;
    const bool big = static_cast<double>(f.bytes) > total_bytes / k;
    const bool hot = f.rate * static_cast<double>(f.dim) * 4 > total_lookup_bytes / k;
    f.strategy = options.num_shards > 1 && (big || hot) ? ShardingStrategy::kRowWise
                                                        : ShardingStrategy::kTableWise;
  }
  // Both terms are shares of a total, so bytes and lookups weigh equally whatever their scales.
  const auto load = [&](const TableShard& part) {
    const double lookup_share =
        total_lookup_bytes > 0
            ? part.expected_lookups * static_cast<double>(part.num_columns) * 4 / total_lookup_bytes
            : 0.0;
    return static_cast<double>(part.bytes) / total_bytes + lookup_share;
  };

  Placement plan{.num_shards = options.num_shards};
  std::vector<double> shard_load(static_cast<size_t>(options.num_shards), 0.0);
  std::vector<size_t> table_wise;
  for (size_t t = 0; t < tables.size(); ++t) {
    plan.tables.push_back({.table = tables[t].name, .strategy = facts[t].strategy});
    if (facts[t].strategy == ShardingStrategy::kTableWise) {
      table_wise.push_back(t);
      continue;
    }
    plan.tables[t].shards = spread_parts(facts[t], options.num_shards);
    for (const TableShard& part : plan.tables[t].shards) {
      shard_load[static_cast<size_t>(part.shard)] += load(part);
    }
  }
  std::vector<TableShard> whole(tables.size());
  for (const size_t t : table_wise) {
    whole[t] = {.shard = 0,
                .rows = facts[t].rows,
                .num_columns = facts[t].dim,
                .bytes = facts[t].bytes,
                .expected_lookups = facts[t].rate};
  }
  std::stable_sort(table_wise.begin(), table_wise.end(),
                   [&](size_t a, size_t b) { return load(whole[a]) > load(whole[b]); });
  for (const size_t t : table_wise) {
    const auto least = std::min_element(shard_load.begin(), shard_load.end());
    whole[t].shard = static_cast<int>(least - shard_load.begin());
    *least += load(whole[t]);
    plan.tables[t].shards = {whole[t]};
  }

  for (int s = 0; s < options.num_shards; ++s) plan.shards.push_back({.shard = s});
  for (const TablePlacement& table : plan.tables) {
    for (const TableShard& part : table.shards) {
      ShardSummary& summary = plan.shards[static_cast<size_t>(part.shard)];
      ++summary.num_tables;
      summary.rows += part.rows;
      summary.bytes += part.bytes;
      summary.expected_lookups += part.expected_lookups;
    }
  }
  return plan;
}

std::string format_placement(const Placement& placement) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(2) << std::left << std::setw(6) << "shard" << std::right
       << std::setw(8) << "tables" << std::setw(15) << "rows" << std::setw(19) << "bytes_with_slots"
       << std::setw(17) << "lookups/example"
       << "\n";
  const auto shard_line = [&](const std::string& shard, int64_t tables, const ShardSummary& s) {
    text << std::left << std::setw(6) << shard << std::right << std::setw(8) << tables
         << std::setw(15) << s.rows << std::setw(19) << s.bytes << std::setw(17)
         << s.expected_lookups << "\n";
  };
  ShardSummary total;
  for (const ShardSummary& s : placement.shards) {
    shard_line(std::to_string(s.shard), s.num_tables, s);
    total.rows += s.rows;
    total.bytes += s.bytes;
    total.expected_lookups += s.expected_lookups;
  }
  shard_line("total", static_cast<int64_t>(placement.tables.size()), total);

  text << "\n"
       << std::left << std::setw(24) << "table" << std::setw(12) << "strategy" << std::right
       << std::setw(7) << "shard" << std::setw(15) << "rows" << std::setw(15) << "columns"
       << std::setw(19) << "bytes_with_slots" << std::setw(17) << "lookups/example"
       << "\n";
  for (const TablePlacement& table : placement.tables) {
    for (const TableShard& part : table.shards) {
      // Half-open: [0,8) and [8,16) do not overlap.
      const std::string columns = "[" + std::to_string(part.first_column) + "," +
                                  std::to_string(part.first_column + part.num_columns) + ")";
      // Names longer than the column push the rest right; a space keeps the fields apart.
      text << std::left << std::setw(23) << table.table << " " << std::setw(12)
           << sharding_strategy_name(table.strategy) << std::right << std::setw(7) << part.shard
           << std::setw(15) << part.rows << std::setw(15) << columns << std::setw(19) << part.bytes
           << std::setw(17) << part.expected_lookups << "\n";
    }
  }
  return text.str();
}

}  // namespace recemb
