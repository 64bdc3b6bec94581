"""Embedding: the tables of a feature config, looked up with combiners and trained by an optimizer
fused into apply_gradients (the seed's TPUEmbedding layer, on the CPU of one process).

    layer = recemb.Embedding(features, optimizer=recemb.optimizers.Adagrad(learning_rate=0.1))
    activations = layer(inputs)              # same structure as `features`; kept for training
    ... the dense model computes d(loss)/d(activations) ...
    layer.apply_gradients(gradients)         # same structure; the optimizer updates touched rows

Threads: the engine runs lookups and updates on its own worker threads with the interpreter lock
released; calls on one layer are serialised by a lock, so sharing a layer between Python threads
is safe (but gains nothing).
"""

import threading

import numpy as np

from recemb import _nest, _recemb, optimizers
from recemb.config import Resolved, TableConfig
from recemb.inputs import feature_input, float32_array

_NON_FINITE = {"reject": _recemb.NonFiniteGradients.kReject,
               "skip_rows": _recemb.NonFiniteGradients.kSkipRows}
_RESIZE = {"error": _recemb.Resize.kError, "grow": _recemb.Resize.kGrow,
           "grow_or_shrink": _recemb.Resize.kGrowOrShrink}
_NO_GRADIENT = np.empty(0, dtype=np.float32)


class LookupBatch:
    """What apply_gradients needs from one training lookup: a copy of its validated ids, so the
    input arrays may be released after the lookup. It belongs to the layer that filled it and is
    applied at most once; several may be pending at a time."""

    __slots__ = ("_cpp", "_shapes")

    def __init__(self):
        self._cpp = _recemb.LookupBatch()
        self._shapes = None  # the activation shapes of its lookup

    @property
    def applicable(self):
        """Whether it holds a lookup not applied yet."""
        return self._cpp.applicable()


class _Tables(dict):
    """A dict keyed by table name that also accepts the table's TableConfig as a key."""

    def __init__(self, items, resolved):
        super().__init__(items)
        self._resolved = resolved

    def _key(self, key):
        return self._resolved.table_name(key) if isinstance(key, TableConfig) else key

    def __getitem__(self, key):
        return super().__getitem__(self._key(key))

    def __contains__(self, key):
        return super().__contains__(self._key(key)) if not isinstance(key, TableConfig) else (
            key in self._resolved.tables)

    def get(self, key, default=None):
        return self[key] if key in self else default


def _build_engine(resolved, optimizer, options, zero_tables=False):
    """The C++ Embedding of a resolved config, its tables initialized (zeros if zero_tables)."""
    cpp_options = _recemb.EmbeddingOptions(
        optimizer=None if optimizer is None else optimizer._to_cpp(),
        num_threads=options["num_threads"], seed=options["seed"],
        non_finite_gradients=options["non_finite_gradients"])
    initial_values = [] if zero_tables else resolved.initial_values()
    engine = _recemb.Embedding(resolved.cpp_tables(zero_tables),
                               resolved.cpp_features(), cpp_options)
    for name, values in initial_values:
        engine.write_variable(name, "parameters", values)  # validates: finite values
    return engine


def _lookup(engine, resolved, features, weights, batch):
    """Looks up every feature; returns the flat list of float32 activations.

    engine: a C++ Embedding, or anything with its activation_shape(feature, input) and
    lookup(inputs, activations) (a serving model); batch: a LookupBatch to fill, or None."""
    names = resolved.feature_names
    flat_ids = _nest.flatten_up_to(resolved.structure, features, "features")
    flat_weights = ([None] * len(names) if weights is None else
                    _nest.flatten_up_to(resolved.structure, weights, "weights"))
    views = [feature_input(name, ids, w) for name, ids, w in zip(names, flat_ids, flat_weights)]
    shapes = [engine.activation_shape(f, view) for f, view in enumerate(views)]
    activations = [np.empty(shape, dtype=np.float32) for shape in shapes]
    if batch is None:
        engine.lookup(views, activations)
    else:
        batch._shapes = None
        engine.lookup(views, activations, batch._cpp)
        batch._shapes = [tuple(shape) for shape in shapes]
    return activations


