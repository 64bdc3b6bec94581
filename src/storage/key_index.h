// The index of a dynamic table's part (docs/semantics.md, "Dynamic vocabularies"): which int64
// keys hold a row, in which slot, when each was last seen and how often; and the choice of keys to
// evict. The counts of keys seen but not yet admitted are storage/pending_counts.h's.
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
// Thread safety: find, prefetch, key_of, last_seen and count may run concurrently with each other;
// every other call needs exclusive access. Nothing here throws except the constructor
// (ResourceExhausted / std::bad_alloc, InvalidArgument) and methods documented to; no call
// allocates once the index is built, except the scratch of choose_victims / expired /
// slots_by_key (reused, grows to the most asked for). Preconditions (an occupied slot, an
// absent key, a step not before last_seen, ...) are checked and abort when broken: they are bugs
// of the caller, never bad user input.
//
// Layout (key_index.cc says why):
//   buckets_:   the hash table: cache-line buckets of 5 {key, slot} entries, a key's home bucket
//               being its mixed 64-bit hash scaled to the bucket count, with linear probing over
//               buckets; each bucket counts the keys that passed it full on their way further
//               (`passed`), so a search stops at the first bucket that holds the key or that no
//               key passed. Sized so that it is at most 80% full. Erasing shifts keys back
//               (no tombstones) so that no key passes a bucket with a free entry: probe lengths
//               stay those of a table built by inserts only, however long keys churn. find() of a
//               present key reads its home bucket's line and, rarely, the next.
//   slots_:     per slot {last_seen, count, position of its entry in buckets_, generation}.
//               Free slots form a LIFO list threaded through last_seen; never-used slots follow
//               in increasing order.
//   recency_:   entries {slot, generation} filed by step: each occupied slot has exactly one
//               live entry (its generation is the slot's, bumped by every insert), filed under a
//               step no later than its last_seen: the step it was inserted at, or re-filed at.
//               touch() changes last_seen only, so that a lookup's sightings cost no more than
//               the metadata write. expired and choose_victims take entries from the earliest
//               step: a dead one (its slot freed or taken again since) is dropped, one whose
//               last_seen is later than its step is re-filed under its last_seen, and the
//               others come in last_seen order. So a key seen every step is re-filed once per
//               time it reaches the front, not once per sighting.
#ifndef RECEMB_STORAGE_KEY_INDEX_H_
#define RECEMB_STORAGE_KEY_INDEX_H_

#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <span>
#include <vector>

#include "recemb/config.h"

#include "kernels/prefetch.h"
#include "util/key_hash.h"

namespace recemb::internal {

enum class EvictionOrder { kLeastRecent, kLeastFrequent };

class KeyIndex {
 public:
  static constexpr int64_t kAbsent = -1;
  // The most slots one index holds (slots and hash positions are 32-bit).
  static constexpr int64_t kMaxCapacity = kMaxDynamicCapacity;

  // An empty index of `capacity` slots (1 <= capacity). Memory: the slot metadata (last_seen,
  // count, position, generation: 24 bytes a slot), a hash table of 64-byte buckets of 5 keys at
  // most 80% full when every slot is taken (16 bytes a slot), the recency entries (8 bytes a key,
  // and their steps' lists). Throws InvalidArgument when capacity > kMaxCapacity,
  // ResourceExhausted when memory is short. With `keys_by_slot`, it also keeps each slot's key in
  // an array (8 bytes a slot more) for keys_by_slot().
  explicit KeyIndex(int64_t capacity, bool keys_by_slot = false);

  int64_t capacity() const;
  int64_t size() const;  // keys held

  // The slot of `key`, or kAbsent.
  int64_t find(int64_t key) const;
  // Prefetches what find(key) will read.
  void prefetch(int64_t key) const;
  // Prefetches, for writing, what insert(key, ...) reads and writes first (its home bucket).
  void prefetch_for_insert(int64_t key) const;
  // slots[j] = the slot of keys[j], or `absent`, for j in [0, n): the lookup's path, pipelined
  // (each key's bucket is computed and prefetched kFindAhead keys before it is searched).
  void find_all(const int64_t* keys, int64_t n, int64_t* slots, int64_t absent) const;

  int64_t key_of(int64_t slot) const;  // slot must be occupied
  // Built with keys_by_slot: [capacity] keys, entry s being key_of(s) for an occupied slot s (any
  // value for a free one), for kernels that key a row's computation by its key (a 16-bit table's
  // stochastic rounding); nullptr otherwise.
  const int64_t* keys_by_slot() const {
    return keys_by_slot_.empty() ? nullptr : keys_by_slot_.data();
  }
  int64_t last_seen(int64_t slot) const;  // slot must be occupied
  int64_t count(int64_t slot) const;      // slot must be occupied
  bool occupied(int64_t slot) const;

