#include "storage/key_index.h"

#include <algorithm>
#include <bit>
#include <new>
#include <string>
#include <sys/mman.h>
#include <tuple>

#include "recemb/error.h"

#include "kernels/prefetch.h"
#include "util/check.h"
#include "util/checked_math.h"

namespace recemb::internal {
namespace {

// Asks for transparent huge pages over the whole 2 MiB pages inside a vector's reserved memory,
// before it is first written: find() reads a random position of a table far larger than the TLB
// covers with 4 KiB pages, as the row gather does (storage/aligned_buffer.h). Advice only.
template <class T>
void advise_huge_pages(const std::vector<T>& vector) {
  constexpr uintptr_t kHugePage = uintptr_t{2} << 20;
  const auto begin = reinterpret_cast<uintptr_t>(vector.data());
  const uintptr_t end = begin + vector.capacity() * sizeof(T);
  const uintptr_t first = (begin + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t last = end & ~(kHugePage - 1);
  if (first < last) madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
}

}  // namespace

KeyIndex::KeyIndex(int64_t capacity, bool keys_by_slot) : capacity_(capacity) {
  RECEMB_CHECK(capacity >= 1);
  if (capacity > kMaxCapacity) {
    throw InvalidArgument("capacity " + std::to_string(capacity) +
                          " of one part is above the most a key index holds (" +
                          std::to_string(kMaxCapacity) +
                          "): lower capacity or shard the table over more processes");
  }
  // ceil(capacity / 0.8) entries: at most 80% full.
  const int64_t entries = capacity + (capacity + 3) / 4;
  const int64_t buckets = (entries + kBucketWidth - 1) / kBucketWidth;
  try {
    buckets_.reserve(static_cast<size_t>(buckets));
    slots_.reserve(static_cast<size_t>(capacity));
    advise_huge_pages(buckets_);
    advise_huge_pages(slots_);
    buckets_.resize(static_cast<size_t>(buckets));
    slots_.assign(static_cast<size_t>(capacity), Slot{kAbsent, 0, kFreeSlot, 0});
    if (keys_by_slot) keys_by_slot_.assign(static_cast<size_t>(capacity), 0);
  } catch (const std::bad_alloc&) {
    const int64_t bytes =
        buckets * int64_t{sizeof(Bucket)} +
        capacity * (int64_t{sizeof(Slot)} + (keys_by_slot ? int64_t{sizeof(int64_t)} : 0));
    throw ResourceExhausted("cannot allocate " + std::to_string(bytes) +
                            " bytes for the key index of " + std::to_string(capacity) +
                            " keys: out of memory; lower capacity or shard the table over more "
                            "processes");
  }
}

int64_t KeyIndex::capacity() const { return capacity_; }
int64_t KeyIndex::size() const { return size_; }

void KeyIndex::find_all(const int64_t* keys, int64_t n, int64_t* slots, int64_t absent) const {
  // homes[j % kFindAhead]: the home bucket of keys[j], for the next kFindAhead keys.
  size_t homes[kFindAhead];
  for (int64_t j = 0; j < std::min<int64_t>(n, kFindAhead); ++j) {
    homes[j] = home_bucket(keys[j]);
    prefetch_line_to_l2(&buckets_[homes[j]]);
  }
  for (int64_t j = 0; j < n; ++j) {
    size_t& home = homes[j % kFindAhead];
    const int64_t slot = find_from(home, keys[j]);
    slots[j] = slot == kAbsent ? absent : slot;
    if (j + kFindAhead < n) {
      home = home_bucket(keys[j + kFindAhead]);
      prefetch_line_to_l2(&buckets_[home]);
    }
  }
}

int64_t KeyIndex::find_empty_key(size_t home) const {
  for (size_t b = home;; b = next_bucket(b)) {
    const Bucket& bucket = buckets_[b];
    for (int i = 0; i < kBucketWidth; ++i) {
      if (bucket.keys[i] == kEmptyKey && bucket.slots[i] != kEmptyEntry) return bucket.slots[i];
    }
    if (bucket.passed == 0) return kAbsent;
  }
}

bool KeyIndex::occupied(int64_t slot) const {
  RECEMB_CHECK(slot >= 0 && slot < capacity_);
  return slots_[slot].position != kFreeSlot;
}

int64_t KeyIndex::key_of(int64_t slot) const {
  RECEMB_CHECK(occupied(slot));
  const uint32_t position = slots_[slot].position;
  return buckets_[position / kBucketWidth].keys[position % kBucketWidth];
}

int64_t KeyIndex::last_seen(int64_t slot) const {
  RECEMB_CHECK(occupied(slot));
  return slots_[slot].last_seen;
}

int64_t KeyIndex::count(int64_t slot) const {
  RECEMB_CHECK(occupied(slot));
  return slots_[slot].count;
}

void KeyIndex::touch(int64_t slot, int64_t step, int64_t occurrences) {
  RECEMB_CHECK(occupied(slot) && occurrences >= 0);
  Slot& entry = slots_[slot];
  RECEMB_CHECK(step >= entry.last_seen);
  entry.count = saturating_add(entry.count, occurrences);
  entry.last_seen = step;  // its recency entry is re-filed when it reaches the front
}

void KeyIndex::touch_range(std::span<const int64_t> slots, int64_t first_slot, int64_t end_slot,
                           int64_t step) {
  // One unsigned compare: kAbsent and slots below first_slot wrap to large values.
  const auto in_range = [&](int64_t slot) {
    return static_cast<uint64_t>(slot - first_slot) < static_cast<uint64_t>(end_slot - first_slot);
  };
  const auto n = std::ssize(slots);
  for (int64_t j = 0; j < n; ++j) {
    if (j + kFindAhead < n && in_range(slots[j + kFindAhead])) {
      prefetch_line_for_write(&slots_[slots[j + kFindAhead]]);
    }
    if (in_range(slots[j])) touch(slots[j], step, 1);
  }
}

int64_t KeyIndex::slot_end() const { return never_used_; }

void KeyIndex::prefetch_for_insert(int64_t key) const {
  prefetch_line_for_write(&buckets_[home_bucket(key)]);
}

int64_t KeyIndex::insert(int64_t key, int64_t step, int64_t count) {
  RECEMB_CHECK(size_ < capacity_ && count >= 0);
  RECEMB_CHECK(find(key) == kAbsent);
  // The first bucket from home with a free entry; the full ones before it count the key passing.
  size_t b = home_bucket(key);
  int entry = 0;
  while (true) {
    Bucket& bucket = buckets_[b];
    while (entry < kBucketWidth && bucket.slots[entry] != kEmptyEntry) ++entry;
    if (entry < kBucketWidth) break;
    ++bucket.passed;
    b = next_bucket(b);
    entry = 0;
  }
  int64_t slot = free_head_;
  if (slot != kAbsent) {
    free_head_ = slots_[slot].last_seen;
  } else {
    slot = never_used_++;
  }
  buckets_[b].keys[entry] = key;
  buckets_[b].slots[entry] = static_cast<uint32_t>(slot);
  if (!keys_by_slot_.empty()) keys_by_slot_[static_cast<size_t>(slot)] = key;
  Slot& metadata = slots_[slot];
  metadata.last_seen = step;
  metadata.count = count;
  metadata.position = static_cast<uint32_t>(b * kBucketWidth + static_cast<size_t>(entry));
  ++metadata.generation;
  ++size_;
  pool_inserted(slot, key);
  recency_[step].push_back(RecencyEntry{static_cast<uint32_t>(slot), metadata.generation});
  // Dead entries are dropped when scanned; an index never scanned (no TTL, least-frequent
  // eviction) drops them all once they outnumber the keys.
  if (++recency_entries_ > 2 * capacity_ + 64) drop_dead_recency();
  return slot;
}

void KeyIndex::erase(int64_t slot) {
  RECEMB_CHECK(occupied(slot));
  Slot& metadata = slots_[slot];
  size_t hole = metadata.position / kBucketWidth;
  size_t hole_entry = metadata.position % kBucketWidth;
  unpass(home_bucket(buckets_[hole].keys[hole_entry]), hole);
  // Backward shift: while a key held further on passed the hole's bucket, the nearest one moves
  // into the hole, which moves to where it was. So no key ever passes a bucket with a free entry,
  // and the table stays as short to search as one built by inserts only, however long it churns.
  while (buckets_[hole].passed > 0) {
    const size_t n = buckets_.size();
    const auto distance = [n](size_t from, size_t to) { return (to + n - from) % n; };
    size_t from = next_bucket(hole);
    int from_entry = -1;
    for (size_t scanned = 0;; ++scanned) {
      RECEMB_CHECK(scanned < buckets_.size());  // a key passed the hole: it is held further on
      const Bucket& bucket = buckets_[from];
      for (int i = 0; i < kBucketWidth && from_entry < 0; ++i) {
        if (bucket.slots[i] != kEmptyEntry &&
            distance(home_bucket(bucket.keys[i]), from) >= distance(hole, from)) {
          from_entry = i;
        }
      }
      if (from_entry >= 0) break;
      from = next_bucket(from);
    }
    const uint32_t moved_slot = buckets_[from].slots[from_entry];
    buckets_[hole].keys[hole_entry] = buckets_[from].keys[from_entry];
    buckets_[hole].slots[hole_entry] = moved_slot;
    slots_[moved_slot].position = static_cast<uint32_t>(hole * kBucketWidth + hole_entry);
    unpass(hole, from);
    hole = from;
    hole_entry = static_cast<size_t>(from_entry);
  }
  buckets_[hole].keys[hole_entry] = kEmptyKey;
  buckets_[hole].slots[hole_entry] = kEmptyEntry;
  metadata.position = kFreeSlot;
  metadata.count = 0;
  metadata.last_seen = free_head_;
  free_head_ = slot;
  --size_;
}

void KeyIndex::clear() {
  std::fill(buckets_.begin(), buckets_.end(), Bucket{});
  std::fill(slots_.begin(), slots_.end(), Slot{kAbsent, 0, kFreeSlot, 0});
  size_ = 0;
  free_head_ = kAbsent;
  never_used_ = 0;
  recency_.clear();
  recency_entries_ = 0;
  pool_.clear();
  pool_filled_ = false;
}

void KeyIndex::unpass(size_t first, size_t end) {
  for (size_t b = first; b != end; b = next_bucket(b)) --buckets_[b].passed;
}

// ---- Recency entries -----------------------------------------------------------------------

bool KeyIndex::recency_live(RecencyEntry entry) const {
  const Slot& slot = slots_[entry.slot];
  return slot.position != kFreeSlot && slot.generation == entry.generation;
}

template <class Visit>
void KeyIndex::for_each_key(Visit visit) const {
  for (const Bucket& bucket : buckets_) {
    for (int i = 0; i < kBucketWidth; ++i) {
      if (bucket.slots[i] != kEmptyEntry) visit(bucket.keys[i], int64_t{bucket.slots[i]});
    }
  }
}

void KeyIndex::drop_dead_recency() {
  for (auto filed = recency_.begin(); filed != recency_.end();) {
    std::vector<RecencyEntry>& entries = filed->second;
    size_t kept = 0;
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i + kFindAhead < entries.size()) prefetch_line(&slots_[entries[i + kFindAhead].slot]);
      if (recency_live(entries[i])) entries[kept++] = entries[i];
    }
    recency_entries_ -= static_cast<int64_t>(entries.size() - kept);
    entries.resize(kept);
    filed = entries.empty() ? recency_.erase(filed) : std::next(filed);
  }
}

