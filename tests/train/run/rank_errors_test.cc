#include "train/run/rank_errors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "recemb/communicator.h"
#include "recemb/error.h"

#include "testing/error_of.h"

namespace recemb::train {
namespace {

using test::error_of;
using ::testing::AllOf;
using ::testing::HasSubstr;

// Runs `body(rank, group)` on `ranks` threads connected as one group.
template <class Body>
void on_ranks(int ranks, Body body) {
  const std::vector<std::shared_ptr<Communicator>> communicators = in_process_communicators(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      RankGroup group(communicators[static_cast<size_t>(r)]);
      body(r, group);
    });
  }
  for (std::thread& thread : threads) thread.join();
}

TEST(RankErrors, AloneAnErrorIsThrownWhereItHappens) {
  RankGroup group(nullptr);
  RankErrors errors(group);
  EXPECT_THAT(error_of<InvalidArgument>(
                  [&] { errors.locally([] { throw InvalidArgument("unreadable file"); }); }),
              HasSubstr("unreadable file"));
  int runs = 0;
  errors.locally([&] { ++runs; });  // nothing kept: the next work runs
  EXPECT_EQ(runs, 1);
  EXPECT_NO_THROW(errors.sync());
}

// An error of rank 1 alone: its later local work is skipped, the collectives still run, and every
// rank throws it at the next sync(), after which the ranks go on.
TEST(RankErrors, AnErrorOfOneRankIsThrownOnEveryRankAtTheNextSync) {
  constexpr int kRanks = 3;
  std::vector<std::string> thrown(kRanks);
  std::vector<int> later_work(kRanks, 0);
  std::vector<int64_t> gathered(kRanks, 0);
  on_ranks(kRanks, [&](int r, RankGroup& group) {
    RankErrors errors(group);
    errors.locally([&] {
      if (r == 1) throw InvalidArgument("unreadable file");
    });
    errors.locally([&] { ++later_work[static_cast<size_t>(r)]; });
    gathered[static_cast<size_t>(r)] =
        static_cast<int64_t>(group.all_gather(std::vector<int64_t>{r}).size());
    thrown[static_cast<size_t>(r)] = error_of<InvalidArgument>([&] { errors.sync(); });
    errors.sync();  // the error was thrown: nothing is kept
  });
  EXPECT_EQ(later_work, (std::vector<int>{1, 0, 1}));
  EXPECT_EQ(gathered, (std::vector<int64_t>{kRanks, kRanks, kRanks}));
  for (const std::string& message : thrown) EXPECT_EQ(message, "rank 1: unreadable file");
}

TEST(RankErrors, RanksThatReadDifferentDataAreNamed) {
  constexpr int kRanks = 3;
  std::vector<std::string> thrown(kRanks);
  on_ranks(kRanks, [&](int r, RankGroup& group) {
    expect_same_on_every_rank(group, 500, "held-out examples");  // the same everywhere
    thrown[static_cast<size_t>(r)] = error_of<InvalidArgument>(
        [&] { expect_same_on_every_rank(group, r == 2 ? 499 : 500, "held-out examples"); });
  });
  for (const std::string& message : thrown) {
    EXPECT_THAT(message, AllOf(HasSubstr("rank 2 has 499 held-out examples, rank 0 has 500"),
                               HasSubstr("every rank must read the same data")));
  }
  // Entry 1 of every rank's two gathered values: {7, 3}, {8, 3}, {9, 4}.
  const std::vector<int64_t> values = {7, 3, 8, 3, 9, 4};
  EXPECT_NO_THROW(expect_same_on_every_rank({7, 3, 8, 3, 9, 3}, kRanks, 1, "steps"));
  EXPECT_THAT(error_of<InvalidArgument>(
                  [&] { expect_same_on_every_rank(values, kRanks, 1, "examples in the batch"); }),
              HasSubstr("rank 2 has 4 examples in the batch, rank 0 has 3"));
  EXPECT_THAT(error_of<InvalidArgument>(
                  [&] { expect_same_on_every_rank(values, kRanks, 0, "examples in the batch"); }),
              HasSubstr("rank 1 has 8 examples in the batch, rank 0 has 7"));
}

}  // namespace
}  // namespace recemb::train
