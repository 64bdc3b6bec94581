// The extension module recemb._recemb: the public C++ API of include/recemb/, bound 1:1 (one
// bind_<header>.cc per header). The Python package python/recemb builds its API on this module.
#include "bind.h"

PYBIND11_MODULE(_recemb, module) {
  module.doc() =
      "recemb's C++ API, bound 1:1 (include/recemb/*.h). Most users want the Python package "
      "`recemb` (and `recemb.torch`) instead.";
  // Dependency order: a type must be registered before it appears in a default argument.
  recemb::python::bind_error(module);
  recemb::python::bind_combiner(module);
  recemb::python::bind_initializer(module);
  recemb::python::bind_learning_rate(module);
  recemb::python::bind_optimizer(module);
  recemb::python::bind_config(module);
  recemb::python::bind_placement(module);
  recemb::python::bind_communicator(module);
  recemb::python::bind_batch(module);
  recemb::python::bind_executor(module);
  recemb::python::bind_embedding(module);
  recemb::python::bind_checkpoint(module);
  recemb::python::bind_serving(module);
  recemb::python::bind_string_key(module);
  recemb::python::bind_graph_ops(module);
}
