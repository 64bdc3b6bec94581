// Runs alone (a group of one) and under mpirun (tests/CMakeLists.txt: -np 2 and -np 4). Every rank
// runs the same tests in the same order, draws the same random part sizes from the same seeds, and
// so knows what every rank sends: each checks what it receives against that. Checks come after
// the collectives (EXPECT, never ASSERT, before one), so a failing rank still takes part in every
// collective, and exits non-zero, which fails the mpirun job.
#include "comm/mpi_communicator.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <gtest/gtest.h>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "recemb/communicator.h"
#include "recemb/error.h"

#include "testing/error_of.h"

namespace recemb {
namespace {

// Under mpirun, only rank 0 prints GoogleTest's report; the other ranks print their failures
// only, each line marked with the rank.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(std::string rank) : rank_(std::move(rank)) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %s] %s:%d: Failure\n%s\n", rank_.c_str(),
                 result.file_name() != nullptr ? result.file_name() : "?", result.line_number(),
                 result.message());
  }
  void OnTestEnd(const ::testing::TestInfo& test) override {
    if (test.result()->Failed()) {
      std::fprintf(stderr, "[rank %s] FAILED %s.%s\n", rank_.c_str(), test.test_suite_name(),
                   test.name());
    }
  }

 private:
  std::string rank_;
};

[[maybe_unused]] const bool kQuietUnlessRankZero = [] {
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (rank == nullptr || std::string_view(rank) == "0") return false;
  ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
  delete listeners.Release(listeners.default_result_printer());
  listeners.Append(new FailurePrinter(rank));
  return true;
}();

// An integer from mpirun's environment, or `otherwise` without mpirun.
int environment_int(const char* name, int otherwise) {
  const char* value = std::getenv(name);
  return value == nullptr ? otherwise : std::atoi(value);
}

uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Appends the `count` bytes that rank `from` sends to rank `to` (to = -1: to all) in exchange
// `seed`: hashes of their position, so a part from the wrong rank, or at the wrong offset, differs.
void append_part(uint64_t seed, int from, int to, int64_t count, std::vector<std::byte>& out) {
  const uint64_t key =
      mix(mix(seed) + static_cast<uint64_t>(from) * 1000003 + static_cast<uint64_t>(to + 1) * 7919);
  const size_t start = out.size();
  out.resize(start + static_cast<size_t>(count));
  for (int64_t i = 0; i < count; i += 8) {  // 8 bytes from each hash
    const uint64_t bits = mix(key + static_cast<uint64_t>(i));
    std::memcpy(out.data() + start + i, &bits,
                static_cast<size_t>(std::min<int64_t>(8, count - i)));
  }
}

// "" when equal, else where the first difference is.
std::string first_difference(const std::vector<std::byte>& actual,
                             const std::vector<std::byte>& expected) {
  if (actual.size() != expected.size()) {
    return "size " + std::to_string(actual.size()) + ", expected " +
           std::to_string(expected.size());
  }
  if (actual.empty() || std::memcmp(actual.data(), expected.data(), actual.size()) == 0) return "";
  for (size_t i = 0; i < actual.size(); ++i) {
    if (actual[i] != expected[i]) {
      return "byte " + std::to_string(i) + " is " + std::to_string(static_cast<int>(actual[i])) +
             ", expected " + std::to_string(static_cast<int>(expected[i]));
    }
  }
  return "";
}

// A size x size matrix of part sizes (counts[from * size + to]), the same on every rank: a
// quarter are 0, the others uniform in [1, max_count].
std::vector<int64_t> random_counts(uint64_t seed, int size, int64_t max_count) {
  std::mt19937_64 random(seed);
  std::vector<int64_t> counts(static_cast<size_t>(size) * static_cast<size_t>(size));
  for (int64_t& count : counts) {
    const bool empty = random() % 4 == 0;
    count = empty || max_count == 0 ? 0 : 1 + static_cast<int64_t>(random() % max_count);
  }
  return counts;
}

