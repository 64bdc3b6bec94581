"""Embedding: the tables of a feature config, looked up with combiners and trained by an optimizer
fused into apply_gradients (the seed's TPUEmbedding layer, on CPUs; sharded over processes with
placement= and communicator=, see recemb.placement).

    layer = recemb.Embedding(features, optimizer=recemb.optimizers.Adagrad(learning_rate=0.1))
    activations = layer(inputs)              # same structure as `features`; kept for training
    ... the dense model computes d(loss)/d(activations) ...
    layer.apply_gradients(gradients)         # same structure; the optimizer updates touched rows
    evaluation = layer(inputs, training=False)   # a pure lookup: keeps nothing

Threads: the engine runs lookups and updates on its own worker threads with the interpreter lock
released; calls on one layer are serialised by a lock, and the batch a training call of the layer
keeps for apply_gradients is the calling thread's own, so sharing a layer between Python threads
is safe (but gains nothing).

Ranks: with a communicator of several ranks, every rank builds the same layer and makes the same
calls in the same order (lookups, apply_gradients, embedding_tables, slot_variables, assign_*):
they are collective. An input this layer rejects on one rank raises on every rank.
"""

from __future__ import annotations

import os
import pathlib
import threading
from typing import Any, Mapping, Optional, Union

import numpy as np

from recemb import _nest, _recemb, optimizers
from recemb._activations import ActivationArrays
from recemb._engine import _build_engine, _int_setting, _num_threads_setting
from recemb._lookup import _lookup_arguments, _pure_lookup
from recemb._tables import _TableAccess, _viewable_tables
from recemb.config import Resolved, _parse_name
from recemb.inputs import ArrayLike, float32_array
from recemb.placement import Placement, _cpp_communicator

_NO_GRADIENT = np.empty(0, dtype=np.float32)

# Type hints: a nested structure (dict / list / tuple) mirroring the feature config, of inputs,
# weights, arrays or None; an optimizer or its name; a path.
Nest = Any
OptimizerLike = Union[None, str, optimizers._Optimizer]
PathLike = Union[str, "os.PathLike[str]"]


class LookupBatch:
    """What apply_gradients needs from one training lookup: a copy of its validated ids, so the
    input arrays may be released after the lookup. It belongs to the layer that filled it and is
    applied at most once; several may be pending at a time."""

    __slots__ = ("_cpp", "_shapes", "_prefetched")

    def __init__(self):
        self._cpp = _recemb.LookupBatch()
        self._shapes = None  # the activation shapes of its lookup
        # Between prefetch and finish_lookup: (input views, activations, shapes, what
        # finish_lookup returns); the views and arrays stay referenced while the engine fills
        # them on its background thread.
        self._prefetched = None

    @property
    def applicable(self) -> bool:
        """Whether it holds a lookup not applied yet."""
        return self._cpp.applicable()


class _ThreadBatches(threading.local):
    """The batch of the calling thread's training calls of a layer (layer(...) and
    apply_gradients(gradients) without a batch): one per thread, so that threads sharing a layer
    never apply each other's lookups."""

    def __init__(self):
        super().__init__()
        self.batch = LookupBatch()


