#include "train/run/rank_errors.h"

#include <string>

#include "recemb/error.h"

#include "support/collectives.h"

namespace recemb::train {
namespace {

std::string different_data(int rank, int64_t value, int64_t first, const std::string& what) {
  return "rank " + std::to_string(rank) + " has " + std::to_string(value) + " " + what +
         ", rank 0 has " + std::to_string(first) +
         ": every rank must read the same data (data.path and data.eval_path on a file system "
         "that every rank sees)";
}

}  // namespace

void expect_same_on_every_rank(RankGroup& group, int64_t value, const std::string& what) {
  support::agree_on_value(group.communicator(), static_cast<uint64_t>(value),
                          [&](int rank, uint64_t other, uint64_t first) {
                            return different_data(rank, static_cast<int64_t>(other),
                                                  static_cast<int64_t>(first), what);
                          });
}

void expect_same_on_every_rank(const std::vector<int64_t>& values, int num_ranks, size_t index,
                               const std::string& what) {
  const size_t stride = values.size() / static_cast<size_t>(num_ranks);
  const int64_t first = values[index];
  for (int q = 1; q < num_ranks; ++q) {
    const int64_t value = values[static_cast<size_t>(q) * stride + index];
    if (value != first) {
      throw InvalidArgument(different_data(q, value, first, what));
    }
  }
}

}  // namespace recemb::train