template <class Visit>
void KeyIndex::scan_recency(Visit visit) {
  for (auto filed = recency_.begin(); filed != recency_.end();) {
    const int64_t step = filed->first;
    std::vector<RecencyEntry>& entries = filed->second;
    size_t kept = 0;
    size_t i = 0;
    bool stopped = false;
    for (; i < entries.size() && !stopped; ++i) {
      if (i + kFindAhead < entries.size()) prefetch_line(&slots_[entries[i + kFindAhead].slot]);
      const RecencyEntry entry = entries[i];
      if (!recency_live(entry)) {
        --recency_entries_;
        continue;  // dropped
      }
      const int64_t last_seen = slots_[entry.slot].last_seen;
      if (last_seen != step) {
        RECEMB_CHECK(last_seen > step);        // filed no later than its last_seen
        recency_[last_seen].push_back(entry);  // a later list: visited again in order
        continue;
      }
      entries[kept++] = entry;
      stopped = !visit(int64_t{entry.slot});
    }
    // The entries not reached stay as they are.
    kept = static_cast<size_t>(std::copy(entries.begin() + static_cast<std::ptrdiff_t>(i),
                                         entries.end(),
                                         entries.begin() + static_cast<std::ptrdiff_t>(kept)) -
                               entries.begin());
    entries.resize(kept);
    filed = entries.empty() ? recency_.erase(filed) : std::next(filed);
    if (stopped) return;
  }
}

