"""TensorFlow's and Keras's configs as recemb's (docs/keras.md, "Configs"): the
`tf.tpu.experimental.embedding` TableConfig, FeatureConfig and optimizers (SGD, Adagrad,
AdagradMomentum, Adam, FTRL), keras-rs's TableConfig and FeatureConfig, and Keras optimizers as
the seed's translate_keras_optimizer translates them. Every field is honoured or refused by name (ValueError). Imports TensorFlow only
when given one of its objects."""

from __future__ import annotations

from typing import Any

import numpy as np

from recemb import _nest, optimizers
from recemb.config import FeatureConfig, QuantizationConfig, TableConfig

_TF_MODULE = "tensorflow.python.tpu.tpu_embedding_v2_utils"

# tf.tpu.experimental.embedding optimizers: recemb's class of the same name.
_TF_OPTIMIZERS = {"SGD": optimizers.SGD, "Adagrad": optimizers.Adagrad,
                  "AdagradMomentum": optimizers.AdagradMomentum, "Adam": optimizers.Adam,
                  "FTRL": optimizers.FTRL}

# Attributes of TF's optimizers that recemb reads under another name, or ignores because they
# change no result.
_TF_RENAMED = {"clip_gradient_min", "clip_gradient_max"}
_TF_NO_EFFECT = {"low_dimensional_packing_status"}  # a TPU memory-packing hint


def _is_tf(value: Any, name: str) -> bool:
    kind = type(value)
    return kind.__module__ == _TF_MODULE and kind.__name__ == name


def is_tf_config(value: Any) -> bool:
    """Whether `value` is one of TensorFlow's embedding configs or optimizers."""
    return type(value).__module__ == _TF_MODULE


def tf_optimizer(optimizer: Any) -> optimizers._Optimizer:
    """The recemb optimizer of a tf.tpu.experimental.embedding optimizer, every attribute
    carried over (clip_gradient_min / max as clipvalue); slot_variable_creation_fn is refused
    (recemb owns the slots)."""
    name = type(optimizer).__name__
    if name not in _TF_OPTIMIZERS:
        raise ValueError(f"tf.tpu.experimental.embedding.{name}: recemb translates "
                         f"{sorted(_TF_OPTIMIZERS)}")
    cls = _TF_OPTIMIZERS[name]
    fields = {key: value for key, value in vars(optimizer).items()
              if key not in _TF_RENAMED and key not in _TF_NO_EFFECT}
    if fields.get("slot_variable_creation_fn") is not None:
        raise ValueError(f"tf.tpu.experimental.embedding.{name}: slot_variable_creation_fn is "
                         "not supported: recemb owns the slot variables (read them from the "
                         "layer's slot_variables)")
    fields.pop("slot_variable_creation_fn", None)
    low, high = optimizer.clip_gradient_min, optimizer.clip_gradient_max
    fields["clipvalue"] = None if low is None and high is None else (low, high)
    try:
        return cls(**fields)
    except ValueError as error:
        raise ValueError(f"tf.tpu.experimental.embedding.{name}: {error}") from None


def _initializer(initializer: Any):
    """A TF initializer (a callable of (shape, dtype)) as recemb's callable of the shape."""
    if initializer is None:
        return None

    def initial_values(shape):
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        return np.asarray(initializer(list(shape), dtype=tf.float32), dtype=np.float32)

    return initial_values


def tf_table(table: Any) -> TableConfig:
    """recemb's TableConfig of a tf.tpu.experimental.embedding.TableConfig."""
    if not isinstance(table.combiner, str):
        raise ValueError(f"table {table.name!r}: combiner {table.combiner!r}: recemb supports "
                         "'sum', 'mean' and 'sqrtn', not a CustomCombiner")
    if getattr(table, "layout", None) is not None:
        raise ValueError(f"table {table.name!r}: layout is a TPU sharding layout; recemb places "
                         "tables with placement= (docs/sharding.md)")
    dtype = getattr(table, "dtype", None)
    if dtype is not None and getattr(dtype, "name", str(dtype)) != "float32":
        raise ValueError(f"table {table.name!r}: dtype {dtype!r}: recemb's tables are float32")
    quantization = table.quantization_config
    if quantization is not None:
        quantization = QuantizationConfig(num_buckets=quantization.num_buckets,
                                          lower=quantization.lower, upper=quantization.upper)
    optimizer = None if table.optimizer is None else tf_optimizer(table.optimizer)
    return TableConfig(vocabulary_size=table.vocabulary_size, dim=table.dim,
                       initializer=_initializer(table.initializer), optimizer=optimizer,
                       combiner=table.combiner, name=table.name,
                       quantization_config=quantization)


def _is_keras_rs(value: Any, name: str) -> bool:
    kind = type(value)
    return kind.__module__.startswith("keras_rs.") and kind.__name__ == name


def _keras_initializer(initializer: Any):
    """A Keras initializer (a name or an object) as recemb's callable of the shape."""
    def initial_values(shape):
        import keras  # pylint: disable=import-outside-toplevel
        values = keras.initializers.get(initializer)(list(shape), dtype="float32")
        return np.asarray(keras.ops.convert_to_numpy(values), dtype=np.float32)

    return initial_values


