// How the ranks of a group agree on whether a call's validation passed, so that an error on one
// rank makes every rank throw instead of leaving the others waiting in the next collective.
#ifndef RECEMB_EMBEDDING_AGREEMENT_H_
#define RECEMB_EMBEDDING_AGREEMENT_H_

#include <cstdint>
#include <exception>
#include <string>

#include "recemb/communicator.h"
#include "recemb/error.h"

namespace recemb::internal {

enum class ErrorKind : char { kNone = 0, kInvalidArgument = 1, kOther = 2 };

// Collective. Every rank reports its outcome; when some rank's kind is not kNone, every rank throws
// the error of the lowest such rank: InvalidArgument for kInvalidArgument, FailedPrecondition for
// kOther, with the message "rank R: <message>" ("rank R: failed" for an empty message). Returns
// when every rank reported kNone.
void agree_on_outcome(Communicator& communicator, ErrorKind kind, const std::string& message);

// Collective. Every rank reports `value` (a hash of what must be the same everywhere); when some
// rank's differs from rank 0's, every rank throws InvalidArgument "rank R's <what> differ(s) from
// rank 0's: <why>", R the lowest such rank.
void agree_on_value(Communicator& communicator, uint64_t value, const std::string& what,
                    const std::string& why);

// Runs `validate` and agrees on its outcome. With one rank, `validate`'s own exception propagates
// unchanged (no exchange at all).
template <class Validate>
void agree(Communicator& communicator, Validate&& validate) {
  if (communicator.size() == 1) {
    validate();
    return;
  }
  ErrorKind kind = ErrorKind::kNone;
  std::string message;
  try {
    validate();
  } catch (const InvalidArgument& error) {
    kind = ErrorKind::kInvalidArgument;
    message = error.what();
  } catch (const std::exception& error) {
    kind = ErrorKind::kOther;
    message = error.what();
  } catch (...) {
    kind = ErrorKind::kOther;
    message = "an exception that is not a std::exception";
  }
  agree_on_outcome(communicator, kind, message);
}

}  // namespace recemb::internal

#endif  // RECEMB_EMBEDDING_AGREEMENT_H_
