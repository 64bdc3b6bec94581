"""recemb.torch: recemb's embedding tables as a torch.nn.Module whose backward pass applies
recemb's fused optimizer to the touched rows (the seed's "gradient trap", done properly).

    emb = recemb.torch.Embedding(features, recemb.optimizers.Adagrad(learning_rate=0.1))
    dense = torch.nn.Linear(16, 1)
    opt = torch.optim.SGD(dense.parameters(), lr=0.1)     # the dense part keeps a torch optimizer
    for ids, labels in data:
        loss = loss_fn(dense(emb(ids)["watched"]), labels)
        opt.zero_grad(); loss.backward(); opt.step()     # backward() also updates the tables

The tables are not torch Parameters: torch optimizers never see them. Each forward in training
mode (module.train(), the default) with grad enabled keeps its own LookupBatch, applied when
backward reaches its activations (at most once), so evaluation passes in between (in eval mode,
module.eval(), or under torch.no_grad(): pure lookups) change nothing. CPU tensors
only; inputs may be torch tensors (dense, or sparse COO), numpy arrays, recemb.Ragged or
recemb.Sparse holding either; the ids of a dynamic table may be any int64 value, or str / bytes
(lists, numpy arrays, Ragged.from_lists).
"""

from __future__ import annotations

import math
import os
import pathlib
from typing import Any, Union

import numpy as np
import torch

from recemb import _nest, _recemb, _state, optimizers
from recemb._tables import _Tables
from recemb.embedding import Embedding as _Layer
from recemb.embedding import LookupBatch
from recemb.inputs import Ragged, Sparse

__all__ = ["Embedding", "torch_threads", "translate_optimizer"]


# The torch type of a 16-bit table's rows (TableConfig dtype).
_TORCH_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def _numpy(value):
    """A torch tensor (or a Ragged / Sparse of them) as numpy, sharing memory when possible (a
    bfloat16 or float16 tensor, which numpy cannot hold or the engine takes as float32: a float32
    copy, exact)."""
    if isinstance(value, torch.Tensor):
        if value.is_sparse:
            value = value.detach().coalesce().cpu()
            return Sparse(indices=value.indices().t().contiguous().numpy(),
                          values=value.values().numpy(), dense_shape=list(value.shape))
        if value.dtype in _TORCH_DTYPES.values():
            value = value.float()
        return value.detach().cpu().numpy()
    if isinstance(value, Ragged):
        return Ragged(_numpy(value.values), _numpy(value.row_splits))
    if isinstance(value, Sparse):
        return Sparse(_numpy(value.indices), _numpy(value.values),
                      [int(d) for d in value.dense_shape])
    return value


def _numpy_arrays(arrays):
    """{name: tensor or array} with every tensor as numpy (None stays None)."""
    return None if arrays is None else {name: _numpy(values) for name, values in arrays.items()}


def _openmp_runtimes() -> set[str]:
    """The files of the OpenMP runtimes mapped into this process (GNU's libgomp, LLVM's libomp,
    Intel's libiomp5), from /proc/self/maps; empty where that file does not exist."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            fields = [line.split(None, 5) for line in maps]
    except OSError:
        return set()
    paths = {entry[5].strip() for entry in fields if len(entry) == 6}
    return {os.path.realpath(path) for path in paths
            if os.path.basename(path).startswith(("libgomp", "libomp", "libiomp"))}


def torch_threads() -> Union[int, str]:
    """recemb's num_threads for running on torch's intra-op threads (docs/python.md, "One set of
    threads"): "openmp" when torch's parallel backend is OpenMP and the process holds one OpenMP
    runtime, the one recemb's extension calls (then recemb's loops run on torch's threads and
    neither set spins on a core the other needs); otherwise torch.get_num_threads() threads of
    recemb's own."""
    runtime = _recemb.openmp_runtime_path()
    if ("parallel backend: OpenMP" in torch.__config__.parallel_info() and runtime
            and _openmp_runtimes() == {os.path.realpath(runtime)}):
        return "openmp"
    return torch.get_num_threads()


