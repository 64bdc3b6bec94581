#include "train/rank_errors.h"

#include <array>

#include "recemb/error.h"

namespace recemb::train {

void expect_same_on_every_rank(RankGroup& group, int64_t value, const std::string& what) {
  expect_same_on_every_rank(group.all_gather(std::array{value}), group.size(), 0, what);
}

void expect_same_on_every_rank(const std::vector<int64_t>& values, int num_ranks, size_t index,
                               const std::string& what) {
  const size_t stride = values.size() / static_cast<size_t>(num_ranks);
  const int64_t first = values[index];
  for (int q = 1; q < num_ranks; ++q) {
    const int64_t value = values[static_cast<size_t>(q) * stride + index];
    if (value != first) {
      throw InvalidArgument("rank " + std::to_string(q) + " has " + std::to_string(value) + " " +
                            what + ", rank 0 has " + std::to_string(first) +
                            ": every rank must read the same data (data.path and "
                            "data.eval_path on a file system that every rank sees)");
    }
  }
}

}  // namespace recemb::train
