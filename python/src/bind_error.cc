// recemb/error.h: InvalidArgument is a ValueError, FailedPrecondition a RuntimeError.
#include "recemb/error.h"

#include "bind.h"

namespace recemb::python {

void bind_error(py::module_& module) {
  py::register_exception<InvalidArgument>(module, "InvalidArgument", PyExc_ValueError).doc() =
      "Bad configuration or bad input; the message names the table or feature, the field or "
      "example, and the offending value. Nothing was changed.";
  py::register_exception<FailedPrecondition>(module, "FailedPrecondition", PyExc_RuntimeError)
      .doc() =
      "A call that is valid in itself but not in the object's current state (for example "
      "apply_gradients with a batch already applied). Nothing was changed.";
}

}  // namespace recemb::python
