#include "embedding/dynamic_part.h"

#include <algorithm>
#include <bit>
#include <new>
#include <string>

#include "recemb/error.h"

#include "storage/initializer.h"
#include "util/check.h"
#include "util/checked_math.h"
#include "util/key_hash.h"

namespace recemb::internal {
namespace {

// How many keys ahead the loops over keys prefetch the index (and commit the slots).
constexpr int64_t kKeysAhead = 32;
// How many admitted keys ahead initialize_admitted prefetches their rows and slots.
constexpr int64_t kRowsAhead = 4;

EvictionOrder eviction_order(WhenFull when_full) {
  return when_full == WhenFull::kEvictLeastFrequent ? EvictionOrder::kLeastFrequent
                                                    : EvictionOrder::kLeastRecent;
}

// A 16-bit table's index keeps each slot's key for the rounding of updated rows (keyed by key:
// docs/semantics.md, "16-bit tables").
KeyIndex make_index(const TableConfig& table, int64_t capacity) {
  const std::string& table_name = table.name;
  try {
    return KeyIndex(capacity, /*keys_by_slot=*/table.dtype != DType::kFloat32);
  } catch (const std::bad_alloc&) {
    throw ResourceExhausted("table '" + table_name + "': cannot allocate the index of " +
                            std::to_string(capacity) +
                            " keys: out of memory; lower dynamic_vocabulary.capacity, or shard "
                            "the table over more processes");
  }
}

}  // namespace

DynamicPart::DynamicPart(const TableConfig& table, const TablePart& part, uint64_t table_seed)
    : table_(table),
      vocabulary_(*table.dynamic_vocabulary),
      first_column_(part.first_column),
      columns_(part.num_columns),
      table_seed_(table_seed),
      zero_row_(part.rows),
      index_(make_index(table, part.rows)),
      // Exact counts for as many keys as the part holds (at least 2^16): beyond that a sketch,
      // which may admit early, never late (docs/semantics.md).
      pending_(std::max<int64_t>(part.rows, int64_t{1} << 16)) {}

void DynamicPart::find(const KeyRun& run, int64_t first, int64_t last, int64_t absent) const {
  index_.find_all(run.keys + first, last - first, run.slots + first, absent);
}

uint32_t DynamicPart::distinct_index(int64_t key) {
  const size_t mask = distinct_positions_.size() - 1;
  for (size_t at = mix_key(key) & mask;; at = (at + 1) & mask) {
    const uint32_t entry = distinct_positions_[at];
    if (entry == 0) {
      distinct_.push_back(
          {.key = key, .occurrences = 0, .slot = KeyIndex::kAbsent, .admitted = false});
      distinct_positions_[at] = static_cast<uint32_t>(distinct_.size());
      return static_cast<uint32_t>(distinct_.size() - 1);
    }
    if (distinct_[entry - 1].key == key) return entry - 1;
  }
}

int64_t DynamicPart::mark_present(std::span<const KeyRun> runs, bool mark) {
  if (in_lookup_.size() < static_cast<size_t>(index_.capacity())) {
    in_lookup_.resize(static_cast<size_t>(index_.capacity()), 0);
  }
  int64_t newly = 0;
  for (const KeyRun& run : runs) {
    for (int64_t j = 0; j < run.size; ++j) {
      const int64_t slot = run.slots[j];
      if (slot == KeyIndex::kAbsent) continue;
      uint8_t& flag = in_lookup_[static_cast<size_t>(slot)];
      newly += mark && flag == 0 ? 1 : 0;
      flag = mark ? 1 : 0;
    }
  }
  return newly;
}

void DynamicPart::plan(std::span<const KeyRun> runs, int64_t step, int64_t pinned_from) {
  // The absent keys: counted by distinct key, in order of first occurrence.
  int64_t absent = 0;
  for (const KeyRun& run : runs) {
    for (int64_t j = 0; j < run.size; ++j) absent += run.slots[j] == KeyIndex::kAbsent ? 1 : 0;
  }
  // Below 2^32 - 1 ids a table per batch (lookup_stage.cc), so uint32 indexes suffice.
  const auto positions = std::bit_ceil(static_cast<size_t>(2 * absent + 2));
  distinct_positions_.assign(positions, 0u);
  distinct_.clear();
  occurrence_distinct_.clear();
  for (const KeyRun& run : runs) {
    for (int64_t j = 0; j < run.size; ++j) {
      if (run.slots[j] != KeyIndex::kAbsent) continue;
      const uint32_t d = distinct_index(run.keys[j]);
      ++distinct_[d].occurrences;
      occurrence_distinct_.push_back(d);
    }
  }
  admitted_ = 0;
  for (size_t d = 0; d < distinct_.size(); ++d) {
    if (d + kKeysAhead < distinct_.size()) pending_.prefetch(distinct_[d + kKeysAhead].key);
    Distinct& entry = distinct_[d];
    entry.admitted =
        saturating_add(pending_.count(entry.key), entry.occurrences) >= vocabulary_.min_count;
    admitted_ += entry.admitted ? 1 : 0;
  }
  victims_.clear();
  const int64_t excess = index_.size() + admitted_ - index_.capacity();
  if (excess <= 0) return;
  const std::string owner = "table '" + table_.name + "'";
  if (vocabulary_.when_full == WhenFull::kError) {
    throw FailedPrecondition(
        owner + " is full: admitting " + std::to_string(admitted_) +
        " new keys would hold more than its capacity of " + std::to_string(index_.capacity()) +
        " keys (dynamic_vocabulary.capacity " + std::to_string(vocabulary_.capacity) +
        ", when_full = 'error'); raise the capacity or let it evict "
        "(when_full = 'evict_least_recent'). Nothing was changed");
  }
  // The smallest unpinned keys, skipping those of this lookup (about to be seen again).
  const int64_t present = mark_present(runs, true);
  if (present + admitted_ > index_.capacity()) {
    mark_present(runs, false);
    throw FailedPrecondition(
        owner + ": one training lookup has " + std::to_string(present + admitted_) +
        " distinct keys that need a row, more than a part of the table holds (" +
        std::to_string(index_.capacity()) + " keys, from dynamic_vocabulary.capacity " +
        std::to_string(vocabulary_.capacity) +
        "); raise the capacity or split the batch. Nothing was changed");
  }
  const std::span<const int64_t> candidates = index_.choose_victims(
      eviction_order(vocabulary_.when_full), excess + present, std::min(pinned_from, step));
  for (const int64_t slot : candidates) {
    if (std::ssize(victims_) == excess) break;
    if (in_lookup_[static_cast<size_t>(slot)] == 0) victims_.push_back(slot);
  }
  mark_present(runs, false);
  if (std::ssize(victims_) < excess) {
    throw FailedPrecondition(
        owner + ": no room for " + std::to_string(admitted_) + " new keys: the " +
        std::to_string(index_.capacity()) +
        " keys it holds are all used by training lookups not applied yet; apply them first or "
        "raise dynamic_vocabulary.capacity. Nothing was changed");
  }
}

void DynamicPart::touch_present(std::span<const KeyRun> runs, int64_t step, int part, int parts) {
  // Part p touches the p-th of `parts` equal ranges of the slots taken so far.
  const int64_t end = index_.slot_end();
  const int64_t first_slot = end * part / parts;
  const int64_t end_slot = end * (part + 1) / parts;
  for (const KeyRun& run : runs) {
    index_.touch_range({run.slots, static_cast<size_t>(run.size)}, first_slot, end_slot, step);
  }
}

void DynamicPart::evict_victims(ChangeLog& changes) {
  const bool tracking = changes.tracking();  // else the keys are not even read
  for (const int64_t slot : victims_) {
    if (tracking) changes.removed(index_.key_of(slot));
    index_.erase(slot);
  }
  counters_.evicted += std::ssize(victims_);
}

void DynamicPart::commit(std::span<const KeyRun> runs, int64_t step, ChangeLog& changes) {
  evict_victims(changes);
  // The index first; the admitted keys' rows after (initialize_admitted).
  admitted_rows_.clear();
  for (size_t d = 0; d < distinct_.size(); ++d) {
    if (d + kKeysAhead < distinct_.size()) {
      pending_.prefetch(distinct_[d + kKeysAhead].key);
      index_.prefetch_for_insert(distinct_[d + kKeysAhead].key);
    }
    Distinct& entry = distinct_[d];
    if (entry.admitted) {
      const int64_t count = saturating_add(pending_.count(entry.key), entry.occurrences);
      pending_.forget(entry.key);
      entry.slot = index_.insert(entry.key, step, count);
      admitted_rows_.push_back({.key = entry.key, .slot = entry.slot});
      ++counters_.inserted;
    } else {
      pending_.add(entry.key, entry.occurrences);
      counters_.not_admitted_lookups += entry.occurrences;
      entry.slot = zero_row_;
    }
  }
  size_t next = 0;
  for (const KeyRun& run : runs) {
    for (int64_t j = 0; j < run.size; ++j) {
      if (run.slots[j] == KeyIndex::kAbsent)
        run.slots[j] = distinct_[occurrence_distinct_[next++]].slot;
    }
  }
}

int64_t DynamicPart::expire(int64_t completed_step, int64_t pinned_from, ChangeLog& changes) {
  if (!vocabulary_.ttl_steps) return 0;
  const int64_t before = completed_step - *vocabulary_.ttl_steps + 1;
  const std::span<const int64_t> expired = index_.expired(before, pinned_from);
  victims_.assign(expired.begin(), expired.end());  // the index's scratch: copied before erasing
  evict_victims(changes);
  return std::ssize(victims_);
}

void DynamicPart::initialize_admitted(TableStorage& storage, ChangeLog& changes, int part,
                                      int parts) const {
  const int64_t row_bytes = columns_ * dtype_bytes(storage.dtype());
  const std::byte* rows = storage.parameter_bytes().data();
  const auto prefetch = [&](int64_t slot) {
    prefetch_bytes_for_write(rows + slot * row_bytes, row_bytes);
    for (size_t s = 0; s < storage.slot_specs().size(); ++s) {
      const int64_t width = storage.slot_specs()[s].width;
      prefetch_row_for_write(storage.slot_bases()[s] + slot * width, width);
    }
  };
  std::vector<float> initial_row(static_cast<size_t>(table_.dim));
  const auto n = std::ssize(admitted_rows_);
  for (int64_t i = part; i < n; i += parts) {
    if (i + kRowsAhead * parts < n) prefetch(admitted_rows_[i + kRowsAhead * parts].slot);
    const auto [key, slot] = admitted_rows_[i];
    initialize_rows(table_.initializer, table_seed_, key, 1, table_.dim, initial_row);
    storage.write_rows(slot, 1, initial_row.data() + first_column_);  // 16 bits: to nearest
    storage.initialize_slots(slot, 1);
    changes.mark(slot);
  }
}

void DynamicPart::replace_keys(std::span<const int64_t> keys, int64_t step,
                               std::span<int64_t> slots) {
  for (const int64_t slot : index_.slots_by_key()) index_.erase(slot);
  for (size_t i = 0; i < keys.size(); ++i) {
    pending_.forget(keys[i]);
    slots[i] = index_.insert(keys[i], step, 1);
  }
}

void DynamicPart::restore(std::span<const int64_t> keys, std::span<const int64_t> last_seen,
                          std::span<const int64_t> counts, std::span<const int64_t> pending_keys,
                          std::span<const int64_t> pending_counts,
                          const VocabularyCounters& counters, std::span<int64_t> slots) {
  index_.clear();
  pending_.clear();
  for (size_t i = 0; i < keys.size(); ++i)
    slots[i] = index_.insert(keys[i], last_seen[i], counts[i]);
  for (size_t i = 0; i < pending_keys.size(); ++i) pending_.add(pending_keys[i], pending_counts[i]);
  counters_ = counters;
}

void DynamicPart::reset_zero_row(TableStorage& storage) const {
  // All bits zero is +0.0 in float32, bfloat16 and float16 alike.
  const int64_t row_bytes = columns_ * dtype_bytes(storage.dtype());
  std::fill_n(storage.parameter_bytes().begin() + zero_row_ * row_bytes, row_bytes, std::byte{0});
}

void PendingLookups::add(int64_t step) {
  const std::lock_guard lock(mutex_);
  ++steps_[step];
}

void PendingLookups::remove(int64_t step) {
  const std::lock_guard lock(mutex_);
  const auto found = steps_.find(step);
  RECEMB_CHECK(found != steps_.end());
  if (--found->second == 0) steps_.erase(found);
}

int64_t PendingLookups::oldest() const {
  const std::lock_guard lock(mutex_);
  return steps_.empty() ? std::numeric_limits<int64_t>::max() : steps_.begin()->first;
}

void PendingLookup::hold(const std::shared_ptr<PendingLookups>& lookups, int64_t step) {
  release();
  lookups->add(step);
  lookups_ = lookups;
  step_ = step;
}

void PendingLookup::release() {
  if (const std::shared_ptr<PendingLookups> lookups = lookups_.lock()) lookups->remove(step_);
  lookups_.reset();
}

}  // namespace recemb::internal
