// recemb/combiner.h.
#include "recemb/combiner.h"

#include "bind.h"

namespace recemb::python {

void bind_combiner(py::module_& module) {
  py::enum_<Combiner>(module, "Combiner",
                      "How the rows of one bag are combined into one activation: kSum, kMean "
                      "(S / sum of weights), kSqrtn (S / sqrt(sum of squared weights)).")
      .value("kSum", Combiner::kSum)
      .value("kMean", Combiner::kMean)
      .value("kSqrtn", Combiner::kSqrtn);
  module.def("parse_combiner", &parse_combiner, py::arg("name"),
             "'sum', 'mean' or 'sqrtn'; anything else raises InvalidArgument listing them.");
  module.def("combiner_name", &combiner_name, py::arg("combiner"));
}

}  // namespace recemb::python