class _Lookup(torch.autograd.Function):
    """Returns the activations of one training lookup; its backward applies their gradients to
    the tables with the lookup's own batch. `trigger` is an empty tensor requiring grad, so that
    autograd calls backward."""

    @staticmethod
    def forward(ctx, trigger, layer, batch, activations):
        ctx.layer = layer
        ctx.batch = batch
        ctx.set_materialize_grads(False)  # an unused output's gradient stays None (zeros)
        return tuple(torch.from_numpy(activation) for activation in activations)

    @staticmethod
    def backward(ctx, *gradients):
        flat = [None if g is None else g.detach().cpu().contiguous().numpy() for g in gradients]
        layer = ctx.layer
        layer.apply_gradients(_nest.pack_sequence_as(layer.feature_config, flat), ctx.batch)
        return None, None, None, None


class Embedding(torch.nn.Module):
    """recemb.Embedding as a torch module. forward(features, weights=None) returns float32 CPU
    tensors in the structure of `feature_config`; in training mode with grad enabled they
    require grad and backward updates the tables with `optimizer` (a recemb.optimizers object or
    name, or a torch.optim SGD / Adagrad / Adam / SparseAdam, translated by
    translate_optimizer). In eval mode (module.eval()) or under torch.no_grad() a forward is a
    pure lookup: its tensors do not require grad, and nothing is kept.

    num_threads: "torch" (the default): lookups and updates run on torch's intra-op threads
    (torch_threads(): recemb.Embedding's "openmp" when torch uses OpenMP, otherwise
    torch.get_num_threads() threads of recemb's own, counted when the module is built); an int or
    "openmp": as recemb.Embedding's.

    placement and communicator: as recemb.Embedding's (sharding; with several ranks forward,
    prefetch, backward, state_dict and the table properties are collective: every rank calls
    them in the same order).

    Pipelining: prefetch(features) starts the training lookup of the next forward on a
    background thread, so that it overlaps the backward pass of the current step; the next
    forward of the same objects completes it. pipeline_staleness: as recemb.Embedding's ("none":
    the same results as without prefetch, bitwise; "one_step": the rows are read at prefetch;
    pipeline_execution_with_tensor_core=True, TF's name, is "one_step").

        emb.prefetch(batches[0])
        for t, ids in enumerate(batches):
            out = emb(ids)                                  # completes the prefetch of ids
            if t + 1 < len(batches):
                emb.prefetch(batches[t + 1])                # overlaps what follows
            loss_fn(dense(out["watched"]), labels[t]).backward()

    state_dict() holds "<table>.<variable>" (the table as "parameters", in its own type as
    embedding_tables gives it, and its slots) as tensors sharing memory with the engine (copies
    for tables split into shards, as recemb.Embedding.embedding_tables), and "step";
    load_state_dict() restores them. A dynamic
    table's entries are copies of read_dynamic_table: "<table>.keys" (int64 [n]),
    "<table>.parameters" ([n, dim]) and its slots, written back by write_dynamic_table. These are
    exactly the variables of a recemb checkpoint (save / restore): the checkpoint stores each
    "<table>.<variable>" tensor as a raw file of its type (float32, or a 16-bit table's values)
    and "step" in its manifest, so restore(save) and load_state_dict(state_dict()) leave the
    same state, and either can continue the other.

    copy.deepcopy(module) and torch.save(module) / torch.load keep the tables, slots, step,
    configs and optimizer (recemb.Embedding's pickling); a pending prefetch is not kept.
    """

    def __init__(self, feature_config: Any, optimizer: Any = None, *,
                 num_threads: Union[int, str] = "torch",
                 seed: int = 0, non_finite_gradients: str = "reject",
                 pipeline_staleness: str = "none", placement: Any = None,
                 communicator: Any = None,
                 pipeline_execution_with_tensor_core: Any = None) -> None:
        super().__init__()
        if isinstance(optimizer, torch.optim.Optimizer):
            optimizer = translate_optimizer(optimizer)
        if num_threads == "torch":
            num_threads = torch_threads()
        self.layer = _Layer(feature_config, optimizer, num_threads=num_threads, seed=seed,
                            non_finite_gradients=non_finite_gradients,
                            pipeline_staleness=pipeline_staleness, placement=placement,
                            communicator=communicator,
                            pipeline_execution_with_tensor_core=(
                                pipeline_execution_with_tensor_core))
        self._prefetched = None  # (features, weights, LookupBatch) of the pending prefetch

    def _flat_inputs(self, values, what):
        structure = self.layer.feature_config
        try:
            flat = _nest.flatten_up_to(structure, values, what)
        except ValueError:
            return values  # the layer's lookup raises this error, agreed on by every rank
        return _nest.pack_sequence_as(structure, [_numpy(value) for value in flat])

    def prefetch(self, features: Any, weights: Any = None) -> None:
        """Starts the training lookup of `features` (and `weights`) on the engine's background
        thread; the next forward(features, weights) of these same objects completes it instead
        of looking them up (a forward of other inputs completes and drops it). The inputs must
        not change in between. Errors the engine finds in the ids are raised by that forward."""
        self._finish_prefetch()
        batch = self.layer.prefetch(self._numpy_inputs(features, "features"),
                                    self._numpy_inputs(weights, "weights"))
        self._prefetched = (features, weights, batch)

    def _finish_prefetch(self):
        """The (features, weights, LookupBatch, activations) of the pending prefetch, completed,
        or None."""
        if self._prefetched is None:
            return None
        features, weights, batch = self._prefetched
        self._prefetched = None
        return features, weights, batch, self.layer.finish_lookup(batch)

    def _numpy_inputs(self, values, what):
        return None if values is None else self._flat_inputs(values, what)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_prefetched"] = None
        return state

    def extra_repr(self) -> str:
        layer = self.layer
        tables = ", ".join(
            f"{name!r}: ({table.vocabulary_size if table.vocabulary is None else 'dynamic'}, "
            f"{table.dim}"
            f"{'' if table.dtype == 'float32' else ', ' + table.dtype}"
            f"{'' if table.optimizer is None else ', ' + _optimizer_repr(table.optimizer)})"
            for name, table in zip(layer.table_names, layer._resolved.tables))
        return (f"tables={{{tables}}}, features={layer.feature_names}, "
                f"optimizer={_optimizer_repr(layer.optimizer)}")

    def forward(self, features: Any, weights: Any = None) -> Any:
        training = self.training and torch.is_grad_enabled()
        prefetched = self._finish_prefetch()
        if prefetched is not None and prefetched[0] is features and prefetched[1] is weights:
            batch, activations = prefetched[2:]
        else:
            batch = LookupBatch() if training else None
            activations = self.layer.lookup(self._numpy_inputs(features, "features"),
                                            self._numpy_inputs(weights, "weights"), batch=batch)
        if not training:
            return _nest.map_structure(torch.from_numpy, activations)
        activations = _nest.flatten(activations)
        trigger = torch.empty(0, requires_grad=True)
        outputs = _Lookup.apply(trigger, self.layer, batch, activations)
        if isinstance(outputs, torch.Tensor):
            outputs = (outputs,)
        return _nest.pack_sequence_as(self.layer.feature_config, list(outputs))

    @property
    def step(self) -> int:
        """The number of updates (backward passes reaching the activations) so far."""
        return self.layer.step

    @property
    def placement(self):
        """The plan the tables follow (recemb.Embedding.placement)."""
        return self.layer.placement

    @property
    def rank(self) -> int:
        return self.layer.rank

    @property
    def world_size(self) -> int:
        return self.layer.world_size

    def _table_tensor(self, name: str) -> torch.Tensor:
        """The static table `name` in its own type: float32, or a 16-bit table's rows as a
        torch.bfloat16 / torch.float16 tensor, sharing the engine's memory where the layer
        views it (else a copy, exact)."""
        dtype = _TORCH_DTYPES.get(self.layer._dtype(name))
        if dtype is None:
            return torch.from_numpy(self.layer._variable(name, "parameters"))
        rows = self.layer._half_rows(name)
        if rows is not None:
            return torch.from_numpy(rows.view(np.int16)).view(dtype)
        return torch.from_numpy(self.layer._variable(name, "parameters")).to(dtype)

    @property
    def embedding_tables(self) -> dict[str, torch.Tensor]:
        """{table name: tensor [vocabulary_size, dim]} of the static tables, in the table's type
        (float32; torch.bfloat16 or torch.float16 for a 16-bit table), sharing memory with the
        engine (copies for tables split into shards: see recemb.Embedding.embedding_tables); a
        TableConfig works as a key too, and an unknown key's KeyError lists the tables. Values
        written into a 16-bit table's tensor are stored as they are (torch rounds to nearest)."""
        return _Tables({name: self._table_tensor(name)
                        for name in self.layer._static_table_names()}, self.layer._resolved)

    @property
    def slot_variables(self) -> dict[str, dict[str, torch.Tensor]]:
        """{table name: {slot name: float32 tensor}}, views or copies as embedding_tables."""
        return _Tables({name: {slot: torch.from_numpy(value) for slot, value in slots.items()}
                        for name, slots in self.layer.slot_variables.items()},
                       self.layer._resolved)

    def assign_table(self, table: Any, values: Any) -> None:
        self.layer.assign_table(table, _numpy(values))

    def vocabulary_stats(self, table: Any) -> dict[str, int]:
        """recemb.Embedding.vocabulary_stats: a dynamic table's size, inserted, evicted and
        not_admitted_lookups."""
        return self.layer.vocabulary_stats(table)

    def read_dynamic_table(self, table: Any) -> tuple[torch.Tensor, torch.Tensor,
                                                      dict[str, torch.Tensor]]:
        """recemb.Embedding.read_dynamic_table as tensors: (keys int64 [n], rows float32
        [n, dim], {slot name: float32 tensor})."""
        keys, rows, slots = self.layer.read_dynamic_table(table)
        return (torch.from_numpy(keys), torch.from_numpy(rows),
                {name: torch.from_numpy(values) for name, values in slots.items()})

    def write_dynamic_table(self, table: Any, keys: Any, rows: Any, slots: Any = None) -> None:
        """recemb.Embedding.write_dynamic_table, from tensors or arrays."""
        self.layer.write_dynamic_table(table, _numpy(keys), _numpy(rows), None if slots is None
                                       else {name: _numpy(v) for name, v in slots.items()})

    def save(self, directory: Any, keep_last: int = 3) -> pathlib.Path:
        """recemb.Embedding.save: a checkpoint of every state_dict() entry, plus the configs."""
        return self.layer.save(directory, keep_last)

    def restore(self, checkpoint: Any, resize: str = "error") -> int:
        """recemb.Embedding.restore: as load_state_dict of the saved module's state_dict(), after
        verifying every file (resize as recemb.Embedding.restore). Returns the step."""
        return self.layer.restore(checkpoint, resize)

    def export(self, path: Any, dtype: str = "float32", extra_arrays: Any = None,
               metadata: Any = None) -> None:
        """recemb.Embedding.export: a serving model file for recemb.ServingModel; extra_arrays
        may hold tensors (a dense model's state_dict(), for example)."""
        self.layer.export(path, dtype, _numpy_arrays(extra_arrays), metadata)

    def publish(self, dir: Any, dtype: str = "float32", extra_arrays: Any = None,
                metadata: Any = None, **retention: int) -> Any:
        """recemb.Embedding.publish (a base, then deltas, for `recemb serve`; retention:
        base_every_deltas, base_every_bytes, keep_versions); extra_arrays may hold tensors."""
        return self.layer.publish(dir, dtype, _numpy_arrays(extra_arrays), metadata, **retention)

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        # Each table in its own type (a 16-bit table's bfloat16 or float16 tensor).
        for key, values in _state.state_arrays(self.layer, prefix, self._table_tensor).items():
            destination[key] = values if isinstance(values, torch.Tensor) else (
                torch.from_numpy(values))

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        missing, unexpected, errors = _state.load_state_arrays(self.layer, state_dict, prefix,
                                                               _numpy, strict)
        missing_keys.extend(missing)
        unexpected_keys.extend(unexpected)
        error_msgs.extend(errors)


