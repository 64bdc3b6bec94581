"""recemb.keras: recemb's tables as a Keras 3 layer with the seed's `TPUEmbedding` constructor,
trained by recemb's fused optimizer inside model.fit and custom loops (docs/keras.md).

    layer = recemb.keras.Embedding(feature_config, optimizer=tf.tpu.experimental.embedding
                                   .Adagrad(learning_rate=0.1))
    model = keras.Sequential([...])    # or functional / subclassed, with the layer inside
    model.compile(optimizer="adam", loss=...)   # the dense part's optimizer
    model.fit(dataset)                 # each step's backward pass also updates the tables

On the TensorFlow backend the layer runs two real graph ops (RecembLookup and
RecembApplyGradients, recemb/_tf_ops.so), so it works eagerly, under tf.function and in
model.fit's compiled step. The tables are not Keras variables: the layer holds one trainable
scalar, the gradient trigger (the seed's "dummy" variable), through which the gradients of the
activations reach RecembApplyGradients, which applies the fused optimizer to the touched rows
while the Keras optimizer updates the dense weights (the trigger's own gradient is 0). On the
JAX backend the same happens through XLA FFI custom calls (recemb/_jax_ops.py); on the PyTorch
backend it runs recemb.torch's module: torch's backward pass applies the optimizer.
"""

from __future__ import annotations

import os
from typing import Any, Optional, Union

import keras
import numpy as np

from recemb import _config_dict, _jax_ops, _nest, _recemb, _state, _tf_configs, optimizers
from recemb.embedding import Embedding as _Layer

__all__ = ["Embedding", "TPUEmbedding", "translate_keras_optimizer"]

translate_keras_optimizer = _tf_configs.translate_keras_optimizer

_OPS = None


def _ops():
    """The TensorFlow op library (loaded once)."""
    global _OPS
    if _OPS is None:
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_tf_ops.so")
        if not os.path.exists(path):
            raise ImportError(f"recemb.keras: {path} was not built: build recemb where "
                              "tensorflow imports (scripts/keras-env, or -DRECEMB_BUILD_TF_OPS=ON; "
                              "docs/keras.md)")
        _OPS = tf.load_op_library(path)
    return _OPS


def _optimizer(optimizer: Any) -> Optional[optimizers._Optimizer]:
    """The seed's optimizer argument as a recemb optimizer: None, a name, a recemb optimizer, a
    tf.tpu.experimental.embedding optimizer or a Keras optimizer."""
    if optimizer is None or isinstance(optimizer, (str, optimizers._Optimizer)):
        return optimizers.get(optimizer)
    if _tf_configs.is_tf_config(optimizer):
        return _tf_configs.tf_optimizer(optimizer)
    if _tf_configs.is_keras_optimizer(optimizer):
        return translate_keras_optimizer(optimizer)
    raise ValueError(f"Unknown optimizer type {type(optimizer)}. Please pass a string optimizer "
                     "name, a subclass of keras optimizer, a recemb optimizer or an instance of "
                     "one of the optimizer parameter classes under "
                     "tf.tpu.experimental.embedding.")


