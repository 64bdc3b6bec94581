"""The optimizers recemb fuses into apply_gradients, with the keyword names and defaults of
`tf.tpu.experimental.embedding` (SGD, Adagrad, AdagradMomentum, Adam, FTRL) plus row-wise Adagrad.

Every hyperparameter is readable back as an attribute of the same name (`opt.learning_rate`).
An unknown keyword raises ValueError listing the valid ones; invalid values raise ValueError when
the optimizer is created. The update formulas are in docs/semantics.md.

`learning_rate` is a float, a schedule from `recemb.schedules` (a function of the step counter),
a zero-argument callable evaluated once per apply_gradients (as TF's dynamic learning rate), or a
callable of the step (a Keras LearningRateSchedule: `schedule(step)`, step being the number of
earlier apply_gradients calls); any other callable raises ValueError at construction.

Hyperparameters every optimizer takes (TF's `_Optimizer` base):
  use_gradient_accumulation (True), clip_weight_min (None), clip_weight_max (None),
  weight_decay_factor (None), multiply_weight_decay_factor_by_learning_rate (None),
  clipvalue (None; a scalar c clips gradients to [-c, c]; a (min, max) pair, None unbounded),
  low_dimensional_packing_status (False; a TPU memory layout option, accepted and ignored), and
  except for SGD slot_variable_creation_fn (only None: recemb owns its slot variables).
"""

from __future__ import annotations

import inspect
import math
import numbers
from typing import Any, Optional, Union

import numpy as np

from recemb import _recemb

_SCHEDULES = (_recemb.ExponentialDecay, _recemb.PiecewiseConstant, _recemb.LinearWarmup)

# TF's common keywords (its _Optimizer base) and their defaults: None means unset, which _to_cpp
# turns into the C++ default (clip bounds +-inf, weight_decay_factor 0, no multiplication).
_COMMON = {
    "use_gradient_accumulation": _recemb.CommonHyperparameters().use_gradient_accumulation,
    "clip_weight_min": None,
    "clip_weight_max": None,
    "weight_decay_factor": None,
    "multiply_weight_decay_factor_by_learning_rate": None,
    "clipvalue": None,
    "low_dimensional_packing_status": False,
}


def _python_value(value):
    """A C++ default as Python shows it: a float32 as the shortest decimal that rounds to it
    (0.001, not 0.0010000000474974513), so repr and comparisons read as TF's."""
    if isinstance(value, float):
        return float(str(np.float32(value)))
    return value


def _cpp_learning_rate(value, owner):
    """The C++ LearningRate of a Python learning_rate."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, _SCHEDULES):
        return value
    if callable(value):
        if _takes_step(value, owner):
            return lambda step: float(value(step))
        return lambda step: float(value())
    raise ValueError(f"{owner}: learning_rate must be a float, a recemb.schedules schedule, a "
                     f"zero-argument callable or a callable of the step, got {value!r}")


def _takes_step(function, owner):
    """Whether the learning-rate callable `function` takes the step (a Keras schedule's
    __call__(step)) rather than no argument; ValueError if it can be called neither way."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return False  # no signature to read (a builtin): called without arguments, as TF does
    for arguments, takes_step in (((), False), ((0,), True)):
        try:
            signature.bind(*arguments)
            return takes_step
        except TypeError:
            pass
    raise ValueError(f"{owner}: learning_rate {function!r} takes {signature}: a learning-rate "
                     "callable takes no argument, or one (the step)")


def _bound(value, default):
    return default if value is None else float(value)


def _clip_range(clipvalue, owner):
    if clipvalue is None:
        return -math.inf, math.inf
    if isinstance(clipvalue, numbers.Real) and not isinstance(clipvalue, bool):
        return -float(clipvalue), float(clipvalue)
    if isinstance(clipvalue, (tuple, list)) and len(clipvalue) == 2:
        return _bound(clipvalue[0], -math.inf), _bound(clipvalue[1], math.inf)
    raise ValueError(f"{owner}: clipvalue must be None, a number or a (min, max) pair, got "
                     f"{clipvalue!r}")


