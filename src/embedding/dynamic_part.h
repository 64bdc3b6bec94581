// The keys of one part of a dynamic table (docs/semantics.md, "Dynamic vocabularies"): its index
// of the keys holding a row (storage/key_index.h) and the counts of the keys not admitted yet
// (storage/pending_counts.h), the admission and eviction rules, and the counters behind
// Embedding::vocabulary_stats.
//
// The part's storage (TableState) holds part.rows slots plus one more row, the zero row, which
// every absent key reads: so pooling and the update need no other path. Gradients of absent keys
// land on the zero row, which the table resets after every update (reset_zero_row).
//
// A lookup first finds the slot of every key (find: read-only, on any number of threads, ranges
// of the runs in parallel). A pure lookup stops there. A training lookup then resolves the keys
// without a slot in two halves, so that a failure changes nothing:
//   plan:   counts the occurrences of the absent keys (in run order), decides which are admitted
//           and which keys are evicted to make room; throws FailedPrecondition (when_full = error,
//           or more distinct keys than the part holds)
//   commit: records the sightings of the present keys (touch_present, in parallel tasks), then
//           evicts, inserts the admitted keys, counts the rest, and writes the slots of the
//           absent keys (the new slot, or the zero row); then initialises the admitted keys' rows
//           and slots from (table seed, key) (initialize_admitted, in parallel tasks). A present
//           key is never a victim, so touch_present and commit touch different slots.
// Every copy of a part (replicated, column-wise) resolves the same runs in the same order and so
// makes the same decisions.
#ifndef RECEMB_EMBEDDING_DYNAMIC_PART_H_
#define RECEMB_EMBEDDING_DYNAMIC_PART_H_

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "recemb/config.h"

#include "embedding/change_log.h"
#include "embedding/vocabulary_counters.h"
#include "placement/partition.h"
#include "storage/key_index.h"
#include "storage/pending_counts.h"
#include "storage/table_storage.h"

namespace recemb::internal {

// The keys of one section of a lookup and where their slots go.
struct KeyRun {
  const int64_t* keys = nullptr;
  int64_t size = 0;
  int64_t* slots = nullptr;
};

class DynamicPart {
 public:
  // `part` of dynamic `table`; `table_seed` as storage/initializer.h's table_seed.
  DynamicPart(const TableConfig& table, const TablePart& part, uint64_t table_seed);

  // The storage row every absent key reads: part.rows.
  int64_t zero_row() const { return zero_row_; }
  const KeyIndex& index() const { return index_; }
  const PendingCounts& pending() const { return pending_; }
  const VocabularyCounters& counters() const { return counters_; }

  // write_dynamic_table's share of this part: its keys become exactly `keys` (none repeated),
  // each seen once at `step`, in slots[i] (keys.size() of them; the caller writes their rows),
  // and no longer counted as pending. The counters are kept. The caller checked that they fit.
  void replace_keys(std::span<const int64_t> keys, int64_t step, std::span<int64_t> slots);
  // A restore: its keys become exactly `keys` (last seen at last_seen[i], counted counts[i]; in
  // slots[i]), its pending counts exactly `pending_keys` with `pending_counts`, its counters
  // `counters`. The caller checked the arrays (checkpoint/dynamic_checkpoint.h).
  void restore(std::span<const int64_t> keys, std::span<const int64_t> last_seen,
               std::span<const int64_t> counts, std::span<const int64_t> pending_keys,
               std::span<const int64_t> pending_counts, const VocabularyCounters& counters,
               std::span<int64_t> slots);

  // Writes the slot of keys [first, last) of `run`, or `absent` (zero_row() for a pure lookup,
  // KeyIndex::kAbsent before plan). Reads only: safe on several threads.
  void find(const KeyRun& run, int64_t first, int64_t last, int64_t absent) const;

