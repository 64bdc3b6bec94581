"""TensorFlow's embedding configs and Keras optimizers as recemb's (recemb/_tf_configs.py): every
field carried over with non-default values, and what recemb cannot honour refused by name."""

import numpy as np
import pytest
import tensorflow as tf

import keras
import recemb
import recemb.keras
from recemb import _tf_configs

E = tf.tpu.experimental.embedding

COMMON = {"clip_weight_min": -3.0, "clip_weight_max": 4.0,
          "weight_decay_factor": 0.01, "multiply_weight_decay_factor_by_learning_rate": True,
          "clipvalue": (-0.5, 0.75)}
OWN = {
    "SGD": {},
    "Adagrad": {"initial_accumulator_value": 0.3},
    "AdagradMomentum": {"momentum": 0.5, "use_nesterov": True, "exponent": 3.0, "beta2": 0.9,
                        "epsilon": 1e-6},
    "Adam": {"beta_1": 0.8, "beta_2": 0.95, "epsilon": 1e-5, "lazy_adam": False,
             "sum_inside_sqrt": False},
    "FTRL": {"learning_rate_power": -0.6, "l1_regularization_strength": 0.1,
             "l2_regularization_strength": 0.2, "beta": 0.05, "initial_accumulator_value": 0.4,
             "multiply_linear_by_learning_rate": True, "allow_zero_accumulator": True},
}


@pytest.mark.parametrize("name", sorted(OWN))
def test_every_tf_optimizer_field_is_carried_over(name):
    tf_optimizer = getattr(E, name)(learning_rate=0.125, **OWN[name], **COMMON)
    ours = _tf_configs.tf_optimizer(tf_optimizer)
    assert type(ours) is getattr(recemb.optimizers, name)
    assert ours.learning_rate == 0.125
    for field, value in {**OWN[name], **COMMON}.items():
        assert getattr(ours, field) == pytest.approx(value), field
    # TF allows clipping only with gradient accumulation: that flag, alone.
    assert _tf_configs.tf_optimizer(getattr(E, name)(
        use_gradient_accumulation=False)).use_gradient_accumulation is False


def test_tf_table_and_feature_configs_are_carried_over(rng):
    values = rng.normal(size=(11, 3)).astype(np.float32)
    table = E.TableConfig(11, 3, initializer=tf.constant_initializer(values), combiner="sqrtn",
                          name="t", optimizer=E.Adagrad(0.5),
                          quantization_config=E.QuantizationConfig(num_buckets=9, lower=-1.0,
                                                                   upper=1.0))
    config = {"a": E.FeatureConfig(table, max_sequence_length=4, name="a"),
              "b": E.FeatureConfig(table, output_shape=[6], name="b")}
    ours = _tf_configs.feature_config(config)
    assert ours["a"].table is ours["b"].table
    converted = ours["a"].table
    assert (converted.vocabulary_size, converted.dim, converted.combiner, converted.name) == (
        11, 3, "sqrtn", "t")
    assert type(converted.optimizer) is recemb.optimizers.Adagrad
    assert converted.optimizer.learning_rate == 0.5
    quantization = converted.quantization_config
    assert (quantization.num_buckets, quantization.lower, quantization.upper) == (9, -1.0, 1.0)
    np.testing.assert_array_equal(converted.initializer((11, 3)), values)
    assert ours["a"].max_sequence_length == 4 and ours["b"].output_shape == [6]
    layer = recemb.keras.Embedding(config)
    np.testing.assert_array_equal(layer.embedding_tables["t"], values)


def test_what_recemb_cannot_honour_is_refused_by_name():
    with pytest.raises(ValueError, match="layout"):
        _tf_configs.tf_table(E.TableConfig(5, 2, name="t", layout=object()))
    with pytest.raises(ValueError, match="CustomCombiner"):
        _tf_configs.tf_table(E.TableConfig(5, 2, name="t", combiner=E.CustomCombiner(
            lambda *args: None, max_valency=2, num_weights=0)))
    for optimizer, field in ((keras.optimizers.Adam(amsgrad=True), "amsgrad"),
                             (keras.optimizers.Adagrad(weight_decay=0.1), "weight_decay"),
                             (keras.optimizers.SGD(nesterov=True, momentum=0.5), "momentum"),
                             (keras.optimizers.Ftrl(l2_shrinkage_regularization_strength=0.1),
                              "l2_shrinkage_regularization_strength"),
                             (tf.keras.optimizers.legacy.SGD(clipnorm=1.0), "clipnorm")):
        with pytest.raises(ValueError, match=field):
            recemb.keras.translate_keras_optimizer(optimizer)


def test_keras_optimizers_carry_their_hyperparameters():
    adam = recemb.keras.translate_keras_optimizer(
        keras.optimizers.Adam(learning_rate=0.02, beta_1=0.7, beta_2=0.8, epsilon=1e-4))
    assert (type(adam), adam.learning_rate, adam.beta_1, adam.beta_2, adam.epsilon) == (
        recemb.optimizers.Adam, pytest.approx(0.02), pytest.approx(0.7), pytest.approx(0.8),
        pytest.approx(1e-4))
    assert adam.lazy_adam and adam.sum_inside_sqrt  # TF's embedding Adam, as the seed translates
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5)
    sgd = recemb.keras.translate_keras_optimizer(keras.optimizers.SGD(learning_rate=schedule))
    assert sgd.learning_rate is schedule
    legacy_schedule = tf.keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=10,
                                                                     decay_rate=0.5)
    legacy = recemb.keras.translate_keras_optimizer(
        tf.keras.optimizers.legacy.SGD(learning_rate=legacy_schedule))
    assert legacy.learning_rate is legacy_schedule
    assert recemb.keras.translate_keras_optimizer(
        tf.keras.optimizers.legacy.Adagrad(learning_rate=0.25)).learning_rate == 0.25


def test_the_layer_runs_inside_a_tf_data_pipeline(rng):
    """A pure lookup inside dataset.map: the op runs in tf.data's graph functions."""
    table = recemb.TableConfig(20, 3, initializer=rng.normal(size=(20, 3)).astype(np.float32),
                               combiner="sum", name="t")
    layer = recemb.keras.Embedding(recemb.FeatureConfig(table, name="f"))
    ids = rng.integers(0, 20, size=(12, 2))
    dataset = tf.data.Dataset.from_tensor_slices(ids).batch(4).map(lambda x: layer(x))
    got = np.concatenate([batch.numpy() for batch in dataset])
    np.testing.assert_allclose(got, layer.embedding_tables["t"][ids].sum(axis=1), rtol=1e-6)
