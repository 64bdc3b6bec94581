#include "checkpoint/dynamic_checkpoint.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <numeric>
#include <span>
#include <tuple>
#include <utility>

#include "recemb/checkpoint.h"
#include "recemb/error.h"

#include "checkpoint/data_file.h"
#include "checkpoint/layout.h"
#include "checkpoint/part_io.h"
#include "placement/partition.h"
#include "storage/key_index.h"
#include "support/file_io.h"
#include "util/check.h"

namespace recemb::internal {
namespace {

namespace fs = std::filesystem;

// Bytes of rows gathered (or read) per positioned write (read): large enough for sequential disk
// speed, small next to the tables.
constexpr int64_t kChunkBytes = int64_t{4} << 20;
constexpr auto kInt64Bytes = static_cast<uint64_t>(sizeof(int64_t));

// The order of keys in the files.
std::tuple<uint64_t, int64_t> file_order(int64_t key) { return {key_bucket(key), key}; }

void write_int64s(const fs::path& path, int64_t offset, std::span<const int64_t> values) {
  const std::unique_ptr<support::WritableFile> file = support::file_system().open_for_writing(path);
  if (!values.empty()) {
    file->write_at(static_cast<uint64_t>(offset) * kInt64Bytes, std::as_bytes(values));
  }
  file->sync();
  file->close();
}

std::vector<int64_t> read_int64s(const support::InputFile& file, int64_t first, int64_t count) {
  std::vector<int64_t> values(static_cast<size_t>(count));
  if (count > 0) {
    file.read_at(static_cast<uint64_t>(first) * kInt64Bytes,
                 std::as_writable_bytes(std::span(values)));
  }
  return values;
}

// The file of `table`'s dynamic array `array`.
support::InputFile open_array(const fs::path& directory, const TableEntry& table,
                              DynamicArray array) {
  return support::InputFile::open(directory / table.dynamic->arrays[array].data.file);
}

// The first index in [0, size) of the keys file whose key belongs to a part >= `part` of
// `num_parts` (the keys being in file order, key_part is non-decreasing along the file).
int64_t first_key_of_part(const support::InputFile& keys, int64_t size, size_t part,
                          int64_t num_parts) {
  int64_t low = 0;
  int64_t high = size;
  while (low < high) {
    const int64_t middle = low + (high - low) / 2;
    if (key_part(read_int64s(keys, middle, 1)[0], num_parts) < part) {
      low = middle + 1;
    } else {
      high = middle;
    }
  }
  return low;
}

// The range [first, end) of `keys` (a file of `size` keys) that `part` holds.
std::pair<int64_t, int64_t> part_range(const support::InputFile& keys, int64_t size,
                                       const TablePart& part) {
  if (part.strategy != ShardingStrategy::kRowWise) return {0, size};
  return {first_key_of_part(keys, size, part.index_in_table, part.row_stride),
          first_key_of_part(keys, size, part.index_in_table + 1, part.row_stride)};
}

// "checkpoint file '<path>' (table '<name>' array '<array>') is damaged: ".
std::string damaged(const support::InputFile& file, const TableEntry& table, DynamicArray array) {
  return "checkpoint file '" + file.path().string() + "' (table '" + table.config.name +
         "' array '" + std::string(kDynamicArrayNames[array]) + "') is damaged: ";
}

// Throws DataLoss (`damage` + what) unless `keys` are in strictly increasing file order and, for
// a part split by rows, all its own.
void check_keys(std::span<const int64_t> keys, const TablePart& part, const std::string& damage) {
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i > 0 && !(file_order(keys[i - 1]) < file_order(keys[i]))) {
      throw DataLoss(damage + "key " + std::to_string(keys[i]) + " follows key " +
                     std::to_string(keys[i - 1]) + ", out of (bucket, key) order or repeated");
    }
    if (part.strategy == ShardingStrategy::kRowWise &&
        key_part(keys[i], part.row_stride) != part.index_in_table) {
      throw DataLoss(damage + "key " + std::to_string(keys[i]) + " is out of (bucket, key) order");
    }
  }
}

