// The communicators that stay inside the process (src/comm/in_process_communicator.cc): the group
// of one, and groups of threads. Every rank derives from a fixed seed what every other rank sends,
// so each checks what it received on its own thread. Buffers are reused and overwritten as soon as
// a collective returns, so these tests, run under ThreadSanitizer, also check that a rank never
// reads a peer's buffer after the collective has released it.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "recemb/communicator.h"
#include "recemb/error.h"

#include "testing/error_of.h"

namespace recemb {
namespace {

// The byte at position `index` of what rank `from` sends rank `to` in round `round`: distinct
// enough that a part from the wrong rank, round or offset shows.
std::byte byte_of(uint64_t round, int from, int to, size_t index) {
  uint64_t x = round * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(from) * 0xbf58476d1ce4e5b9ULL +
               static_cast<uint64_t>(to) * 0x94d049bb133111ebULL + index;
  x ^= x >> 29;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 32;
  return static_cast<std::byte>(x & 0xff);
}

// counts[from][to] of one round, from the round's seed: sizes 0..max_bytes, a third of them zero.
std::vector<std::vector<int64_t>> part_sizes(uint64_t seed, int size, int64_t max_bytes) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> length(1, max_bytes);
  std::uniform_int_distribution<int> zero(0, 2);
  std::vector<std::vector<int64_t>> counts(static_cast<size_t>(size));
  for (std::vector<int64_t>& row : counts) {
    for (int to = 0; to < size; ++to) row.push_back(zero(rng) == 0 ? 0 : length(rng));
  }
  return counts;
}

// Runs body(rank, communicator) on one thread per rank; returns each rank's first problem, "" if
// none (gtest assertions stay on the main thread).
std::vector<std::string> on_ranks(const std::vector<std::shared_ptr<Communicator>>& communicators,
                                  const std::function<std::string(int, Communicator&)>& body) {
  std::vector<std::string> problems(communicators.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < communicators.size(); ++r) {
    threads.emplace_back([&, r] { problems[r] = body(static_cast<int>(r), *communicators[r]); });
  }
  for (std::thread& thread : threads) thread.join();
  return problems;
}

// One all_to_all of round `round` on rank `rank`, with the caller's reused buffers; "" if what
// arrived is what every sender was to send.
std::string all_to_all_round(Communicator& communicator, uint64_t round, int64_t max_bytes,
                             std::vector<std::byte>& send, std::vector<std::byte>& recv,
                             std::vector<int64_t>& recv_counts) {
  const int size = communicator.size();
  const int rank = communicator.rank();
  const std::vector<std::vector<int64_t>> counts = part_sizes(1000 + round, size, max_bytes);
  const std::vector<int64_t>& mine = counts[static_cast<size_t>(rank)];
  send.clear();
  for (int to = 0; to < size; ++to) {
    for (size_t i = 0; i < static_cast<size_t>(mine[static_cast<size_t>(to)]); ++i) {
      send.push_back(byte_of(round, rank, to, i));
    }
  }
  recv_counts.assign(static_cast<size_t>(size), -1);
  communicator.all_to_all(send, mine, recv, recv_counts);
  // Released: this rank's buffer may change at once (a peer still reading it would be a race).
  std::fill(send.begin(), send.end(), std::byte{0});

  const std::string where = "round " + std::to_string(round) + " rank " + std::to_string(rank);
  size_t at = 0;
  for (int from = 0; from < size; ++from) {
    const int64_t expected = counts[static_cast<size_t>(from)][static_cast<size_t>(rank)];
    if (recv_counts[static_cast<size_t>(from)] != expected) {
      return where + ": recv_counts[" + std::to_string(from) +
             "] = " + std::to_string(recv_counts[static_cast<size_t>(from)]) + ", expected " +
             std::to_string(expected);
    }
    for (size_t i = 0; i < static_cast<size_t>(expected); ++i, ++at) {
      if (at >= recv.size() || recv[at] != byte_of(round, from, rank, i)) {
        return where + ": byte " + std::to_string(i) + " from rank " + std::to_string(from);
      }
    }
  }
  if (recv.size() != at) {
    return where + ": received " + std::to_string(recv.size()) + " bytes, expected " +
           std::to_string(at);
  }
  return "";
}

// One all_gather of round `round`: rank q sends lengths[q] bytes (some zero).
std::string all_gather_round(Communicator& communicator, uint64_t round, int64_t max_bytes,
                             std::vector<std::byte>& send, std::vector<std::byte>& recv,
                             std::vector<int64_t>& recv_counts) {
  const int size = communicator.size();
  const int rank = communicator.rank();
  // Row 0 of a size x size matrix: one length per rank.
  const std::vector<int64_t> lengths = part_sizes(5000 + round, size, max_bytes)[0];
  send.assign(static_cast<size_t>(lengths[static_cast<size_t>(rank)]), std::byte{0});
  for (size_t i = 0; i < send.size(); ++i) send[i] = byte_of(round, rank, -1, i);
  recv_counts.assign(static_cast<size_t>(size), -1);
  communicator.all_gather(send, recv, recv_counts);
  std::fill(send.begin(), send.end(), std::byte{0});

  const std::string where = "round " + std::to_string(round) + " rank " + std::to_string(rank);
  size_t at = 0;
  for (int from = 0; from < size; ++from) {
    const int64_t expected = lengths[static_cast<size_t>(from)];
    if (recv_counts[static_cast<size_t>(from)] != expected) {
      return where + ": recv_counts[" + std::to_string(from) +
             "] = " + std::to_string(recv_counts[static_cast<size_t>(from)]) + ", expected " +
             std::to_string(expected);
    }
    for (size_t i = 0; i < static_cast<size_t>(expected); ++i, ++at) {
      if (at >= recv.size() || recv[at] != byte_of(round, from, -1, i)) {
        return where + ": byte " + std::to_string(i) + " from rank " + std::to_string(from);
      }
    }
  }
  if (recv.size() != at) {
    return where + ": received " + std::to_string(recv.size()) + " bytes, expected " +
           std::to_string(at);
  }
  return "";
}

TEST(LocalCommunicator, IsRankZeroOfOne) {
  const std::shared_ptr<Communicator> local = local_communicator();
  EXPECT_EQ(local->rank(), 0);
  EXPECT_EQ(local->size(), 1);
  EXPECT_EQ(local->name(), "local");
}

TEST(LocalCommunicator, AllToAllAndAllGatherCopy) {
  const std::shared_ptr<Communicator> local = local_communicator();
  std::vector<std::byte> send, recv(100, std::byte{7});  // stale content, longer than any message
  std::vector<int64_t> counts(1, -1);
  for (uint64_t round = 0; round < 8; ++round) {
    send.assign(static_cast<size_t>(round * 3 % 7), std::byte{0});  // 0, 3, 6, 2, 5, 1, 4, 0
    for (size_t i = 0; i < send.size(); ++i) send[i] = byte_of(round, 0, 0, i);
    const std::vector<int64_t> send_counts = {static_cast<int64_t>(send.size())};
    local->all_to_all(send, send_counts, recv, counts);
    EXPECT_EQ(recv, send) << "round " << round;
    EXPECT_EQ(counts[0], static_cast<int64_t>(send.size()));
    counts[0] = -1;
    recv.assign(50, std::byte{9});
    local->all_gather(send, recv, counts);
    EXPECT_EQ(recv, send) << "round " << round;
    EXPECT_EQ(counts[0], static_cast<int64_t>(send.size()));
  }
}

TEST(InProcessCommunicators, RejectsASizeBelowOne) {
  for (const int size : {0, -1, -5}) {
    EXPECT_THAT(
        test::error_of<InvalidArgument>([&] { in_process_communicators(size); }),
        ::testing::AllOf(::testing::HasSubstr("size"), ::testing::HasSubstr(std::to_string(size))));
  }
}

class InProcessTest : public ::testing::TestWithParam<int> {
 protected:
  int size() const { return GetParam(); }
  const std::vector<std::shared_ptr<Communicator>> communicators_ =
      in_process_communicators(GetParam());
};

TEST_P(InProcessTest, RanksAreZeroToSizeMinusOne) {
  ASSERT_EQ(communicators_.size(), static_cast<size_t>(size()));
  for (int r = 0; r < size(); ++r) {
    const Communicator& communicator = *communicators_[static_cast<size_t>(r)];
    EXPECT_EQ(communicator.rank(), r);
    EXPECT_EQ(communicator.size(), size());
    EXPECT_EQ(communicator.name(), "in-process");
  }
}

TEST_P(InProcessTest, AllToAllDeliversEveryPart) {
  for (const int64_t max_bytes : {1, 7, 300}) {
    const std::vector<std::string> problems =
        on_ranks(communicators_, [&](int, Communicator& communicator) {
          std::vector<std::byte> send, recv;
          std::vector<int64_t> recv_counts;
          return all_to_all_round(communicator, static_cast<uint64_t>(max_bytes), max_bytes, send,
                                  recv, recv_counts);
        });
    for (const std::string& problem : problems) EXPECT_EQ(problem, "") << max_bytes << " bytes";
  }
}

TEST_P(InProcessTest, AllToAllOfNothing) {
  const std::vector<std::string> problems =
      on_ranks(communicators_, [&](int, Communicator& communicator) -> std::string {
        const std::vector<int64_t> send_counts(static_cast<size_t>(size()), 0);
        std::vector<int64_t> recv_counts(static_cast<size_t>(size()), -1);
        std::vector<std::byte> recv(10, std::byte{1});
        communicator.all_to_all({}, send_counts, recv, recv_counts);
        if (!recv.empty()) return "received " + std::to_string(recv.size()) + " bytes";
        for (const int64_t count : recv_counts) {
          if (count != 0) return "a count of " + std::to_string(count);
        }
        return "";
      });
  for (const std::string& problem : problems) EXPECT_EQ(problem, "");
}

TEST_P(InProcessTest, AllGatherConcatenatesDifferentLengthsInRankOrder) {
  for (const int64_t max_bytes : {1, 5, 1000}) {
    const std::vector<std::string> problems =
        on_ranks(communicators_, [&](int, Communicator& communicator) {
          std::vector<std::byte> send, recv;
          std::vector<int64_t> recv_counts;
          return all_gather_round(communicator, static_cast<uint64_t>(max_bytes), max_bytes, send,
                                  recv, recv_counts);
        });
    for (const std::string& problem : problems) EXPECT_EQ(problem, "") << max_bytes << " bytes";
  }
}

TEST_P(InProcessTest, ManyRoundsInARowReuseTheBuffers) {
  // Collectives of both kinds, interleaved in a per-round order every rank derives, with sizes that
  // grow and shrink so the receive buffers are resized both ways while keeping their capacity.
  const int rounds = 200;
  const std::vector<std::string> problems =
      on_ranks(communicators_, [&](int, Communicator& communicator) -> std::string {
        std::vector<std::byte> send, recv;
        std::vector<int64_t> recv_counts;
        std::string first_problem;
        for (int round = 0; round < rounds; ++round) {
          const auto r = static_cast<uint64_t>(round);
          const int64_t max_bytes = round % 5 == 0 ? 2000 : 1 + round % 17;
          std::string problem =
              round % 3 == 2
                  ? all_gather_round(communicator, r, max_bytes, send, recv, recv_counts)
                  : all_to_all_round(communicator, r, max_bytes, send, recv, recv_counts);
          // Keep going after a problem: a rank that left early would leave the others waiting.
          if (first_problem.empty()) first_problem = std::move(problem);
        }
        return first_problem;
      });
  for (const std::string& problem : problems) EXPECT_EQ(problem, "");
}

TEST_P(InProcessTest, GroupsAreIndependent) {
  // Two groups of the same size used at once by separate threads, sending different data: neither
  // sees the other's.
  const std::vector<std::shared_ptr<Communicator>> other = in_process_communicators(size());
  std::vector<std::shared_ptr<Communicator>> both = communicators_;
  both.insert(both.end(), other.begin(), other.end());
  const std::vector<std::string> problems =
      on_ranks(both, [&](int index, Communicator& communicator) -> std::string {
        const auto group = static_cast<uint64_t>(index / size());
        std::vector<std::byte> send, recv;
        std::vector<int64_t> recv_counts;
        std::string first_problem;
        for (uint64_t round = 0; round < 30; ++round) {
          std::string problem =
              all_to_all_round(communicator, group * 100000 + round, 64, send, recv, recv_counts);
          if (first_problem.empty()) first_problem = std::move(problem);
        }
        return first_problem;
      });
  for (const std::string& problem : problems) EXPECT_EQ(problem, "");
}

INSTANTIATE_TEST_SUITE_P(Ranks, InProcessTest, ::testing::Values(1, 2, 3, 5),
                         [](const auto& test_info) {
                           return std::to_string(test_info.param) + "ranks";
                         });

}  // namespace
}  // namespace recemb