def _optimizer_repr(optimizer):
    """An optimizer in short: its class and learning rate (None for no optimizer)."""
    if optimizer is None:
        return "None"
    return f"{type(optimizer).__name__}(learning_rate={optimizer.learning_rate!r})"


# Settings that select an implementation and never change the result.
_IMPLEMENTATION_SETTINGS = {"foreach", "capturable", "differentiable", "fused"}


def refuse_settings(owner, settings, **accepted):
    """Raises ValueError naming every setting of `settings` (of `owner`, for the message) that
    differs from the one value recemb can honour."""
    bad = [f"{name}={settings[name]!r} (recemb needs {value!r})"
           for name, value in accepted.items() if name in settings and settings[name] != value]
    if bad:
        raise ValueError(f"{owner}: recemb cannot honour " + ", ".join(bad))


def _sgd(settings):
    refuse_settings("torch.optim.SGD", settings, momentum=0, weight_decay=0, nesterov=False,
                    maximize=False)
    return optimizers.SGD(learning_rate=float(settings["lr"]))


def _adagrad(settings):
    refuse_settings("torch.optim.Adagrad", settings, lr_decay=0, weight_decay=0, maximize=False)
    initial = float(settings["initial_accumulator_value"])
    if initial <= 0:
        raise ValueError(
            f"torch.optim.Adagrad: recemb cannot honour initial_accumulator_value={initial!r}: "
            "its Adagrad (as TF's) has no epsilon and needs initial_accumulator_value > 0")
    epsilon = float(settings["eps"])
    # recemb divides by sqrt(a), torch by sqrt(a) + eps, with a >= initial: the relative
    # difference is at most eps / sqrt(initial), invisible in float32 below 2^-24.
    if epsilon > 2.0**-24 * math.sqrt(initial):
        raise ValueError(
            f"torch.optim.Adagrad: recemb cannot honour eps={epsilon!r}: its Adagrad has no "
            f"epsilon; eps <= {2.0**-24 * math.sqrt(initial):.3g} (2^-24 * "
            "sqrt(initial_accumulator_value)) changes nothing in float32")
    return optimizers.Adagrad(learning_rate=float(settings["lr"]),
                              initial_accumulator_value=initial)