// Throws DataLoss (`damage` + what) unless every value is in [minimum, maximum]; `first` is the
// index of values[0] in its array.
void check_range(std::span<const int64_t> values, int64_t minimum, int64_t maximum, int64_t first,
                 const std::string& damage) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] < minimum || values[i] > maximum) {
      throw DataLoss(damage + "value " + std::to_string(values[i]) + " at index " +
                     std::to_string(first + static_cast<int64_t>(i)) + " is outside [" +
                     std::to_string(minimum) + ", " + std::to_string(maximum) + "]");
    }
  }
}

}  // namespace

bool writes_keys(const TablePart& part) {
  if (part.strategy == ShardingStrategy::kReplicated) return part.rank == 0;
  if (part.strategy == ShardingStrategy::kColumnWise) return part.index_in_table == 0;
  return true;
}

DynamicPartSize dynamic_part_size(const DynamicPart& part) {
  return {.keys = part.index().size(), .pending = part.pending().exact_size()};
}

void write_dynamic_part(const fs::path& directory, const TableEntry& table,
                        const LocalPart<const float>& local, const std::vector<bool>& writes,
                        int64_t key_offset, int64_t pending_offset) {
  RECEMB_CHECK(table.dynamic && writes.size() == local.variables.size());
  const KeyIndex& index = local.dynamic->index();
  // The part's slots in file order.
  std::vector<std::tuple<uint64_t, int64_t, int64_t>> ordered;  // bucket, key, slot
  for (const int64_t slot : index.slots_by_key()) {
    const int64_t key = index.key_of(slot);
    ordered.emplace_back(key_bucket(key), key, slot);
  }
  std::sort(ordered.begin(), ordered.end());
  const auto num_keys = static_cast<int64_t>(ordered.size());

  if (writes_keys(local.part)) {
    std::vector<int64_t> values(ordered.size());
    const auto write_array = [&](DynamicArray array, auto value_of) {
      std::transform(ordered.begin(), ordered.end(), values.begin(), value_of);
      write_int64s(directory / table.dynamic->arrays[array].data.file, key_offset, values);
    };
    write_array(kKeys, [](const auto& entry) { return std::get<1>(entry); });
    write_array(kLastSeen,
                [&index](const auto& entry) { return index.last_seen(std::get<2>(entry)); });
    write_array(kCounts, [&index](const auto& entry) { return index.count(std::get<2>(entry)); });

    std::vector<std::pair<int64_t, int64_t>> pending = local.dynamic->pending().exact_entries();
    std::sort(pending.begin(), pending.end(), [](const auto& a, const auto& b) {
      return file_order(a.first) < file_order(b.first);
    });
    values.resize(pending.size());
    std::transform(pending.begin(), pending.end(), values.begin(),
                   [](const auto& entry) { return entry.first; });
    write_int64s(directory / table.dynamic->arrays[kPendingKeys].data.file, pending_offset, values);
    std::transform(pending.begin(), pending.end(), values.begin(),
                   [](const auto& entry) { return entry.second; });
    write_int64s(directory / table.dynamic->arrays[kPendingCounts].data.file, pending_offset,
                 values);
  }

  for (size_t v = 0; v < local.variables.size(); ++v) {
    if (!writes[v]) continue;
    const PartVariable<const float>& variable = local.variables[v];
    const std::unique_ptr<support::WritableFile> file = support::file_system().open_for_writing(
        directory / table.variable(variable.name).data.file);
    const int64_t value_bytes = dtype_bytes(variable.dtype);
    const auto row_offset = [&](int64_t i) {
      return static_cast<uint64_t>(((key_offset + i) * variable.width + variable.first_column) *
                                   value_bytes);
    };
    const auto row_bytes = static_cast<size_t>(variable.columns * value_bytes);
    const auto row_of = [&](int64_t i) {
      return variable.bytes.subspan(
          static_cast<size_t>(std::get<2>(ordered[static_cast<size_t>(i)])) * row_bytes, row_bytes);
    };
    if (variable.columns == variable.width) {
      // Whole rows: gathered into chunks of consecutive file rows.
      const int64_t chunk_rows = std::max<int64_t>(1, kChunkBytes / (variable.width * value_bytes));
      std::vector<std::byte> chunk;
      for (int64_t begin = 0; begin < num_keys; begin += chunk_rows) {
        const int64_t end = std::min(num_keys, begin + chunk_rows);
        chunk.clear();
        for (int64_t i = begin; i < end; ++i) {
          const std::span<const std::byte> row = row_of(i);
          chunk.insert(chunk.end(), row.begin(), row.end());
        }
        file->write_at(row_offset(begin), chunk);
      }
    } else {
      // A column range: one write per row, as for a static table's column-wise part.
      for (int64_t i = 0; i < num_keys; ++i) file->write_at(row_offset(i), row_of(i));
    }
    file->sync();
    file->close();
  }
}