@keras.saving.register_keras_serializable(package="recemb")
class Embedding(keras.layers.Layer):
    """The seed's TPUEmbedding on recemb (docs/keras.md).

    feature_config: a nested structure of recemb.FeatureConfig or
        tf.tpu.experimental.embedding.FeatureConfig (their TableConfigs and optimizers are
        converted, every field honoured or refused by name; tables shared by features stay
        shared).
    optimizer: None (tables without an optimizer: lookups only), a name ("sgd", "adagrad",
        "adam", "ftrl", and recemb's "adagrad_momentum", "rowwise_adagrad"), a recemb optimizer,
        a tf.tpu.experimental.embedding optimizer, or a Keras optimizer (translated as the seed's
        translate_keras_optimizer does).
    pipeline_execution_with_tensor_core, batch_size: the seed's, accepted: the layer makes no
        prefetch (so the results are those without pipelining, as the seed's on CPU) and needs no
        batch size.
    num_threads, seed, non_finite_gradients: recemb.Embedding's.

    call(features, weights=None, training=None): features in the structure of feature_config,
    each a tf.Tensor (int32 / int64 ids; [B] or [B, 1] one id an example, [B, N] a bag; a
    dynamic table's may be tf.string), a tf.RaggedTensor or a tf.SparseTensor (on JAX: dense
    arrays; on PyTorch: what recemb.torch takes); weights None or the same structure (None leaves
    allowed). Returns float32 activations in that structure. With training=True (model.fit) the
    gradients of the activations update the tables; otherwise it is a pure lookup.
    """

    def __init__(self, feature_config: Any, optimizer: Any = None,
                 pipeline_execution_with_tensor_core: bool = False,
                 batch_size: Optional[int] = None, *, num_threads: Union[int, str] = 0,
                 seed: int = 0, non_finite_gradients: str = "reject", **kwargs: Any) -> None:
        backend = keras.backend.backend()
        if backend not in ("tensorflow", "torch", "jax"):
            raise ValueError(f"recemb.keras runs on Keras's TensorFlow, PyTorch and JAX "
                             f"backends; this process uses {backend!r} (KERAS_BACKEND; "
                             "docs/keras.md)")
        if batch_size is not None and (isinstance(batch_size, bool) or
                                       not isinstance(batch_size, int) or batch_size < 1):
            raise ValueError(f"batch_size={batch_size!r}: must be None or a positive int")
        if not isinstance(pipeline_execution_with_tensor_core, bool):
            raise ValueError("pipeline_execution_with_tensor_core="
                             f"{pipeline_execution_with_tensor_core!r}: expected True or False")
        super().__init__(**kwargs)
        self._options = {"num_threads": num_threads, "seed": seed,
                         "non_finite_gradients": non_finite_gradients}
        # Keras would make ragged and sparse inputs dense (padding ids): the layer takes them as
        # they are.
        self._convert_input_args = False
        self._allow_non_tensor_positional_args = True  # numpy ids, recemb.Ragged / Sparse
        self.batch_size = batch_size
        self.pipeline_execution_with_tensor_core = pipeline_execution_with_tensor_core
        configs, optimizer = _tf_configs.feature_config(feature_config), _optimizer(optimizer)
        options = {"seed": seed, "non_finite_gradients": non_finite_gradients,
                   "pipeline_execution_with_tensor_core": pipeline_execution_with_tensor_core}
        self._torch_module = None
        self._trigger = None
        if backend == "torch":
            # recemb.torch's module, whose autograd function applies the gradients in torch's
            # backward pass; set past Keras's and torch's attribute tracking (it has no
            # parameters for either to see).
            import recemb.torch  # pylint: disable=import-outside-toplevel
            module = recemb.torch.Embedding(
                configs, optimizer, num_threads="torch" if num_threads == 0 else num_threads,
                **options)
            object.__setattr__(self, "_torch_module", module)
            self._layer = module.layer
        else:
            self._layer = _Layer(configs, optimizer, num_threads=num_threads, **options)
            self._graph_ops = _recemb.GraphOps(self._layer._engine)
            self._api = int(_recemb.graph_api_address())
            self._layer_id = int(self._graph_ops.layer_id())
            self._trigger = self.add_weight(name="recemb_gradient_trigger", shape=(),
                                            initializer="zeros", trainable=True)
        self._features = _nest.flatten(self._layer.feature_config)
        self._trainable = any(feature.table.optimizer is not None for feature in self._features) \
            or self._layer.optimizer is not None
        self.built = True

    # --- the layer's state ------------------------------------------------------------------

    @property
    def feature_config(self) -> Any:
        """The feature configs as recemb's (recemb.FeatureConfig)."""
        return self._layer.feature_config

    @property
    def embedding(self) -> _Layer:
        """The recemb.Embedding underneath (checkpoints, export, publish, dynamic tables)."""
        return self._layer

    @property
    def embedding_tables(self) -> dict[str, np.ndarray]:
        """{table name: float32 array}, live views of the engine (recemb.Embedding's)."""
        return self._layer.embedding_tables

    @property
    def slot_variables(self) -> dict[str, dict[str, np.ndarray]]:
        return self._layer.slot_variables

    @property
    def step(self) -> int:
        """The number of updates so far."""
        return self._layer.step

    def save_own_variables(self, store: Any) -> None:
        """Keras's saving (model.save, save_weights): the trigger, then every entry of the
        layer's state ("<table>.<variable>", "step"; recemb/_state.py) under "recemb:"."""
        super().save_own_variables(store)
        for key, values in _state.state_arrays(self._layer, "recemb:").items():
            store[key] = np.array(values)

    def load_own_variables(self, store: Any) -> None:
        self._load_state({key: store[key] for key in store.keys()
                          if str(key).startswith("recemb:")}, "recemb:", "saved tables")
        if self._trigger is not None and "0" in store.keys():
            self._trigger.assign(np.asarray(store["0"], dtype=np.float32))

    def _load_state(self, arrays, prefix, what):
        """Writes the state arrays (recemb/_state.py) into the layer, all of them or, raising
        ValueError, none."""
        missing, unexpected, errors = _state.load_state_arrays(self._layer, arrays, prefix,
                                                               complete=True)
        if missing or unexpected or errors:
            raise ValueError(f"layer {self.name!r}: the {what} do not fit this layer (missing "
                             f"{missing}, unexpected {unexpected}, errors {errors}); nothing was "
                             "loaded")

    def get_config(self) -> dict:
        """The layer's Keras config (model.save('*.keras')): the feature config and optimizer as
        JSON (recemb/_config_dict.py) and the constructor's other arguments."""
        config = super().get_config()
        config.update({"recemb": _config_dict.to_dict(self._layer.feature_config,
                                                      self._layer.optimizer),
                       "pipeline_execution_with_tensor_core":
                           self.pipeline_execution_with_tensor_core,
                       "batch_size": self.batch_size, **self._options})
        return config

    @classmethod
    def from_config(cls, config: dict) -> "Embedding":
        config = dict(config)
        feature_config, optimizer = _config_dict.from_dict(config.pop("recemb"))
        return cls(feature_config, optimizer, **config)

    # tf.train.Checkpoint (the seed's docstring checkpoints the model "as normal"): on the
    # TensorFlow backend the layer is a TF trackable, saved as its state arrays.
    # Checkpoint keys hold no "." (TensorFlow escapes it): "recemb-<table>-<variable>", with a
    # name's own "-" doubled.
    @staticmethod
    def _checkpoint_key(key):
        return "recemb-" + key.replace("-", "--").replace(".", "-")

    def _serialize_to_tensors(self):
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        return {self._checkpoint_key(key): tf.constant(values) for key, values in
                _state.state_arrays(self._layer).items()}

    def _restore_from_tensors(self, restored_tensors):
        keys = {self._checkpoint_key(key): key for key in _state.state_keys(self._layer)}
        self._load_state({keys.get(key, key): np.asarray(value)
                          for key, value in restored_tensors.items()}, "", "checkpoint's tables")

    # --- the lookup ---------------------------------------------------------------------------

    def call(self, features: Any, weights: Any = None, training: Any = None) -> Any:
        if self._torch_module is not None:
            # A training forward with grad enabled keeps its batch for torch's backward pass;
            # anything else is a pure lookup (recemb.torch.Embedding.forward).
            self._torch_module.train(training is True and self._trainable)
            return self._torch_module(features, weights)
        if keras.backend.backend() == "jax":
            return self._jax_call(features, weights, training is True and self._trainable)
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        from tensorflow.python.saved_model import save_context  # pylint: disable=import-outside-toplevel
        if save_context.in_save_context():
            raise ValueError("recemb.keras: a SavedModel cannot hold recemb's tables (its ops "
                             "call this process's engine): export them with "
                             "layer.embedding.export(path) for recemb.ServingModel / recemb "
                             "serve, and the dense part with Keras (docs/keras.md, \"Saving, "
                             "checkpoints and serving\")")
        structure = self._layer.feature_config
        flat, flat_weights = self._flat_inputs(features, weights)
        empty_ids, no_weights = tf.zeros([0], tf.int64), tf.zeros([0], tf.float32)
        inputs = [self._graph_input(tf, f, x, w, empty_ids, no_weights)
                  for f, (x, w) in enumerate(zip(flat, flat_weights))]
        kinds, ids, index, shapes, values = (list(column) for column in zip(*inputs))
        arguments = {"api": self._api, "layer": self._layer_id, "kinds": kinds, "ids": ids,
                     "index": index, "shapes": shapes, "weights": values}
        if training is True and self._trainable:
            outputs = self._training_lookup(tf, arguments)
        else:
            outputs, _ = _ops().recemb_lookup(training=False, **arguments)
        outputs = [self._with_static_shape(f, x, output)
                   for f, (x, output) in enumerate(zip(flat, outputs))]
        return _nest.pack_sequence_as(structure, outputs)

    def _flat_inputs(self, features, weights):
        """The features and weights (None for each when weights is None) in feature order;
        ValueError naming the path where they do not match the feature config."""
        structure = self._layer.feature_config
        flat = _nest.flatten_up_to(structure, features, "features")
        if weights is None:
            return flat, [None] * len(flat)
        return flat, _nest.flatten_up_to(structure, weights, "weights")

    def _jax_call(self, features, weights, training):
        flat, flat_weights = self._flat_inputs(features, weights)
        shapes = []
        for f, ids in enumerate(flat):
            if not (hasattr(ids, "shape") and np.issubdtype(ids.dtype, np.integer)):
                raise ValueError(f"feature {self._features[f].name!r}: on the JAX backend the "
                                 "ids must be a dense integer array, got "
                                 f"{type(ids).__name__} {getattr(ids, 'dtype', '')}")
            # The engine's shape rule (recemb/batch.h), on ids of the same (static) shape.
            placeholder = np.zeros(int(np.prod(ids.shape)), np.int64)
            shapes.append(self._layer._engine.activation_shape(
                f, _recemb.DenseIds(ids=placeholder, shape=list(ids.shape))))
        trigger = keras.ops.convert_to_tensor(self._trigger)
        outputs = _jax_ops.lookup(self._api, self._layer_id, flat, flat_weights, shapes, trigger,
                                  training)
        return _nest.pack_sequence_as(self._layer.feature_config, outputs)

    def _training_lookup(self, tf, arguments):
        """The activations of a training lookup, whose gradient function applies their
        gradients (RecembApplyGradients) and returns 0 for the trigger."""
        api, layer = self._api, self._layer_id
        ops = _ops()

        @tf.custom_gradient
        def lookup(trigger):
            activations, batch = ops.recemb_lookup(training=True, **arguments)

            def gradient(*upstream):
                gradients = [tf.zeros([0], tf.float32) if g is None
                             else tf.cast(tf.convert_to_tensor(g), tf.float32) for g in upstream]
                applied = ops.recemb_apply_gradients(api=api, layer=layer, batch=batch,
                                                     gradients=gradients)
                with tf.control_dependencies([applied]):
                    return tf.zeros_like(trigger)

            return activations, gradient

        return tf.nest.flatten(lookup(tf.convert_to_tensor(self._trigger)))

    def _graph_input(self, tf, f, ids, weights, empty_ids, no_weights):
        """(kind, ids, index, shape, weights) of feature f's input for RecembLookup; empty_ids and
        no_weights: the call's empty int64 and float32 tensors."""
        name = self._features[f].name or f"#{f}"

        def id_values(values):
            if values.dtype == tf.string and self._features[f].table.vocabulary is not None:
                # A dynamic table's string ids: their keys (recemb/string_key.h), as recemb's
                # Python and C++ APIs hash them.
                return _ops().recemb_string_keys(api=self._api, strings=values)
            if values.dtype not in (tf.int32, tf.int64):
                raise ValueError(f"feature {name!r}: ids must be int32 or int64 (or strings, for "
                                 f"a dynamic table), got {values.dtype.name}")
            return tf.cast(values, tf.int64)

        def weight_values(kind, expected):
            if weights is None:
                return no_weights
            if not isinstance(weights, expected):
                raise ValueError(f"feature {name!r}: weights must be a {expected.__name__} as "
                                 f"its ids are, got {type(weights).__name__}")
            values = weights if kind == "dense" else weights.values
            return tf.cast(values, tf.float32)  # the op reads any shape flat

        if isinstance(ids, tf.RaggedTensor):
            if ids.ragged_rank != 1 or ids.shape.rank != 2:
                raise ValueError(f"feature {name!r}: a RaggedTensor of ids must be [batch, "
                                 f"(ragged)], got shape {ids.shape}")
            return (1, id_values(ids.values), tf.cast(ids.row_splits, tf.int64), empty_ids,
                    weight_values("ragged", tf.RaggedTensor))
        if isinstance(ids, tf.SparseTensor):
            return (2, id_values(ids.values), ids.indices,
                    tf.cast(ids.dense_shape, tf.int64), weight_values("sparse", tf.SparseTensor))
        # Dense ids as they are: the op reads their shape (no reshape, no shape op).
        return (0, id_values(tf.convert_to_tensor(ids)), empty_ids, empty_ids,
                weight_values("dense", tf.Tensor))

    def _static_shape(self, f, ids):
        """Feature f's activation shape known before the lookup runs, from the ids' static
        shape (None where unknown): the batch axis, the rank and the table's dim
        (recemb/batch.h's shape rules); None when the ids' rank is unknown."""
        feature = self._features[f]
        dim = feature.table.dim
        shape = getattr(ids, "shape", None)
        try:
            rank = len(shape)
        except (TypeError, ValueError):  # no shape, or a TensorShape of unknown rank
            rank = None
        batch = shape[0] if rank else None
        if feature.output_shape:
            return list(feature.output_shape) + [dim]
        if feature.max_sequence_length > 0:
            return [batch, feature.max_sequence_length, dim]
        if rank is None:
            return None
        if type(ids).__name__ == "SparseTensor":
            return [batch] + [None] * (rank - 2) + [dim]
        if rank <= 2:
            return [batch, dim]
        return list(shape[:-1]) + [dim]

    def _with_static_shape(self, f, ids, output):
        shape = self._static_shape(f, ids)
        if shape is not None:
            output.set_shape(shape)
        return output

    def compute_output_spec(self, features: Any, weights: Any = None, training: Any = None):
        """The activations' shapes for symbolic inputs (Keras's functional API)."""
        structure = self._layer.feature_config
        flat = _nest.flatten_up_to(structure, features, "features")
        return _nest.pack_sequence_as(structure, [
            keras.KerasTensor(self._static_shape(f, ids) or [None, self._features[f].table.dim],
                              dtype="float32") for f, ids in enumerate(flat)])


TPUEmbedding = Embedding
