// recemb/serving.h and recemb/publish.h. Paths convert from str or os.PathLike and to pathlib.Path.
// export, open (which may read the whole file to verify it) and lookup release the interpreter
// lock; a ServingModel is immutable, so lookups from several Python threads run in parallel. The
// numpy arrays of ExportOptions.extra_arrays are borrowed as SaveOptions' are (bind_checkpoint.cc):
// each ServingArray keeps its array alive, and ExportOptions its ServingArrays. ServingModel's
// extra_arrays are read-only numpy arrays of their shapes over the model's memory (their base is
// the model).
#include <map>
#include <pybind11/stl/filesystem.h>
#include <string>
#include <utility>
#include <vector>

#include "recemb/publish.h"
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

  py::class_<ServingArray>(module, "ServingArray",
                           "A named float32 array stored beside the tables: a name, a shape and "
                           "the values (C-contiguous, borrowed until export_serving_model "
                           "returns).")
      .def(
          py::init([](std::string name, std::vector<int64_t> shape, std::span<const float> values) {
            return ServingArray{
                .name = std::move(name), .shape = std::move(shape), .values = values};
          }),
          py::arg("name"), py::arg("shape"), py::arg("values"), py::keep_alive<1, 4>())
      .def_readonly("name", &ServingArray::name)
      .def_readonly("shape", &ServingArray::shape)
      .def_readonly("values", &ServingArray::values);

  // Not bind_fields: extra_arrays must keep the ServingArrays (and so their arrays) alive.
  const ExportOptions defaults{};
  py::class_<ExportOptions>(module, "ExportOptions")
      .def(py::init([](ServingDtype dtype, std::vector<ServingArray> extra_arrays,
                       std::map<std::string, std::string> metadata) {
             return ExportOptions{.dtype = dtype,
                                  .extra_arrays = std::move(extra_arrays),
                                  .metadata = std::move(metadata)};
           }),
           py::arg("dtype") = defaults.dtype, py::arg("extra_arrays") = defaults.extra_arrays,
           py::arg("metadata") = defaults.metadata, py::keep_alive<1, 3>())
      .def_readwrite("dtype", &ExportOptions::dtype)
      .def_property(
          "extra_arrays", [](const ExportOptions& options) { return options.extra_arrays; },
          py::cpp_function(
              [](ExportOptions& options, std::vector<ServingArray> extra_arrays) {
                options.extra_arrays = std::move(extra_arrays);
              },
              py::keep_alive<1, 2>()))
      .def_readwrite("metadata", &ExportOptions::metadata);
  module.def("export_serving_model", &export_serving_model, py::arg("embedding"), py::arg("path"),
             py::arg("options") = ExportOptions{}, Release(),
             "Writes the embedding's tables (no slots) and configs to the file `path`, "
             "atomically.");

  // As ExportOptions (recemb/publish.h).
  const PublishOptions publish_defaults{};
  py::class_<PublishOptions>(module, "PublishOptions")
      .def(py::init([](ServingDtype dtype, std::vector<ServingArray> extra_arrays,
                       std::map<std::string, std::string> metadata, int64_t base_every_deltas,
                       int64_t base_every_bytes, int keep_versions) {
             return PublishOptions{.dtype = dtype,
                                   .extra_arrays = std::move(extra_arrays),
                                   .metadata = std::move(metadata),
                                   .base_every_deltas = base_every_deltas,
                                   .base_every_bytes = base_every_bytes,
                                   .keep_versions = keep_versions};
           }),
           py::arg("dtype") = publish_defaults.dtype,
           py::arg("extra_arrays") = publish_defaults.extra_arrays,
           py::arg("metadata") = publish_defaults.metadata,
           py::arg("base_every_deltas") = publish_defaults.base_every_deltas,
           py::arg("base_every_bytes") = publish_defaults.base_every_bytes,
           py::arg("keep_versions") = publish_defaults.keep_versions, py::keep_alive<1, 3>())
      .def_readonly("dtype", &PublishOptions::dtype)
      .def_readonly("metadata", &PublishOptions::metadata)
      .def_readonly("base_every_deltas", &PublishOptions::base_every_deltas)
      .def_readonly("base_every_bytes", &PublishOptions::base_every_bytes)
      .def_readonly("keep_versions", &PublishOptions::keep_versions);
  py::class_<PublishResult>(module, "PublishResult")
      .def_readonly("file", &PublishResult::file)
      .def_readonly("version", &PublishResult::version)
      .def_readonly("sequence", &PublishResult::sequence)
      .def_readonly("rows", &PublishResult::rows)
      .def_readonly("bytes", &PublishResult::bytes)
      .def_readonly("base_reason", &PublishResult::base_reason)
      .def_readonly("removed_versions", &PublishResult::removed_versions);
  module.def("publish", &publish, py::arg("embedding"), py::arg("dir"),
             py::arg("options") = PublishOptions{}, Release(),
             "Writes a base into the model directory `dir`, then deltas of the rows changed "
             "since the previous publish (docs/serving.md, \"Publishing deltas\").");

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
      .def(
          "extra_arrays",
          [](py::object self) {
            py::dict result;
            for (const ServingArray& array : self.cast<const ServingModel&>().extra_arrays()) {
              std::vector<py::ssize_t> strides(array.shape.size());
              py::ssize_t stride = sizeof(float);
              for (size_t i = array.shape.size(); i-- > 0;) {
                strides[i] = stride;
                stride *= static_cast<py::ssize_t>(array.shape[i]);
              }
              py::array_t<float> values(
                  std::vector<py::ssize_t>(array.shape.begin(), array.shape.end()), strides,
                  array.values.data(), self);
              py::detail::array_proxy(values.ptr())->flags &=
                  ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
              result[py::str(array.name)] = values;
            }
            return result;
          },
          "{name: float32 array of its shape}, in export order: read-only views of the "
          "model's memory.")
      .def("metadata", &ServingModel::metadata)
      .def("is_dynamic", &ServingModel::is_dynamic, py::arg("table"),
           "Whether table `table` is dynamic (looked up by any int64 key; a key it does not hold "
           "is a zero row).")
      .def("num_keys", &ServingModel::num_keys, py::arg("table"),
           "The keys dynamic table `table` holds; InvalidArgument for a static table.")
      .def("activation_shape", &ServingModel::activation_shape, py::arg("feature"),
           py::arg("input"),
           "The shape of feature `feature`'s activation for `input`: output shape + [dim].")
      .def("lookup", &ServingModel::lookup, py::arg("inputs"), py::arg("activations"), Release(),
           "As Embedding.lookup: activations[f] (float32, C-contiguous, writeable) receives "
           "feature f's combined rows.")
      .def("clone", &ServingModel::clone, Release(),
           "A deep copy, in memory of its own (a replica to apply deltas to).")
      .def("apply_delta", &ServingModel::apply_delta, py::arg("delta"), Release(),
           "Applies the delta file `delta` in place (docs/serving.md, \"Publishing deltas\").")
      .def("delta_sequence", &ServingModel::delta_sequence,
           "Deltas applied: 0 for a model opened from a base.");
}

}  // namespace recemb::python