PartKeys read_part_keys(const fs::path& directory, const TableEntry& table, const TablePart& part,
                        int64_t step, const std::string& prefix) {
  RECEMB_CHECK(table.dynamic);
  const DynamicEntry& dynamic = *table.dynamic;
  const support::InputFile keys_file = open_array(directory, table, kKeys);
  const auto [first, end] = part_range(keys_file, dynamic.num_keys(), part);
  if (end - first > part.rows) {
    const DynamicVocabulary& vocabulary = *table.config.dynamic_vocabulary;
    throw InvalidArgument(
        prefix + "table '" + table.config.name + "': " + std::to_string(end - first) +
        " of the checkpoint's " + std::to_string(dynamic.num_keys()) +
        " keys belong to a part that holds at most " + std::to_string(part.rows) +
        " (the embedding's dynamic_vocabulary.capacity, over its parts; the checkpoint's "
        "capacity was " +
        std::to_string(vocabulary.capacity) +
        "); raise the capacity or split the table over "
        "more parts");
  }
  PartKeys keys{.first = first, .keys = read_int64s(keys_file, first, end - first)};
  check_keys(keys.keys, part, damaged(keys_file, table, kKeys));
  const support::InputFile last_seen_file = open_array(directory, table, kLastSeen);
  keys.last_seen = read_int64s(last_seen_file, first, end - first);
  // A key is last seen by a training lookup for step `step` + 1 at the latest.
  check_range(keys.last_seen, std::numeric_limits<int64_t>::min(), step + 1, first,
              damaged(last_seen_file, table, kLastSeen));
  const support::InputFile counts_file = open_array(directory, table, kCounts);
  keys.counts = read_int64s(counts_file, first, end - first);
  check_range(keys.counts, 0, std::numeric_limits<int64_t>::max(), first,
              damaged(counts_file, table, kCounts));

  const support::InputFile pending_keys_file = open_array(directory, table, kPendingKeys);
  const auto [pending_first, pending_end] =
      part_range(pending_keys_file, dynamic.num_pending(), part);
  keys.pending_keys = read_int64s(pending_keys_file, pending_first, pending_end - pending_first);
  check_keys(keys.pending_keys, part, damaged(pending_keys_file, table, kPendingKeys));
  const support::InputFile pending_counts_file = open_array(directory, table, kPendingCounts);
  keys.pending_counts =
      read_int64s(pending_counts_file, pending_first, pending_end - pending_first);
  check_range(keys.pending_counts, 1, std::numeric_limits<int64_t>::max(), pending_first,
              damaged(pending_counts_file, table, kPendingCounts));
  return keys;
}

