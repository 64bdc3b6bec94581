// The index of a dynamic table's part (docs/semantics.md, "Dynamic vocabularies"): which int64
// keys hold a row, in which slot, when each was last seen and how often; the counts of keys seen
// but not yet admitted; and the choice of keys to evict.
//
// Slots are the part's local rows [0, capacity). A key holds at most one slot; a slot at most one
// key. The index stores, per slot, its key, last_seen (the lookup step of the last training
// lookup that saw it) and count (its occurrences in training lookups since it was admitted,
// admission included); it does not touch rows (the caller initialises and reads them).
//
// Eviction order (smallest first):
//   kLeastRecent:   (last_seen, count, key)
//   kLeastFrequent: (count, last_seen, key)
// A slot is pinned when last_seen >= pinned_from: never chosen (the keys of lookups not applied
// yet, docs/semantics.md).
//
// Not-yet-admitted counts are exact for up to exact_pending_limit() distinct keys; beyond that a
// count-min sketch holds the rest, which may over-count (admit early) but never under-count.
//
// Thread safety: find, prefetch, key_of, last_seen and count may run concurrently with each other;
// every other call needs exclusive access. Nothing here throws except the constructor
// (ResourceExhausted / std::bad_alloc) and methods documented to; no call allocates once the index
// is built, except pending counts (amortised, bounded by exact_pending_limit) and the scratch of
// choose_victims / expired (reused, grows to the most asked for).
#ifndef RECEMB_STORAGE_KEY_INDEX_H_
#define RECEMB_STORAGE_KEY_INDEX_H_

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace recemb::internal {

enum class EvictionOrder { kLeastRecent, kLeastFrequent };

class KeyIndex {
 public:
  static constexpr int64_t kAbsent = -1;

  // An empty index of `capacity` slots (>= 1). Memory: the slot metadata (key, last_seen, count:
  // 16 bytes a slot) and a hash table sized so that it is at most 80% full when every slot is
  // taken; plus the pending counts (at most exact_pending_limit keys, then a fixed sketch).
  explicit KeyIndex(int64_t capacity, int64_t exact_pending_limit);

  int64_t capacity() const;
  int64_t size() const;  // keys held
  int64_t exact_pending_limit() const;

  // The slot of `key`, or kAbsent.
  int64_t find(int64_t key) const;
  // Prefetches what find(key) will read.
  void prefetch(int64_t key) const;

  int64_t key_of(int64_t slot) const;     // slot must be occupied
  int64_t last_seen(int64_t slot) const;  // slot must be occupied
  int64_t count(int64_t slot) const;      // slot must be occupied
  bool occupied(int64_t slot) const;

  // Records `occurrences` more sightings of the key in `slot` at lookup step `step` (>= its
  // last_seen): last_seen = step, count += occurrences (saturating at INT64_MAX).
  void touch(int64_t slot, int64_t step, int64_t occurrences);

  // Inserts an absent `key` (size() < capacity()) into a free slot and returns the slot, with
  // last_seen = step and count = `count`. Which free slot is taken depends only on the sequence
  // of inserts and erases made so far (deterministic).
  int64_t insert(int64_t key, int64_t step, int64_t count);
  // Frees an occupied slot (its key becomes absent).
  void erase(int64_t slot);

  // Not-yet-admitted counts: the count of an absent key (0 if never seen), and adding to it.
  int64_t pending_count(int64_t key) const;
  void add_pending(int64_t key, int64_t occurrences);
  // Forgets the pending count of `key` (called when it is admitted). After a sketch was needed, a
  // key's sketch count cannot be removed: pending_count may stay > 0 for it (over-count only).
  void forget_pending(int64_t key);
  // Exact pending entries held now.
  int64_t exact_pending_size() const;

  // The `n` occupied, unpinned slots smallest in `order`, smallest first; fewer when fewer exist.
  // Reads only; the result is valid until the next non-const call.
  std::span<const int64_t> choose_victims(EvictionOrder order, int64_t n, int64_t pinned_from);
  // The occupied, unpinned slots whose last_seen < before_step, in increasing (last_seen, key).
  // Cost proportional to the number returned plus the number of keys touched since the previous
  // call (not to size()), so that a TTL sweep every step stays cheap.
  std::span<const int64_t> expired(int64_t before_step, int64_t pinned_from);

  // Every occupied slot, in increasing key order (checkpoints, read_dynamic_table).
  std::vector<int64_t> slots_by_key() const;
  // The pending (key, count) pairs held exactly, in increasing key order, and whether a sketch is
  // in use (checkpoints; add_pending puts them back).
  std::vector<std::pair<int64_t, int64_t>> exact_pending() const;
  bool sketch_in_use() const;

  // Bytes held (slot metadata, hash table, pending counts, sketch).
  int64_t memory_bytes() const;
};

}  // namespace recemb::internal

#endif  // RECEMB_STORAGE_KEY_INDEX_H_