  // Records `occurrences` more sightings of the key in `slot` at lookup step `step` (>= its
  // last_seen): last_seen = step, count += occurrences (saturating at INT64_MAX).
  void touch(int64_t slot, int64_t step, int64_t occurrences);
  // touch(slot, step, 1) for each slots[j] in [first_slot, end_slot) (kAbsent never is), in order,
  // pipelined as find_all is. Calls on disjoint slot ranges may run concurrently: a lookup's
  // sightings split over threads by slot range.
  void touch_range(std::span<const int64_t> slots, int64_t first_slot, int64_t end_slot,
                   int64_t step);
  // Every occupied slot is below it (the slots ever taken).
  int64_t slot_end() const;

  // Inserts an absent `key` (size() < capacity()) into a free slot and returns the slot, with
  // last_seen = step and count = `count`. Which free slot is taken depends only on the sequence
  // of inserts and erases made so far (deterministic): the slot freed last, else the lowest slot
  // never used.
  int64_t insert(int64_t key, int64_t step, int64_t count);
  // Frees an occupied slot (its key becomes absent).
  void erase(int64_t slot);
  // Empties the index: no key; slots are then taken in the order of a new index's (a restore
  // refills it, checkpoint/dynamic_checkpoint.h). Allocates nothing.
  void clear();

  // The `n` occupied, unpinned slots smallest in `order`, smallest first; fewer when fewer exist.
  // Changes no key, slot or count (only how the recency entries and the least-frequent pool are
  // kept); the result is valid until the next non-const call. Cost: kLeastRecent, the number of
  // recency entries filed under steps up to the n-th's last_seen (those of keys seen since are
  // re-filed, once each); kLeastFrequent, O((n + keys of the pool seen since) log pool) from the
  // pool of the keys that may be smallest, and a pass over every key (O(size() log pool)) when
  // the pool runs out, every pool / n calls or so (the pool: max(4n, 1024, size() / 32) keys).
  std::span<const int64_t> choose_victims(EvictionOrder order, int64_t n, int64_t pinned_from);
  // The occupied, unpinned slots whose last_seen < before_step, in increasing (last_seen, key).
  // Cost proportional to the number returned plus the number of entries re-filed (not to
  // size()), so that a TTL sweep every step stays cheap.
  std::span<const int64_t> expired(int64_t before_step, int64_t pinned_from);

  // Every occupied slot, in increasing key order (checkpoints, read_dynamic_table).
  std::vector<int64_t> slots_by_key() const;

  // Bytes held (slot metadata, hash table, recency entries, scratch).
  int64_t memory_bytes() const;

 private:
  static constexpr uint32_t kEmptyEntry = 0xffffffffu;
  // The key an empty entry holds, so that find compares keys only and looks at slots only when
  // searching for this key itself (any int64 is a key).
  static constexpr int64_t kEmptyKey = 0x5eed0f0e0e0e7e11LL;
  static constexpr int kFindAhead = 32;
  static constexpr uint32_t kFreeSlot = 0xffffffffu;

  static constexpr int kBucketWidth = 5;
  // One cache line: 5 keys and their slots, and the count of keys that passed it.
  struct alignas(64) Bucket {
    int64_t keys[kBucketWidth] = {kEmptyKey, kEmptyKey, kEmptyKey, kEmptyKey, kEmptyKey};
    uint32_t slots[kBucketWidth] = {kEmptyEntry, kEmptyEntry, kEmptyEntry, kEmptyEntry,
                                    kEmptyEntry};
    // Keys whose home bucket is this one or one before it (cyclically) and that are held after
    // it, because it was full when they were inserted.
    uint32_t passed = 0;
  };
  struct Slot {
    int64_t last_seen;    // free slot: the next free slot, or kAbsent
    int64_t count;        // free slot: 0
    uint32_t position;    // bucket * kBucketWidth + entry; kFreeSlot when the slot is free
    uint32_t generation;  // which recency_ entry of this slot is live
  };
  struct RecencyEntry {
    uint32_t slot;
    uint32_t generation;
  };
  // A victim candidate for choose_victims / expired before it is ordered.
  struct Candidate {
    int64_t first;   // last_seen (kLeastRecent, expired) or count (kLeastFrequent)
    int64_t second;  // count (kLeastRecent) or last_seen (kLeastFrequent); 0 for expired
    int64_t key;
    int64_t slot;
  };

