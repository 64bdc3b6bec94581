// The whole-table calls of dynamic tables (recemb/embedding.h): stats, read and write, over the
// parts this rank holds.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "recemb/embedding.h"
#include "recemb/error.h"

#include "embedding/embedding_impl.h"
#include "format/checksum.h"
#include "optimizers/slot_spec.h"
#include "support/collectives.h"

namespace recemb {
namespace {

using internal::TablePart;
using internal::TableState;
using internal::TableStorage;

void check_dynamic(const TableConfig& table, std::string_view call) {
  if (!table.dynamic_vocabulary) {
    throw FailedPrecondition("table '" + table.name + "' is static: " + std::string(call) +
                             " takes a dynamic table (one with a DynamicVocabulary)");
  }
}

// Whether a part's keys and counters count once for the table: the first column range of each
// bucket range (column-wise parts share their keys), and one copy of a replicated table.
bool counts_keys(const TablePart& part) {
  return part.first_column == 0 &&
         (part.strategy != ShardingStrategy::kReplicated || part.rank == 0);
}

// One part's keys and values, as every rank sees them after the gather.
struct PartContents {
  int64_t first_column = 0;
  int64_t columns = 0;
  bool counts_keys = false;
  internal::VocabularyCounters counters;
  int64_t size = 0;                       // keys held
  std::vector<int64_t> keys;              // when gathered with contents
  std::vector<float> parameters;          // [keys, columns]
  std::vector<std::vector<float>> slots;  // per slot: [keys, the part's width]
  std::vector<int64_t> slot_widths;
};

template <class T>
void append(std::vector<std::byte>& out, const T* values, size_t count) {
  const auto* bytes = reinterpret_cast<const std::byte*>(values);
  out.insert(out.end(), bytes, bytes + count * sizeof(T));
}

template <class T>
void take(std::span<const std::byte>& in, T* values, size_t count) {
  if (count > 0) std::memcpy(values, in.data(), count * sizeof(T));  // values may be null then
  in = in.subspan(count * sizeof(T));
}

// A part's counters and key count, and with `with_contents` its keys, rows and slots.
void serialize(const TableState& state, bool with_contents, std::vector<std::byte>& out) {
  const internal::KeyIndex& index = state.dynamic()->index();
  const std::vector<int64_t> slots = with_contents ? index.slots_by_key() : std::vector<int64_t>{};
  const internal::VocabularyCounters& counters = state.dynamic()->counters();
  const TableStorage& storage = state.storage();
  const int64_t header[] = {state.part().first_column,
                            state.columns(),
                            counts_keys(state.part()) ? 1 : 0,
                            counters.inserted,
                            counters.evicted,
                            counters.not_admitted_lookups,
                            index.size(),
                            static_cast<int64_t>(slots.size()),
                            static_cast<int64_t>(storage.slot_specs().size())};
  append(out, header, std::size(header));
  for (const int64_t slot : slots) {
    const int64_t key = index.key_of(slot);
    append(out, &key, 1);
  }
  std::vector<float> row(static_cast<size_t>(state.columns()));  // a 16-bit row, decoded
  for (const int64_t slot : slots) {
    storage.read_rows(slot, 1, row.data());
    append(out, row.data(), row.size());
  }
  for (size_t v = 0; v < storage.slot_specs().size(); ++v) {
    const int64_t width = storage.slot_specs()[v].width;
    append(out, &width, 1);
    for (const int64_t slot : slots) {
      append(out, storage.slot_bases()[v] + slot * width, static_cast<size_t>(width));
    }
  }
}

PartContents deserialize(std::span<const std::byte>& in) {
  int64_t header[9];
  take(in, header, std::size(header));
  PartContents part{
      .first_column = header[0],
      .columns = header[1],
      .counts_keys = header[2] != 0,
      .counters = {.inserted = header[3], .evicted = header[4], .not_admitted_lookups = header[5]},
      .size = header[6]};
  const auto n = static_cast<size_t>(header[7]);
  part.keys.resize(n);
  take(in, part.keys.data(), n);
  part.parameters.resize(n * static_cast<size_t>(part.columns));
  take(in, part.parameters.data(), part.parameters.size());
  for (int64_t v = 0; v < header[8]; ++v) {
    int64_t width = 0;
    take(in, &width, 1);
    part.slot_widths.push_back(width);
    part.slots.emplace_back(n * static_cast<size_t>(width));
    take(in, part.slots.back().data(), part.slots.back().size());
  }
  return part;
}

// Every part of dynamic table `t` that counts, from every rank (collective with several ranks).
std::vector<PartContents> gather_parts(const internal::Model& model, Communicator& communicator,
                                       size_t t, bool with_contents) {
  std::vector<std::byte> mine;
  for (const TableState& state : model.states) {
    const TablePart& part = state.part();
    if (part.table == t && (part.strategy != ShardingStrategy::kReplicated || part.rank == 0)) {
      serialize(state, with_contents, mine);
    }
  }
  std::vector<std::byte> gathered;
  if (communicator.size() == 1) {
    gathered = std::move(mine);
  } else {
    std::vector<int64_t> counts(static_cast<size_t>(communicator.size()));
    communicator.all_gather(mine, gathered, counts);
  }
  std::vector<PartContents> parts;
  std::span<const std::byte> in(gathered);
  while (!in.empty()) parts.push_back(deserialize(in));
  return parts;
}

// The checks of write_dynamic_table, before anything changes.
void validate_contents(const internal::Model& model, size_t t, const DynamicTableContents& contents,
                       const internal::PendingLookups& pending) {
  const TableConfig& config = model.tables[t];
  const std::string& table = config.name;
  const std::string owner = "write_dynamic_table: table '" + config.name + "'";
  const auto n = static_cast<int64_t>(contents.keys.size());
  for (int64_t i = 1; i < n; ++i) {
    if (!(contents.keys[static_cast<size_t>(i - 1)] < contents.keys[static_cast<size_t>(i)])) {
      throw InvalidArgument(owner + ": keys must be strictly increasing; key " +
                            std::to_string(contents.keys[static_cast<size_t>(i)]) + " at index " +
                            std::to_string(i) + " follows " +
                            std::to_string(contents.keys[static_cast<size_t>(i - 1)]));
    }
  }
  const auto check_values = [&](std::string_view name, const std::vector<float>& values,
                                int64_t width) {
    if (std::ssize(values) != n * width) {
      throw InvalidArgument(owner + ": '" + std::string(name) + "' needs " +
                            std::to_string(n * width) + " floats (" + std::to_string(n) +
                            " keys x " + std::to_string(width) + "), got " +
                            std::to_string(values.size()));
    }
    model.check_variable_values(
        table, name, values, owner + ": '" + std::string(name) + "'", [&](int64_t row) {
          return "key " + std::to_string(contents.keys[static_cast<size_t>(row)]);
        });
  };
  check_values("parameters", contents.parameters, config.dim);
  const std::vector<std::string> names = model.variable_names(table);
  if (contents.slots.size() != names.size() - 1) {
    throw InvalidArgument(owner + ": expected " + std::to_string(names.size() - 1) +
                          " slots (the optimizer's), got " + std::to_string(contents.slots.size()));
  }
  for (size_t v = 1; v < names.size(); ++v) {
    if (contents.slots[v - 1].first != names[v]) {
      throw InvalidArgument(owner + ": slot " + std::to_string(v - 1) + " must be '" + names[v] +
                            "', got '" + contents.slots[v - 1].first + "'");
    }
    check_values(names[v], contents.slots[v - 1].second, model.variable_width(table, names[v]));
  }
  // Which part holds each key, and whether any part gets more keys than it holds.
  for (const TablePart& part : model.partition.table_parts(t)) {
    int64_t keys = 0;
    for (const int64_t key : contents.keys) {
      keys += part.strategy != ShardingStrategy::kRowWise ||
              internal::key_part(key, part.row_stride) == part.index_in_table;
    }
    if (keys > part.rows) {
      throw InvalidArgument(owner + ": " + std::to_string(keys) +
                            " keys belong to a part that holds at most " +
                            std::to_string(part.rows) + " (dynamic_vocabulary.capacity " +
                            std::to_string(config.dynamic_vocabulary->capacity) + ")");
    }
  }
  if (pending.oldest() != std::numeric_limits<int64_t>::max()) {
    throw FailedPrecondition(owner +
                             ": a training lookup is not applied yet (its keys have slots); "
                             "apply it first");
  }
}

}  // namespace

VocabularyStats Embedding::vocabulary_stats(std::string_view table) const {
  impl_->execution.prefetcher.wait();
  const internal::Model& model = impl_->model;
  const size_t t = model.table_index(table);
  support::agree(impl_->exchange.communicator(),
                 [&] { check_dynamic(model.tables[t], "vocabulary_stats"); });
  VocabularyStats stats;
  for (const PartContents& part :
       gather_parts(model, impl_->exchange.communicator(), t, /*with_contents=*/false)) {
    if (!part.counts_keys) continue;
    stats.size += part.size;
    stats.inserted += part.counters.inserted;
    stats.evicted += part.counters.evicted;
    stats.not_admitted_lookups += part.counters.not_admitted_lookups;
  }
  return stats;
}

DynamicTableContents Embedding::read_dynamic_table(std::string_view table) const {
  impl_->execution.prefetcher.wait();
  const internal::Model& model = impl_->model;
  const size_t t = model.table_index(table);
  support::agree(impl_->exchange.communicator(),
                 [&] { check_dynamic(model.tables[t], "read_dynamic_table"); });
  const std::vector<PartContents> parts =
      gather_parts(model, impl_->exchange.communicator(), t, /*with_contents=*/true);
  const int64_t dim = model.tables[t].dim;
  DynamicTableContents contents;
  for (const PartContents& part : parts) {
    if (part.counts_keys)
      contents.keys.insert(contents.keys.end(), part.keys.begin(), part.keys.end());
  }
  std::sort(contents.keys.begin(), contents.keys.end());
  const auto n = static_cast<int64_t>(contents.keys.size());
  contents.parameters.resize(static_cast<size_t>(n * dim));
  const std::vector<std::string> names = model.variable_names(table);
  std::vector<int64_t> widths;  // of the whole slot variables
  for (size_t v = 1; v < names.size(); ++v) {
    widths.push_back(model.variable_width(table, names[v]));
    contents.slots.emplace_back(names[v],
                                std::vector<float>(static_cast<size_t>(n * widths.back())));
  }
  // Every part writes its columns of its keys' rows (row-wise parts hold disjoint keys; the
  // column ranges of a column-wise table hold the same keys).
  for (const PartContents& part : parts) {
    for (size_t i = 0; i < part.keys.size(); ++i) {
      const int64_t at =
          std::lower_bound(contents.keys.begin(), contents.keys.end(), part.keys[i]) -
          contents.keys.begin();
      std::copy_n(part.parameters.data() + static_cast<int64_t>(i) * part.columns, part.columns,
                  contents.parameters.data() + at * dim + part.first_column);
      for (size_t v = 0; v < part.slots.size(); ++v) {
        // A full-width slot is split like the parameters; a row-wise one is whole in every part.
        const int64_t width = part.slot_widths[v];
        const int64_t offset = widths[v] == dim ? part.first_column : 0;
        std::copy_n(part.slots[v].data() + static_cast<int64_t>(i) * width, width,
                    contents.slots[v].second.data() + at * widths[v] + offset);
      }
    }
  }
  return contents;
}

void Embedding::write_dynamic_table(std::string_view table, const DynamicTableContents& contents) {
  impl_->execution.prefetcher.wait();
  internal::Model& model = impl_->model;
  Communicator& communicator = impl_->exchange.communicator();
  support::agree(communicator, [&] {
    check_dynamic(model.tables[model.table_index(table)], "write_dynamic_table");
    validate_contents(model, model.table_index(table), contents, *impl_->pending_lookups);
  });
  if (communicator.size() > 1) {
    // The checksum of the keys, the parameters and each slot's name and values, in turn.
    format::StreamingChecksum checksum;
    checksum.update(std::as_bytes(std::span(contents.keys)));
    checksum.update(std::as_bytes(std::span(contents.parameters)));
    for (const auto& [name, values] : contents.slots) {
      checksum.update(std::as_bytes(std::span(name)));
      checksum.update(std::as_bytes(std::span(values)));
    }
    support::agree_on_value(communicator, checksum.digest(),
                            "contents for dynamic table '" + std::string(table) + "'",
                            "write_dynamic_table takes the same contents on every rank");
  }
  // Validated: replace the keys of every part this rank holds.
  const size_t t = model.table_index(table);
  const TableConfig& config = model.tables[t];
  const int64_t n = std::ssize(contents.keys);
  const std::vector<std::string> names = model.variable_names(table);
  const int64_t dim = config.dim;
  for (TableState& state : model.states) {
    const TablePart& part = state.part();
    if (part.table != t) continue;
    // The keys this part holds (a row-wise part: those routed to it), and their indices.
    std::vector<int64_t> keys;
    std::vector<int64_t> indices;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t key = contents.keys[static_cast<size_t>(i)];
      if (part.strategy == ShardingStrategy::kRowWise &&
          internal::key_part(key, part.row_stride) != part.index_in_table) {
        continue;
      }
      keys.push_back(key);
      indices.push_back(i);
    }
    std::vector<int64_t> slots(keys.size());
    state.dynamic()->replace_keys(keys, model.step, slots);
    TableStorage& storage = state.untracked_storage();
    for (size_t k = 0; k < keys.size(); ++k) {
      const int64_t i = indices[k];
      const int64_t slot = slots[k];
      // (A 16-bit table's rounded to nearest.)
      storage.write_rows(slot, 1, contents.parameters.data() + i * dim + part.first_column);
      for (size_t v = 1; v < names.size(); ++v) {
        const int64_t width = storage.variable_width(names[v]);
        const int64_t whole_width = model.variable_width(table, names[v]);
        const int64_t offset = whole_width == dim ? part.first_column : 0;
        std::copy_n(contents.slots[v - 1].second.data() + i * whole_width + offset, width,
                    storage.variable(names[v])->data() + slot * width);
      }
    }
  }
}

}  // namespace recemb
