// A Placement made concrete for a group of ranks: which parts of which table each rank holds, where
// a table's id goes, and the order of the sections of every exchange between ranks.
//
// Shard s lives on rank s % world_size. A replicated table has one copy per rank (in one process,
// one copy: the copies of the placement's shards would all be identical and live in the same
// memory).
//
// Sections. Every message from one rank to rank q is a list of sections, one per (part held by q,
// feature of that part's table), parts in q's part order, features in feature order. The section
// list is the same whoever sends, so sender and receiver agree on it without exchanging it.
#ifndef RECEMB_PLACEMENT_PARTITION_H_
#define RECEMB_PLACEMENT_PARTITION_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "recemb/config.h"
#include "recemb/placement.h"

#include "util/key_hash.h"

namespace recemb::internal {

// One part of a table, held by one rank.
struct TablePart {
  size_t table = 0;
  ShardingStrategy strategy = ShardingStrategy::kTableWise;  // never kAuto
  int shard = 0;  // the placement's shard; kReplicated: the rank
  int rank = 0;
  size_t index_on_rank = 0;   // position in rank_parts(rank)
  size_t index_in_table = 0;  // position in table_parts(table)
  int64_t rows = 0;           // rows held: all, or for kRowWise those with r % row_stride == shard
  int64_t row_stride = 1;     // kRowWise: K; else 1
  int64_t first_column = 0;
  int64_t num_columns = 0;
  // Whether the part holds the whole table (all rows and columns): table-wise and replicated
  // parts, and the one part of a row-wise or column-wise plan that has a single part.
  bool whole = false;
  // A dynamic table's part: its ids are keys, routed by key_part (kRowWise), and `rows` is the
  // number of keys it holds at most.
  bool keyed = false;
  // The table row of local row `local`.
  int64_t global_row(int64_t local) const {
    return strategy == ShardingStrategy::kRowWise ? local * row_stride + shard : local;
  }
};

// Where a dynamic table split by rows into `num_parts` parts keeps `key`: the key's bucket (one of
// 2^kKeyBucketBits, from a hash of the key) and the part owning the bucket's range. Resharding
// moves whole buckets. The hash is fixed: checkpoints hold keys, not buckets, but a changed hash
// would move every key.
inline constexpr int kKeyBucketBits = 20;
inline uint64_t key_bucket(int64_t key) {
  // The key xor a constant, mixed: the bucket's bits are unrelated to those of the parts' hash
  // indexes (which mix the plain key).
  return mix_key(key ^ 0x2545f4914f6cdd1dLL) >> (64 - kKeyBucketBits);
}
inline size_t key_part(int64_t key, int64_t num_parts) {
  return static_cast<size_t>((key_bucket(key) * static_cast<uint64_t>(num_parts)) >>
                             kKeyBucketBits);
}

struct Section {
  size_t part = 0;     // index into rank_parts(rank)
  size_t feature = 0;  // index into the features
};

class Partition {
 public:
  // `placement` must be plan_placement's result for `tables` (one TablePlacement per table, in
  // order); world_size >= 1.
  Partition(const Placement& placement, const std::vector<TableConfig>& tables,
            const std::vector<FeatureConfig>& features, int world_size);

  int world_size() const { return world_size_; }

  // The parts of table t: in shard order; kReplicated: one per rank, in rank order.
  std::span<const TablePart> table_parts(size_t table) const { return by_table_[table]; }
  // The parts rank q holds, in (table, shard) order.
  std::span<const TablePart> rank_parts(int rank) const {
    return by_rank_[static_cast<size_t>(rank)];
  }
  // The sections of every message to rank q, and the index in it of (part, feature).
  std::span<const Section> sections(int rank) const { return sections_[static_cast<size_t>(rank)]; }
  size_t section_index(const TablePart& part, size_t feature) const;

 private:
  int world_size_;
  std::vector<std::vector<TablePart>> by_table_;
  std::vector<std::vector<TablePart>> by_rank_;
  std::vector<std::vector<Section>> sections_;
  // first_section_[rank][part index]: the index of the part's first section; its features' sections
  // follow in feature order.
  std::vector<std::vector<size_t>> first_section_;
  std::vector<std::vector<size_t>> table_features_;  // table -> features, in order
  std::vector<size_t> position_in_table_;            // feature -> position in table_features_
};

}  // namespace recemb::internal

#endif  // RECEMB_PLACEMENT_PARTITION_H_