// One all_to_all of the parts `counts` gives (see random_counts), with `recv` reused from the
// calls before, checked against what this rank must receive.
void check_all_to_all(Communicator& communicator, uint64_t seed, const std::vector<int64_t>& counts,
                      std::vector<std::byte>& recv) {
  const int size = communicator.size();
  const int me = communicator.rank();
  const auto at = [&](int from, int to) {
    return counts[static_cast<size_t>(from) * static_cast<size_t>(size) + static_cast<size_t>(to)];
  };
  std::vector<std::byte> send;
  std::vector<int64_t> send_counts;
  std::vector<std::byte> expected;
  std::vector<int64_t> expected_counts;
  for (int q = 0; q < size; ++q) {
    send_counts.push_back(at(me, q));
    append_part(seed, me, q, at(me, q), send);
    expected_counts.push_back(at(q, me));
    append_part(seed, q, me, at(q, me), expected);
  }
  const std::byte* before = recv.data();
  const size_t capacity = recv.capacity();
  std::vector<int64_t> recv_counts(static_cast<size_t>(size), -1);
  communicator.all_to_all(send, send_counts, recv, recv_counts);
  EXPECT_EQ(recv_counts, expected_counts) << "seed " << seed << ", rank " << me;
  EXPECT_EQ(first_difference(recv, expected), "") << "seed " << seed << ", rank " << me;
  if (capacity > 0 && recv.size() <= capacity) {
    EXPECT_EQ(recv.data(), before) << "recv reallocated; seed " << seed;
  }
}

// One all_gather of `lengths[q]` bytes from each rank q, checked likewise.
void check_all_gather(Communicator& communicator, uint64_t seed,
                      const std::vector<int64_t>& lengths, std::vector<std::byte>& recv) {
  const int me = communicator.rank();
  std::vector<std::byte> send;
  append_part(seed, me, -1, lengths[static_cast<size_t>(me)], send);
  std::vector<std::byte> expected;
  for (int q = 0; q < communicator.size(); ++q) {
    append_part(seed, q, -1, lengths[static_cast<size_t>(q)], expected);
  }
  const std::byte* before = recv.data();
  const size_t capacity = recv.capacity();
  std::vector<int64_t> recv_counts(static_cast<size_t>(communicator.size()), -1);
  communicator.all_gather(send, recv, recv_counts);
  EXPECT_EQ(recv_counts, lengths) << "seed " << seed << ", rank " << me;
  EXPECT_EQ(first_difference(recv, expected), "") << "seed " << seed << ", rank " << me;
  if (capacity > 0 && recv.size() <= capacity) {
    EXPECT_EQ(recv.data(), before) << "recv reallocated; seed " << seed;
  }
}

// Exchanges above `bytes` go in pieces while it lives (see set_mpi_message_limit).
class MessageLimit {
 public:
  explicit MessageLimit(int64_t bytes) { internal::set_mpi_message_limit(bytes); }
  ~MessageLimit() { internal::set_mpi_message_limit(INT_MAX); }
  MessageLimit(const MessageLimit&) = delete;
  MessageLimit& operator=(const MessageLimit&) = delete;
};

class MpiCommunicatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!mpi_available()) GTEST_SKIP() << "recemb was built without MPI";
    communicator_ = mpi_communicator();
  }

  std::shared_ptr<Communicator> communicator_;
};

TEST_F(MpiCommunicatorTest, IsTheSameObjectOnEveryCall) {
  EXPECT_EQ(mpi_communicator().get(), communicator_.get());
  EXPECT_EQ(mpi_communicator().get(), mpi_communicator().get());
  EXPECT_EQ(communicator_->name(), "mpi");
}

TEST_F(MpiCommunicatorTest, RankAndSizeAreMpirunsWorld) {
  EXPECT_EQ(communicator_->size(), environment_int("OMPI_COMM_WORLD_SIZE", 1));
  EXPECT_EQ(communicator_->rank(), environment_int("OMPI_COMM_WORLD_RANK", 0));
  // And every rank agrees: each rank's number, gathered, is 0, 1, ..., size - 1.
  const int rank = communicator_->rank();
  std::vector<std::byte> recv;
  std::vector<int64_t> recv_counts(static_cast<size_t>(communicator_->size()));
  communicator_->all_gather(std::as_bytes(std::span(&rank, 1)), recv, recv_counts);
  ASSERT_EQ(recv.size(), sizeof(int) * static_cast<size_t>(communicator_->size()));
  for (int q = 0; q < communicator_->size(); ++q) {
    int gathered = -1;
    std::memcpy(&gathered, recv.data() + sizeof(int) * static_cast<size_t>(q), sizeof(int));
    EXPECT_EQ(gathered, q);
  }
}

