// recemb/error.h: InvalidArgument is a ValueError, FailedPrecondition a RuntimeError, DataLoss a
// ValueError subclass (recemb.DataLoss), ResourceExhausted a MemoryError subclass. And the
// std::system_error of a failing system call (checkpoint and serving files) is an OSError with its
// errno, so that Python raises the matching subclass (FileNotFoundError, PermissionError, ...).
// The same types on one rank and on several (recemb/communicator.h, agree_on_error). An OSError
// leaves the layer unchanged, except from restore when the read after the verification fails: it
// is then partially restored (the message says so).
#include <system_error>

#include "recemb/error.h"

#include "bind.h"

namespace recemb::python {
namespace {

void translate_system_error(std::exception_ptr error) {
  try {
    if (error) std::rethrow_exception(error);
  } catch (const std::system_error& system_error) {
    const std::error_category& category = system_error.code().category();
    const bool has_errno =
        category == std::generic_category() || category == std::system_category();
    // OSError(errno, message) makes the subclass of that errno (FileNotFoundError, ...).
    const auto os_error = py::reinterpret_borrow<py::object>(PyExc_OSError);
    const py::object exception = has_errno
                                     ? os_error(system_error.code().value(), system_error.what())
                                     : os_error(system_error.what());
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exception.ptr())), exception.ptr());
  }
}

}  // namespace

void bind_error(py::module_& module) {
  py::register_exception_translator(&translate_system_error);
  py::register_exception<InvalidArgument>(module, "InvalidArgument", PyExc_ValueError).doc() =
      "Bad configuration or bad input; the message names the table or feature, the field or "
      "example, and the offending value. Nothing was changed.";
  py::register_exception<FailedPrecondition>(module, "FailedPrecondition", PyExc_RuntimeError)
      .doc() =
      "A call that is valid in itself but not in the object's current state (for example "
      "apply_gradients with a batch already applied, or saving a step that exists already). "
      "Nothing was changed.";
  py::register_exception<ResourceExhausted>(module, "ResourceExhausted", PyExc_MemoryError).doc() =
      "Memory for a table could not be allocated; the message names the table and the bytes "
      "asked for. A MemoryError. Nothing was built.";
  py::register_exception<DataLoss>(module, "DataLoss", PyExc_ValueError).doc() =
      "A file that is damaged (a checksum does not match), truncated, or of another format or "
      "version; the message names the file and what was wrong. A ValueError. Found before "
      "anything changes, except by restore when a file changes after it was verified: the "
      "layer is then partially restored, and the message says so.";
}

}  // namespace recemb::python