class Embedding:
    """The embedding tables of `feature_config` (a FeatureConfig or a nested dict / list / tuple
    of them, flattened as tf.nest does: dict keys sorted) and their optimizer.

    optimizer: a recemb.optimizers object or name, used by every table without its own; None
        leaves such tables untrainable (lookups only).
    num_threads: worker threads of lookups and updates (0: one per core).
    seed: seed of the random initializers (same seed, same tables).
    non_finite_gradients: "reject" (a NaN or infinite gradient fails apply_gradients, changing
        nothing) or "skip_rows" (rows with a non-finite gradient are left as they are; counted by
        skipped_rows).

    Errors: bad configs, inputs and gradients raise ValueError (recemb.InvalidArgument) naming
    the feature or table and the value; tables, slots and the step counter are then unchanged.
    """

    def __init__(self, feature_config, optimizer=None, *, num_threads=0, seed=0,
                 non_finite_gradients="reject"):
        if non_finite_gradients not in _NON_FINITE:
            raise ValueError(f"non_finite_gradients must be one of {list(_NON_FINITE)}, got "
                             f"{non_finite_gradients!r}")
        self._resolved = Resolved(feature_config)
        self._optimizer = optimizers.get(optimizer)
        self._options = {"num_threads": int(num_threads), "seed": int(seed),
                         "non_finite_gradients": _NON_FINITE[non_finite_gradients]}
        self._lock = threading.RLock()
        self._engine = _build_engine(self._resolved, self._optimizer, self._options)
        self._batch = LookupBatch()

    @property
    def feature_config(self):
        return self._resolved.structure

    @property
    def optimizer(self):
        return self._optimizer

    @property
    def feature_names(self):
        """The features' names, in flattening order (the order of errors and of the engine)."""
        return list(self._resolved.feature_names)

    @property
    def table_names(self):
        """The tables' names, in order of first appearance."""
        return list(self._resolved.table_names)

    def __call__(self, features, weights=None):
        """Looks up `features` (the structure of the feature config; see recemb.inputs for the
        layouts) and keeps the batch for the next apply_gradients. Returns float32 numpy arrays
        in the same structure: [batch, dim] per combined feature, [batch, L, dim] per sequence
        feature, output_shape + [dim] when set."""
        return self.lookup(features, weights, batch=self._batch)

    def lookup(self, features, weights=None, batch=None):
        """As calling the layer, but keeps the batch in `batch` (a LookupBatch) when given, and
        nothing when batch is None (a pure lookup, for evaluation and serving)."""
        with self._lock:
            activations = _lookup(self._engine, self._resolved, features, weights, batch)
        return _nest.pack_sequence_as(self._resolved.structure, activations)

    def apply_gradients(self, gradients, batch=None):
        """Applies d(loss)/d(activations) of the last layer call (or of `batch`): `gradients` has
        the feature config's structure, each entry the shape of its activation or None (zeros;
        the feature's rows still count as touched, as TF's None). Then step increases by 1.
        Raises RuntimeError (recemb.FailedPrecondition) if the batch was applied already."""
        batch = self._batch if batch is None else batch
        if batch._shapes is None:
            raise RuntimeError("apply_gradients needs a training lookup first (call the layer, or "
                               "lookup(..., batch=...))")
        names = self._resolved.feature_names
        flat = ([None] * len(names) if gradients is None else
                _nest.flatten_up_to(self._resolved.structure, gradients, "gradients"))
        arrays = []
        for name, gradient, shape in zip(names, flat, batch._shapes):
            if gradient is None:
                arrays.append(_NO_GRADIENT)
                continue
            array = float32_array(gradient)
            if array.shape != shape:
                raise ValueError(f"feature '{name}': gradient of shape {array.shape}, expected "
                                 f"the activation's shape {shape}")
            arrays.append(array)
        with self._lock:
            self._engine.apply_gradients(batch._cpp, arrays)

    @property
    def step(self):
        """The number of apply_gradients calls so far (the step of learning-rate schedules).
        Assigning it (restoring a checkpoint) moves the schedules and Adam's bias correction to
        that step."""
        return self._engine.step()

    @step.setter
    def step(self, step):
        self._set_step(step)

    @property
    def skipped_rows(self):
        """Rows left unchanged by non_finite_gradients="skip_rows", summed over all steps."""
        return self._engine.skipped_rows()

    def _variable(self, table, variable):
        flat = self._engine.variable_data(table, variable)
        return flat.reshape(self._engine.variable_shape(table, variable))

    @property
    def embedding_tables(self):
        """{table name: float32 array [vocabulary_size, dim]}, sharing memory with the engine
        (a TableConfig works as a key too). Reads see every later update. Writes through the
        arrays are allowed between calls and are not validated (assign_table validates)."""
        return _Tables({name: self._variable(name, "parameters")
                        for name in self._resolved.table_names}, self._resolved)

    @property
    def slot_variables(self):
        """{table name: {slot name: float32 array}} (TF's slot names, e.g. "accumulators"),
        sharing memory with the engine as embedding_tables does."""
        return _Tables({name: {slot: self._variable(name, slot)
                               for slot in self._engine.variable_names(name)[1:]}
                        for name in self._resolved.table_names}, self._resolved)

    def variable_names(self, table):
        """"parameters" (the table), then the table's slots."""
        return self._engine.variable_names(self._resolved.table_name(table))

    def assign_table(self, table, values):
        """Copies `values` (shape [vocabulary_size, dim], finite) into the table."""
        self.assign_variable(table, "parameters", values)

    def assign_variable(self, table, variable, values):
        """Copies `values` (the variable's shape, finite) into a table or slot variable; raises
        ValueError (changing nothing) on a wrong shape or a non-finite value."""
        name = self._resolved.table_name(table)
        array = float32_array(values)
        shape = tuple(self._engine.variable_shape(name, variable))
        if array.shape != shape:
            raise ValueError(f"table '{name}' variable '{variable}': shape {array.shape}, "
                             f"expected {shape}")
        with self._lock:
            if not np.may_share_memory(array, self._variable(name, variable)):
                self._engine.write_variable(name, variable, array)

    def save(self, directory, keep_last=3):
        """Saves the tables, slots, step and configs as the checkpoint directory/ckpt-<step, 12
        digits> (the format of docs/formats.md), atomically, and deletes the checkpoints under
        `directory` beyond the newest keep_last. Returns the new checkpoint's path (a
        pathlib.Path). Raises RuntimeError (recemb.FailedPrecondition) if a checkpoint of this
        step exists already, OSError for file-system failures; the layer is never changed."""
        with self._lock:
            return _recemb.save_checkpoint(self._engine, directory,
                                           _recemb.SaveOptions(keep_last=keep_last))

    def restore(self, checkpoint, resize="error"):
        """Restores a checkpoint (a ckpt-* directory, or a directory given to save: its latest
        checkpoint) into this layer: tables, slots and the step, bit for bit. Returns the step.

        Tables are matched by name and need the same dim and optimizer (a table without an
        optimizer takes the parameters alone); features may differ. resize: "error" (a different
        vocabulary_size is an error), "grow" (a larger vocabulary: the rows beyond the
        checkpoint's keep their current values, for a new layer its initial ones) or
        "grow_or_shrink" (also smaller: the checkpoint's extra rows are dropped).
        Every file is verified before anything changes: a mismatch, a missing, truncated or
        damaged file raises ValueError naming the table or the file, and the layer is unchanged.
        """
        if resize not in _RESIZE:
            raise ValueError(f"resize must be one of {list(_RESIZE)}, got {resize!r}")
        with self._lock:
            return _recemb.restore_checkpoint(self._engine, checkpoint,
                                              _recemb.RestoreOptions(resize=_RESIZE[resize])).step

    def export(self, path, dtype="float32"):
        """Writes the tables (no slots) and the configs as the serving model file `path` (see
        recemb.ServingModel and docs/serving.md), atomically. dtype: "float32" (lookups equal
        this layer's bitwise), "float16" or "int8" (within the bounds of docs/serving.md).
        Raises ValueError, creating no file, for a bad dtype or a value the dtype cannot hold
        (non-finite; |x| >= 65520 for float16), naming the table, row and column."""
        options = _recemb.ExportOptions(dtype=_recemb.parse_serving_dtype(str(dtype)))
        with self._lock:
            _recemb.export_serving_model(self._engine, path, options)

    def _set_step(self, step):
        step = int(step)
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        with self._lock:
            self._engine.set_step(step)


