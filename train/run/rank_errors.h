// How the ranks of a data-parallel run (trainer.h) meet errors together: an error that one rank
// meets alone in rank-local work (reading data, writing outputs, a non-finite value in its slice)
// is kept until the next exchange and then thrown on every rank, so that no rank is left waiting
// in a collective; and the values every rank must share (what it read) are compared.
#ifndef RECEMB_TRAIN_RUN_RANK_ERRORS_H_
#define RECEMB_TRAIN_RUN_RANK_ERRORS_H_

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "train/run/data_parallel.h"

namespace recemb::train {

class RankErrors {
 public:
  // The errors of this rank of `group` (which must outlive this).
  explicit RankErrors(RankGroup& group) : group_(group) {}

  // Runs rank-local work (no collective inside). Alone, its exceptions propagate as they come.
  // With several ranks, an exception is kept until the next sync() instead: a rank that threw
  // here alone would leave the others waiting in their next collective. Once a rank keeps an
  // error, its local work is skipped until then (collectives still run, on valid inputs).
  template <class Work>
  void locally(Work&& work) {
    if (group_.size() == 1) {
      work();
      return;
    }
    if (error_) return;
    try {
      work();
    } catch (...) {
      error_ = std::current_exception();
    }
  }

  // Collective: when some rank keeps an error from locally(), every rank throws it ("rank R:
  // <message>"). Called before anything relies on the results of local work.
  void sync() { group_.agree(std::exchange(error_, nullptr)); }

 private:
  RankGroup& group_;
  std::exception_ptr error_;  // kept by locally() until sync()
};

// Collective: throws InvalidArgument on every rank of `group` when the ranks' `value`s differ
// (`what` names it, e.g. "held-out examples": the ranks must read the same data).
void expect_same_on_every_rank(RankGroup& group, int64_t value, const std::string& what);

// The same for entry `index` of every rank's values gathered by RankGroup::all_gather over
// `num_ranks` ranks (each rank's values.size() / num_ranks of them, in rank order): not itself a
// collective.
void expect_same_on_every_rank(const std::vector<int64_t>& values, int num_ranks, size_t index,
                               const std::string& what);

}  // namespace recemb::train

#endif  // RECEMB_TRAIN_RUN_RANK_ERRORS_H_
