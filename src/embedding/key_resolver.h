// The dynamic-key protocol of one lookup (embedding/dynamic_part.h) over the parts of dynamic
// tables this rank holds, run in one place: the caller adds the key runs of each part, then
//   find:  every key's slot, in tasks of about kIdsPerPoolTask keys over all runs, on the pool;
//   admit: (a training lookup) plan, agreed across the ranks, so that a refusal anywhere changes
//          nothing anywhere; then the sightings, commit and the admitted rows' initial values,
//          each part's work split over the pool's threads.
// Owns its scratch (the runs, the tasks): no allocation once grown.
#ifndef RECEMB_EMBEDDING_KEY_RESOLVER_H_
#define RECEMB_EMBEDDING_KEY_RESOLVER_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "recemb/communicator.h"

#include "embedding/dynamic_part.h"
#include "embedding/table_state.h"
#include "support/thread_pool.h"

namespace recemb::internal {

class KeyResolver {
 public:
  // Starts a lookup over `num_states` parts (Model::states): no runs yet.
  void begin(size_t num_states);
  // Adds a run of keys of the dynamic part states[state], whose slots go to run.slots. Every copy
  // of a part must get the same runs in the same order (they then make the same decisions).
  void add_run(size_t state, const KeyRun& run);

  // Writes every key's slot: a present key's, else `absent_is_zero_row` ? the part's zero row (a
  // pure lookup) : KeyIndex::kAbsent (before admit). Reads only.
  void find(std::span<const TableState> states, bool absent_is_zero_row, support::ThreadPool& pool);

  // A training lookup of step `step` (model step + 1), after find(states, false, ...): plans
  // every part, agreeing on the outcome with the other ranks of `communicator` (a refusal throws
  // on every rank, nothing changed), then commits, admitting keys (their rows initialised and
  // marked in the parts' change logs) and evicting others. Keys last seen at a step >=
  // pinned_from are never evicted.
  void admit(std::span<TableState> states, int64_t step, int64_t pinned_from,
             Communicator& communicator, support::ThreadPool& pool);

 private:
  // One parallel task of find: keys [first, last) of a run of states[state].
  struct FindTask {
    size_t state;
    const KeyRun* run;
    int64_t first;
    int64_t last;
  };

  std::vector<std::vector<KeyRun>> runs_;  // per state: its runs, in order
  std::vector<FindTask> tasks_;
  int64_t total_keys_ = 0;
};

}  // namespace recemb::internal

#endif  // RECEMB_EMBEDDING_KEY_RESOLVER_H_
