// The counts of a dynamic table part's keys seen by training lookups but not admitted yet
// (docs/semantics.md, "Dynamic vocabularies": a key is admitted once seen min_count times). The
// keys that hold a row are storage/key_index.h's; a key is counted here until it is admitted.
//
// Exact for up to exact_limit distinct keys: a table of {key, count} entries (count 0 = empty)
// with linear probing and backward-shift deletion (no tombstones), at most 80% full, grown by
// doubling. Beyond that a count-min sketch holds the rest (4 rows of 2^16 saturating 32-bit
// counters, 1 MiB, conservative update): its counts may be too high, never too low below 2^32, so
// a key may be admitted early, never late. A key's sketch count cannot be removed: count() may stay
// > 0 for a key forgotten after the sketch counted it (an over-count only). A key that gets an
// exact entry after the sketch counted it starts from the sketch's count: a count never goes down.
//
// Thread safety: the const calls may run concurrently with each other; add, forget and clear need
// exclusive access. Allocation: only add allocates (may throw std::bad_alloc): the exact table as
// it grows (amortised; at most max(16, 2.5 * exact_limit) entries of 16 bytes) and the sketch the
// first time a key does not fit in it. Nothing else throws. Preconditions (exact_limit >= 0,
// occurrences >= 0) are checked and abort when broken: they are bugs of the caller.
#ifndef RECEMB_STORAGE_PENDING_COUNTS_H_
#define RECEMB_STORAGE_PENDING_COUNTS_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace recemb::internal {

class PendingCounts {
 public:
  // No key counted, nothing allocated.
  explicit PendingCounts(int64_t exact_limit);

  // The count of `key` (0 if never counted).
  int64_t count(int64_t key) const;
  // Prefetches, for writing, what count(key), add(key, ...) and forget(key) read first.
  void prefetch(int64_t key) const;
  // Counts `occurrences` (>= 0) more of `key`, saturating at INT64_MAX (the sketch at 2^32 - 1).
  void add(int64_t key, int64_t occurrences);
  // Forgets the exact count of `key` (called when it is admitted); see above for the sketch's.
  void forget(int64_t key);
  // Empties the counts and drops the sketch, as a new one's; keeps the memory (allocates nothing).
  void clear();

  // Exact entries held now (at most exact_limit).
  int64_t exact_size() const;
  // The (key, count) pairs held exactly, in increasing key order, and whether a sketch is in use
  // (checkpoints; add puts the pairs back).
  std::vector<std::pair<int64_t, int64_t>> exact_entries() const;
  bool sketch_in_use() const;

  // Bytes held (the exact table and the sketch).
  int64_t memory_bytes() const;

 private:
  struct Entry {
    int64_t key = 0;
    int64_t count = 0;  // 0: empty
  };

  size_t home(int64_t key) const;
  // The position of `key` in exact_ (not empty), or of the empty one where it would go.
  size_t position_of(int64_t key) const;
  void insert_exact(int64_t key, int64_t count);
  void grow_exact();
  int64_t sketch_estimate(int64_t key) const;
  void add_to_sketch(int64_t key, int64_t occurrences);

  int64_t exact_limit_;
  std::vector<Entry> exact_;  // empty until the first add
  int64_t exact_size_ = 0;
  std::vector<uint32_t> sketch_;  // empty until a key does not fit in exact_
};

}  // namespace recemb::internal

#endif  // RECEMB_STORAGE_PENDING_COUNTS_H_
