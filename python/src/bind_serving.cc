// recemb/serving.h. Paths convert from str or os.PathLike and to pathlib.Path. export, open
// (which may read the whole file to verify it) and lookup release the interpreter lock; a
// ServingModel is immutable, so lookups from several Python threads run in parallel.
#include <pybind11/stl/filesystem.h>

#include "recemb/serving.h"

#include "bind.h"

namespace recemb::python {

void bind_serving(py::module_& module) {
  using Release = py::call_guard<py::gil_scoped_release>;

  py::enum_<ServingDtype>(module, "ServingDtype", "How a serving model stores table values.")
      .value("kFloat32", ServingDtype::kFloat32)
      .value("kFloat16", ServingDtype::kFloat16)
      .value("kInt8", ServingDtype::kInt8);
  module.def("serving_dtype_name", &serving_dtype_name, py::arg("dtype"),
             "'float32', 'float16' or 'int8'.");
  module.def("parse_serving_dtype", &parse_serving_dtype, py::arg("name"),
             "The inverse of serving_dtype_name; anything else raises InvalidArgument.");

  py::class_<ExportOptions> export_options(module, "ExportOptions");
  bind_fields(export_options, Field{"dtype", &ExportOptions::dtype});
  module.def("export_serving_model", &export_serving_model, py::arg("embedding"), py::arg("path"),
             py::arg("options") = ExportOptions{}, Release(),
             "Writes the embedding's tables (no slots) and configs to the file `path`, "
             "atomically.");

  py::class_<OpenOptions> open_options(module, "OpenOptions");
  bind_fields(open_options, Field{"verify", &OpenOptions::verify});

  py::class_<ServingModel>(module, "ServingModel",
                           "A serving model file, read into memory. Immutable: every "
                           "method may run concurrently.")
      .def_static("open", &ServingModel::open, py::arg("path"), py::arg("options") = OpenOptions{},
                  Release())
      .def("path", &ServingModel::path)
      .def("dtype", &ServingModel::dtype)
      .def("tables", &ServingModel::tables)
      .def("features", &ServingModel::features)
      .def("activation_shape", &ServingModel::activation_shape, py::arg("feature"),
           py::arg("input"),
           "The shape of feature `feature`'s activation for `input`: output shape + [dim].")
      .def("lookup", &ServingModel::lookup, py::arg("inputs"), py::arg("activations"), Release(),
           "As Embedding.lookup: activations[f] (float32, C-contiguous, writeable) receives "
           "feature f's combined rows.");
}

}  // namespace recemb::python
