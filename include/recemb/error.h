// The exceptions recemb throws.
//
// Every public entry point validates all of its input before it changes any state; when it throws
// InvalidArgument, tables, slots, the step counter and any pending batch are exactly as before.
// Internal invariant violations (bugs) abort instead of throwing.
#ifndef RECEMB_ERROR_H_
#define RECEMB_ERROR_H_

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

}  // namespace recemb

#endif  // RECEMB_ERROR_H_
