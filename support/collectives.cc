#include "support/collectives.h"

#include <algorithm>
#include <cstring>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "recemb/error.h"

namespace recemb {
namespace {

// What agree_on_error sends first: whether the rank failed, and with which type of error.
enum class ErrorKind : char {
  kNone,
  kInvalidArgument,
  kFailedPrecondition,
  kDataLoss,
  kResourceExhausted,
  kSystemError,  // followed by the errno (int32_t)
  kOther,        // any other exception: FailedPrecondition on every rank
};

// A failed rank's report: its kind, the errno of a system_error, and its message.
struct Report {
  ErrorKind kind = ErrorKind::kOther;
  int32_t error_number = 0;
  std::string message;
};

// The message of a system_error without the ": <strerror>" that its constructor appended, so that
// the rethrown one (which appends it again) says it once.
std::string without_error_text(const std::system_error& error) {
  std::string message = error.what();
  const std::string suffix = ": " + error.code().message();
  if (message.ends_with(suffix)) message.resize(message.size() - suffix.size());
  return message;
}

Report describe(std::exception_ptr error) {
  try {
    std::rethrow_exception(std::move(error));
  } catch (const InvalidArgument& e) {
    return {ErrorKind::kInvalidArgument, 0, e.what()};
  } catch (const FailedPrecondition& e) {
    return {ErrorKind::kFailedPrecondition, 0, e.what()};
  } catch (const DataLoss& e) {
    return {ErrorKind::kDataLoss, 0, e.what()};
  } catch (const ResourceExhausted& e) {
    return {ErrorKind::kResourceExhausted, 0, e.what()};
  } catch (const std::system_error& e) {
    const std::error_category& category = e.code().category();
    if (category == std::generic_category() || category == std::system_category()) {
      return {ErrorKind::kSystemError, e.code().value(), without_error_text(e)};
    }
    return {ErrorKind::kOther, 0, e.what()};
  } catch (const std::exception& e) {
    return {ErrorKind::kOther, 0, e.what()};
  } catch (...) {
    return {ErrorKind::kOther, 0, "an exception that is not a std::exception"};
  }
}

std::vector<std::byte> encode(const Report& report) {
  std::vector<std::byte> bytes{static_cast<std::byte>(report.kind)};
  if (report.kind == ErrorKind::kSystemError) {
    bytes.resize(1 + sizeof report.error_number);
    std::memcpy(bytes.data() + 1, &report.error_number, sizeof report.error_number);
  }
  const auto* text = reinterpret_cast<const std::byte*>(report.message.data());
  bytes.insert(bytes.end(), text, text + report.message.size());
  return bytes;
}

Report decode(std::span<const std::byte> bytes) {
  Report report;
  if (bytes.empty()) return report;
  report.kind = static_cast<ErrorKind>(bytes[0]);
  bytes = bytes.subspan(1);
  if (report.kind == ErrorKind::kSystemError) {
    std::memcpy(&report.error_number, bytes.data(), sizeof report.error_number);
    bytes = bytes.subspan(sizeof report.error_number);
  }
  report.message.assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return report;
}

[[noreturn]] void throw_as(const Report& report, int rank) {
  const std::string text = "rank " + std::to_string(rank) + ": " +
                           (report.message.empty() ? std::string("failed") : report.message);
  switch (report.kind) {
    case ErrorKind::kInvalidArgument:
      throw InvalidArgument(text);
    case ErrorKind::kDataLoss:
      throw DataLoss(text);
    case ErrorKind::kResourceExhausted:
      throw ResourceExhausted(text);
    case ErrorKind::kSystemError:
      throw std::system_error(report.error_number, std::generic_category(), text);
    default:
      throw FailedPrecondition(text);
  }
}

}  // namespace

void agree_on_error(Communicator& communicator, const std::exception_ptr& error) {
  if (communicator.size() == 1) {
    if (error) std::rethrow_exception(error);
    return;
  }
  const std::vector<std::byte> mine =
      error ? encode(describe(error))
            : std::vector<std::byte>{static_cast<std::byte>(ErrorKind::kNone)};
  std::vector<std::byte> all;
  std::vector<int64_t> counts(static_cast<size_t>(communicator.size()));
  communicator.all_gather(mine, all, counts);
  size_t offset = 0;
  for (int rank = 0; rank < communicator.size(); ++rank) {
    const auto count = static_cast<size_t>(counts[static_cast<size_t>(rank)]);
    const Report report = decode(std::span(all).subspan(offset, count));
    if (report.kind != ErrorKind::kNone) throw_as(report, rank);
    offset += count;
  }
}
namespace support {

std::string broadcast(Communicator& communicator, const std::string& text) {
  if (communicator.size() == 1) return text;
  std::vector<std::byte> all;
  std::vector<int64_t> counts(static_cast<size_t>(communicator.size()));
  const std::span<const std::byte> mine =
      communicator.rank() == 0 ? std::as_bytes(std::span(text)) : std::span<const std::byte>();
  communicator.all_gather(mine, all, counts);
  return std::string(reinterpret_cast<const char*>(all.data()), static_cast<size_t>(counts[0]));
}

std::vector<int64_t> union_over_ranks(Communicator& communicator, std::vector<int64_t> mine) {
  if (communicator.size() > 1) mine = all_gather(communicator, std::span<const int64_t>(mine));
  std::sort(mine.begin(), mine.end());
  mine.erase(std::unique(mine.begin(), mine.end()), mine.end());
  return mine;
}

void agree_on_value(Communicator& communicator, uint64_t value,
                    const std::function<std::string(int rank, uint64_t value, uint64_t rank0_value)>&
                        mismatch) {
  if (communicator.size() == 1) return;
  const std::vector<uint64_t> all = all_gather(communicator, std::span<const uint64_t>(&value, 1));
  for (int rank = 1; rank < communicator.size(); ++rank) {
    if (all[static_cast<size_t>(rank)] != all[0]) {
      throw InvalidArgument(mismatch(rank, all[static_cast<size_t>(rank)], all[0]));
    }
  }
}

void agree_on_value(Communicator& communicator, uint64_t value, const std::string& what,
                    const std::string& why) {
  agree_on_value(communicator, value, [&](int rank, uint64_t, uint64_t) {
    return "rank " + std::to_string(rank) + "'s " + what + " differ from rank 0's: " + why;
  });
}

}  // namespace support
}  // namespace recemb