TEST_F(MpiCommunicatorTest, AllToAllRandomPartSizes) {
  std::vector<std::byte> recv;  // reused by every exchange
  uint64_t seed = 100;
  for (const int64_t max_count : {0, 1, 5, 300, 5000, 17, 0, 64}) {
    for (int round = 0; round < 4; ++round, ++seed) {
      check_all_to_all(*communicator_, seed, random_counts(seed, communicator_->size(), max_count),
                       recv);
    }
  }
}

TEST_F(MpiCommunicatorTest, AllToAllEmptyParts) {
  const int size = communicator_->size();
  const auto matrix = [&](auto count_of) {
    std::vector<int64_t> counts;
    for (int from = 0; from < size; ++from) {
      for (int to = 0; to < size; ++to) counts.push_back(count_of(from, to));
    }
    return counts;
  };
  std::vector<std::byte> recv;
  check_all_to_all(*communicator_, 1, matrix([](int, int) { return 0; }), recv);
  EXPECT_TRUE(recv.empty());
  check_all_to_all(*communicator_, 2, matrix([](int from, int to) { return from == to ? 9 : 0; }),
                   recv);
  check_all_to_all(*communicator_, 3, matrix([](int, int to) { return to == 0 ? 33 : 0; }), recv);
  check_all_to_all(*communicator_, 4, matrix([](int from, int) { return from == 0 ? 21 : 0; }),
                   recv);
  check_all_to_all(*communicator_, 5,
                   matrix([&](int from, int to) { return from == size - 1 && to == 0 ? 7 : 0; }),
                   recv);
  check_all_to_all(*communicator_, 6, matrix([](int, int) { return 0; }), recv);
  EXPECT_TRUE(recv.empty());
}

TEST_F(MpiCommunicatorTest, AllToAllLarge) {
  // 64 MiB in all, uneven between pairs.
  const int size = communicator_->size();
  const int64_t average = (int64_t{64} << 20) / (size * size);
  std::vector<int64_t> counts = random_counts(7, size, average / 2);
  for (int64_t& count : counts) count += average * 3 / 4;
  std::vector<std::byte> recv;
  check_all_to_all(*communicator_, 7, counts, recv);
  check_all_to_all(*communicator_, 8, random_counts(8, size, 1000), recv);  // smaller, same buffer
}

TEST_F(MpiCommunicatorTest, AllToAllInPiecesAboveTheMessageLimit) {
  // Part sizes below and above the limit of 1000 bytes, so that in some exchanges only some parts
  // go in pieces (several messages between one pair, received in the order sent).
  const MessageLimit limit(1000);
  std::vector<std::byte> recv;
  uint64_t seed = 200;
  for (const int64_t max_count : {3000, 50, 300, 999, 1001, 0, 2500}) {
    for (int round = 0; round < 4; ++round, ++seed) {
      check_all_to_all(*communicator_, seed, random_counts(seed, communicator_->size(), max_count),
                       recv);
    }
  }
  const MessageLimit tiny(1);  // every byte its own message
  check_all_to_all(*communicator_, 300, random_counts(300, communicator_->size(), 20), recv);
}

TEST_F(MpiCommunicatorTest, AllGatherRandomLengths) {
  std::vector<std::byte> recv;
  uint64_t seed = 400;
  for (const int64_t max_length : {0, 1, 5, 300, 5000, 17, 0, 64}) {
    for (int round = 0; round < 4; ++round, ++seed) {
      // The diagonal of a random matrix: one random length per rank, a quarter of them 0.
      const std::vector<int64_t> counts = random_counts(seed, communicator_->size(), max_length);
      std::vector<int64_t> lengths;
      for (int q = 0; q < communicator_->size(); ++q) {
        lengths.push_back(counts[static_cast<size_t>(q * communicator_->size() + q)]);
      }
      check_all_gather(*communicator_, seed, lengths, recv);
    }
  }
}

