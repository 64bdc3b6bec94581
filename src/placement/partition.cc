#include "placement/partition.h"

#include "config/validate.h"
#include "util/check.h"

namespace recemb::internal {

Partition::Partition(const Placement& placement, const std::vector<TableConfig>& tables,
                     const std::vector<FeatureConfig>& features, int world_size)
    : world_size_(world_size),
      by_table_(tables.size()),
      by_rank_(static_cast<size_t>(world_size)),
      sections_(static_cast<size_t>(world_size)),
      first_section_(static_cast<size_t>(world_size)),
      table_features_(tables.size()) {
  RECEMB_CHECK(world_size >= 1 && placement.tables.size() == tables.size());
  for (size_t f = 0; f < features.size(); ++f) {
    for (size_t t = 0; t < tables.size(); ++t) {
      if (tables[t].name == features[f].table) {
        position_in_table_.push_back(table_features_[t].size());
        table_features_[t].push_back(f);
      }
    }
  }
  for (size_t t = 0; t < tables.size(); ++t) {
    const TablePlacement& plan = placement.tables[t];
    auto add = [&](TablePart part) {
      part.whole = part.rows == table_rows(tables[t]) && part.num_columns == tables[t].dim;
      part.keyed = tables[t].dynamic_vocabulary.has_value();
      std::vector<TablePart>& on_rank = by_rank_[static_cast<size_t>(part.rank)];
      part.index_on_rank = on_rank.size();
      part.index_in_table = by_table_[t].size();
      on_rank.push_back(part);
      by_table_[t].push_back(part);
    };
    if (plan.strategy == ShardingStrategy::kReplicated) {
      for (int rank = 0; rank < world_size; ++rank) {
        add({.table = t,
             .strategy = plan.strategy,
             .shard = rank,
             .rank = rank,
             .rows = table_rows(tables[t]),
             .num_columns = tables[t].dim});
      }
      continue;
    }
    for (const TableShard& shard : plan.shards) {
      add({.table = t,
           .strategy = plan.strategy,
           .shard = shard.shard,
           .rank = shard.shard % world_size,
           .rows = shard.rows,
           .row_stride = plan.strategy == ShardingStrategy::kRowWise ? placement.num_shards : 1,
           .first_column = shard.first_column,
           .num_columns = shard.num_columns});
    }
  }
  for (int rank = 0; rank < world_size; ++rank) {
    const auto r = static_cast<size_t>(rank);
    for (size_t p = 0; p < by_rank_[r].size(); ++p) {
      first_section_[r].push_back(sections_[r].size());
      for (const size_t f : table_features_[by_rank_[r][p].table]) {
        sections_[r].push_back({.part = p, .feature = f});
      }
    }
  }
}

size_t Partition::section_index(const TablePart& part, size_t feature) const {
  return first_section_[static_cast<size_t>(part.rank)][part.index_on_rank] +
         position_in_table_[feature];
}

}  // namespace recemb::internal
