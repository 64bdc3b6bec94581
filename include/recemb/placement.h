// Placement: where each table of an Embedding lives when its tables are split across shards
// (threads, processes or hosts). A plan only; nothing here allocates tables or moves data.
//
//   recemb::Placement plan = recemb::plan_placement(
//       tables, features, recemb::Adagrad{},
//       {.num_shards = 4, .table_strategies = {{"user", recemb::ShardingStrategy::kReplicated}},
//        .expected_lookups = {{"watched", 20.0}}});
//   std::cout << recemb::format_placement(plan);
//
// Sizes. A table with R rows, dim D and optimizer slots holds, per row and per column it owns,
// 4 bytes for the weight and 4 bytes for every slot of width D ("accumulators", "momenta", ...),
// plus 4 bytes per row for every slot of width 1 (RowwiseAdagrad's "accumulators"):
//   bytes(rows, columns) = 4 * rows * (columns * (1 + slots of width D) + slots of width 1)
// The table's optimizer is its own, else the global one; with neither it has no slots.
//
// Expected lookups are ids per example (of the global batch) that reach a shard, from the
// per-feature rates of PlacementOptions.expected_lookups (default 1 per feature), assuming ids
// spread uniformly over a table's rows. A table's rate is the sum of its features' rates.
#ifndef RECEMB_PLACEMENT_H_
#define RECEMB_PLACEMENT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "recemb/config.h"
#include "recemb/export.h"
#include "recemb/optimizer.h"

