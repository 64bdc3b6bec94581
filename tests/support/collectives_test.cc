// support/collectives.h and agree_on_error (recemb/communicator.h): ranks are threads connected by
// in_process_communicators, checked against what each rank gave. For agree: Every rank passes ->
// every rank returns; some rank fails
// -> every rank throws the lowest failing rank's error as "rank R: <message>", of its type
// (InvalidArgument, FailedPrecondition, DataLoss, ResourceExhausted, std::system_error with its
// errno; anything else
// becomes FailedPrecondition); one rank alone -> the validation's own exception, untouched. These
// tests also run under ThreadSanitizer.
#include "support/collectives.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <gtest/gtest.h>
#include <memory>
#include <ostream>
#include <random>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "recemb/communicator.h"
#include "recemb/error.h"

namespace recemb::support {
namespace {

// What one rank's call did.
struct Outcome {
  enum Kind {
    kReturned,
    kInvalidArgument,
    kFailedPrecondition,
    kDataLoss,
    kResourceExhausted,
    kSystemError,
    kOther
  } kind = kReturned;
  std::string message;
  int error_number = 0;  // of a kSystemError

  bool operator==(const Outcome&) const = default;
};

std::ostream& operator<<(std::ostream& out, const Outcome& outcome) {
  static const char* const kNames[] = {"returned",       "InvalidArgument",   "FailedPrecondition",
                                       "DataLoss",       "ResourceExhausted", "system_error",
                                       "other exception"};
  return out << kNames[outcome.kind] << " \"" << outcome.message << "\" errno "
             << outcome.error_number;
}

Outcome outcome_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const InvalidArgument& error) {
    return {Outcome::kInvalidArgument, error.what()};
  } catch (const FailedPrecondition& error) {
    return {Outcome::kFailedPrecondition, error.what()};
  } catch (const DataLoss& error) {
    return {Outcome::kDataLoss, error.what()};
  } catch (const ResourceExhausted& error) {
    return {Outcome::kResourceExhausted, error.what()};
  } catch (const std::system_error& error) {
    return {Outcome::kSystemError, error.what(), error.code().value()};
  } catch (const std::exception& error) {
    return {Outcome::kOther, error.what()};
  }
  return {};
}

// Runs body(rank, communicator) on one thread per communicator and returns each rank's outcome.
std::vector<Outcome> on_ranks(const std::vector<std::shared_ptr<Communicator>>& communicators,
                              const std::function<void(int, Communicator&)>& body) {
  std::vector<Outcome> outcomes(communicators.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < communicators.size(); ++r) {
    threads.emplace_back([&, r] {
      outcomes[r] = outcome_of([&] { body(static_cast<int>(r), *communicators[r]); });
    });
  }
  for (std::thread& thread : threads) thread.join();
  return outcomes;
}

// What a rank's validation does in one agreement.
enum class Failure {
  kNone,
  kInvalidArgument,
  kFailedPrecondition,
  kDataLoss,
  kResourceExhausted,
  kNoSpace,  // std::system_error ENOSPC
  kRuntimeError
};

// The errno and its text of Failure::kNoSpace.
constexpr int kNoSpaceErrno = ENOSPC;
std::string no_space_text() { return ": " + std::generic_category().message(kNoSpaceErrno); }

void fail(Failure failure, const std::string& message) {
  switch (failure) {
    case Failure::kNone:
      return;
    case Failure::kInvalidArgument:
      throw InvalidArgument(message);
    case Failure::kFailedPrecondition:
      throw FailedPrecondition(message);
    case Failure::kDataLoss:
      throw DataLoss(message);
    case Failure::kResourceExhausted:
      throw ResourceExhausted(message);
    case Failure::kNoSpace:
      throw std::system_error(kNoSpaceErrno, std::generic_category(), message);
    case Failure::kRuntimeError:
      throw std::runtime_error(message);
  }
}

// The outcome every rank must see, from the header's contract, for ranks failing as `failures`.
Outcome expected_outcome(const std::vector<Failure>& failures,
                         const std::vector<std::string>& messages) {
  for (size_t r = 0; r < failures.size(); ++r) {
    if (failures[r] == Failure::kNone) continue;
    const std::string text = "rank " + std::to_string(r) + ": " + messages[r];
    switch (failures[r]) {
      case Failure::kInvalidArgument:
        return {Outcome::kInvalidArgument, text};
      case Failure::kDataLoss:
        return {Outcome::kDataLoss, text};
      case Failure::kResourceExhausted:
        return {Outcome::kResourceExhausted, text};
      case Failure::kNoSpace:  // strerror once, as the failing rank's own error said it
        return {Outcome::kSystemError, text + no_space_text(), kNoSpaceErrno};
      default:
        return {Outcome::kFailedPrecondition, text};
    }
  }
  return {};
}

