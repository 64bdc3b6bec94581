#include "storage/pending_counts.h"

#include <algorithm>
#include <limits>
#include <span>

#include "kernels/prefetch.h"
#include "util/check.h"
#include "util/checked_math.h"
#include "util/key_hash.h"

namespace recemb::internal {
namespace {

// The exact table (linear probing over single entries; not on the lookup path, so it keeps to the
// simplest scheme): the position of `key`, or of the empty one where it would go.
template <class Entry, class IsEmpty>
size_t probe(std::span<const Entry> table, size_t home, int64_t key, IsEmpty is_empty) {
  size_t position = home;
  while (!is_empty(table[position]) && table[position].key != key) {
    position = position + 1 == table.size() ? 0 : position + 1;
  }
  return position;
}

// Backward-shift deletion from a linear-probing table: empties `hole`, then moves each following
// entry of the run whose home does not lie cyclically in (hole, entry] into the hole, so that
// every key stays reachable from its home without tombstones.
template <class Entry, class Home, class IsEmpty>
void erase_at(std::span<Entry> table, size_t hole, Home home, IsEmpty is_empty) {
  const size_t n = table.size();
  const auto distance = [n](size_t from, size_t to) {
    return to >= from ? to - from : to + n - from;
  };
  for (size_t position = hole + 1 == n ? 0 : hole + 1; !is_empty(table[position]);
       position = position + 1 == n ? 0 : position + 1) {
    if (distance(home(table[position].key), position) >= distance(hole, position)) {
      table[hole] = table[position];
      hole = position;
    }
  }
  table[hole] = Entry{};
}

// The count-min sketch of counts beyond the exact limit: kSketchRows rows of 2^16 saturating
// uint32 counters (1 MiB), a key's column in row r being 16 bits of one mixed hash. Updates are
// conservative (each counter raised only to the key's new estimate), which keeps every estimate
// >= the key's true count (up to 2^32 - 1) with less over-count than plain adds.
constexpr int kSketchRows = 4;
constexpr int kSketchColumnBits = 16;
constexpr size_t kSketchColumns = size_t{1} << kSketchColumnBits;
// Decorrelates the sketch's columns from the hash tables' home positions.
constexpr int64_t kSketchSalt = 0x5bd1e9955bd1e995LL;

size_t sketch_index(uint64_t hash, int row) {
  return static_cast<size_t>(row) * kSketchColumns +
         static_cast<size_t>((hash >> (kSketchColumnBits * row)) & (kSketchColumns - 1));
}

constexpr size_t kMinExactPositions = 16;

}  // namespace

PendingCounts::PendingCounts(int64_t exact_limit) : exact_limit_(exact_limit) {
  RECEMB_CHECK(exact_limit >= 0);
}

size_t PendingCounts::home(int64_t key) const { return scale_hash(mix_key(key), exact_.size()); }

size_t PendingCounts::position_of(int64_t key) const {
  return probe(std::span<const Entry>(exact_), home(key), key,
               [](const Entry& entry) { return entry.count == 0; });
}

void PendingCounts::prefetch(int64_t key) const {
  if (!exact_.empty()) prefetch_line_for_write(&exact_[home(key)]);
}

int64_t PendingCounts::count(int64_t key) const {
  if (!exact_.empty()) {
    const int64_t count = exact_[position_of(key)].count;
    if (count != 0) return count;
  }
  return sketch_in_use() ? sketch_estimate(key) : 0;
}

void PendingCounts::add(int64_t key, int64_t occurrences) {
  RECEMB_CHECK(occurrences >= 0);
  if (occurrences == 0) return;
  if (!exact_.empty()) {
    int64_t& count = exact_[position_of(key)].count;
    if (count != 0) {
      count = saturating_add(count, occurrences);
      return;
    }
  }
  if (exact_size_ < exact_limit_) {
    // The sketch may already hold occurrences of this key (counted while the exact entries were
    // all taken): start from its estimate, so that the count never goes down.
    insert_exact(key, saturating_add(sketch_in_use() ? sketch_estimate(key) : 0, occurrences));
  } else {
    add_to_sketch(key, occurrences);
  }
}

void PendingCounts::insert_exact(int64_t key, int64_t count) {
  // At most 80% full, as the key index's hash table.
  if ((exact_size_ + 1) * 5 > static_cast<int64_t>(exact_.size()) * 4) grow_exact();
  exact_[position_of(key)] = Entry{key, count};
  ++exact_size_;
}

void PendingCounts::grow_exact() {
  std::vector<Entry> old(std::max(kMinExactPositions, 2 * exact_.size()));
  old.swap(exact_);
  for (const Entry& entry : old) {
    if (entry.count == 0) continue;
    exact_[position_of(entry.key)] = entry;
  }
}

void PendingCounts::forget(int64_t key) {
  if (exact_.empty()) return;
  const size_t position = position_of(key);
  if (exact_[position].count == 0) return;
  erase_at(
      std::span<Entry>(exact_), position, [this](int64_t moved_key) { return home(moved_key); },
      [](const Entry& entry) { return entry.count == 0; });
  --exact_size_;
}

void PendingCounts::clear() {
  std::fill(exact_.begin(), exact_.end(), Entry{});
  exact_size_ = 0;
  sketch_.clear();
}

int64_t PendingCounts::exact_size() const { return exact_size_; }

std::vector<std::pair<int64_t, int64_t>> PendingCounts::exact_entries() const {
  std::vector<std::pair<int64_t, int64_t>> pairs;
  pairs.reserve(static_cast<size_t>(exact_size_));
  for (const Entry& entry : exact_) {
    if (entry.count != 0) pairs.emplace_back(entry.key, entry.count);
  }
  std::sort(pairs.begin(), pairs.end());
  return pairs;
}

bool PendingCounts::sketch_in_use() const { return !sketch_.empty(); }

int64_t PendingCounts::sketch_estimate(int64_t key) const {
  const uint64_t hash = mix_key(key ^ kSketchSalt);
  uint32_t estimate = std::numeric_limits<uint32_t>::max();
  for (int row = 0; row < kSketchRows; ++row) {
    estimate = std::min(estimate, sketch_[sketch_index(hash, row)]);
  }
  return estimate;
}

void PendingCounts::add_to_sketch(int64_t key, int64_t occurrences) {
  if (sketch_.empty()) sketch_.assign(kSketchRows * kSketchColumns, 0);
  const int64_t target = std::min<int64_t>(saturating_add(sketch_estimate(key), occurrences),
                                           std::numeric_limits<uint32_t>::max());
  const uint64_t hash = mix_key(key ^ kSketchSalt);
  for (int row = 0; row < kSketchRows; ++row) {
    uint32_t& counter = sketch_[sketch_index(hash, row)];
    counter = std::max(counter, static_cast<uint32_t>(target));
  }
}

int64_t PendingCounts::memory_bytes() const {
  return static_cast<int64_t>(exact_.capacity() * sizeof(Entry) +
                              sketch_.capacity() * sizeof(uint32_t));
}

}  // namespace recemb::internal
