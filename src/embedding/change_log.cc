#include "embedding/change_log.h"

#include <algorithm>

namespace recemb::internal {

void ChangeLog::start(int64_t rows) {
  changed_.assign(static_cast<size_t>(rows), 0);
  removed_keys_.clear();
  untracked_ = false;
}

void ChangeLog::mark_all() { std::fill(changed_.begin(), changed_.end(), 1); }

void ChangeLog::clear() {
  std::fill(changed_.begin(), changed_.end(), 0);
  removed_keys_.clear();
}

}  // namespace recemb::internal