std::vector<Outcome> agree_with(const std::vector<std::shared_ptr<Communicator>>& communicators,
                                const std::vector<Failure>& failures,
                                const std::vector<std::string>& messages) {
  return on_ranks(communicators, [&](int rank, Communicator& communicator) {
    const auto r = static_cast<size_t>(rank);
    agree(communicator, [&] { fail(failures[r], messages[r]); });
  });
}

std::vector<std::string> messages_for(size_t size) {
  std::vector<std::string> messages;
  for (size_t r = 0; r < size; ++r) {
    messages.push_back("feature 'f" + std::to_string(r) + "': id " + std::to_string(100 + r) +
                       " out of range");
  }
  return messages;
}

class AgreementTest : public ::testing::TestWithParam<int> {
 protected:
  int size() const { return GetParam(); }
  const std::vector<std::shared_ptr<Communicator>> communicators_ =
      in_process_communicators(GetParam());
  const std::vector<std::string> messages_ = messages_for(static_cast<size_t>(GetParam()));
};

TEST_P(AgreementTest, ReturnsOnEveryRankWhenEveryRankPasses) {
  const std::vector<Failure> none(static_cast<size_t>(size()), Failure::kNone);
  for (const Outcome& outcome : agree_with(communicators_, none, messages_)) {
    EXPECT_EQ(outcome, Outcome{});
  }
  // agree_on_error itself, with no error anywhere.
  for (const Outcome& outcome : on_ranks(communicators_, [](int, Communicator& communicator) {
         agree_on_error(communicator, nullptr);
       })) {
    EXPECT_EQ(outcome, Outcome{});
  }
}

// agree_on_error itself: the last rank's error (an empty message) reaches every rank.
TEST_P(AgreementTest, AgreeOnErrorNamesTheRankOfAnEmptyMessage) {
  const int last = size() - 1;
  for (const Outcome& outcome :
       on_ranks(communicators_, [last](int rank, Communicator&communicator) {
         agree_on_error(communicator,
                        rank == last ? std::make_exception_ptr(std::runtime_error("")) : nullptr);
       })) {
    EXPECT_EQ(outcome,
              (Outcome{Outcome::kFailedPrecondition, "rank " + std::to_string(last) + ": failed"}));
  }
}

TEST_P(AgreementTest, OneRanksInvalidArgumentIsThrownOnEveryRank) {
  for (int failing = 0; failing < size(); ++failing) {
    std::vector<Failure> failures(static_cast<size_t>(size()), Failure::kNone);
    failures[static_cast<size_t>(failing)] = Failure::kInvalidArgument;
    const Outcome expected{Outcome::kInvalidArgument, "rank " + std::to_string(failing) + ": " +
                                                          messages_[static_cast<size_t>(failing)]};
    const std::vector<Outcome> outcomes = agree_with(communicators_, failures, messages_);
    for (int r = 0; r < size(); ++r) {
      EXPECT_EQ(outcomes[static_cast<size_t>(r)], expected)
          << "rank " << r << " failing " << failing;
    }
  }
}

// Each type of recemb/error.h arrives as itself (a system_error with its errno); any other
// exception as FailedPrecondition.
TEST_P(AgreementTest, EveryRankThrowsTheFailingRanksType) {
  const std::string failing_text = "rank " + std::to_string(size() - 1) + ": ";
  const std::string& message = messages_.back();
  for (const auto& [failure, expected] : std::vector<std::pair<Failure, Outcome>>{
           {Failure::kFailedPrecondition, {Outcome::kFailedPrecondition, failing_text + message}},
           {Failure::kDataLoss, {Outcome::kDataLoss, failing_text + message}},
           {Failure::kResourceExhausted, {Outcome::kResourceExhausted, failing_text + message}},
           {Failure::kNoSpace,
            {Outcome::kSystemError, failing_text + message + no_space_text(), ENOSPC}},
           {Failure::kRuntimeError, {Outcome::kFailedPrecondition, failing_text + message}}}) {
    std::vector<Failure> failures(static_cast<size_t>(size()), Failure::kNone);
    failures.back() = failure;
    for (const Outcome& outcome : agree_with(communicators_, failures, messages_)) {
      EXPECT_EQ(outcome, expected);
    }
  }
}