namespace recemb {

// How one table is split over K = num_shards shards.
enum class ShardingStrategy {
  kAuto,        // the planner decides (see plan_placement)
  kTableWise,   // the whole table (all rows, all columns, its slots) on one shard
  kRowWise,     // mod sharding, as TPUs: row r on shard r % K, at local index r / K; all columns
  kColumnWise,  // all rows; columns split into K contiguous ranges, as even as possible: shard s
                // gets D / K columns, plus one if s < D % K, starting after those of shards < s
                // (a shard gets none when D < K). Not for a table whose optimizer keeps a slot of
                // width 1 per row (RowwiseAdagrad, dim > 1): its update needs the whole row.
  kReplicated,  // a full copy (rows, columns, slots) on every shard; gradients are all-reduced
};

// "auto", "table_wise", "row_wise", "column_wise" or "replicated"; InvalidArgument for a value
// that is none of the enumerators.
RECEMB_EXPORT std::string_view sharding_strategy_name(ShardingStrategy strategy);
// The inverse of sharding_strategy_name; anything else throws InvalidArgument listing the valid
// names.
RECEMB_EXPORT ShardingStrategy parse_sharding_strategy(std::string_view name);

// The most shards a plan has (PlacementOptions::num_shards, and so the most ranks sharing an
// Embedding's tables): a plan's size grows with K (every row-wise table has K parts; 65,536 shards
// of the trainer's 26 tables take 0.4 s and 170 MB), and a mistyped count must not exhaust memory.
inline constexpr int kMaxNumShards = 65536;

struct PlacementOptions {
  int num_shards = 1;  // K, in [1, kMaxNumShards]
  // The strategy of every table not named in table_strategies.
  ShardingStrategy strategy = ShardingStrategy::kAuto;
  // Per-table override, by table name; wins over `strategy`.
  std::map<std::string, ShardingStrategy> table_strategies = {};
  // Expected ids per example, by feature name: finite, >= 0. Features not named: 1.
  std::map<std::string, double> expected_lookups = {};
};

// The part of one table that one shard holds: rows x [first_column, first_column + num_columns).
// Which rows follows from the table's strategy: every row, except for kRowWise (rows r with
// r % K == shard, `rows` of them).
struct TableShard {
  int shard = 0;             // in [0, K)
  int64_t rows = 0;          // >= 1
  int64_t first_column = 0;  // 0 unless kColumnWise
  int64_t num_columns = 0;   // >= 1
  int64_t bytes = 0;         // bytes(rows, num_columns) as above, weights and slots
  // Ids per example this shard serves. kTableWise: the table's rate; kRowWise: rate * rows / table
  // rows; kColumnWise: the table's rate (each id is looked up in every column range);
  // kReplicated: rate / K (each replica serves the ids of its own share of the batch).
  double expected_lookups = 0;
};

struct TablePlacement {
  std::string table = {};                                    // TableConfig::name
  ShardingStrategy strategy = ShardingStrategy::kTableWise;  // never kAuto
  // One entry per shard that holds at least one value of the table, in increasing shard order
  // (kRowWise with fewer rows than shards, or kColumnWise with dim < K, leaves shards out).
  std::vector<TableShard> shards = {};
};

// The totals of one shard over the TableShards with that shard number.
struct ShardSummary {
  int shard = 0;
  int num_tables = 0;           // tables of which it holds a part
  int64_t rows = 0;             // sum of TableShard::rows (a column-wise slice counts its rows)
  int64_t bytes = 0;            // sum of TableShard::bytes
  double expected_lookups = 0;  // sum of TableShard::expected_lookups
};

struct Placement {
  int num_shards = 1;
  std::vector<TablePlacement> tables = {};  // one per TableConfig, in their order
  std::vector<ShardSummary> shards = {};    // num_shards entries, shards[s].shard == s
};

// Plans the placement of `tables` over options.num_shards shards. `global_optimizer` is the
// Embedding's global optimizer (EmbeddingOptions::optimizer), used for the slot bytes of tables
// without their own. Deterministic: the same arguments give the same plan.
//
// Overrides win: a table named in options.table_strategies gets that strategy, the others
// options.strategy. Then each table whose strategy is kAuto gets
//   kRowWise   when K > 1 and bytes(table) > B / K or lookup_bytes(table) > L / K,
//   kTableWise otherwise,
// where bytes(table) = bytes(R, D), lookup_bytes(table) = rate * D * 4 (activation bytes per
// example), and B, L are their sums over all tables: a table bigger or hotter than a fair share
// is spread over every shard, smaller ones stay whole (no id exchange beyond their one shard).
// The planner never picks kColumnWise or kReplicated by itself.
// Table-wise tables are placed greedily, largest load first (ties: lower table index), each on the
// shard with the least load so far (ties: lower shard), after every other table is placed, where
//   load(shard) = sum over its TableShards of bytes / B + expected_lookups * num_columns * 4 / L
// (the second term is 0 when L == 0). Hence, when every table is table-wise or row-wise (as kAuto
// chooses), max load <= mean load + the largest table-wise load + one row's load per row-wise
// table.
//
// Throws InvalidArgument, naming the item and value, when the configs are invalid for an
// Embedding (as the Embedding constructor checks them), when num_shards is not in
// [1, kMaxNumShards], a strategy is not
// a ShardingStrategy value, table_strategies names a table that does not exist, expected_lookups
// names a feature that does not exist or has a negative or non-finite rate, a table with a slot of
// width 1 (RowwiseAdagrad) and dim > 1 is column-wise, a byte count
// overflows int64_t, or L (above) is not finite.
RECEMB_EXPORT Placement plan_placement(const std::vector<TableConfig>& tables,
                                       const std::vector<FeatureConfig>& features,
                                       const std::optional<Optimizer>& global_optimizer,
                                       const PlacementOptions& options);

// The plan as text: a header line, one line per shard (shard, tables, rows, bytes with the
// optimizer slots, expected lookups), a total line ("total", number of tables, sums over
// shards); an empty line; a header line and one line per TableShard (table, strategy name,
// shard, rows, columns as the half-open range "[first,end)", bytes with slots, expected
// lookups). Fields are separated by spaces; lookups have 2 decimals.
RECEMB_EXPORT std::string format_placement(const Placement& placement);

}  // namespace recemb

#endif  // RECEMB_PLACEMENT_H_
