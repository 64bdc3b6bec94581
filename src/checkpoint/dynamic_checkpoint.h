// The keys of dynamic tables in checkpoints (docs/formats.md, "Dynamic tables"): writing a part's
// keys, counts and rows at their places in the files, and reading back the keys a part of any
// placement owns.
//
// A dynamic table of n keys is saved as its variables [n, width] (checkpoint/manifest.h,
// TableEntry) and its key arrays (DynamicArray), every array in the same order of keys: by
// (key_bucket(key), key) (placement/partition.h). A part of a table split by rows owns a range of
// buckets, hence one contiguous range of every array, whatever the number of parts: each rank
// writes and reads only its parts' ranges, at their offsets, as for static tables
// (checkpoint/part_io.h), and a restore into another placement finds each part's range by binary
// search on the keys.
#ifndef RECEMB_CHECKPOINT_DYNAMIC_CHECKPOINT_H_
#define RECEMB_CHECKPOINT_DYNAMIC_CHECKPOINT_H_

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "embedding/parts.h"

namespace recemb::internal {

// Whether this rank writes the key arrays of `part` (a dynamic table's): each row-wise part its
// own keys, a table-wise part its table's, and of the parts that all hold every key, one: rank
// 0's copy of a replicated table, the first part of a column-wise one.
bool writes_keys(const TablePart& part);

// How many keys and exactly counted pending keys `part` (with writes_keys) writes.
struct DynamicPartSize {
  int64_t keys = 0;
  int64_t pending = 0;
};
DynamicPartSize dynamic_part_size(const DynamicPart& part);

// Writes `local` (a dynamic table's part, table index `table` of the manifest) into the existing
// files of `directory`: if writes_keys, its key arrays at [key_offset, key_offset + keys) and
// [pending_offset, pending_offset + pending); and each of its variables for which `writes`
// holds, its columns of its keys' rows at rows [key_offset, key_offset + keys). Each file is
// fsynced and closed. std::system_error on I/O failure.
void write_dynamic_part(const std::filesystem::path& directory, const TableEntry& table,
                        const LocalPart<const float>& local, const std::vector<bool>& writes,
                        int64_t key_offset, int64_t pending_offset);

// A part's share of a dynamic table's checkpoint: the keys in its bucket range (all of them for a
// part not split by rows) with their last_seen and counts, and its pending counts.
struct PartKeys {
  int64_t first = 0;  // the index of keys[0] in the table's arrays
  std::vector<int64_t> keys;
  std::vector<int64_t> last_seen;
  std::vector<int64_t> counts;
  std::vector<int64_t> pending_keys;
  std::vector<int64_t> pending_counts;
};

// Reads the share of `part` from the verified key arrays of `table` in `directory`. Throws
// InvalidArgument (starting with `prefix`, naming the table) when the part holds fewer keys than
// its share, DataLoss when the arrays are not in (bucket, key) order without repeats, or hold a
// negative count or a last_seen after `step` + 1 (the lookup step of the next training lookup).
PartKeys read_part_keys(const std::filesystem::path& directory, const TableEntry& table,
                        const TablePart& part, int64_t step, const std::string& prefix);

// Replaces the keys of `local` (a dynamic table's part) by `keys`: clears its index, inserts every
// key with its last_seen and count, puts back the pending counts, reads the keys' rows of every
// variable from `table`'s files in `directory` into their slots, and sets the part's counters: the
// table's totals in every part holding all keys and in the first part of a table split by rows
// (vocabulary_stats sums the parts holding keys), zero in the other parts.
// std::system_error or DataLoss (a file changed since it was verified) on I/O failure.
void load_dynamic_part(const std::filesystem::path& directory, const TableEntry& table,
                       const LocalPart<float>& local, const PartKeys& keys);

}  // namespace recemb::internal

#endif  // RECEMB_CHECKPOINT_DYNAMIC_CHECKPOINT_H_
