"""recemb.optimizers and recemb.schedules: TF's names and defaults, readable attributes, errors."""

import math

import numpy as np
import pytest

import recemb
from recemb import _recemb, optimizers

COMMON = {"use_gradient_accumulation": True, "clip_weight_min": None, "clip_weight_max": None,
          "weight_decay_factor": None, "multiply_weight_decay_factor_by_learning_rate": None,
          "clipvalue": None, "low_dimensional_packing_status": False}

# TF's defaults (tf.tpu.experimental.embedding), plus recemb's own options.
DEFAULTS = {
    optimizers.SGD: {"learning_rate": 0.01},
    optimizers.Adagrad: {"learning_rate": 0.001, "initial_accumulator_value": 0.1},
    optimizers.AdagradMomentum: {"learning_rate": 0.001, "momentum": 0.0, "use_nesterov": False,
                                 "exponent": 2.0, "beta2": 1.0, "epsilon": 1e-10},
    optimizers.Adam: {"learning_rate": 0.001, "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7,
                      "lazy_adam": True, "sum_inside_sqrt": True, "bias_correction": False},
    optimizers.FTRL: {"learning_rate": 0.001, "learning_rate_power": -0.5,
                      "l1_regularization_strength": 0.0, "l2_regularization_strength": 0.0,
                      "beta": 0.0, "initial_accumulator_value": 0.1,
                      "multiply_linear_by_learning_rate": False, "allow_zero_accumulator": False},
    optimizers.RowWiseAdagrad: {"learning_rate": 0.001, "initial_accumulator_value": 0.0,
                                "epsilon": 1e-8},
}


@pytest.mark.parametrize("cls", list(DEFAULTS), ids=lambda c: c.__name__)
def test_defaults_are_tfs_and_match_the_cpp_structs(cls):
    optimizer = cls()
    for name, value in {**DEFAULTS[cls], **COMMON}.items():
        assert getattr(optimizer, name) == value, name
    cpp = optimizer._to_cpp()
    default_cpp = cls._CPP()
    for name in DEFAULTS[cls]:
        if name != "learning_rate":
            assert getattr(cpp, name) == getattr(default_cpp, name), name
    assert np.float32(cpp.learning_rate) == np.float32(default_cpp.learning_rate)
    assert cpp.common.clip_weight_min == -math.inf and cpp.common.clip_gradient_max == math.inf


def test_attributes_read_back():
    adam = optimizers.Adam(0.1, beta_1=0.5, clipvalue=(None, 2.0), weight_decay_factor=0.01)
    assert (adam.learning_rate, adam.beta_1, adam.clipvalue) == (0.1, 0.5, (None, 2.0))
    cpp = adam._to_cpp()
    assert cpp.common.clip_gradient_min == -math.inf and cpp.common.clip_gradient_max == 2.0
    assert cpp.common.weight_decay_factor == pytest.approx(0.01)
    assert optimizers.SGD(clipvalue=3.0)._to_cpp().common.clip_gradient_min == -3.0
    assert adam.slot_names == ["momenta", "velocities"]
    assert optimizers.SGD().slot_names == []
    assert "beta_1=0.5" in repr(adam)


def test_unknown_keyword_lists_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown hyperparameter\(s\) \['lr'\].*'learning_rate'"):
        optimizers.Adagrad(lr=0.1)
    with pytest.raises(ValueError, match="slot_variable_creation_fn"):
        optimizers.SGD(slot_variable_creation_fn=lambda *args: None)
    with pytest.raises(ValueError, match="not supported"):
        optimizers.Adam(slot_variable_creation_fn=lambda *args: None)


