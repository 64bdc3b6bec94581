// What changed in one part of a table since the last publish (online publishing: docs/serving.md,
// "Publishing deltas"): the rows written by training steps, the keys a dynamic part removed, and
// whether anything wrote rows without saying which. Each TableState owns one, and its rows can be
// written only through TableState's two doors: the training step's (which marks the rows it
// writes here) and every other writer's (which marks the log untracked, so the next publish
// writes a base). A writer cannot skip the log.
//
// Off until start(): an Embedding that is never published keeps no bytes and marks nothing.
#ifndef RECEMB_EMBEDDING_CHANGE_LOG_H_
#define RECEMB_EMBEDDING_CHANGE_LOG_H_

#include <cstdint>
#include <span>
#include <vector>

namespace recemb::internal {

class ChangeLog {
 public:
  // Starts tracking (again) `rows` rows (a dynamic part: its slots): every row unchanged, no key
  // removed, nothing untracked.
  void start(int64_t rows);
  bool tracking() const { return !changed_.empty(); }

  // Row `row` was written by a training step. Calls for distinct rows may run at once (a byte
  // each). Nothing when not tracking.
  void mark(int64_t row) {
    if (!changed_.empty()) changed_[static_cast<size_t>(row)] = 1;
  }
  void mark_all();
  // A dynamic part's `key` lost its row (evicted, expired). Nothing when not tracking.
  void removed(int64_t key) {
    if (!changed_.empty()) removed_keys_.push_back(key);
  }
  // Rows were written by a call that does not say which (write_variable, write_dynamic_table, a
  // restore, the mutable variable_data): only a base can follow. Kept until start().
  void mark_untracked() { untracked_ = true; }
  bool untracked() const { return untracked_; }

  // A byte per row, 1 for a written one; empty when not tracking.
  std::span<const uint8_t> changed_rows() const { return changed_; }
  // The keys removed since, in order (a key may appear more than once, and may hold a row again).
  std::span<const int64_t> removed_keys() const { return removed_keys_; }
  // After a delta took the changes: every row unchanged, no key removed (still tracking).
  void clear();

 private:
  std::vector<uint8_t> changed_;
  std::vector<int64_t> removed_keys_;
  bool untracked_ = false;
};

}  // namespace recemb::internal

#endif  // RECEMB_EMBEDDING_CHANGE_LOG_H_