class Embedding(_TableAccess):
    """The embedding tables of `feature_config` (a FeatureConfig or a nested dict / list / tuple
    of them, flattened as tf.nest does: dict keys sorted) and their optimizer.

    optimizer: a recemb.optimizers object or name, used by every table without its own; None
        leaves such tables untrainable (lookups only).
    num_threads: worker threads of lookups and updates (0: one per core), or "openmp": no
        threads of its own; the loops run on the threads of the process's OpenMP runtime (its
        omp_get_max_threads() when the layer is built), the ones PyTorch's intra-op parallelism
        uses (docs/python.md, "One set of threads"). recemb.torch.Embedding's default.
    seed: seed of the random initializers (same seed, same tables).
    non_finite_gradients: "reject" (a NaN or infinite gradient fails apply_gradients, changing
        nothing) or "skip_rows" (rows with a non-finite gradient are left as they are; counted by
        skipped_rows).
    pipeline_staleness: what prefetch does ahead of finish_lookup: "none" (everything but reading
        the tables: finish_lookup gives what a lookup at that time would, bitwise) or "one_step"
        (everything, so the rows read may miss the apply_gradients calls made in between: one
        step old in the usual loop, as TF's pipeline_execution_with_tensor_core).
    pipeline_execution_with_tensor_core: TF's name of that choice, for ported code: True is
        pipeline_staleness="one_step", False "none" (None: pipeline_staleness decides; giving
        both, differing, raises ValueError).
    placement: a recemb.Placement (how the tables are split into shards), or None: the automatic
        planner over one shard per rank (one process alone keeps every table whole).
    communicator: None (this process alone), "mpi" (the ranks of mpirun; RuntimeError if recemb
        was built without MPI) or a recemb.Communicator (e.g. one of
        recemb.in_process_communicators(n), each used by its own thread). With several ranks,
        every rank builds the layer with the same configs, seed and placement and passes its own
        share of the global batch (the ranks' batches in rank order); shard s lives on rank
        s % world_size. Results equal the single-process layer's on the global batch (to float
        rounding, 1e-5 relative).

    Errors: bad configs, inputs and gradients raise ValueError (recemb.InvalidArgument) naming
    the feature or table and the value; tables, slots, the step counter and any pending batch are
    then unchanged.

    copy.deepcopy and pickle give an independent layer with the same configs, options, tables,
    slots and step (bitwise), without a pending batch (not with several ranks: save a checkpoint).
    """

    def __init__(self, feature_config: Nest, optimizer: OptimizerLike = None, *,
                 num_threads: Union[int, str] = 0, seed: int = 0,
                 non_finite_gradients: str = "reject",
                 pipeline_staleness: str = "none", placement: Optional[Placement] = None,
                 communicator: Union[None, str, _recemb.Communicator] = None,
                 pipeline_execution_with_tensor_core: Optional[bool] = None) -> None:
        non_finite_gradients = _parse_name(_recemb.parse_non_finite_gradients,
                                           "non_finite_gradients", non_finite_gradients)
        pipeline_staleness = _parse_name(_recemb.parse_pipeline_staleness, "pipeline_staleness",
                                         pipeline_staleness)
        if pipeline_execution_with_tensor_core is not None:
            if not isinstance(pipeline_execution_with_tensor_core, bool):
                raise ValueError("pipeline_execution_with_tensor_core="
                                 f"{pipeline_execution_with_tensor_core!r}: expected True, False "
                                 "or None")
            tf_staleness = _recemb.PipelineStaleness.kOneStep if (
                pipeline_execution_with_tensor_core) else _recemb.PipelineStaleness.kNone
            if pipeline_staleness not in (tf_staleness, _recemb.PipelineStaleness.kNone):
                raise ValueError(
                    f"pipeline_execution_with_tensor_core={pipeline_execution_with_tensor_core} "
                    "contradicts pipeline_staleness="
                    f"{_recemb.pipeline_staleness_name(pipeline_staleness)!r}: give one of them")
            pipeline_staleness = tf_staleness
        if placement is not None and not isinstance(placement, Placement):
            raise ValueError(f"placement must be None or a recemb.Placement, got {placement!r}")
        self._start(Resolved(feature_config), optimizers.get(optimizer),
                    {"num_threads": _num_threads_setting(num_threads),
                     "seed": _int_setting("seed", seed, 2**64 - 1),
                     "non_finite_gradients": non_finite_gradients,
                     "pipeline_staleness": pipeline_staleness,
                     "placement": placement,
                     "communicator": _cpp_communicator(communicator)})

    def _start(self, resolved, optimizer, options, zero_tables=False):
        """Builds the engine (see _build_engine) and the layer's Python state around it."""
        self._resolved = resolved
        self._optimizer = optimizer
        self._options = options
        self._lock = threading.RLock()
        self._engine = _build_engine(resolved, optimizer, options, zero_tables)
        self._views = _viewable_tables(self._engine, resolved)
        self._thread_batches = _ThreadBatches()
        self._new_arrays = ActivationArrays()

    def __getstate__(self):
        """What pickle and copy.deepcopy keep: the configs, options, every variable (a dynamic
        table's keys, rows and slots, as read_dynamic_table gives them) and the step (a pending
        batch is not kept, as in a checkpoint)."""
        if self.world_size > 1:
            raise RuntimeError(
                f"a layer sharded over {self.world_size} ranks cannot be copied or pickled: "
                "save a checkpoint on every rank (layer.save) and restore it into a new layer")
        options = {name: value for name, value in self._options.items() if name != "communicator"}
        options["non_finite_gradients"] = _recemb.non_finite_gradients_name(
            options["non_finite_gradients"])
        options["pipeline_staleness"] = _recemb.pipeline_staleness_name(
            options["pipeline_staleness"])
        with self._lock:
            variables = {(table, variable): np.array(self._variable(table, variable))
                         for table in self._static_table_names()
                         for variable in self._engine.variable_names(table)}
            dynamic_tables = {table: self.read_dynamic_table(table)
                              for table in self._dynamic_table_names()}
            step = self._engine.step()
        return {"feature_config": self._resolved.structure, "optimizer": self._optimizer,
                "options": options, "variables": variables, "dynamic_tables": dynamic_tables,
                "step": step}

    def __setstate__(self, state):
        options = dict(state["options"])
        for name, parse in (("non_finite_gradients", _recemb.parse_non_finite_gradients),
                            ("pipeline_staleness", _recemb.parse_pipeline_staleness)):
            options[name] = parse(options[name])
        self._start(Resolved(state["feature_config"]), state["optimizer"], options,
                    zero_tables=True)
        for (table, variable), values in state["variables"].items():
            self._engine.write_variable(table, variable, float32_array(values))
        self._engine.set_step(state["step"])
        for table, contents in state.get("dynamic_tables", {}).items():
            self.write_dynamic_table(table, *contents)

    @property
    def feature_config(self) -> Nest:
        return self._resolved.structure

    @property
    def optimizer(self) -> Optional[optimizers._Optimizer]:
        return self._optimizer

    @property
    def feature_names(self) -> list[str]:
        """The features' names, in flattening order (the order of errors and of the engine)."""
        return list(self._resolved.feature_names)

    @property
    def table_names(self) -> list[str]:
        """The tables' names, in order of first appearance."""
        return list(self._resolved.table_names)

    @property
    def placement(self):
        """The plan the tables follow (recemb._recemb.Placement: num_shards, tables[i].strategy
        and .shards, shards[s] totals); str() gives it as text, one line per shard and per
        table part."""
        return self._engine.placement()

    @property
    def rank(self) -> int:
        """This process's rank among the layer's ranks (0 without a communicator)."""
        return self._engine.rank()

    @property
    def world_size(self) -> int:
        """The number of ranks sharing the tables (1 without a communicator)."""
        return self._engine.world_size()

    def _checked(self, check):
        """check() (the checks and argument shaping this layer does before a collective call of
        the engine), then, with several ranks, agreement on its outcome with the other ranks,
        which make the same call: if check() raised on any rank, every rank raises, this rank its
        own error, the others ValueError (or RuntimeError, for an error not a ValueError) "rank
        R: <its message>". Returns check()'s result. Call it holding self._lock, so that
        collectives keep their order."""
        agree = self._engine.world_size() > 1
        try:
            result = check()
        except Exception as error:
            if agree:
                try:
                    self._engine.agree_on_error(error)
                except (ValueError, RuntimeError):
                    pass  # this rank raises its own error
            raise
        if agree:
            self._engine.agree_on_error(None)
        return result

    def __call__(self, features: Nest, weights: Nest = None, *, training: bool = True,
                 replace_pending: bool = False, out: Nest = None) -> Nest:
        """Looks up `features` (the structure of the feature config; see recemb.inputs for the
        layouts). Returns float32 numpy arrays in the same structure: [batch, dim] per combined
        feature, [batch, L, dim] per sequence feature, output_shape + [dim] when set.

        training: True (a training lookup, Keras's training=True: the batch is kept, for this
            thread, until apply_gradients(gradients) applies it) or False (evaluation: a pure
            lookup that keeps nothing, as lookup(features)). A training lookup while this
            thread's previous one is not applied yet raises RuntimeError
            (recemb.FailedPrecondition), changing nothing, unless replace_pending=True (which
            drops the pending batch): so an evaluation pass between a training lookup and its
            apply_gradients cannot silently take the training batch's place.

        out: None (arrays of the layer's: new ones, or those of its last two lookups that
        nothing refers to any more, recemb/_activations.py), or arrays to write the activations
        into, returned as given (the same object): the structure of the feature config (one
        array for a single feature), each a numpy float32 array of exactly its activation's
        shape, C-contiguous, aligned and writeable, sharing memory with no other out array and
        no input array. Otherwise raises
        ValueError naming the feature, before anything is written; inputs the engine rejects
        leave the arrays unchanged too. A training lookup keeps no reference to them."""
        if not isinstance(training, bool):
            raise ValueError(f"training must be True or False, got {training!r}")
        if not training:
            return self.lookup(features, weights, out=out)
        return self._lookup(features, weights, self._thread_batches.batch, out,
                            check_pending=not replace_pending)

    def lookup(self, features: Nest, weights: Nest = None, batch: Optional[LookupBatch] = None,
               *, out: Nest = None) -> Nest:
        """As calling the layer, but keeps the batch in `batch` (a LookupBatch, whose earlier
        lookup is replaced) when given, and nothing when batch is None (a pure lookup, for
        evaluation and serving). out: as for calling the layer. A failed lookup leaves `batch`
        as it was."""
        return self._lookup(features, weights, batch, out, check_pending=False)

    def _lookup(self, features, weights, batch, out, check_pending):
        """The lookup of __call__ and lookup into `batch` (None: a pure lookup); check_pending:
        refuse to replace a lookup in `batch` that is not applied yet."""
        def checked_arguments():
            if check_pending and batch.applicable:
                raise _recemb.FailedPrecondition(
                    "layer(features): this thread's previous training lookup (a call of the "
                    "layer with training=True, the default) is not applied yet, and this one "
                    "would replace it. For evaluation, call layer(features, training=False); "
                    "to train on the pending batch, call layer.apply_gradients(gradients) "
                    "first; to drop it, pass replace_pending=True")
            return _lookup_arguments(self._engine, self._resolved, features, weights,
                                     self._new_arrays, out)

        with self._lock:
            views, shapes, activations = self._checked(checked_arguments)
            if batch is None:
                self._engine.lookup(views, activations)
            else:
                self._engine.lookup(views, activations, batch._cpp)
                batch._shapes = [tuple(shape) for shape in shapes]
        if out is not None:
            return out
        return _nest.pack_sequence_as(self._resolved.structure, activations)

    def prefetch(self, features: Nest, weights: Nest = None,
                 batch: Optional[LookupBatch] = None, *, out: Nest = None) -> LookupBatch:
        """Starts the training lookup of `features` on the engine's background thread and returns
        at once the LookupBatch it fills (`batch`, or a new one); finish_lookup(batch) completes
        it and returns the activations. Meanwhile the caller may run the dense step of the
        previous batch and apply its gradients:

            batch = layer.prefetch(inputs[0]); activations = layer.finish_lookup(batch)
            for t: next_batch = layer.prefetch(inputs[t + 1])
                   ... dense step t ...; layer.apply_gradients(gradients, batch)
                   activations = layer.finish_lookup(next_batch); batch = next_batch

        What runs ahead is set by the layer's pipeline_staleness: with "none" the results equal
        those of a lookup made when finish_lookup is called, bitwise. Inputs and out: as
        lookup's; the input arrays must not change until finish_lookup. Checks made here raise
        ValueError at once; the engine's (ids out of range, ...) are raised by finish_lookup, as
        lookup raises them, with nothing changed. Every other call on the layer first waits for
        the background work to end. With several ranks it is collective, as lookup."""
        batch = LookupBatch() if batch is None else batch
        with self._lock:
            views, shapes, activations = self._checked(lambda: _lookup_arguments(
                self._engine, self._resolved, features, weights, self._new_arrays, out))
            batch._shapes = None
            batch._prefetched = None
            self._engine.prefetch(views, activations, batch._cpp)
            result = out if out is not None else _nest.pack_sequence_as(
                self._resolved.structure, activations)
            batch._prefetched = (views, activations, [tuple(shape) for shape in shapes], result)
        return batch

    def finish_lookup(self, batch: LookupBatch) -> Nest:
        """Completes the prefetch that filled `batch` and returns its activations (as calling the
        layer: the feature config's structure, or `out` as given); `batch` can then be applied
        with apply_gradients(gradients, batch). Raises the engine's validation errors of the
        prefetched inputs (ValueError, with nothing changed), and RuntimeError
        (recemb.FailedPrecondition) for a batch not given to prefetch."""
        with self._lock:
            pending, batch._prefetched = batch._prefetched, None
            self._engine.finish_lookup(batch._cpp)
            _, _, shapes, result = pending
            batch._shapes = shapes
        return result

    def apply_gradients(self, gradients: Nest, batch: Optional[LookupBatch] = None) -> None:
        """Applies d(loss)/d(activations) of this thread's last training call of the layer (or
        of `batch`): `gradients` has the feature config's structure, each entry the shape of its
        activation or None (zeros; the feature's rows still count as touched, as TF's None). Then
        step increases by 1. Raises RuntimeError (recemb.FailedPrecondition) if the batch was
        applied already."""
        batch = self._thread_batches.batch if batch is None else batch
        with self._lock:
            arrays = self._checked(lambda: self._gradient_arrays(gradients, batch))
            self._engine.apply_gradients(batch._cpp, arrays)

    def _gradient_arrays(self, gradients, batch):
        """The flat float32 gradients of `batch`'s features, checked against its shapes."""
        if batch._shapes is None:
            raise _recemb.FailedPrecondition(
                "apply_gradients needs a training lookup first (call the layer on this thread, "
                "or lookup(..., batch=...))")
        names = self._resolved.feature_names
        flat = ([None] * len(names) if gradients is None else
                _nest.flatten_up_to(self._resolved.structure, gradients, "gradients"))
        arrays = []
        for name, gradient, shape in zip(names, flat, batch._shapes):
            if gradient is None:
                arrays.append(_NO_GRADIENT)
                continue
            array = float32_array(gradient, f"feature '{name}': gradient")
            if array.shape != shape:
                raise ValueError(f"feature '{name}': gradient of shape {array.shape}, expected "
                                 f"the activation's shape {shape}")
            arrays.append(array)
        return arrays

    @property
    def step(self) -> int:
        """The number of apply_gradients calls so far (the step of learning-rate schedules).
        Assigning it (restoring a checkpoint) moves the schedules and Adam's bias correction to
        that step."""
        return self._engine.step()

    @step.setter
    def step(self, step: int) -> None:
        self._set_step(step)

    @property
    def skipped_rows(self) -> int:
        """Rows left unchanged by non_finite_gradients="skip_rows", summed over all steps."""
        return self._engine.skipped_rows()

    def save(self, directory: PathLike, keep_last: int = 3) -> pathlib.Path:
        """Saves the tables, slots, step and configs as the checkpoint directory/ckpt-<step, 12
        digits> (the format of docs/formats.md), atomically, and deletes the checkpoints under
        `directory` beyond the newest keep_last. Returns the new checkpoint's path (a
        pathlib.Path). Raises RuntimeError (recemb.FailedPrecondition) if a checkpoint of this
        step exists already, OSError for file-system failures; the layer is never changed.

        With several ranks (communicator="mpi" or in-process ranks) it is collective: every rank
        calls it with the same directory, which all of them must see (a shared file system on a
        cluster); each rank writes its own shards' rows, and an error on any rank raises on every
        rank ("rank R: ..."; file-system failures then raise RuntimeError)."""
        with self._lock:
            self._checked(lambda: _path("directory", directory))
            return _recemb.save_checkpoint(self._engine, directory,
                                           _recemb.SaveOptions(keep_last=keep_last))

    def restore(self, checkpoint: PathLike, resize: str = "error",
                convert_dtype: bool = False) -> int:
        """Restores a checkpoint (a ckpt-* directory, or a directory given to save: its latest
        checkpoint) into this layer: tables, slots and the step, bit for bit. Returns the step.

        Tables are matched by name and need the same dim and optimizer (a table without an
        optimizer takes the parameters alone); features may differ. resize: "error" (a different
        vocabulary_size is an error), "grow" (a larger vocabulary: the rows beyond the
        checkpoint's keep their current values, for a new layer its initial ones) or
        "grow_or_shrink" (also smaller: the checkpoint's extra rows are dropped).
        convert_dtype: a table whose rows the checkpoint holds in another dtype raises ValueError
        unless True: then they are converted (widened exactly, or rounded to nearest to 16 bits).
        Every file is verified before anything changes: a mismatch raises ValueError, a truncated
        or damaged file recemb.DataLoss, a missing one FileNotFoundError, naming the table or the
        file, and the layer is unchanged (see the module's errors in docs/python.md).
        Any checkpoint restores into any placement and rank count. With several ranks it is
        collective, as save: the ranks verify the files together, then each reads only its own
        shards' rows; an error on any rank raises the same error on every rank.
        """
        if not isinstance(convert_dtype, bool):
            raise ValueError(f"convert_dtype must be a bool, got {convert_dtype!r}")
        options = _recemb.RestoreOptions(
            resize=_parse_name(_recemb.parse_vocabulary_resize, "resize", resize),
            convert_dtype=convert_dtype)
        with self._lock:
            self._checked(lambda: _path("checkpoint", checkpoint))
            return _recemb.restore_checkpoint(self._engine, checkpoint, options).step

    def export(self, path: PathLike, dtype: str = "float32",
               extra_arrays: Optional[Mapping[str, Any]] = None,
               metadata: Optional[Mapping[str, str]] = None) -> None:
        """Writes the tables (no slots; a dynamic table's keys and their rows) and the configs as
        the serving model file `path` (see recemb.ServingModel and docs/serving.md), atomically.
        dtype: "float32" (lookups equal this layer's pure lookups bitwise), "float16" or "int8"
        (within the bounds of docs/serving.md). extra_arrays ({name: array of floats}, stored in
        float32 whatever the dtype: a dense model's weights, for example) and metadata ({str:
        str}) are written with the tables; ServingModel.extra_arrays() and metadata() read them
        back. Raises ValueError, creating no file, for a bad dtype, a value the dtype cannot hold
        (non-finite; |x| >= 65520 for float16), naming the table, row (a dynamic table's key) and
        column, or a bad extra array (an empty or repeated name, a non-finite value), and
        RuntimeError (recemb.FailedPrecondition) with several ranks (export from one process)."""
        if isinstance(dtype, (type, np.dtype)):  # np.float16, np.dtype("int8"): by name
            dtype = np.dtype(dtype).name
        options = _recemb.ExportOptions(
            dtype=_parse_name(_recemb.parse_serving_dtype, "dtype", dtype),
            extra_arrays=_serving_arrays(extra_arrays), metadata=_metadata(metadata))
        _path("path", path)
        if self.world_size > 1:
            raise _recemb.FailedPrecondition(
                f"export: the layer spans {self.world_size} ranks; save a checkpoint "
                "(layer.save), restore it into a layer in one process and export that")
        with self._lock:
            _recemb.export_serving_model(self._engine, path, options)

    def publish(self, dir: PathLike, dtype: str = "float32",
                extra_arrays: Optional[Mapping[str, Any]] = None,
                metadata: Optional[Mapping[str, str]] = None, *,
                base_every_deltas: int = 360, base_every_bytes: int = 2**30,
                keep_versions: int = 2) -> Any:
        """Publishes the tables into the model directory `dir` (MODEL_DIR/NAME of `recemb
        serve`): the first call (and the next after a write that is not a training step:
        write_variable, load, ...; or with another dir or dtype) writes a base, dir/<V>/
        model.recemb as export writes it; each later call dir/<V>/delta-<8 digits>.recemb
        holding the rows (and dynamic keys, and removed keys) changed since the previous publish,
        which ServingModel.apply_delta applies to the base (docs/serving.md, "Publishing
        deltas"). extra_arrays ({name: float32 array}) and metadata ({str: str}) are written
        whole in every file; a delta's arrays must keep the base's names and shapes.
        Retention (docs/serving.md, "Retention"): a new base instead of a delta once the base has
        base_every_deltas deltas or they hold base_every_bytes bytes (0: no such bound), and
        after a base only the keep_versions newest versions stay (0: all). Returns the result:
        .file, .version, .sequence (0 for a base), .rows, .bytes, .base_reason (why a base),
        .removed_versions. Raises ValueError for a bad dtype, array, value or retention setting
        (as export). With several ranks, every rank calls it (rank 0 writes the files)."""
        if isinstance(dtype, (type, np.dtype)):  # np.float16, np.dtype("int8"): by name
            dtype = np.dtype(dtype).name
        _path("dir", dir)
        options = _recemb.PublishOptions(
            dtype=_parse_name(_recemb.parse_serving_dtype, "dtype", dtype),
            extra_arrays=_serving_arrays(extra_arrays), metadata=_metadata(metadata),
            base_every_deltas=_int_setting("base_every_deltas", base_every_deltas, 2**63 - 1),
            base_every_bytes=_int_setting("base_every_bytes", base_every_bytes, 2**63 - 1),
            keep_versions=_int_setting("keep_versions", keep_versions, 2**31 - 1))
        with self._lock:
            return _recemb.publish(self._engine, dir, options)

    def _set_step(self, step):
        step = _int_setting("step", step, 2**63 - 1)
        with self._lock:
            self._engine.set_step(step)


