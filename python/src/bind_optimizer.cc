// recemb/optimizer.h: the six optimizers with TF's hyperparameters and defaults (taken from the
// C++ declarations), and the optimizer functions.
#include "recemb/optimizer.h"

#include "bind.h"

namespace recemb::python {

void bind_optimizer(py::module_& module) {
  using Common = CommonHyperparameters;
  py::class_<Common> common(module, "CommonHyperparameters",
                            "Hyperparameters every optimizer has (TF's _Optimizer base).");
  bind_fields(common, Field{"use_gradient_accumulation", &Common::use_gradient_accumulation},
              Field{"clip_weight_min", &Common::clip_weight_min},
              Field{"clip_weight_max", &Common::clip_weight_max},
              Field{"weight_decay_factor", &Common::weight_decay_factor},
              Field{"multiply_weight_decay_factor_by_learning_rate",
                    &Common::multiply_weight_decay_factor_by_learning_rate},
              Field{"clip_gradient_min", &Common::clip_gradient_min},
              Field{"clip_gradient_max", &Common::clip_gradient_max});

  py::class_<Sgd> sgd(module, "Sgd", "w -= lr * g. No slots.");
  bind_fields(sgd, Field{"learning_rate", &Sgd::learning_rate}, Field{"common", &Sgd::common});

  py::class_<Adagrad> adagrad(module, "Adagrad",
                              "a += g^2; w -= lr * g / sqrt(a). Slot 'accumulators'.");
  bind_fields(adagrad, Field{"learning_rate", &Adagrad::learning_rate},
              Field{"initial_accumulator_value", &Adagrad::initial_accumulator_value},
              Field{"common", &Adagrad::common});

  py::class_<AdagradMomentum> adagrad_momentum(
      module, "AdagradMomentum",
      "Adagrad with momentum and a generalised exponent. Slots 'accumulators', 'momenta'.");
  bind_fields(adagrad_momentum, Field{"learning_rate", &AdagradMomentum::learning_rate},
              Field{"momentum", &AdagradMomentum::momentum},
              Field{"use_nesterov", &AdagradMomentum::use_nesterov},
              Field{"exponent", &AdagradMomentum::exponent},
              Field{"beta2", &AdagradMomentum::beta2}, Field{"epsilon", &AdagradMomentum::epsilon},
              Field{"common", &AdagradMomentum::common});

  py::class_<Adam> adam(module, "Adam",
                        "Adam without bias correction (as TF) unless bias_correction. Slots "
                        "'momenta', 'velocities'.");
  bind_fields(adam, Field{"learning_rate", &Adam::learning_rate}, Field{"beta_1", &Adam::beta_1},
              Field{"beta_2", &Adam::beta_2}, Field{"epsilon", &Adam::epsilon},
              Field{"lazy_adam", &Adam::lazy_adam},
              Field{"sum_inside_sqrt", &Adam::sum_inside_sqrt},
              Field{"bias_correction", &Adam::bias_correction}, Field{"common", &Adam::common});

  py::class_<Ftrl> ftrl(module, "Ftrl",
                        "FTRL-proximal as TF's TPU embedding FTRL. Slots 'accumulators', "
                        "'linears'.");
  bind_fields(ftrl, Field{"learning_rate", &Ftrl::learning_rate},
              Field{"learning_rate_power", &Ftrl::learning_rate_power},
              Field{"l1_regularization_strength", &Ftrl::l1_regularization_strength},
              Field{"l2_regularization_strength", &Ftrl::l2_regularization_strength},
              Field{"beta", &Ftrl::beta},
              Field{"initial_accumulator_value", &Ftrl::initial_accumulator_value},
              Field{"multiply_linear_by_learning_rate", &Ftrl::multiply_linear_by_learning_rate},
              Field{"allow_zero_accumulator", &Ftrl::allow_zero_accumulator},
              Field{"common", &Ftrl::common});

  py::class_<RowwiseAdagrad> rowwise_adagrad(
      module, "RowwiseAdagrad",
      "One accumulator per row: a += mean_d(g_d^2); w -= lr * g / (sqrt(a) + epsilon). Slot "
      "'accumulators' [V].");
  bind_fields(rowwise_adagrad, Field{"learning_rate", &RowwiseAdagrad::learning_rate},
              Field{"initial_accumulator_value", &RowwiseAdagrad::initial_accumulator_value},
              Field{"epsilon", &RowwiseAdagrad::epsilon}, Field{"common", &RowwiseAdagrad::common});

  module.def("optimizer_name", &optimizer_name, py::arg("optimizer"),
             "TF's name of the optimizer: 'sgd', 'adagrad', 'adagrad_momentum', 'adam', 'ftrl', "
             "'rowwise_adagrad'.");
  module.def("parse_optimizer", &parse_optimizer, py::arg("name"),
             "The optimizer with TF's defaults of one of optimizer_name's names; anything else "
             "raises InvalidArgument listing the valid names.");
  module.def("slot_names", &slot_names, py::arg("optimizer"));
  module.def("validate_optimizer", &validate_optimizer, py::arg("optimizer"), py::arg("owner"));
}

}  // namespace recemb::python
