// The whole-table calls of dynamic tables (recemb/embedding.h): stats, read and write, over the
// parts this rank holds.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "recemb/embedding.h"
#include "recemb/error.h"

#include "embedding/embedding_impl.h"
#include "optimizers/slot_spec.h"

namespace recemb {
namespace {

using internal::TablePart;
using internal::TableState;
using internal::TableStorage;

// The states of dynamic table `t` this rank holds, checking that they are all of its parts.
std::vector<TableState*> dynamic_states(internal::Model& model, size_t t, int rank,
                                        std::string_view call) {
  const TableConfig& table = model.tables[t];
  if (!table.dynamic_vocabulary) {
    throw FailedPrecondition("table '" + table.name + "' is static: " + std::string(call) +
                             " takes a dynamic table (one with a DynamicVocabulary)");
  }
  std::vector<TableState*> states;
  bool all_here = true;
  for (const TablePart& part : model.partition.table_parts(t)) {
    if (part.strategy == ShardingStrategy::kReplicated && part.rank != rank) continue;
    if (part.rank != rank) {
      all_here = false;
      continue;
    }
    states.push_back(&model.states[part.index_on_rank]);
  }
  if (!all_here) {
    throw FailedPrecondition("table '" + table.name + "': " + std::string(call) +
                             " needs every part of the table on this rank; it is split over " +
                             "ranks (placement: " +
                             std::string(sharding_strategy_name(model.placement.tables[t].strategy)) +
                             ")");
  }
  return states;
}

// Whether `state` holds the keys of its part (its first columns: column-wise parts share them).
bool holds_keys(const TableState& state) { return state.part().first_column == 0; }

}  // namespace

VocabularyStats Embedding::vocabulary_stats(std::string_view table) const {
  impl_->execution.join_prefetch();
  internal::Model& model = impl_->model;
  VocabularyStats stats;
  for (const TableState* state :
       dynamic_states(model, model.table_index(table), impl_->rank(), "vocabulary_stats")) {
    if (!holds_keys(*state)) continue;
    const internal::VocabularyCounters& counters = state->dynamic()->counters();
    stats.size += state->dynamic()->index().size();
    stats.inserted += counters.inserted;
    stats.evicted += counters.evicted;
    stats.not_admitted_lookups += counters.not_admitted_lookups;
  }
  return stats;
}

DynamicTableContents Embedding::read_dynamic_table(std::string_view table) const {
  impl_->execution.join_prefetch();
  internal::Model& model = impl_->model;
  const size_t t = model.table_index(table);
  const std::vector<TableState*> states =
      dynamic_states(model, t, impl_->rank(), "read_dynamic_table");
  const int64_t dim = model.tables[t].dim;
  DynamicTableContents contents;
  for (const TableState* state : states) {
    if (!holds_keys(*state)) continue;
    const internal::KeyIndex& index = state->dynamic()->index();
    for (const int64_t slot : index.slots_by_key()) contents.keys.push_back(index.key_of(slot));
  }
  std::sort(contents.keys.begin(), contents.keys.end());
  const auto n = static_cast<int64_t>(contents.keys.size());
  contents.parameters.resize(static_cast<size_t>(n * dim));
  const std::vector<std::string> names = model.variable_names(table);
  for (size_t v = 1; v < names.size(); ++v) {
    const int64_t width = model.variable_width(table, names[v]);
    contents.slots.emplace_back(names[v], std::vector<float>(static_cast<size_t>(n * width)));
  }
  // Every part writes its columns of its keys' rows (row-wise parts hold disjoint keys; the
  // column ranges of a column-wise table hold the same keys).
  for (const TableState* state : states) {
    const internal::KeyIndex& index = state->dynamic()->index();
    const TableStorage& storage = state->storage();
    const int64_t first = state->part().first_column;
    const int64_t columns = state->columns();
    for (const int64_t slot : index.slots_by_key()) {
      const int64_t at = std::lower_bound(contents.keys.begin(), contents.keys.end(),
                                          index.key_of(slot)) -
                         contents.keys.begin();
      std::copy_n(storage.row(slot), columns, contents.parameters.data() + at * dim + first);
      for (size_t v = 1; v < names.size(); ++v) {
        const int64_t width = storage.variable_width(names[v]);
        // A full-width slot is split like the parameters; a row-wise one is whole in every part.
        const int64_t whole_width = model.variable_width(table, names[v]);
        const int64_t offset = whole_width == dim ? first : 0;
        std::copy_n(storage.variable(names[v])->data() + slot * width, width,
                    contents.slots[v - 1].second.data() + at * whole_width + offset);
      }
    }
  }
  return contents;
}

void Embedding::write_dynamic_table(std::string_view table, const DynamicTableContents& contents) {
  impl_->execution.join_prefetch();
  internal::Model& model = impl_->model;
  const size_t t = model.table_index(table);
  const std::vector<TableState*> states =
      dynamic_states(model, t, impl_->rank(), "write_dynamic_table");
  const TableConfig& config = model.tables[t];
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
    const auto bad = std::find_if(values.begin(), values.end(),
                                  [](float value) { return !std::isfinite(value); });
    if (bad != values.end()) {
      throw InvalidArgument(owner + ": '" + std::string(name) + "' value " +
                            std::to_string(*bad) + " at index " +
                            std::to_string(bad - values.begin()) + " is not finite");
    }
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
  for (const TableState* state : states) {
    const TablePart& part = state->part();
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
  if (impl_->pending_lookups->oldest() != std::numeric_limits<int64_t>::max()) {
    throw FailedPrecondition(owner +
                             ": a training lookup is not applied yet (its keys have slots); "
                             "apply it first");
  }
  // Validated: replace every part's keys.
  const int64_t dim = config.dim;
  for (TableState* state : states) {
    const TablePart& part = state->part();
    internal::DynamicPart& dynamic = *state->dynamic();
    internal::KeyIndex& index = dynamic.index();
    for (const int64_t slot : index.slots_by_key()) index.erase(slot);
    TableStorage& storage = state->storage();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t key = contents.keys[static_cast<size_t>(i)];
      if (part.strategy == ShardingStrategy::kRowWise &&
          internal::key_part(key, part.row_stride) != part.index_in_table) {
        continue;
      }
      index.forget_pending(key);
      const int64_t slot = index.insert(key, model.step, 1);
      std::copy_n(contents.parameters.data() + i * dim + part.first_column, state->columns(),
                  storage.row(slot));
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