// ---- Victims -------------------------------------------------------------------------------

std::span<const int64_t> KeyIndex::ordered_victims(int64_t n) {
  const auto less = [](const Candidate& a, const Candidate& b) {
    return std::tie(a.first, a.second, a.key) < std::tie(b.first, b.second, b.key);
  };
  const auto take = static_cast<std::ptrdiff_t>(
      std::min<int64_t>(std::max<int64_t>(n, 0), static_cast<int64_t>(candidates_.size())));
  if (take < static_cast<std::ptrdiff_t>(candidates_.size())) {
    std::nth_element(candidates_.begin(), candidates_.begin() + take, candidates_.end(), less);
  }
  std::sort(candidates_.begin(), candidates_.begin() + take, less);
  chosen_.clear();
  for (std::ptrdiff_t i = 0; i < take; ++i) chosen_.push_back(candidates_[i].slot);
  return chosen_;
}

std::span<const int64_t> KeyIndex::choose_victims(EvictionOrder order, int64_t n,
                                                  int64_t pinned_from) {
  candidates_.clear();
  if (n <= 0) return ordered_victims(0);
  if (order == EvictionOrder::kLeastRecent) {
    // Live entries come in last_seen order: take them up to the n-th and every one sharing its
    // last_seen (the ties are ordered by count and key below).
    scan_recency([&](int64_t slot) {
      const Slot& entry = slots_[slot];
      if (entry.last_seen >= pinned_from) return false;
      if (static_cast<int64_t>(candidates_.size()) >= n &&
          entry.last_seen != candidates_.back().first) {
        return false;
      }
      candidates_.push_back({entry.last_seen, entry.count, key_of(slot), slot});
      return true;
    });
    return ordered_victims(n);
  }
  // kLeastFrequent: from the pool of the keys that may be smallest; filled again when it runs
  // out, and as a last resort (a pool of pinned keys) one pass over every key, keeping the n
  // smallest unpinned in a max-heap.
  if (least_frequent_from_pool(n, pinned_from)) return ordered_victims(n);
  fill_least_frequent_pool(std::max({4 * n, int64_t{1024}, size_ / 32}));
  if (least_frequent_from_pool(n, pinned_from)) return ordered_victims(n);
  candidates_.clear();
  const auto less = [](const Candidate& a, const Candidate& b) {
    return std::tie(a.first, a.second, a.key) < std::tie(b.first, b.second, b.key);
  };
  for_each_key([&](int64_t key, int64_t slot) {
    const Slot& entry = slots_[slot];
    if (entry.last_seen >= pinned_from) return;
    const Candidate candidate{entry.count, entry.last_seen, key, slot};
    if (static_cast<int64_t>(candidates_.size()) < n) {
      candidates_.push_back(candidate);
      std::push_heap(candidates_.begin(), candidates_.end(), less);
    } else if (less(candidate, candidates_.front())) {
      std::pop_heap(candidates_.begin(), candidates_.end(), less);
      candidates_.back() = candidate;
      std::push_heap(candidates_.begin(), candidates_.end(), less);
    }
  });
  return ordered_victims(n);
}