def _serving_arrays(extra_arrays):
    """The ServingArrays of export's and publish's extra_arrays ({name: array of floats})."""
    arrays = []
    for name, values in (extra_arrays or {}).items():
        values = float32_array(values, f"extra_arrays['{name}']")
        arrays.append(_recemb.ServingArray(str(name), list(values.shape), values.reshape(-1)))
    return arrays


def _metadata(metadata):
    """export's and publish's metadata ({str: str}) as the C++ map."""
    return {str(key): str(value) for key, value in (metadata or {}).items()}


def _path(name, value):
    """Raises ValueError naming the argument unless `value` is a non-empty path (str or
    os.PathLike)."""
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
        raise ValueError(f"{name}={value!r}: expected a non-empty path (a str or os.PathLike)")


def serving_embedding_lookup(inputs: Nest, weights: Nest, tables: dict[Any, ArrayLike],
                             feature_config: Nest, *, num_threads: int = 0) -> Nest:
    """A stateless lookup of `inputs` in the given `tables` (TF's serving_embedding_lookup): the
    same activations as Embedding(feature_config) holding those tables would give.

    tables: {table name or TableConfig: array [vocabulary_size, dim]}, for example an
    Embedding's embedding_tables (static tables only). Each call builds a temporary engine and
    copies the tables into it: O(total table size) per call, fine for tests and small models.
    """
    resolved = Resolved(feature_config)
    options = {"num_threads": _int_setting("num_threads", num_threads, 2**31 - 1), "seed": 0}
    engine = _build_engine(resolved, None, options, zero_tables=True)
    for table, name in zip(resolved.tables, resolved.table_names):
        if table.vocabulary is not None:
            raise ValueError(f"table '{name}' is dynamic: serving_embedding_lookup takes static "
                             "tables (look a dynamic table up with layer.lookup(features), or "
                             "in a ServingModel)")
        if table in tables:
            values = tables[table]
        elif name in tables:
            values = tables[name]
        else:
            raise ValueError(f"tables has no entry for table '{name}' (keys may be table names "
                             "or TableConfigs)")
        array = float32_array(values, f"table '{name}'")
        if array.shape != (table.vocabulary_size, table.dim):
            raise ValueError(f"table '{name}': shape {array.shape}, expected "
                             f"{(table.vocabulary_size, table.dim)}")
        engine.write_variable(name, "parameters", array)
    return _nest.pack_sequence_as(resolved.structure,
                                  _pure_lookup(engine, resolved, inputs, weights,
                                               ActivationArrays()))