TEST_F(MpiCommunicatorTest, AllGatherEmptyAndLarge) {
  const auto size = static_cast<size_t>(communicator_->size());
  std::vector<std::byte> recv;
  check_all_gather(*communicator_, 1, std::vector<int64_t>(size, 0), recv);
  EXPECT_TRUE(recv.empty());
  std::vector<int64_t> only_last(size, 0);
  only_last.back() = 123;
  check_all_gather(*communicator_, 2, only_last, recv);
  // 64 MiB in all, uneven between ranks.
  std::vector<int64_t> lengths;
  for (size_t q = 0; q < size; ++q) {
    lengths.push_back((int64_t{64} << 20) / static_cast<int64_t>(size) + 4099 * (q % 2 ? 1 : -1));
  }
  check_all_gather(*communicator_, 3, lengths, recv);
  check_all_gather(*communicator_, 4, std::vector<int64_t>(size, 10), recv);
}

TEST_F(MpiCommunicatorTest, AllGatherInPiecesAboveTheMessageLimit) {
  const MessageLimit limit(1000);
  std::vector<std::byte> recv;
  uint64_t seed = 500;
  for (const int64_t max_length : {3000, 50, 999, 1001, 0, 2500}) {
    for (int round = 0; round < 4; ++round, ++seed) {
      std::mt19937_64 random(seed);
      std::vector<int64_t> lengths;
      for (int q = 0; q < communicator_->size(); ++q) {
        lengths.push_back(max_length == 0 ? 0 : static_cast<int64_t>(random() % max_length));
      }
      check_all_gather(*communicator_, seed, lengths, recv);
    }
  }
}

TEST_F(MpiCommunicatorTest, AlternatingCollectivesShareABuffer) {
  std::vector<std::byte> recv;
  for (uint64_t seed = 600; seed < 620; ++seed) {
    const std::vector<int64_t> counts = random_counts(seed, communicator_->size(), 200);
    if (seed % 2 == 0) {
      check_all_to_all(*communicator_, seed, counts, recv);
    } else {
      check_all_gather(*communicator_, seed,
                       std::vector<int64_t>(counts.begin(), counts.begin() + communicator_->size()),
                       recv);
    }
  }
}

// Sets an environment variable (unsets it for nullptr) while it lives, then restores it.
class EnvironmentVariable {
 public:
  EnvironmentVariable(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    set(value);
  }
  ~EnvironmentVariable() { set(old_ ? old_->c_str() : nullptr); }
  EnvironmentVariable(const EnvironmentVariable&) = delete;
  EnvironmentVariable& operator=(const EnvironmentVariable&) = delete;

 private:
  void set(const char* value) {
    if (value == nullptr) {
      unsetenv(name_);
    } else {
      setenv(name_, value, 1);
    }
  }
  const char* name_;
  std::optional<std::string> old_;
};

TEST(LaunchedProcessesTest, ComesFromTheLaunchersEnvironment) {
  {
    const EnvironmentVariable openmpi("OMPI_COMM_WORLD_SIZE", nullptr);
    const EnvironmentVariable pmi("PMI_SIZE", nullptr);
    EXPECT_EQ(launched_processes(), 0);
  }
  {
    const EnvironmentVariable openmpi("OMPI_COMM_WORLD_SIZE", nullptr);
    const EnvironmentVariable pmi("PMI_SIZE", "3");
    EXPECT_EQ(launched_processes(), 3);
  }
  {
    const EnvironmentVariable openmpi("OMPI_COMM_WORLD_SIZE", "5");
    const EnvironmentVariable pmi("PMI_SIZE", nullptr);
    EXPECT_EQ(launched_processes(), 5);
  }
}

TEST(MpiCommunicatorWithoutMpiTest, ThrowsFailedPrecondition) {
  if (mpi_available()) GTEST_SKIP() << "recemb was built with MPI";
  EXPECT_EQ(test::error_of<FailedPrecondition>([] { mpi_communicator(); }),
            "recemb was built without MPI; install libopenmpi-dev and rebuild (docs/scaling.md)");
}

}  // namespace
}  // namespace recemb