void load_dynamic_part(const fs::path& directory, const TableEntry& table,
                       const LocalPart<float>& local, const PartKeys& keys) {
  RECEMB_CHECK(table.dynamic && local.dynamic != nullptr);
  const bool with_counters =
      local.part.strategy != ShardingStrategy::kRowWise || local.part.index_in_table == 0;
  std::vector<int64_t> slots(keys.keys.size());
  local.dynamic->restore(keys.keys, keys.last_seen, keys.counts, keys.pending_keys,
                         keys.pending_counts,
                         with_counters ? table.dynamic->counters : VocabularyCounters{}, slots);

  const auto num_keys = static_cast<int64_t>(keys.keys.size());
  for (const PartVariable<float>& variable : local.variables) {
    const ArrayEntry& saved = table.variable(variable.name);
    const support::InputFile file = support::InputFile::open(directory / saved.data.file);
    // Another type than the part's only with RestoreOptions::convert_dtype (converted to nearest).
    const DType file_dtype = value_dtype(saved.dtype);
    const int64_t file_value_bytes = dtype_bytes(file_dtype);
    const int64_t row_bytes = variable.columns * dtype_bytes(variable.dtype);
    const int64_t chunk_rows =
        std::max<int64_t>(1, kChunkBytes / (variable.width * file_value_bytes));
    std::vector<std::byte> chunk;
    std::vector<float> scratch(static_cast<size_t>(variable.columns));
    for (int64_t begin = 0; begin < num_keys; begin += chunk_rows) {
      const int64_t end = std::min(num_keys, begin + chunk_rows);
      chunk.resize(static_cast<size_t>((end - begin) * variable.width * file_value_bytes));
      file.read_at(static_cast<uint64_t>((keys.first + begin) * variable.width * file_value_bytes),
                   chunk);
      for (int64_t i = begin; i < end; ++i) {
        convert_values(file_dtype,
                       chunk.data() + ((i - begin) * variable.width + variable.first_column) *
                                          file_value_bytes,
                       variable.dtype,
                       variable.bytes.data() + slots[static_cast<size_t>(i)] * row_bytes,
                       variable.columns, scratch.data());
      }
    }
  }
}

}  // namespace recemb::internal

namespace recemb {

DynamicTableContents read_static_table_as_dynamic(const std::filesystem::path& checkpoint,
                                                  std::string_view table) {
  const std::filesystem::path directory = internal::resolve_checkpoint(checkpoint);
  const internal::Manifest manifest = internal::read_manifest(directory).manifest;
  const std::string owner =
      "checkpoint '" + directory.string() + "': table '" + std::string(table) + "'";
  const auto found =
      std::find_if(manifest.tables.begin(), manifest.tables.end(),
                   [&](const internal::TableEntry& entry) { return entry.config.name == table; });
  if (found == manifest.tables.end()) {
    throw InvalidArgument(owner + ": not in the checkpoint");
  }
  if (found->dynamic) {
    throw InvalidArgument(owner + " is dynamic already: restore it with restore_checkpoint");
  }
  const int64_t rows = found->config.vocabulary_size;
  DynamicTableContents contents;
  contents.keys.resize(static_cast<size_t>(rows));
  std::iota(contents.keys.begin(), contents.keys.end(), int64_t{0});
  std::vector<std::byte> scratch;
  for (const internal::ArrayEntry& variable : found->variables) {
    std::vector<float> values(variable.data.bytes / sizeof(float));
    internal::read_data_file(support::InputFile::open(directory / variable.data.file),
                             variable.data, manifest.checksum_block_bytes,
                             "table '" + std::string(table) + "' variable '" + variable.name + "'",
                             std::as_writable_bytes(std::span(values)), scratch);
    if (variable.name == "parameters") {
      contents.parameters = std::move(values);
    } else {
      contents.slots.emplace_back(variable.name, std::move(values));
    }
  }
  return contents;
}

}  // namespace recemb
