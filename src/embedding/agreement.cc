#include "embedding/agreement.h"

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "recemb/error.h"

namespace recemb {
namespace {

// What agree_on_error sends first: whether (and how) the rank failed.
enum class ErrorKind : char { kNone = 0, kInvalidArgument = 1, kOther = 2 };

std::pair<ErrorKind, std::string> describe(std::exception_ptr error) {
  try {
    std::rethrow_exception(std::move(error));
  } catch (const InvalidArgument& e) {
    return {ErrorKind::kInvalidArgument, e.what()};
  } catch (const std::exception& e) {
    return {ErrorKind::kOther, e.what()};
  } catch (...) {
    return {ErrorKind::kOther, "an exception that is not a std::exception"};
  }
}

}  // namespace

void agree_on_error(Communicator& communicator, std::exception_ptr error) {
  if (communicator.size() == 1) {
    if (error) std::rethrow_exception(error);
    return;
  }
  // Each rank sends its kind, followed by its message when it failed.
  std::vector<std::byte> mine{static_cast<std::byte>(ErrorKind::kNone)};
  if (error) {
    const auto [kind, message] = describe(error);
    mine.resize(1 + message.size());
    mine[0] = static_cast<std::byte>(kind);
    std::memcpy(mine.data() + 1, message.data(), message.size());
  }
  std::vector<std::byte> all;
  std::vector<int64_t> counts(static_cast<size_t>(communicator.size()));
  communicator.all_gather(mine, all, counts);
  size_t offset = 0;
  for (int rank = 0; rank < communicator.size(); ++rank) {
    const auto count = static_cast<size_t>(counts[static_cast<size_t>(rank)]);
    const auto reported = count == 0 ? ErrorKind::kOther : static_cast<ErrorKind>(all[offset]);
    if (reported != ErrorKind::kNone) {
      const std::string text =
          "rank " + std::to_string(rank) + ": " +
          (count > 1
               ? std::string(reinterpret_cast<const char*>(all.data() + offset + 1), count - 1)
               : std::string("failed"));
      if (reported == ErrorKind::kInvalidArgument) throw InvalidArgument(text);
      throw FailedPrecondition(text);
    }
    offset += count;
  }
}

namespace internal {

void agree_on_value(Communicator& communicator, uint64_t value, const std::string& what,
                    const std::string& why) {
  std::vector<std::byte> all;
  std::vector<int64_t> counts(static_cast<size_t>(communicator.size()));
  communicator.all_gather(std::as_bytes(std::span(&value, 1)), all, counts);
  uint64_t first = 0;
  std::memcpy(&first, all.data(), sizeof(first));
  for (int rank = 1; rank < communicator.size(); ++rank) {
    uint64_t other = 0;
    std::memcpy(&other, all.data() + static_cast<size_t>(rank) * sizeof(other), sizeof(other));
    if (other != first) {
      throw InvalidArgument("rank " + std::to_string(rank) + "'s " + what +
                            " differ from rank 0's: " + why);
    }
  }
}

}  // namespace internal
}  // namespace recemb
