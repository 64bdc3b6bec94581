// recemb/embedding.h. lookup, apply_gradients and the constructor release the interpreter lock
// (the Embedding runs its own worker threads); Python callbacks (initializers, learning rates)
// take it back when they are called. variable_data returns a numpy view of the variable whose
// base is the Embedding object.
#include "recemb/embedding.h"

#include "bind.h"

namespace recemb::python {

void bind_embedding(py::module_& module) {
  py::enum_<NonFiniteGradients>(module, "NonFiniteGradients",
                                "What apply_gradients does with a NaN or infinite gradient.")
      .value("kReject", NonFiniteGradients::kReject)
      .value("kSkipRows", NonFiniteGradients::kSkipRows);

  py::class_<EmbeddingOptions> options(module, "EmbeddingOptions");
  bind_fields(options, Field{"optimizer", &EmbeddingOptions::optimizer},
              Field{"num_threads", &EmbeddingOptions::num_threads},
              Field{"seed", &EmbeddingOptions::seed},
              Field{"non_finite_gradients", &EmbeddingOptions::non_finite_gradients});

  py::class_<LookupBatch>(module, "LookupBatch",
                          "The validated ids of one training lookup: what apply_gradients needs. "
                          "Belongs to the Embedding that filled it.")
      .def(py::init<>())
      .def("applicable", &LookupBatch::applicable, "Whether it holds a lookup not applied yet.");

  using Inputs = std::span<const FeatureInput>;
  using Activations = std::span<const std::span<float>>;
  using Release = py::call_guard<py::gil_scoped_release>;

  py::class_<Embedding>(module, "Embedding",
                        "Many tables, many features, lookups with combiners and optimizers fused "
                        "into apply_gradients. Not safe for concurrent calls.")
      .def(py::init<std::vector<TableConfig>, std::vector<FeatureConfig>, EmbeddingOptions>(),
           py::arg("tables"), py::arg("features"), py::arg("options") = EmbeddingOptions{},
           Release())
      .def("tables", &Embedding::tables)
      .def("features", &Embedding::features)
      .def("options", &Embedding::options)
      .def("step", &Embedding::step, "Number of apply_gradients calls so far.")
      .def("set_step", &Embedding::set_step, py::arg("step"),
           "Sets the step counter, as a restore from a checkpoint does.")
      .def("activation_shape", &Embedding::activation_shape, py::arg("feature"), py::arg("input"),
           "The shape of feature `feature`'s activation for `input`: output shape + [dim].")
      .def("lookup", py::overload_cast<Inputs, Activations>(&Embedding::lookup), py::arg("inputs"),
           py::arg("activations"), Release(),
           "Pure lookup: activations[f] (float32, C-contiguous, writeable) receives feature f's "
           "combined rows; nothing is kept for training.")
      .def("lookup", py::overload_cast<Inputs, Activations, LookupBatch&>(&Embedding::lookup),
           py::arg("inputs"), py::arg("activations"), py::arg("batch"), Release(),
           "Training lookup: also keeps in `batch` what apply_gradients needs.")
      .def("apply_gradients", &Embedding::apply_gradients, py::arg("batch"), py::arg("gradients"),
           Release(),
           "Applies d(loss)/d(activations) of the lookup in `batch` (one float32 array per "
           "feature; an empty one stands for zeros) and increments step().")
      .def("skipped_rows", &Embedding::skipped_rows)
      .def("variable_names", &Embedding::variable_names, py::arg("table"))
      .def("variable_shape", &Embedding::variable_shape, py::arg("table"), py::arg("variable"))
      .def("read_variable", &Embedding::read_variable, py::arg("table"), py::arg("variable"),
           py::arg("out"))
      .def("write_variable", &Embedding::write_variable, py::arg("table"), py::arg("variable"),
           py::arg("values"))
      .def("variable_data",
           py::overload_cast<std::string_view, std::string_view>(&Embedding::variable_data),
           py::arg("table"), py::arg("variable"), py::return_value_policy::reference_internal,
           "The variable's memory as a flat float32 array whose base is this Embedding. Writing "
           "through it is allowed while no other call runs; values written are not validated.");
}

}  // namespace recemb::python