// A system_error's errno arrives whatever its value, from a std::filesystem error too.
TEST_P(AgreementTest, SystemErrorsKeepTheirErrno) {
  for (const int error_number : {ENOENT, EIO, EACCES, ENOSPC}) {
    const std::error_code code(error_number, std::generic_category());
    for (const Outcome& outcome : on_ranks(communicators_, [&](int rank, Communicator&group) {
           agree(group, [&] {
             if (rank == 0) throw std::filesystem::filesystem_error("rename", "/a", "/b", code);
           });
         })) {
      EXPECT_EQ(outcome.kind, Outcome::kSystemError);
      EXPECT_EQ(outcome.error_number, error_number);
      EXPECT_EQ(outcome.message.rfind("rank 0: ", 0), 0u) << outcome.message;
      EXPECT_NE(outcome.message.find("rename"), std::string::npos) << outcome.message;
    }
  }
}

TEST_P(AgreementTest, TheLowestFailingRanksErrorWinsOnEveryRank) {
  if (size() < 2) GTEST_SKIP() << "needs two ranks";
  const size_t last = static_cast<size_t>(size()) - 1;
  // The lowest failure is InvalidArgument, a higher one something else, and the other way round.
  for (const auto& [low, high] : std::vector<std::pair<Failure, Failure>>{
           {Failure::kInvalidArgument, Failure::kRuntimeError},
           {Failure::kRuntimeError, Failure::kInvalidArgument},
           {Failure::kNoSpace, Failure::kDataLoss},
           {Failure::kDataLoss, Failure::kNoSpace},
           {Failure::kInvalidArgument, Failure::kInvalidArgument}}) {
    for (size_t first = 0; first < last; ++first) {
      std::vector<Failure> failures(static_cast<size_t>(size()), Failure::kNone);
      failures[first] = low;
      failures[last] = high;
      const Outcome expected = expected_outcome(failures, messages_);
      ASSERT_NE(expected.kind, Outcome::kReturned);
      EXPECT_EQ(expected.message.rfind("rank " + std::to_string(first) + ": ", 0), 0u);
      for (const Outcome& outcome : agree_with(communicators_, failures, messages_)) {
        EXPECT_EQ(outcome, expected) << "ranks " << first << " and " << last << " fail";
      }
    }
  }
}

TEST_P(AgreementTest, LongMessagesArriveWhole) {
  std::vector<Failure> failures(static_cast<size_t>(size()), Failure::kInvalidArgument);
  std::vector<std::string> messages;
  for (int r = 0; r < size(); ++r) {
    // Lengths differ per rank; a byte that is not ASCII. (No '\0': what() is a C string.)
    std::string message(static_cast<size_t>(10000 + 37 * r), 'x');
    message[6] = static_cast<char>(0xff);
    message.back() = static_cast<char>('a' + r);
    messages.push_back(message);
  }
  const Outcome expected = expected_outcome(failures, messages);
  for (const Outcome& outcome : agree_with(communicators_, failures, messages)) {
    EXPECT_EQ(outcome.kind, expected.kind);
    EXPECT_TRUE(outcome.message == expected.message) << "length " << outcome.message.size();
  }
}

