// rank_slice and RankGroup (train/run/data_parallel.h): ranks are threads connected by
// recemb::in_process_communicators, each checking its own results; the references are plain
// loops in long double.
#include "train/run/data_parallel.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "recemb/communicator.h"
#include "recemb/error.h"

#include "testing/error_of.h"

namespace recemb::train {
namespace {

using ::testing::ElementsAre;

// Runs body(rank, group) on one thread per rank of a group of `size`; returns each rank's first
// problem, "" if none (gtest assertions stay on the main thread).
std::vector<std::string> on_ranks(int size,
                                  const std::function<std::string(int, RankGroup&)>& body) {
  const std::vector<std::shared_ptr<Communicator>> communicators = in_process_communicators(size);
  std::vector<std::string> problems(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      RankGroup group(communicators[static_cast<size_t>(r)]);
      try {
        problems[static_cast<size_t>(r)] = body(r, group);
      } catch (const std::exception& error) {
        problems[static_cast<size_t>(r)] = std::string("unexpected exception: ") + error.what();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  return problems;
}

// The message of the exception `call` throws if it is an `Exception`, else a description.
template <class Exception, class Call>
std::string thrown(Call&& call) {
  try {
    call();
  } catch (const Exception& error) {
    return error.what();
  } catch (const std::exception& error) {
    return std::string("wrong exception type: ") + error.what();
  }
  return "no exception";
}

TEST(RankSlice, SlicesAreContiguousInRankOrderAndEven) {
  for (int ranks = 1; ranks <= 7; ++ranks) {
    for (int64_t count = 0; count <= 50; ++count) {
      int64_t next = 0;
      for (int rank = 0; rank < ranks; ++rank) {
        const Slice slice = rank_slice(count, rank, ranks);
        SCOPED_TRACE("count " + std::to_string(count) + ", rank " + std::to_string(rank) + " of " +
                     std::to_string(ranks));
        EXPECT_EQ(slice.begin, next);
        // count / ranks, or one more.
        EXPECT_GE(slice.count, count / ranks);
        EXPECT_LE(slice.count, (count + ranks - 1) / ranks);
        next = slice.begin + slice.count;
      }
      EXPECT_EQ(next, count);
    }
  }
  EXPECT_EQ(rank_slice(10, 0, 3).count, 3);
  EXPECT_EQ(rank_slice(10, 1, 3).begin, 3);
  EXPECT_EQ(rank_slice(10, 2, 3).begin, 6);
  EXPECT_EQ(rank_slice(10, 2, 3).count, 4);
  EXPECT_EQ(rank_slice(2, 0, 3).count, 0);  // fewer items than ranks: the lower ranks go empty
  EXPECT_EQ(rank_slice(7, 0, 1).count, 7);
}

TEST(RankSlice, RejectsBadArguments) {
  EXPECT_THAT(test::error_of<InvalidArgument>([] { rank_slice(-1, 0, 2); }),
              ::testing::HasSubstr("count -1"));
  EXPECT_THAT(test::error_of<InvalidArgument>([] { rank_slice(5, 2, 2); }),
              ::testing::HasSubstr("rank 2 of 2"));
  EXPECT_THROW(rank_slice(5, -1, 2), InvalidArgument);
  EXPECT_THROW(rank_slice(5, 0, 0), InvalidArgument);
}

TEST(RankGroup, AGroupOfOneIsThisProcessAlone) {
  RankGroup alone(nullptr);
  EXPECT_EQ(alone.rank(), 0);
  EXPECT_EQ(alone.size(), 1);
  EXPECT_EQ(alone.embedding_communicator(), nullptr);
  EXPECT_EQ(alone.slice(9).count, 9);
  // Errors come back as they were thrown.
  const auto error = std::make_exception_ptr(std::runtime_error("disk full"));
  EXPECT_EQ(thrown<std::runtime_error>([&] { alone.agree(error); }), "disk full");
  alone.agree(nullptr);
  EXPECT_EQ(alone.broadcast("mine"), "mine");
  EXPECT_THAT(alone.all_gather(std::array{int64_t{5}}), ElementsAre(5));
  // The mean is the local values, bit for bit.
  const std::vector<float> local = {0.1f, -3e-30f, std::numeric_limits<float>::denorm_min()};
  std::vector<float> mean(3);
  EXPECT_EQ(alone.average(7, 0.25, local, mean), 0.25);
  EXPECT_EQ(mean, local);
  EXPECT_THROW(alone.average(7, 0.25, local, std::span(mean).first(2)), FailedPrecondition);

  const auto group = in_process_communicators(2);
  EXPECT_EQ(RankGroup(group[1]).embedding_communicator(), group[1]);
}

TEST(RankGroup, AverageIsTheGlobalBatchMeanOnEveryRankBitwise) {
  constexpr int kSize = 3;
  constexpr size_t kValues = 1000;
  // count 10: slices of 3, 3, 4; count 2: rank 0's slice is empty (its NaNs must be ignored).
  for (const int64_t count : {int64_t{10}, int64_t{2}, int64_t{3000}}) {
    SCOPED_TRACE("count " + std::to_string(count));
    // Rank q's local means and loss, from seed 17 + q.
    const auto local_of = [](int q) {
      std::mt19937_64 rng(17 + static_cast<uint64_t>(q));
      std::uniform_real_distribution<float> value(-2.0f, 2.0f);
      std::vector<float> values(kValues);
      for (float& v : values) v = value(rng);
      return values;
    };
    const auto loss_of = [](int q) { return 0.5 + 0.125 * q; };
    std::vector<std::vector<float>> means(kSize, std::vector<float>(kValues));
    std::vector<double> losses(kSize);
    const auto problems = on_ranks(kSize, [&](int rank, RankGroup& group) {
      std::vector<float> local = local_of(rank);
      double loss = loss_of(rank);
      if (rank_slice(count, rank, kSize).count == 0) {
        std::fill(local.begin(), local.end(), std::nanf(""));
        loss = std::nan("");
      }
      losses[static_cast<size_t>(rank)] =
          group.average(count, loss, local, means[static_cast<size_t>(rank)]);
      return std::string();
    });
    EXPECT_THAT(problems, ElementsAre("", "", ""));

    long double expected_loss = 0;
    std::vector<long double> expected(kValues, 0);
    for (int q = 0; q < kSize; ++q) {
      const auto share = static_cast<long double>(rank_slice(count, q, kSize).count) /
                         static_cast<long double>(count);
      if (share == 0) continue;
      const std::vector<float> local = local_of(q);
      for (size_t i = 0; i < kValues; ++i) expected[i] += share * local[i];
      expected_loss += share * loss_of(q);
    }
    for (size_t i = 0; i < kValues; ++i) {
      // Rounded once to float from a double sum: within half an ulp plus the double's error.
      ASSERT_NEAR(means[0][i], static_cast<double>(expected[i]),
                  std::abs(static_cast<double>(expected[i])) * 1e-7 + 1e-12)
          << "value " << i;
    }
    EXPECT_NEAR(losses[0], static_cast<double>(expected_loss), 1e-15);
    for (int q = 1; q < kSize; ++q) {
      EXPECT_EQ(means[static_cast<size_t>(q)], means[0]) << "rank " << q;
      EXPECT_EQ(losses[static_cast<size_t>(q)], losses[0]) << "rank " << q;
    }
  }
}

TEST(RankGroup, AverageRejectsRanksOfAnotherSizeOnEveryRank) {
  const auto problems = on_ranks(3, [](int rank, RankGroup& group) {
    std::vector<float> local(rank == 2 ? 4 : 5, 1.0f);
    std::vector<float> mean(5, -1.0f);
    const std::string message =
        thrown<FailedPrecondition>([&] { group.average(9, 1.0, local, mean); });
    if (message != "average: rank 2 sent 4 values; expected 5") return "threw: " + message;
    if (mean != std::vector<float>(5, -1.0f)) return std::string("mean changed");
    return std::string();
  });
  EXPECT_THAT(problems, ElementsAre("", "", ""));
}

TEST(RankGroup, AgreeThrowsTheLowestFailingRanksErrorOnEveryRank) {
  // No error anywhere: every rank returns.
  EXPECT_THAT(on_ranks(3,
                       [](int, RankGroup& group) {
                         group.agree(nullptr);
                         return std::string();
                       }),
              ElementsAre("", "", ""));
  // Ranks 1 (InvalidArgument) and 2 (another error) fail: rank 1's error everywhere.
  EXPECT_THAT(on_ranks(3,
                       [](int rank, RankGroup& group) {
                         std::exception_ptr error;
                         if (rank == 1)
                           error = std::make_exception_ptr(InvalidArgument("bad id 7"));
                         if (rank == 2) error = std::make_exception_ptr(std::runtime_error("disk"));
                         return thrown<InvalidArgument>([&] { group.agree(error); });
                       }),
              ElementsAre("rank 1: bad id 7", "rank 1: bad id 7", "rank 1: bad id 7"));
  // Another kind of error becomes FailedPrecondition.
  EXPECT_THAT(on_ranks(2,
                       [](int rank, RankGroup& group) {
                         std::exception_ptr error;
                         if (rank == 1) error = std::make_exception_ptr(std::runtime_error("disk"));
                         return thrown<FailedPrecondition>([&] { group.agree(error); });
                       }),
              ElementsAre("rank 1: disk", "rank 1: disk"));
  // The group goes on after an agreed error, and after an agreement without one.
  EXPECT_THAT(
      on_ranks(2,
               [](int rank, RankGroup& group) {
                 group.agree(nullptr);
                 thrown<InvalidArgument>([&] {
                   group.agree(rank == 0 ? std::make_exception_ptr(InvalidArgument("x")) : nullptr);
                 });
                 const std::string text = group.broadcast(rank == 0 ? "after" : "");
                 return text == "after" ? std::string() : "broadcast gave '" + text + "'";
               }),
      ElementsAre("", ""));
}

TEST(RankGroup, BroadcastAndAllGather) {
  const auto problems = on_ranks(3, [](int rank, RankGroup& group) {
    std::string problem;
    const std::string text = group.broadcast(rank == 0 ? "ckpt-000000000075" : "other");
    if (text != "ckpt-000000000075") problem += "broadcast gave '" + text + "'; ";
    if (!group.broadcast(rank == 0 ? "" : "other").empty()) problem += "empty broadcast; ";
    if (group.all_gather(std::array{int64_t{10} * rank - 1, int64_t{rank}}) !=
        std::vector<int64_t>{-1, 0, 9, 1, 19, 2}) {
      problem += "all_gather of values; ";
    }
    // Rank 0 sends one float, rank 1 none, rank 2 three; rank q's are q + 0.5.
    std::vector<float> mine(static_cast<size_t>(rank == 1 ? 0 : rank + 1),
                            static_cast<float>(rank) + 0.5f);
    std::vector<float> all = {42.0f, 42.0f, 42.0f, 42.0f, 42.0f, 42.0f, 42.0f};
    group.all_gather(mine, all);
    if (all != std::vector<float>{0.5f, 2.5f, 2.5f, 2.5f}) problem += "all_gather of floats; ";
    return problem;
  });
  EXPECT_THAT(problems, ElementsAre("", "", ""));
}

}  // namespace
}  // namespace recemb::train