def _adam(settings):
    refuse_settings("torch.optim.Adam", settings, weight_decay=0, amsgrad=False, maximize=False)
    beta_1, beta_2 = settings["betas"]
    # torch.optim.Adam updates every row each step (dense gradients) with bias correction.
    return optimizers.Adam(learning_rate=float(settings["lr"]), beta_1=float(beta_1),
                           beta_2=float(beta_2), epsilon=float(settings["eps"]), lazy_adam=False,
                           sum_inside_sqrt=False, bias_correction=True)


def _sparse_adam(settings):
    refuse_settings("torch.optim.SparseAdam", settings, maximize=False)
    beta_1, beta_2 = settings["betas"]
    return optimizers.Adam(learning_rate=float(settings["lr"]), beta_1=float(beta_1),
                           beta_2=float(beta_2), epsilon=float(settings["eps"]), lazy_adam=True,
                           sum_inside_sqrt=False, bias_correction=True)


_TRANSLATIONS = {
    torch.optim.SGD: (_sgd, {"lr", "momentum", "dampening", "weight_decay", "nesterov",
                             "maximize"}),
    torch.optim.Adagrad: (_adagrad, {"lr", "lr_decay", "weight_decay", "initial_accumulator_value",
                                     "eps", "maximize"}),
    # decoupled_weight_decay (torch >= 2.6) only says how a weight_decay, which _adam refuses,
    # would apply.
    torch.optim.Adam: (_adam, {"lr", "betas", "eps", "weight_decay", "decoupled_weight_decay",
                               "amsgrad", "maximize"}),
    torch.optim.SparseAdam: (_sparse_adam, {"lr", "betas", "eps", "maximize"}),
}


