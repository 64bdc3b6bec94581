"""Learning-rate schedules: functions of the step counter (the number of earlier apply_gradients
calls), evaluated in C++ once per apply_gradients. Pass one as an optimizer's learning_rate.

  ExponentialDecay(initial_learning_rate, decay_steps, decay_rate, staircase=False)
      initial_learning_rate * decay_rate ** (step / decay_steps)  (floored exponent if staircase)
  PiecewiseConstant(boundaries, values)   (alias PiecewiseConstantDecay, Keras's name)
      values[i] for the first i with step <= boundaries[i]; values[-1] past the last boundary
  LinearWarmup(target_learning_rate, warmup_steps, initial_learning_rate=0.0)
      linear from initial_learning_rate at step 0 to target_learning_rate at warmup_steps

learning_rate_at(schedule, step) evaluates one. For anything else, pass a callable of the step
(a Keras LearningRateSchedule works: it is called as schedule(step) once per apply_gradients) or a
zero-argument callable (see recemb.optimizers).
"""

from recemb._recemb import ExponentialDecay, LinearWarmup, PiecewiseConstant, learning_rate_at

PiecewiseConstantDecay = PiecewiseConstant

__all__ = ["ExponentialDecay", "PiecewiseConstant", "PiecewiseConstantDecay", "LinearWarmup",
           "learning_rate_at"]