namespace {

bool pool_less(const auto& a, const auto& b) {
  return std::tie(a.count, a.last_seen, a.key) < std::tie(b.count, b.last_seen, b.key);
}

// std::push_heap / pop_heap order: a max-heap of `greater`, so the smallest on top.
bool pool_greater(const auto& a, const auto& b) { return pool_less(b, a); }

}  // namespace

void KeyIndex::fill_least_frequent_pool(int64_t pool) {
  // The `pool` smallest of all keys, kept in a max-heap while passing, then turned over.
  pool_.clear();
  for_each_key([&](int64_t key, int64_t slot) {
    const Slot& entry = slots_[slot];
    const PoolEntry candidate{entry.count, entry.last_seen, key, static_cast<uint32_t>(slot),
                              entry.generation};
    if (std::ssize(pool_) < pool) {
      pool_.push_back(candidate);
      std::push_heap(pool_.begin(), pool_.end(), pool_less<PoolEntry, PoolEntry>);
    } else if (pool_less(candidate, pool_.front())) {
      std::pop_heap(pool_.begin(), pool_.end(), pool_less<PoolEntry, PoolEntry>);
      pool_.back() = candidate;
      std::push_heap(pool_.begin(), pool_.end(), pool_less<PoolEntry, PoolEntry>);
    }
  });
  pool_bounded_ = size_ > std::ssize(pool_);
  if (pool_bounded_) pool_bound_ = pool_.front();
  std::make_heap(pool_.begin(), pool_.end(), pool_greater<PoolEntry, PoolEntry>);
  pool_filled_ = true;
}

