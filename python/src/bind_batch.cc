// recemb/batch.h: the non-owning id views. Each view object keeps the numpy arrays it views alive
// (keep_alive), and its array attributes are read-only numpy views of that same memory. The arrays
// must already have the exact dtype and be C-contiguous (see bind.h): nothing is copied.
#include <optional>

#include "recemb/batch.h"

#include "bind.h"

namespace recemb::python {

void bind_batch(py::module_& module) {
  using Weights = std::optional<std::span<const float>>;

  py::class_<DenseIds>(module, "DenseIds",
                       "Dense ids of shape `shape` (int32 or int64, C-contiguous); rank 1 [B] is "
                       "one id per example, rank >= 2 [..., N] makes the last axis a bag. "
                       "weights: None or one float32 per id.")
      .def(py::init([](IdSpan ids, std::vector<int64_t> shape, Weights weights) {
             return DenseIds{.ids = ids,
                             .shape = std::move(shape),
                             .weights = weights.value_or(std::span<const float>())};
           }),
           py::arg("ids"), py::arg("shape"), py::arg("weights") = py::none(),
           py::keep_alive<1, 2>(), py::keep_alive<1, 4>())
      .def_readonly("ids", &DenseIds::ids)
      .def_readonly("shape", &DenseIds::shape)
      .def_readonly("weights", &DenseIds::weights);

  py::class_<RaggedIds>(module, "RaggedIds",
                        "Ragged ids: example b holds values[row_splits[b]:row_splits[b + 1]]. "
                        "weights: None or one float32 per value.")
      .def(py::init([](IdSpan values, IdSpan row_splits, Weights weights) {
             return RaggedIds{.values = values,
                              .row_splits = row_splits,
                              .weights = weights.value_or(std::span<const float>())};
           }),
           py::arg("values"), py::arg("row_splits"), py::arg("weights") = py::none(),
           py::keep_alive<1, 2>(), py::keep_alive<1, 3>(), py::keep_alive<1, 4>())
      .def_readonly("values", &RaggedIds::values)
      .def_readonly("row_splits", &RaggedIds::row_splits)
      .def_readonly("weights", &RaggedIds::weights);

  py::class_<SparseIds>(module, "SparseIds",
                        "Sparse COO ids: indices int64 [nnz, rank] in canonical order, values "
                        "[nnz], dense_shape of that rank. weights: None or one float32 per value.")
      .def(py::init([](std::span<const int64_t> indices, IdSpan values,
                       std::vector<int64_t> dense_shape, Weights weights) {
             return SparseIds{.indices = indices,
                              .values = values,
                              .dense_shape = std::move(dense_shape),
                              .weights = weights.value_or(std::span<const float>())};
           }),
           py::arg("indices"), py::arg("values"), py::arg("dense_shape"),
           py::arg("weights") = py::none(), py::keep_alive<1, 2>(), py::keep_alive<1, 3>(),
           py::keep_alive<1, 5>())
      .def_readonly("indices", &SparseIds::indices)
      .def_readonly("values", &SparseIds::values)
      .def_readonly("dense_shape", &SparseIds::dense_shape)
      .def_readonly("weights", &SparseIds::weights);
}

}  // namespace recemb::python