  // A key of the least-frequent pool, by (count, last_seen, key) when it was put there.
  struct PoolEntry {
    int64_t count;
    int64_t last_seen;
    int64_t key;
    uint32_t slot;
    uint32_t generation;
  };

  size_t home_bucket(int64_t key) const { return scale_hash(mix_key(key), buckets_.size()); }
  // find(key), searching from its home bucket `home`.
  int64_t find_from(size_t home, int64_t key) const;
  // find_from for kEmptyKey: entries are compared by slot too.
  int64_t find_empty_key(size_t home) const;
  size_t next_bucket(size_t bucket) const { return bucket + 1 == buckets_.size() ? 0 : bucket + 1; }
  // A key held in bucket `end` no longer passes buckets [first, end) (cyclically).
  void unpass(size_t first, size_t end);
  bool recency_live(RecencyEntry entry) const;
  // Drops every dead recency entry: O(entries), once every capacity + 64 inserts at most.
  void drop_dead_recency();
  // Visits the occupied slots in last_seen order (ties in filing order) while `visit(slot)`
  // returns true, dropping the dead entries and re-filing the late ones on the way.
  template <class Visit>
  void scan_recency(Visit visit);
  // Calls visit(key, slot) for every key held, in bucket order.
  template <class Visit>
  void for_each_key(Visit visit) const;
  std::span<const int64_t> ordered_victims(int64_t n);
  // kLeastFrequent: the n smallest unpinned keys from the pool, into candidates_ in order; false
  // when the pool cannot tell them (it ran out above its bound).
  bool least_frequent_from_pool(int64_t n, int64_t pinned_from);
  // Fills the pool with the `pool` smallest keys of all (pinned or not), and sets its bound.
  void fill_least_frequent_pool(int64_t pool);
  // Adds a key inserted after the pool was filled when it is below the bound.
  void pool_inserted(int64_t slot, int64_t key);

  int64_t capacity_;
  int64_t size_ = 0;
  std::vector<Bucket> buckets_;
  std::vector<Slot> slots_;
  std::vector<int64_t> keys_by_slot_;  // empty unless built with keys_by_slot
  int64_t free_head_ = kAbsent;        // the most recently freed slot
  int64_t never_used_ = 0;             // slots [never_used_, capacity_) were never taken
  std::map<int64_t, std::vector<RecencyEntry>> recency_;  // step -> entries filed under it
  int64_t recency_entries_ = 0;                           // live and dead
  std::vector<Candidate> candidates_;
  std::vector<int64_t> chosen_;
  // kLeastFrequent's pool (docs/semantics.md's order kept without a pass a call): a min-heap of
  // keys by (count, last_seen, key) as they were when pushed. Every occupied key outside it is
  // above pool_bound_ (when pool_bounded_): counts and last_seen only grow, and inserts below the
  // bound are pushed; so a popped entry whose values are unchanged is the smallest left, and one
  // whose values grew is pushed again with them (or left out, above the bound).
  std::vector<PoolEntry> pool_;
  std::vector<PoolEntry> pool_taken_;  // scratch: entries popped by one call, pushed back
  bool pool_filled_ = false;
  bool pool_bounded_ = false;  // false: every key is in the pool
  PoolEntry pool_bound_ = {};
};

// find and prefetch are on every lookup's path: inline.
inline int64_t KeyIndex::find_from(size_t home, int64_t key) const {
  if (key == kEmptyKey) [[unlikely]]
    return find_empty_key(home);
  // Ends: a bucket with a free entry is never passed (erase keeps it so), and one always exists.
  for (size_t b = home;; b = next_bucket(b)) {
    const Bucket& bucket = buckets_[b];
    // All entries compared without branches: one well-predicted branch per bucket.
    unsigned matches = 0;
    for (int i = 0; i < kBucketWidth; ++i) {
      matches |= static_cast<unsigned>(bucket.keys[i] == key) << i;
    }
    if (matches != 0) return bucket.slots[std::countr_zero(matches)];
    if (bucket.passed == 0) return kAbsent;
  }
}

inline int64_t KeyIndex::find(int64_t key) const { return find_from(home_bucket(key), key); }

inline void KeyIndex::prefetch(int64_t key) const { prefetch_line(&buckets_[home_bucket(key)]); }

}  // namespace recemb::internal

#endif  // RECEMB_STORAGE_KEY_INDEX_H_