def serving_embedding_lookup(inputs, weights, tables, feature_config, *, num_threads=0):
    """A stateless lookup of `inputs` in the given `tables` (TF's serving_embedding_lookup): the
    same activations as Embedding(feature_config) holding those tables would give.

    tables: {table name or TableConfig: array [vocabulary_size, dim]}, for example an
    Embedding's embedding_tables. Each call builds a temporary engine and copies the tables into
    it: O(total table size) per call, fine for tests and small models.
    """
    resolved = Resolved(feature_config)
    engine = _build_engine(resolved, None, {"num_threads": num_threads, "seed": 0,
                                            "non_finite_gradients": _NON_FINITE["reject"]},
                           zero_tables=True)
    for table, name in zip(resolved.tables, resolved.table_names):
        if table in tables:
            values = tables[table]
        elif name in tables:
            values = tables[name]
        else:
            raise ValueError(f"tables has no entry for table '{name}' (keys may be table names "
                             "or TableConfigs)")
        array = float32_array(values)
        if array.shape != (table.vocabulary_size, table.dim):
            raise ValueError(f"table '{name}': shape {array.shape}, expected "
                             f"{(table.vocabulary_size, table.dim)}")
        engine.write_variable(name, "parameters", array)
    return _nest.pack_sequence_as(resolved.structure,
                                  _lookup(engine, resolved, inputs, weights, None))