TEST_P(AgreementTest, ManyAgreementsInARowReuseTheCommunicators) {
  // A fixed-seed schedule every rank knows: per round, each rank fails with some probability and
  // some kind. Each rank checks its own outcome against the contract in the same thread.
  const uint64_t seed = 77 + static_cast<uint64_t>(size());
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const int rounds = 60;
  std::mt19937_64 rng(seed);
  std::vector<std::vector<Failure>> schedule(rounds);
  std::uniform_int_distribution<int> pick(0, 11);
  for (std::vector<Failure>& failures : schedule) {
    for (int r = 0; r < size(); ++r) {
      const int p = pick(rng);
      failures.push_back(p < 7    ? Failure::kNone
                         : p < 8  ? Failure::kInvalidArgument
                         : p < 9  ? Failure::kRuntimeError
                         : p < 10 ? Failure::kDataLoss
                         : p < 11 ? Failure::kNoSpace
                                  : Failure::kFailedPrecondition);
    }
  }
  std::vector<std::vector<Outcome>> seen(static_cast<size_t>(size()));
  on_ranks(communicators_, [&](int rank, Communicator& communicator) {
    const auto me = static_cast<size_t>(rank);
    for (int round = 0; round < rounds; ++round) {
      const std::vector<Failure>& failures = schedule[static_cast<size_t>(round)];
      seen[me].push_back(outcome_of([&] {
        agree(communicator,
              [&] { fail(failures[me], "round " + std::to_string(round) + " " + messages_[me]); });
      }));
    }
  });
  int failed_rounds = 0;
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::string> messages;
    for (const std::string& m : messages_)
      messages.push_back("round " + std::to_string(round) + " " + m);
    const Outcome expected = expected_outcome(schedule[static_cast<size_t>(round)], messages);
    failed_rounds += expected.kind == Outcome::kReturned ? 0 : 1;
    for (int r = 0; r < size(); ++r) {
      EXPECT_EQ(seen[static_cast<size_t>(r)][static_cast<size_t>(round)], expected)
          << "round " << round << " rank " << r;
    }
  }
  // The schedule mixes passing and failing rounds (else the test would prove less than it says).
  EXPECT_GT(failed_rounds, 0);
  EXPECT_LT(failed_rounds, rounds);
}

INSTANTIATE_TEST_SUITE_P(Ranks, AgreementTest, ::testing::Values(2, 3, 4, 5),
                         [](const auto& test_info) {
                           return std::to_string(test_info.param) + "ranks";
                         });

// One rank: no exchange; the validation's exception propagates as it was thrown.
TEST(Agreement, OneRankPropagatesTheOriginalException) {
  const std::vector<std::shared_ptr<Communicator>> groups_of_one = {local_communicator(),
                                                                    in_process_communicators(1)[0]};
  for (const std::shared_ptr<Communicator>& communicator : groups_of_one) {
    SCOPED_TRACE(std::string(communicator->name()));
    EXPECT_EQ(outcome_of([&] { agree(*communicator, [] {}); }), Outcome{});
    EXPECT_EQ(outcome_of([&] { agree(*communicator, [] { throw InvalidArgument("bad id 7"); }); }),
              (Outcome{Outcome::kInvalidArgument, "bad id 7"}));
    EXPECT_EQ(
        outcome_of([&] { agree(*communicator, [] { throw FailedPrecondition("no lookup"); }); }),
        (Outcome{Outcome::kFailedPrecondition, "no lookup"}));
    // Not turned into FailedPrecondition: the exact type arrives.
    try {
      agree(*communicator, [] { throw std::out_of_range("index 9"); });
      ADD_FAILURE() << "no exception";
    } catch (const std::out_of_range& error) {
      EXPECT_STREQ(error.what(), "index 9");
    }
  }
}

// agree_on_error with one rank: no exchange; the error itself is rethrown.
TEST(Agreement, OneRankAgreeOnErrorRethrowsTheErrorItself) {
  const std::shared_ptr<Communicator> communicator = local_communicator();
  EXPECT_EQ(outcome_of([&] { agree_on_error(*communicator, nullptr); }), Outcome{});
  EXPECT_EQ(outcome_of([&] {
              agree_on_error(*communicator, std::make_exception_ptr(InvalidArgument("bad")));
            }),
            (Outcome{Outcome::kInvalidArgument, "bad"}));
  try {
    agree_on_error(*communicator, std::make_exception_ptr(std::out_of_range("index 9")));
    ADD_FAILURE() << "no exception";
  } catch (const std::out_of_range& error) {
    EXPECT_STREQ(error.what(), "index 9");
  }
}