def translate_optimizer(optimizer: torch.optim.Optimizer) -> optimizers._Optimizer:
    """The recemb optimizer with the hyperparameters of a torch.optim optimizer:
      SGD -> SGD; Adagrad -> Adagrad (initial_accumulator_value > 0 and a negligible eps
      needed); SparseAdam -> lazy Adam with bias correction (the same update);
      Adam -> non-lazy Adam with bias correction (every row moves each step, as torch's dense
      Adam; eps is not scaled by sqrt(1 - beta_2^t) as torch.optim.Adam does, which matters
      only where sqrt(v) is comparable to eps).
    Raises ValueError naming every setting recemb cannot honour (momentum, nesterov, weight
    decay, amsgrad, lr_decay, maximize, differing param groups, ...) and for other classes.
    The learning rate is read once: to follow a torch LR scheduler, pass
    learning_rate=lambda: torch_optimizer.param_groups[0]["lr"] to a recemb optimizer instead.
    """
    kind = type(optimizer)
    if kind not in _TRANSLATIONS:
        raise ValueError(f"cannot translate {kind.__module__}.{kind.__name__}: recemb translates "
                         f"torch.optim {', '.join(k.__name__ for k in _TRANSLATIONS)}")
    translate, known = _TRANSLATIONS[kind]
    groups = [{key: value for key, value in group.items()
               if key != "params" and key not in _IMPLEMENTATION_SETTINGS}
              for group in (optimizer.param_groups or [optimizer.defaults])]
    unknown = sorted(set(groups[0]) - known)
    if unknown:
        raise ValueError(f"torch.optim.{kind.__name__}: recemb does not know the setting(s) "
                         f"{unknown}")
    for group in groups[1:]:
        differing = sorted(key for key in known if group.get(key) != groups[0].get(key))
        if differing:
            raise ValueError(f"torch.optim.{kind.__name__}: param groups differ in {differing}; "
                             "recemb applies one optimizer per table")
    return translate(groups[0])
