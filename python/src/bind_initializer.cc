// recemb/initializer.h. An InitializerCallback is any Python callable
// (first_row, num_rows, dim, values) -> None, where values is a float32 numpy array of
// num_rows * dim elements (row-major) to fill, valid only during the call; it is called on the
// thread that builds the Embedding.
#include "recemb/initializer.h"

#include "bind.h"

namespace recemb::python {

void bind_initializer(py::module_& module) {
  py::class_<TruncatedNormal> truncated_normal(
      module, "TruncatedNormal",
      "Normal(mean, stddev) with values beyond 2 stddev redrawn; stddev 0 means 1/sqrt(dim). "
      "Values depend only on (seed, table name, row, column).");
  bind_fields(truncated_normal, Field{"mean", &TruncatedNormal::mean},
              Field{"stddev", &TruncatedNormal::stddev});

  py::class_<Constant> constant(module, "Constant", "Every value is `value`.");
  bind_fields(constant, Field{"value", &Constant::value});

  py::class_<RowId> row_id(module, "RowId", "Row r is filled with offset + r in every column.");
  bind_fields(row_id, Field{"offset", &RowId::offset});
}

}  // namespace recemb::python
