// The exceptions recemb throws.
//
//   InvalidArgument     bad input, configuration or arguments              Python ValueError
//   FailedPrecondition  a call in the wrong state (e.g. a batch applied    Python RuntimeError
//                       twice)
//   DataLoss            a file that is damaged, truncated, or of another   Python recemb.DataLoss
//                       format or version                                  (a ValueError)
//   std::system_error   a failing file-system call, with its errno         Python OSError (and its
//                       (or a thread that cannot start: EAGAIN)            errno subclasses)
//   ResourceExhausted   memory for a table that cannot be allocated (a     Python MemoryError
//                       std::bad_alloc that names the table and bytes)     (its subclass
//                                                                          _recemb.ResourceExhausted)
//
// The type is the same whatever the number of ranks: in a collective call, the ranks that did not
// fail themselves throw the failing rank's type, with the message prefixed "rank R: ".
//
// Every public entry point validates all of its input before it changes any state; when it throws
// InvalidArgument or FailedPrecondition, tables, slots, the step counter and any pending batch are
// exactly as before. What remains after DataLoss or a system_error is stated by each call (most
// verify everything before changing anything; see recemb/checkpoint.h for the one exception).
// Internal invariant violations (bugs) abort instead of throwing.
#ifndef RECEMB_ERROR_H_
#define RECEMB_ERROR_H_

#include <memory>
#include <new>
#include <stdexcept>
#include <string>

#include "recemb/export.h"

namespace recemb {

// Bad configuration or bad input. The message names the table or feature, the field or example,
// and the offending value. pybind11 translates it to Python's ValueError.
class RECEMB_EXPORT InvalidArgument : public std::invalid_argument {
 public:
  explicit InvalidArgument(const std::string& message) : std::invalid_argument(message) {}
};

// A call that is valid in itself but not in the object's current state (for example
// apply_gradients without a preceding lookup). Python: RuntimeError.
class RECEMB_EXPORT FailedPrecondition : public std::logic_error {
 public:
  explicit FailedPrecondition(const std::string& message) : std::logic_error(message) {}
};

// A file recemb reads is damaged (a checksum does not match), truncated, or of another format or
// version than the reader understands. The message names the file and what was wrong. Python:
// recemb.DataLoss, a subclass of ValueError.
class RECEMB_EXPORT DataLoss : public std::runtime_error {
 public:
  explicit DataLoss(const std::string& message) : std::runtime_error(message) {}
};

// Memory that cannot be allocated, for a named purpose: the message names what it was for (the
// table) and how many bytes were asked for, and suggests what to lower. A std::bad_alloc, so that
// code catching allocation failures catches it too. Python: recemb._recemb.ResourceExhausted, a
// MemoryError.
class RECEMB_EXPORT ResourceExhausted : public std::bad_alloc {
 public:
  explicit ResourceExhausted(const std::string& message)
      : message_(std::make_shared<const std::string>(message)) {}
  const char* what() const noexcept override { return message_->c_str(); }

 private:
  std::shared_ptr<const std::string> message_;  // shared: copying the exception cannot throw
};

}  // namespace recemb

#endif  // RECEMB_ERROR_H_
