// Typed collectives over a recemb::Communicator (recemb/communicator.h), each built once on its
// all_gather: what the engine, the checkpoint and serving writers and the trainer exchange between
// ranks besides the lookups themselves. Each is collective: every rank of the group calls it, in
// the same order. With one rank none exchanges anything.
//
// agree_on_error (declared in recemb/communicator.h: public) is implemented here too: how an error
// on one rank makes every rank throw instead of leaving the others waiting in the next collective.
#ifndef RECEMB_SUPPORT_COLLECTIVES_H_
#define RECEMB_SUPPORT_COLLECTIVES_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "recemb/communicator.h"

namespace recemb::support {

// Every rank's `mine` (any number of values, possibly different per rank), concatenated in rank
// order into `all` (resized; its memory reused); counts[q] (resized to the group's size) is the
// number of values rank q gave. `bytes` is the exchange's buffer, kept by a caller that gathers
// again and again so that its memory is reused too.
template <class T>
  requires std::is_trivially_copyable_v<T>
void all_gather(Communicator& communicator, std::span<const T> mine, std::vector<T>& all,
                std::vector<int64_t>& counts, std::vector<std::byte>& bytes) {
  counts.resize(static_cast<size_t>(communicator.size()));
  communicator.all_gather(std::as_bytes(mine), bytes, counts);
  for (int64_t& count : counts) count /= static_cast<int64_t>(sizeof(T));
  all.resize(bytes.size() / sizeof(T));
  if (!all.empty()) std::memcpy(all.data(), bytes.data(), all.size() * sizeof(T));
}

// The same, with buffers of its own.
template <class T>
  requires std::is_trivially_copyable_v<T>
std::vector<T> all_gather(Communicator& communicator, std::span<const T> mine) {
  std::vector<T> all;
  std::vector<int64_t> counts;
  std::vector<std::byte> bytes;
  all_gather(communicator, mine, all, counts, bytes);
  return all;
}

// Rank 0's `text` on every rank (the other ranks' `text` is ignored).
std::string broadcast(Communicator& communicator, const std::string& text);

// `mine` from every rank, merged: sorted, each value once.
std::vector<int64_t> union_over_ranks(Communicator& communicator, std::vector<int64_t> mine);

// Every rank gives `value` (e.g. a hash of what must be the same everywhere); when some rank's
// differs from rank 0's, every rank throws InvalidArgument(mismatch(R, R's value, rank 0's)), R
// the lowest such rank.
void agree_on_value(Communicator& communicator, uint64_t value,
                    const std::function<std::string(int rank, uint64_t value, uint64_t rank0_value)>&
                        mismatch);

// The same with the message "rank R's <what> differ(s) from rank 0's: <why>".
void agree_on_value(Communicator& communicator, uint64_t value, const std::string& what,
                    const std::string& why);

// Runs `validate` and agrees on its outcome (agree_on_error): when it throws on any rank, every
// rank throws. With one rank, `validate`'s own exception propagates unchanged (no exchange).
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

}  // namespace recemb::support

#endif  // RECEMB_SUPPORT_COLLECTIVES_H_