  // The two halves of a training lookup for lookup step `step` (model step + 1), after find (with
  // absent = KeyIndex::kAbsent) over all its runs; keys last seen at a step >= pinned_from (the
  // oldest training lookup not applied yet) are never evicted.
  void plan(std::span<const KeyRun> runs, int64_t step, int64_t pinned_from);
  // Records one sighting at `step` for every occurrence of a present key of `runs` whose slot lies
  // in the part-th of `parts` equal slot ranges: `parts` calls (part in [0, parts)) may run at
  // once, each slot being touched by one of them.
  void touch_present(std::span<const KeyRun> runs, int64_t step, int part, int parts);
  // The keys it evicts are recorded in `changes` (ChangeLog::removed).
  void commit(std::span<const KeyRun> runs, int64_t step, ChangeLog& changes);
  // After commit: the parameters and slots of the keys it admitted whose index among them %
  // parts == part, from (table seed, key), each row marked in `changes`. `parts` calls may run at
  // once (distinct rows).
  void initialize_admitted(TableStorage& storage, ChangeLog& changes, int part, int parts) const;

  // TTL: at the end of the apply_gradients that completed step `completed_step`, removes the keys
  // last seen before completed_step - ttl_steps + 1 (none without a TTL), recording them in
  // `changes`; returns how many.
  int64_t expire(int64_t completed_step, int64_t pinned_from, ChangeLog& changes);

  // Sets the zero row's parameters back to 0 (after an update wrote to it).
  void reset_zero_row(TableStorage& storage) const;

 private:
  // The distinct absent keys of a lookup, in order of first occurrence.
  struct Distinct {
    int64_t key;
    int64_t occurrences;
    int64_t slot;  // set by commit: the new slot, or the zero row
    bool admitted;
  };
  // Index of `key` in distinct_, adding it (open addressing over distinct_positions_).
  uint32_t distinct_index(int64_t key);
  // Marks (or unmarks) in in_lookup_ the slots of the present keys of `runs`; returns how many
  // distinct slots were newly marked.
  int64_t mark_present(std::span<const KeyRun> runs, bool mark);
  // Erases the keys of the slots in victims_, recording them in `changes`.
  void evict_victims(ChangeLog& changes);

  TableConfig table_;
  DynamicVocabulary vocabulary_;
  int64_t first_column_;
  int64_t columns_;
  uint64_t table_seed_;
  int64_t zero_row_;
  KeyIndex index_;
  PendingCounts pending_;
  VocabularyCounters counters_;
  // The plan, and its scratch (reused; no allocation once grown).
  std::vector<Distinct> distinct_;
  std::vector<uint32_t> distinct_positions_;   // open addressing: index + 1, 0 empty
  std::vector<uint32_t> occurrence_distinct_;  // per absent key of the runs, in order
  std::vector<uint8_t> in_lookup_;             // per slot: a present key of this lookup
  std::vector<int64_t> victims_;
  int64_t admitted_ = 0;
  struct KeySlot {
    int64_t key;
    int64_t slot;
  };
  std::vector<KeySlot> admitted_rows_;  // by the last commit, in order
};

// The lookup steps of the training lookups not applied yet (their keys are pinned). Shared
// between an Embedding and the LookupBatches holding them, which may outlive it or be destroyed on
// another thread: hence the lock.
class PendingLookups {
 public:
  void add(int64_t step);
  void remove(int64_t step);
  // The smallest step pending, or INT64_MAX when none.
  int64_t oldest() const;

 private:
  mutable std::mutex mutex_;
  std::map<int64_t, int64_t> steps_;  // step -> lookups pending at it
};

// A batch's registration in PendingLookups: released on apply, on reuse and on destruction.
class PendingLookup {
 public:
  PendingLookup() = default;
  ~PendingLookup() { release(); }
  PendingLookup(PendingLookup&&) = delete;
  PendingLookup& operator=(PendingLookup&&) = delete;
  void hold(const std::shared_ptr<PendingLookups>& lookups, int64_t step);
  void release();

 private:
  std::weak_ptr<PendingLookups> lookups_;
  int64_t step_ = 0;
};

}  // namespace recemb::internal

#endif  // RECEMB_EMBEDDING_DYNAMIC_PART_H_
