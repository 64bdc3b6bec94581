#include "embedding/key_resolver.h"

#include <algorithm>

#include "support/collectives.h"
#include "util/work_split.h"

namespace recemb::internal {

void KeyResolver::begin(size_t num_states) {
  runs_.resize(num_states);
  for (std::vector<KeyRun>& state_runs : runs_) state_runs.clear();
  total_keys_ = 0;
}

void KeyResolver::add_run(size_t state, const KeyRun& run) {
  runs_[state].push_back(run);
  total_keys_ += run.size;
}

void KeyResolver::find(std::span<const TableState> states, bool absent_is_zero_row,
                       support::ThreadPool& pool) {
  tasks_.clear();
  for (size_t s = 0; s < runs_.size(); ++s) {
    for (const KeyRun& run : runs_[s]) {
      for (int64_t first = 0; first < run.size; first += kIdsPerPoolTask) {
        tasks_.push_back({s, &run, first, std::min(run.size, first + kIdsPerPoolTask)});
      }
    }
  }
  pool.parallel_for(static_cast<int64_t>(tasks_.size()),
                    [&](int64_t t, int) {
                      const FindTask& task = tasks_[static_cast<size_t>(t)];
                      const DynamicPart& dynamic = *states[task.state].dynamic();
                      dynamic.find(*task.run, task.first, task.last,
                                   absent_is_zero_row ? dynamic.zero_row() : KeyIndex::kAbsent);
                    },
                    {.work = total_keys_, .min_work_for_threads = kMinIdsForThreads});
}

void KeyResolver::admit(std::span<TableState> states, int64_t step, int64_t pinned_from,
                        Communicator& communicator, support::ThreadPool& pool) {
  support::agree(communicator, [&] {
    for (size_t s = 0; s < runs_.size(); ++s) {
      if (DynamicPart* dynamic = states[s].dynamic()) dynamic->plan(runs_[s], step, pinned_from);
    }
  });
  // Planned everywhere: commit, the sightings first, each part's split over the threads.
  const int parts = pool.num_threads();
  const auto num_states = static_cast<int64_t>(runs_.size());
  pool.parallel_for(num_states * parts,
                    [&](int64_t t, int) {
                      if (DynamicPart* dynamic = states[static_cast<size_t>(t / parts)].dynamic()) {
                        dynamic->touch_present(runs_[static_cast<size_t>(t / parts)], step,
                                               static_cast<int>(t % parts), parts);
                      }
                    },
                    {.work = total_keys_, .min_work_for_threads = kMinIdsForThreads});
  pool.parallel_for(num_states, [&](int64_t s, int) {
    TableState& state = states[static_cast<size_t>(s)];
    if (DynamicPart* dynamic = state.dynamic()) {
      dynamic->commit(runs_[static_cast<size_t>(s)], step, state.changes());
    }
  });
  pool.parallel_for(num_states * parts, [&](int64_t t, int) {
    TableState& state = states[static_cast<size_t>(t / parts)];
    if (const DynamicPart* dynamic = state.dynamic()) {
      dynamic->initialize_admitted(state.training_storage(), state.changes(),
                                   static_cast<int>(t % parts), parts);
    }
  });
}

}  // namespace recemb::internal