class _Optimizer:
    """Base of the optimizers: hyperparameters as attributes, conversion to the C++ struct.

    A subclass names its bound C++ struct (_CPP); its TF name, learning rate default and own
    hyperparameters with their defaults (_OWN, in declaration order, which is TF's) are read from
    a default-constructed struct, so the C++ declarations are the one statement of them."""

    _CPP = None  # the bound C++ struct
    _NAME = ""  # TF's name (recemb.optimizers.get)
    _OWN = {}
    _LEARNING_RATE = None

    def __init_subclass__(cls):
        super().__init_subclass__()
        defaults = cls._CPP()
        cls._NAME = _recemb.optimizer_name(defaults)
        cls._LEARNING_RATE = _python_value(defaults.learning_rate)
        cls._OWN = {name: _python_value(getattr(defaults, name)) for name in cls._CPP._fields
                    if name not in ("learning_rate", "common")}

    def __init__(self, learning_rate: Any = None, **kwargs: Any) -> None:
        names = dict(self._OWN)
        names.update(_COMMON)
        if self._CPP is not _recemb.Sgd:
            names["slot_variable_creation_fn"] = None
        unknown = [key for key in kwargs if key not in names]
        if unknown:
            raise ValueError(f"{type(self).__name__}: unknown hyperparameter(s) {unknown}; valid: "
                             f"{['learning_rate'] + list(names)}")
        self.learning_rate = self._LEARNING_RATE if learning_rate is None else learning_rate
        for name, default in names.items():
            setattr(self, name, kwargs.get(name, default))
        if getattr(self, "slot_variable_creation_fn", None) is not None:
            raise ValueError(f"{type(self).__name__}: slot_variable_creation_fn is not supported; "
                             "recemb owns the slot variables (read them from "
                             "Embedding.slot_variables)")
        _recemb.validate_optimizer(self._to_cpp(), f"optimizer {type(self).__name__}")

    @property
    def slot_names(self) -> list[str]:
        """The slot variables of a table trained with this optimizer (TF's names)."""
        return _recemb.slot_names(self._to_cpp())

    def _to_cpp(self):
        owner = f"optimizer {type(self).__name__}"
        clip_min, clip_max = _clip_range(self.clipvalue, owner)
        common = _recemb.CommonHyperparameters(
            use_gradient_accumulation=bool(self.use_gradient_accumulation),
            clip_weight_min=_bound(self.clip_weight_min, -math.inf),
            clip_weight_max=_bound(self.clip_weight_max, math.inf),
            weight_decay_factor=_bound(self.weight_decay_factor, 0.0),
            multiply_weight_decay_factor_by_learning_rate=bool(
                self.multiply_weight_decay_factor_by_learning_rate),
            clip_gradient_min=clip_min,
            clip_gradient_max=clip_max)
        own = {name: getattr(self, name) for name in self._OWN}
        return self._CPP(learning_rate=_cpp_learning_rate(self.learning_rate, owner),
                         common=common, **own)

    def __repr__(self):
        names = ["learning_rate"] + list(self._OWN) + list(_COMMON)
        values = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        return f"{type(self).__name__}({values})"


class SGD(_Optimizer):
    """w -= lr * g. No slots."""

    _CPP = _recemb.Sgd


class Adagrad(_Optimizer):
    """a += g^2; w -= lr * g / sqrt(a) (no epsilon, as TF). Slot "accumulators"."""

    _CPP = _recemb.Adagrad


class AdagradMomentum(_Optimizer):
    """Adagrad with momentum, Nesterov, a generalised exponent and beta2.
    Slots "accumulators", "momenta"."""

    _CPP = _recemb.AdagradMomentum


class Adam(_Optimizer):
    """Adam without bias correction, as TF (bias_correction=True adds it to the learning rate).
    lazy_adam=False updates every row each step. Slots "momenta", "velocities"."""

    _CPP = _recemb.Adam


class FTRL(_Optimizer):
    """FTRL-proximal as TF's TPU embedding FTRL. Slots "accumulators", "linears"."""

    _CPP = _recemb.Ftrl


class RowWiseAdagrad(_Optimizer):
    """One accumulator per row (FBGEMM's EXACT_ROWWISE_ADAGRAD): a += mean_d(g_d^2);
    w -= lr * g / (sqrt(a) + epsilon). Slot "accumulators" of shape [vocabulary_size]."""

    _CPP = _recemb.RowwiseAdagrad


_BY_NAME = {cls._NAME: cls for cls in (SGD, Adagrad, AdagradMomentum, Adam, FTRL, RowWiseAdagrad)}


def get(identifier: Union[None, str, _Optimizer]) -> Optional[_Optimizer]:
    """An optimizer from an optimizer object (returned as is), a name ("sgd", "adagrad",
    "adagrad_momentum", "adam", "ftrl", "rowwise_adagrad", in any case: "SGD" too; TF's
    defaults) or None."""
    if identifier is None or isinstance(identifier, _Optimizer):
        return identifier
    if isinstance(identifier, str):  # case-insensitive, as TF's names
        try:
            cpp = _recemb.parse_optimizer(identifier.lower())
        except ValueError as error:
            raise ValueError(f"optimizer={identifier!r}: {error}") from None
        return _BY_NAME[_recemb.optimizer_name(cpp)]()
    raise ValueError(f"unknown optimizer {identifier!r}: pass a recemb.optimizers object, one of "
                     f"the names {list(_BY_NAME)} or None (recemb.torch.translate_optimizer "
                     "converts torch optimizers)")
