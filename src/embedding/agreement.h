// How the ranks of a group agree on whether a call's validation passed, so that an error on one
// rank makes every rank throw instead of leaving the others waiting in the next collective.
#ifndef RECEMB_EMBEDDING_AGREEMENT_H_
#define RECEMB_EMBEDDING_AGREEMENT_H_

#include <cstdint>
#include <exception>
#include <string>

#include "recemb/communicator.h"

namespace recemb::internal {

// Collective. Every rank reports `value` (a hash of what must be the same everywhere); when some
// rank's differs from rank 0's, every rank throws InvalidArgument "rank R's <what> differ(s) from
// rank 0's: <why>", R the lowest such rank.
void agree_on_value(Communicator& communicator, uint64_t value, const std::string& what,
                    const std::string& why);

// Runs `validate` and agrees on its outcome (agree_on_error). With one rank, `validate`'s own
// exception propagates unchanged (no exchange at all).
template <class Validate>
void agree(Communicator& communicator, Validate&& validate) {
  std::exception_ptr error;
  try {
    validate();
  } catch (...) {
    error = std::current_exception();
  }
  agree_on_error(communicator, error);
}

}  // namespace recemb::internal

#endif  // RECEMB_EMBEDDING_AGREEMENT_H_
