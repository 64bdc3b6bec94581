// recemb/learning_rate.h. A LearningRate is a float, one of the schedules, or a Python callable
// step -> float (a LearningRateCallback, called with the interpreter lock held on the thread that
// calls apply_gradients).
#include "recemb/learning_rate.h"

#include "bind.h"

namespace recemb::python {

void bind_learning_rate(py::module_& module) {
  py::class_<ExponentialDecay> exponential_decay(
      module, "ExponentialDecay",
      "lr(step) = initial_learning_rate * decay_rate ^ (step / decay_steps), the exponent floored "
      "when staircase (Keras ExponentialDecay).");
  bind_fields(exponential_decay,
              Field{"initial_learning_rate", &ExponentialDecay::initial_learning_rate},
              Field{"decay_steps", &ExponentialDecay::decay_steps},
              Field{"decay_rate", &ExponentialDecay::decay_rate},
              Field{"staircase", &ExponentialDecay::staircase});

  py::class_<PiecewiseConstant> piecewise_constant(
      module, "PiecewiseConstant",
      "lr(step) = values[i] for the first i with step <= boundaries[i], values[-1] past the last "
      "boundary (Keras PiecewiseConstantDecay).");
  bind_fields(piecewise_constant, Field{"boundaries", &PiecewiseConstant::boundaries},
              Field{"values", &PiecewiseConstant::values});

  py::class_<LinearWarmup> linear_warmup(
      module, "LinearWarmup",
      "Linear ramp from initial_learning_rate at step 0 to target_learning_rate at warmup_steps, "
      "then constant.");
  bind_fields(linear_warmup, Field{"target_learning_rate", &LinearWarmup::target_learning_rate},
              Field{"warmup_steps", &LinearWarmup::warmup_steps},
              Field{"initial_learning_rate", &LinearWarmup::initial_learning_rate});

  module.def("validate_learning_rate", &validate_learning_rate, py::arg("learning_rate"),
             py::arg("owner"));
  module.def("learning_rate_at", &learning_rate_at, py::arg("learning_rate"), py::arg("step"),
             "The learning rate at `step`; InvalidArgument if negative or not finite.");
}

}  // namespace recemb::python