void KeyIndex::pool_inserted(int64_t slot, int64_t key) {
  if (!pool_filled_) return;
  const Slot& entry = slots_[slot];
  const PoolEntry inserted{entry.count, entry.last_seen, key, static_cast<uint32_t>(slot),
                           entry.generation};
  if (pool_bounded_ && !pool_less(inserted, pool_bound_)) return;  // above the bound: left out
  if (!pool_bounded_ && std::ssize(pool_) >= 2 * std::max<int64_t>(size_, 1024)) {
    pool_filled_ = false;  // mostly dead entries: filled again when next needed
    return;
  }
  pool_.push_back(inserted);
  std::push_heap(pool_.begin(), pool_.end(), pool_greater<PoolEntry, PoolEntry>);
}

bool KeyIndex::least_frequent_from_pool(int64_t n, int64_t pinned_from) {
  if (!pool_filled_) return false;
  candidates_.clear();
  pool_taken_.clear();
  const auto push = [this](const PoolEntry& entry) {
    pool_.push_back(entry);
    std::push_heap(pool_.begin(), pool_.end(), pool_greater<PoolEntry, PoolEntry>);
  };
  while (std::ssize(candidates_) < n && !pool_.empty()) {
    std::pop_heap(pool_.begin(), pool_.end(), pool_greater<PoolEntry, PoolEntry>);
    PoolEntry entry = pool_.back();
    pool_.pop_back();
    const Slot& slot = slots_[entry.slot];
    if (slot.position == kFreeSlot || slot.generation != entry.generation) continue;  // dropped
    if (slot.count != entry.count || slot.last_seen != entry.last_seen) {
      entry.count = slot.count;  // grew since: back in its place, or out above the bound
      entry.last_seen = slot.last_seen;
      if (!pool_bounded_ || pool_less(entry, pool_bound_)) push(entry);
      continue;
    }
    pool_taken_.push_back(entry);  // the smallest left of all keys
    if (entry.last_seen < pinned_from) {
      candidates_.push_back({entry.count, entry.last_seen, entry.key, int64_t{entry.slot}});
    }
  }
  for (const PoolEntry& entry : pool_taken_) push(entry);
  // Fewer than n from a pool bounded above the rest: the keys beyond it are not known.
  return std::ssize(candidates_) == n || !pool_bounded_;
}

std::span<const int64_t> KeyIndex::expired(int64_t before_step, int64_t pinned_from) {
  const int64_t limit = std::min(before_step, pinned_from);
  candidates_.clear();
  scan_recency([&](int64_t slot) {
    const Slot& entry = slots_[slot];
    if (entry.last_seen >= limit) return false;
    candidates_.push_back({entry.last_seen, 0, key_of(slot), slot});
    return true;
  });
  return ordered_victims(static_cast<int64_t>(candidates_.size()));
}

std::vector<int64_t> KeyIndex::slots_by_key() const {
  std::vector<std::pair<int64_t, int64_t>> keyed;
  keyed.reserve(static_cast<size_t>(size_));
  for_each_key([&](int64_t key, int64_t slot) { keyed.emplace_back(key, slot); });
  std::sort(keyed.begin(), keyed.end());
  std::vector<int64_t> slots;
  slots.reserve(keyed.size());
  for (const auto& [key, slot] : keyed) slots.push_back(slot);
  return slots;
}

int64_t KeyIndex::memory_bytes() const {
  const auto bytes = [](const auto& vector) {
    return static_cast<int64_t>(vector.capacity() * sizeof(vector[0]));
  };
  // A map node: its step, its vector and the tree's links (libstdc++: 4 pointer-sized fields).
  constexpr int64_t kMapNodeBytes = sizeof(int64_t) + sizeof(std::vector<RecencyEntry>) + 32;
  int64_t recency_bytes = 0;
  for (const auto& [step, entries] : recency_) recency_bytes += kMapNodeBytes + bytes(entries);
  return bytes(buckets_) + bytes(slots_) + bytes(keys_by_slot_) + recency_bytes +
         bytes(candidates_) + bytes(chosen_) + bytes(pool_) + bytes(pool_taken_);
}

}  // namespace recemb::internal
