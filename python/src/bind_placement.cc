// recemb/placement.h. PlacementOptions is a config (constructor with the C++ defaults, read-write
// fields); the plan types (TableShard, TablePlacement, ShardSummary, Placement) come out of
// plan_placement and Embedding.placement() and have read-only fields. str(placement) is
// format_placement(placement).
#include "recemb/placement.h"

#include "bind.h"

namespace recemb::python {

void bind_placement(py::module_& module) {
  py::enum_<ShardingStrategy>(module, "ShardingStrategy",
                              "How one table is split over the shards: kAuto (the planner "
                              "decides), kTableWise, kRowWise (row r on shard r % K), "
                              "kColumnWise, kReplicated.")
      .value("kAuto", ShardingStrategy::kAuto)
      .value("kTableWise", ShardingStrategy::kTableWise)
      .value("kRowWise", ShardingStrategy::kRowWise)
      .value("kColumnWise", ShardingStrategy::kColumnWise)
      .value("kReplicated", ShardingStrategy::kReplicated);
  module.def("sharding_strategy_name", &sharding_strategy_name, py::arg("strategy"),
             "'auto', 'table_wise', 'row_wise', 'column_wise' or 'replicated'.");
  module.def("parse_sharding_strategy", &parse_sharding_strategy, py::arg("name"),
             "The inverse of sharding_strategy_name; anything else raises InvalidArgument "
             "listing the valid names.");

  py::class_<PlacementOptions> options(module, "PlacementOptions");
  bind_fields(options, Field{"num_shards", &PlacementOptions::num_shards},
              Field{"strategy", &PlacementOptions::strategy},
              Field{"table_strategies", &PlacementOptions::table_strategies},
              Field{"expected_lookups", &PlacementOptions::expected_lookups});

  py::class_<TableShard>(module, "TableShard",
                         "The part of one table one shard holds: rows x [first_column, "
                         "first_column + num_columns).")
      .def_readonly("shard", &TableShard::shard)
      .def_readonly("rows", &TableShard::rows)
      .def_readonly("first_column", &TableShard::first_column)
      .def_readonly("num_columns", &TableShard::num_columns)
      .def_readonly("bytes", &TableShard::bytes)
      .def_readonly("expected_lookups", &TableShard::expected_lookups);

  py::class_<TablePlacement>(module, "TablePlacement",
                             "One table's strategy (never kAuto) and the shards holding part of "
                             "it, in increasing shard order.")
      .def_readonly("table", &TablePlacement::table)
      .def_readonly("strategy", &TablePlacement::strategy)
      .def_readonly("shards", &TablePlacement::shards);

  py::class_<ShardSummary>(module, "ShardSummary", "The totals of one shard.")
      .def_readonly("shard", &ShardSummary::shard)
      .def_readonly("num_tables", &ShardSummary::num_tables)
      .def_readonly("rows", &ShardSummary::rows)
      .def_readonly("bytes", &ShardSummary::bytes)
      .def_readonly("expected_lookups", &ShardSummary::expected_lookups);

  py::class_<Placement>(module, "Placement",
                        "A plan: one TablePlacement per table (in their order) and one "
                        "ShardSummary per shard. str() is format_placement().")
      .def_readonly("num_shards", &Placement::num_shards)
      .def_readonly("tables", &Placement::tables)
      .def_readonly("shards", &Placement::shards)
      .def("__str__", &format_placement);

  module.def("plan_placement", &plan_placement, py::arg("tables"), py::arg("features"),
             py::arg("global_optimizer"), py::arg("options"),
             "Plans the placement of `tables` over options.num_shards shards (deterministic). "
             "Raises InvalidArgument naming the item and value for invalid configs or options.");
  module.def("format_placement", &format_placement, py::arg("placement"),
             "The plan as text: one line per shard and a total, then one line per TableShard.");
}

}  // namespace recemb::python