def keras_rs_table(table: Any) -> TableConfig:
    """recemb's TableConfig of a keras_rs.layers.TableConfig: name, vocabulary_size,
    embedding_dim, initializer, optimizer (a Keras optimizer, translated, or a name) and combiner;
    placement, max_ids_per_partition and max_unique_ids_per_partition place the table on a TPU's
    SparseCore and size its buffers there: they change no result."""
    optimizer = table.optimizer
    if is_keras_optimizer(optimizer):
        optimizer = translate_keras_optimizer(optimizer)
    else:
        optimizer = optimizers.get(optimizer)
    return TableConfig(vocabulary_size=table.vocabulary_size, dim=table.embedding_dim,
                       initializer=_keras_initializer(table.initializer), optimizer=optimizer,
                       combiner=table.combiner, name=table.name)


def feature_config(structure: Any) -> Any:
    """The nest of feature configs with every TF or keras-rs FeatureConfig as recemb's (tables
    shared by several features stay shared); recemb's FeatureConfigs pass through. A keras-rs
    feature's input_shape and output_shape are those recemb's shape rules give ([B] or [B, N]
    dense ids: [B, dim]), so they are not carried over."""
    tables = {}

    def convert(feature):
        if _is_keras_rs(feature, "FeatureConfig"):
            key = id(feature.table)
            if key not in tables:
                tables[key] = keras_rs_table(feature.table)
            return FeatureConfig(table=tables[key], name=feature.name)
        if not _is_tf(feature, "FeatureConfig"):
            return feature
        key = id(feature.table)
        if key not in tables:
            tables[key] = tf_table(feature.table)
        output_shape = feature.output_shape  # a TensorShape, of unknown rank when not set
        if output_shape is not None and getattr(output_shape, "rank", 0) is not None:
            output_shape = [int(d) for d in output_shape]
        else:
            output_shape = None
        return FeatureConfig(table=tables[key], max_sequence_length=feature.max_sequence_length,
                             validate_weights_and_indices=feature.validate_weights_and_indices,
                             output_shape=output_shape or None, name=feature.name)

    return _nest.map_structure(convert, structure)


# Keras optimizers as the seed's translate_keras_optimizer maps them: the recemb class and the
# fields carried over. Every other field of the optimizer's config must keep its default
# (refused by name when changed), but those of _KERAS_IMPLEMENTATION.
_KERAS_OPTIMIZERS = {
    "SGD": (optimizers.SGD, ["learning_rate"]),
    "Adagrad": (optimizers.Adagrad, ["learning_rate", "initial_accumulator_value"]),
    "Adam": (optimizers.Adam, ["learning_rate", "beta_1", "beta_2", "epsilon"]),
    "Ftrl": (optimizers.FTRL, ["learning_rate", "learning_rate_power",
                               "l1_regularization_strength", "l2_regularization_strength",
                               "beta", "initial_accumulator_value"]),
}
# Config entries that name or select an implementation, never a result.
_KERAS_IMPLEMENTATION = {"name", "jit_compile", "is_legacy_optimizer", "decay"}


def is_keras_optimizer(value: Any) -> bool:
    """Whether `value` is an optimizer of Keras 3 or of tf_keras (Keras 2)."""
    return any(cls.__module__.split(".")[0] in ("keras", "tf_keras") and
               cls.__name__ in ("Optimizer", "OptimizerV2", "BaseOptimizer")
               for cls in type(value).__mro__)


def translate_keras_optimizer(optimizer: Any) -> optimizers._Optimizer:
    """The recemb optimizer of a Keras optimizer (Keras 3 or tf_keras, legacy or not), as the
    seed's translate_keras_optimizer: SGD, Adagrad (its epsilon unused: TF's embedding Adagrad has
    none), Adam (TF's embedding Adam: lazy, no bias correction) and Ftrl, the hyperparameters
    carried over and every other setting refused by name when changed from its default (momentum,
    nesterov, amsgrad, weight_decay, clipnorm, clipvalue, use_ema, ...). A learning rate that is a
    LearningRateSchedule is called with recemb's step."""
    name = type(optimizer).__name__
    if name not in _KERAS_OPTIMIZERS:
        raise ValueError(f"Keras optimizer {name} is unsupported for TPU Embedding: recemb "
                         f"translates {sorted(_KERAS_OPTIMIZERS)}")
    cls, carried = _KERAS_OPTIMIZERS[name]
    config = optimizer.get_config()
    defaults = type(optimizer)().get_config()
    changed = sorted(key for key in config
                     if key not in carried and key not in _KERAS_IMPLEMENTATION
                     and not _same(config[key], defaults.get(key)))
    if changed:
        raise ValueError(f"Keras optimizer {name}: recemb cannot honour "
                         + ", ".join(f"{key}={config[key]!r}" for key in changed)
                         + " (only " + ", ".join(carried) + " carry over)")
    learning_rate = config["learning_rate"]
    if isinstance(learning_rate, dict):  # a LearningRateSchedule, serialized: take the object
        # (Keras 3 keeps it in _learning_rate; tf_keras's learning_rate property returns it)
        learning_rate = getattr(optimizer, "_learning_rate", None)
        if not callable(learning_rate):
            learning_rate = optimizer.learning_rate
    else:
        learning_rate = float(learning_rate)
    return cls(learning_rate=learning_rate,
               **{key: float(config[key]) for key in carried if key != "learning_rate"})


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(np.all(np.asarray(a) == np.asarray(b)))
    except (TypeError, ValueError):
        return a == b