@pytest.mark.parametrize("make,message", [
    (lambda: optimizers.Adagrad(initial_accumulator_value=0.0), "initial_accumulator_value"),
    (lambda: optimizers.Adam(beta_1=1.0), "beta_1"),
    (lambda: optimizers.Adam(lazy_adam=False, use_gradient_accumulation=False), "accumulation"),
    (lambda: optimizers.AdagradMomentum(epsilon=0.0), "epsilon"),
    (lambda: optimizers.SGD(learning_rate=-1.0), "learning_rate"),
    (lambda: optimizers.SGD(clip_weight_min=1.0, clip_weight_max=0.0), "clip_weight"),
    (lambda: optimizers.SGD(clipvalue=1.0, use_gradient_accumulation=False), "accumulation"),
    (lambda: optimizers.SGD(clipvalue="big"), "clipvalue"),
    (lambda: optimizers.SGD(learning_rate="fast"), "learning_rate"),
])
def test_invalid_hyperparameters_raise_value_error(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_names():
    for name, cls in [("sgd", optimizers.SGD), ("adagrad", optimizers.Adagrad),
                      ("adagrad_momentum", optimizers.AdagradMomentum), ("adam", optimizers.Adam),
                      ("ftrl", optimizers.FTRL), ("rowwise_adagrad", optimizers.RowWiseAdagrad)]:
        assert type(optimizers.get(name)) is cls
        assert _recemb.optimizer_name(optimizers.get(name)._to_cpp()) == name
    assert optimizers.get(None) is None
    adam = optimizers.Adam()
    assert optimizers.get(adam) is adam
    # Case-insensitive, as TF's names.
    for name, cls in [("SGD", optimizers.SGD), ("Adagrad", optimizers.Adagrad),
                      ("ADAM", optimizers.Adam), ("RowWise_Adagrad", optimizers.RowWiseAdagrad)]:
        assert type(optimizers.get(name)) is cls
    with pytest.raises(ValueError,
                       match=r"optimizer='AdamW': unknown optimizer name 'adamw'.*'sgd', "
                             r"'adagrad'"):
        optimizers.get("AdamW")
    with pytest.raises(ValueError, match="unknown optimizer"):
        optimizers.get(3)


def test_schedules():
    schedules = recemb.schedules
    decay = schedules.ExponentialDecay(0.1, 10, 0.5, staircase=True)
    assert (decay.initial_learning_rate, decay.decay_steps, decay.staircase) == (
        pytest.approx(0.1), 10, True)
    assert schedules.learning_rate_at(decay, 19) == pytest.approx(0.05)
    piecewise = schedules.PiecewiseConstantDecay(boundaries=[5], values=[1.0, 0.5])
    assert [schedules.learning_rate_at(piecewise, s) for s in (5, 6)] == [1.0, 0.5]
    warmup = schedules.LinearWarmup(target_learning_rate=1.0, warmup_steps=4)
    assert schedules.learning_rate_at(warmup, 1) == pytest.approx(0.25)
    optimizer = optimizers.SGD(learning_rate=warmup)
    assert optimizer.learning_rate is warmup
    assert schedules.learning_rate_at(optimizer._to_cpp().learning_rate, 1) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="decay_steps"):
        optimizers.SGD(learning_rate=schedules.ExponentialDecay(0.1, 0, 0.5))


class _KerasStyleSchedule:
    """A Keras LearningRateSchedule's shape: called with the step, recording the steps seen."""

    def __init__(self):
        self.steps = []

    def __call__(self, step):
        self.steps.append(step)
        return 0.5 / (1.0 + step)


def test_a_callable_of_the_step_is_called_with_the_step():
    schedule = _KerasStyleSchedule()
    table = recemb.TableConfig(vocabulary_size=6, dim=3, initializer="zeros", name="t",
                               combiner="sum")
    layer = recemb.Embedding(recemb.FeatureConfig(table, name="f"),
                             optimizers.SGD(learning_rate=schedule))
    rng = np.random.default_rng(3)
    expected = np.zeros((6, 3))
    for step in range(3):
        ids = np.array([0, 2, 5])
        gradients = rng.uniform(-1, 1, (3, 3)).astype(np.float32)
        layer(ids)
        layer.apply_gradients(gradients)
        expected[ids] -= 0.5 / (1.0 + step) * gradients.astype(np.float64)
    assert schedule.steps == [0, 1, 2]
    np.testing.assert_allclose(layer.embedding_tables["t"], expected, rtol=1e-6)


def test_a_learning_rate_callable_of_other_arguments_is_refused_at_construction():
    with pytest.raises(ValueError, match=r"optimizer SGD: learning_rate .* takes \(step, scale\): "
                                         r"a learning-rate callable takes no argument, or one"):
        optimizers.SGD(learning_rate=lambda step, scale: 0.1)