// Each rank's values, random in number (0 included) and content; what every rank must receive
// is their concatenation in rank order, built here from the inputs.
TEST_P(AgreementTest, AllGatherConcatenatesInRankOrderAndBroadcastGivesRankZerosText) {
  std::mt19937_64 rng(41 + static_cast<uint64_t>(size()));
  std::vector<std::vector<double>> given(static_cast<size_t>(size()));
  std::vector<double> expected;
  std::vector<int64_t> expected_counts;
  for (std::vector<double>& values : given) {
    values.resize(rng() % 5);
    for (double& value : values) value = std::ldexp(static_cast<double>(rng() % 1000), -3);
    expected.insert(expected.end(), values.begin(), values.end());
    expected_counts.push_back(static_cast<int64_t>(values.size()));
  }
  std::vector<std::vector<double>> received(static_cast<size_t>(size()));
  std::vector<std::vector<int64_t>> counts(static_cast<size_t>(size()));
  std::vector<std::string> texts(static_cast<size_t>(size()));
  const auto outcomes = on_ranks(communicators_, [&](int rank, Communicator& communicator) {
    const auto r = static_cast<size_t>(rank);
    std::vector<std::byte> bytes;
    for (int round = 0; round < 3; ++round) {  // buffers reused
      all_gather(communicator, std::span<const double>(given[r]), received[r], counts[r], bytes);
    }
    texts[r] = broadcast(communicator, rank == 0 ? std::string("from rank 0\0!", 13) : "other");
  });
  for (size_t r = 0; r < received.size(); ++r) {
    EXPECT_EQ(outcomes[r], Outcome{});
    EXPECT_EQ(received[r], expected) << "rank " << r;
    EXPECT_EQ(counts[r], expected_counts) << "rank " << r;
    EXPECT_EQ(texts[r], std::string("from rank 0\0!", 13)) << "rank " << r;
  }
}

TEST_P(AgreementTest, UnionOverRanksIsEveryRanksValuesSortedOnce) {
  std::mt19937_64 rng(43 + static_cast<uint64_t>(size()));
  std::vector<std::vector<int64_t>> given(static_cast<size_t>(size()));
  std::set<int64_t> expected;
  for (std::vector<int64_t>& values : given) {
    for (uint64_t n = rng() % 6; n > 0; --n) values.push_back(static_cast<int64_t>(rng() % 9) - 4);
    expected.insert(values.begin(), values.end());
  }
  std::vector<std::vector<int64_t>> merged(static_cast<size_t>(size()));
  on_ranks(communicators_, [&](int rank, Communicator& communicator) {
    merged[static_cast<size_t>(rank)] =
        union_over_ranks(communicator, given[static_cast<size_t>(rank)]);
  });
  for (const std::vector<int64_t>& values : merged) {
    EXPECT_EQ(values, std::vector<int64_t>(expected.begin(), expected.end()));
  }
}

// Equal values pass on every rank; otherwise every rank throws, naming the lowest rank that
// differs from rank 0 with its value and rank 0's.
TEST_P(AgreementTest, AgreeOnValueNamesTheLowestRankThatDiffers) {
  for (int differing = 1; differing <= size(); ++differing) {  // size(): none differs
    const auto outcomes = on_ranks(communicators_, [&](int rank, Communicator& communicator) {
      const uint64_t value = rank >= differing ? 100 + static_cast<uint64_t>(rank) : 7;
      agree_on_value(communicator, value, [](int r, uint64_t mine, uint64_t first) {
        return "rank " + std::to_string(r) + " has " + std::to_string(mine) + ", rank 0 " +
               std::to_string(first);
      });
      agree_on_value(communicator, 5, "tables", "each rank passes the same");
    });
    const Outcome expected = differing == size()
                                 ? Outcome{}
                                 : Outcome{Outcome::kInvalidArgument,
                                           "rank " + std::to_string(differing) + " has " +
                                               std::to_string(100 + differing) + ", rank 0 7"};
    for (const Outcome& outcome : outcomes) EXPECT_EQ(outcome, expected) << differing;
  }
  const auto outcomes = on_ranks(communicators_, [&](int rank, Communicator& communicator) {
    agree_on_value(communicator, rank == size() - 1 ? 1 : 0, "tables", "each rank passes the same");
  });
  for (const Outcome& outcome : outcomes) {
    EXPECT_EQ(outcome, (Outcome{Outcome::kInvalidArgument,
                                "rank " + std::to_string(size() - 1) +
                                    "'s tables differ from rank 0's: each rank passes the same"}));
  }
}

// One rank: nothing exchanged, each collective its local result.
TEST(Collectives, OneRankExchangesNothing) {
  const std::shared_ptr<Communicator> communicator = local_communicator();
  Communicator& alone = *communicator;
  EXPECT_EQ(broadcast(alone, "text"), "text");
  EXPECT_EQ(union_over_ranks(alone, {3, 1, 3, -2}), (std::vector<int64_t>{-2, 1, 3}));
  EXPECT_EQ(all_gather(alone, std::span<const int>(std::vector<int>{4, 5})),
            (std::vector<int>{4, 5}));
  agree_on_value(alone, 9, "x", "y");
}

}  // namespace
}  // namespace recemb::support
