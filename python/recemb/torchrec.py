"""recemb.torchrec: TorchRec's unsharded embedding modules, EmbeddingBagCollection and
EmbeddingCollection, over recemb's tables and fused optimizers (docs/python.md, "recemb.torchrec").

    tables = [torchrec.EmbeddingBagConfig(name="t", embedding_dim=16, num_embeddings=1000,
                                          feature_names=["f1", "f2"])]
    ebc = recemb.torchrec.EmbeddingBagCollection(tables=tables)
    torchrec.optim.apply_optimizer_in_backward(torch.optim.Adagrad, ebc.parameters(),
                                               {"lr": 0.05})
    pooled = ebc(kjt)                   # a torchrec.KeyedTensor, keys in config order
    loss(pooled.values()).backward()    # the backward pass also updates the touched rows

Each module takes TorchRec's configs and inputs (a KeyedJaggedTensor) and gives TorchRec's
outputs; its state_dict has TorchRec's keys, so that state dicts load either way. The tables live
in a recemb.torch.Embedding (`recemb_embedding`): each table's `weight` Parameter shares memory
with it and never receives a gradient; the gradients of the outputs go to recemb, which applies
the table's optimizer once per distinct touched row from the row's summed gradient (TorchRec's
dense-gradient CPU path and FBGEMM's EXACT_* fused optimizers update a row the same way). The
optimizer is the one apply_optimizer_in_backward attached to the table's weight (read at each
training forward), else the constructor's `optimizer`. Importing this module imports torchrec.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Dict, List, Mapping, Optional, Union

import numpy as np
import torch
import torchrec
import torchrec.optim
from torchrec.modules.embedding_modules import (EmbeddingBagCollectionInterface,
                                                EmbeddingCollectionInterface,
                                                get_embedding_names_by_table)

from recemb import optimizers
from recemb.config import DynamicVocabulary, FeatureConfig, TableConfig
from recemb.inputs import Ragged
from recemb.torch import Embedding as _TorchEmbedding
from recemb.torch import refuse_settings, translate_optimizer

__all__ = ["EmbeddingBagCollection", "EmbeddingCollection", "fused_optimizer"]

# TorchRec config fields recemb cannot honour, with the only value it accepts.
_UNSUPPORTED_CONFIG_FIELDS = {
    "need_pos": False,
    "num_embeddings_post_pruning": None,
    "input_dim": None,
    "total_num_buckets": None,
    "use_virtual_table": False,
    "virtual_table_eviction_policy": None,
    "enable_embedding_update": False,
    "stash_weights": False,
}

_POOLING_COMBINERS = {torchrec.PoolingType.SUM: "sum", torchrec.PoolingType.MEAN: "mean"}

# The table types recemb stores (TableConfig dtype; docs/semantics.md, "16-bit tables").
_DATA_TYPES = {torchrec.DataType.FP32: "float32", torchrec.DataType.BF16: "bfloat16",
               torchrec.DataType.FP16: "float16"}


def _torch_adagrad(optimizer):
    """torch.optim.Adagrad (per-element a += g^2; w -= lr * g / (sqrt(a) + eps)) as recemb's
    Adagrad when initial_accumulator_value > 0 (translate_optimizer), else (torch's default 0) as
    AdagradMomentum(momentum=0, beta2=1, exponent=2, epsilon=eps^2): w -= lr * g / sqrt(a + eps^2),
    whose divisor differs from torch's by less than eps."""
    settings = optimizer.param_groups[0]
    if settings["initial_accumulator_value"] > 0:
        return translate_optimizer(optimizer)
    refuse_settings("torch.optim.Adagrad", settings, lr_decay=0, weight_decay=0, maximize=False)
    epsilon = float(settings["eps"])
    if not epsilon > 0:
        raise ValueError("torch.optim.Adagrad: recemb cannot honour eps=0 with "
                         "initial_accumulator_value=0 (an untouched element divides 0 by 0)")
    return optimizers.AdagradMomentum(learning_rate=float(settings["lr"]), momentum=0.0,
                                      use_nesterov=False, exponent=2.0, beta2=1.0,
                                      epsilon=epsilon * epsilon)


def _rowwise_adagrad(optimizer):
    """torchrec.optim.RowWiseAdagrad (a += mean_d(g_d^2); w -= lr * g / (sqrt(a) + eps)): recemb's
    RowWiseAdagrad, the same update."""
    settings = optimizer.param_groups[0]
    refuse_settings("torchrec.optim.RowWiseAdagrad", settings, lr_decay=0, weight_decay=0,
                     maximize=False)
    return optimizers.RowWiseAdagrad(
        learning_rate=float(settings["lr"]), epsilon=float(settings["eps"]),
        initial_accumulator_value=float(settings["initial_accumulator_value"]))


# The fused optimizer of each supported class, from an instance of it.
_TRANSLATIONS = {
    torch.optim.SGD: translate_optimizer,
    torch.optim.Adam: translate_optimizer,
    torch.optim.Adagrad: _torch_adagrad,
    torchrec.optim.RowWiseAdagrad: _rowwise_adagrad,
}

# TorchRec's placeholder classes (they only name FBGEMM's exact fused optimizers and hold their
# keyword arguments) and the torch optimizer of the same update.
_PLACEHOLDERS = {torchrec.optim.SGD: torch.optim.SGD, torchrec.optim.Adagrad: torch.optim.Adagrad}


def _class_name(cls):
    for package in ("torchrec.optim", "torch.optim"):
        if cls.__module__.startswith(package):
            return f"{package}.{cls.__name__}"
    return f"{cls.__module__}.{cls.__name__}"


def fused_optimizer(optimizer_class: type, optimizer: Optional[torch.optim.Optimizer] = None,
                    kwargs: Optional[Mapping[str, Any]] = None) -> optimizers._Optimizer:
    """The recemb optimizer fused in the backward for a torch or TorchRec optimizer class with
    its instance `optimizer` (as apply_optimizer_in_backward builds it) or, when None, its
    constructor's `kwargs`:
      torch.optim.SGD, torchrec.optim.SGD -> SGD;
      torch.optim.Adagrad, torchrec.optim.Adagrad -> exact (per-element) Adagrad;
      torchrec.optim.RowWiseAdagrad -> RowWiseAdagrad (exact row-wise Adagrad);
      torch.optim.Adam -> non-lazy Adam with bias correction (every row moves each step, as
      torch's Adam on a dense gradient; see translate_optimizer).
    Raises ValueError naming the class for any other (no fused equivalent), and naming every
    setting recemb cannot honour (weight_decay, lr_decay, momentum, maximize, ...)."""
    torch_class = _PLACEHOLDERS.get(optimizer_class, optimizer_class)
    if torch_class not in _TRANSLATIONS:
        supported = [*_TRANSLATIONS, *_PLACEHOLDERS]
        raise ValueError(f"{_class_name(optimizer_class)} has no fused equivalent in recemb; "
                         f"the supported optimizers are "
                         f"{', '.join(_class_name(cls) for cls in supported)}")
    if optimizer is None or optimizer_class in _PLACEHOLDERS:
        optimizer = torch_class([torch.zeros(1, requires_grad=True)], **dict(kwargs or {}))
    return _TRANSLATIONS[torch_class](optimizer)


def _in_backward_optimizer(table, weight):
    """The torch optimizer apply_optimizer_in_backward attached to a table's weight, or None;
    ValueError for several."""
    attached = getattr(weight, "_in_backward_optimizers", [])
    if len(attached) > 1:
        names = [_class_name(cls) for cls in weight._optimizer_classes]
        raise ValueError(f"table '{table}': {len(attached)} optimizers applied in backward "
                         f"({', '.join(names)}); recemb fuses one optimizer per table")
    return attached[0] if attached else None


class _Tables:
    """Holds the recemb.torch.Embedding of a collection (replaced when the fused optimizers
    change), shared by the collection and its dynamic tables' modules without registering it as
    a submodule (its own state_dict keys are not TorchRec's)."""

    def __init__(self):
        self.embedding = None


class _TableWeight(torch.nn.Module):
    """A static table: `weight`, a Parameter [num_embeddings, embedding_dim] sharing memory with
    the recemb engine, as TorchRec's EmbeddingBag / Embedding hold it. It gets no gradient: the
    engine applies the fused optimizer."""

    def __init__(self, weight):
        super().__init__()
        self.weight = torch.nn.Parameter(weight)

    def extra_repr(self) -> str:
        rows, dim = self.weight.shape
        return f"{rows}, {dim}"


class _DynamicTable(torch.nn.Module):
    """A dynamic table in the state_dict: "keys" (int64 [n], increasing), "weight" ([n, dim]:
    row i is key i's) and each optimizer slot by its recemb name, copies read by
    read_dynamic_table; load_state_dict writes them back with write_dynamic_table."""

    def __init__(self, tables, name):
        super().__init__()
        self._tables = tables
        self._name = name

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        keys, rows, slots = self._tables.embedding.read_dynamic_table(self._name)
        destination[prefix + "keys"] = keys
        destination[prefix + "weight"] = rows
        for slot, values in slots.items():
            destination[prefix + slot] = values

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        embedding = self._tables.embedding
        slots = embedding.layer.variable_names(self._name)[1:]
        parts = {"keys": prefix + "keys", "weight": prefix + "weight",
                 **{slot: prefix + slot for slot in slots}}
        missing = [key for key in parts.values() if key not in state_dict]
        missing_keys.extend(missing)
        if strict:
            unexpected_keys.extend(key for key in state_dict if key.startswith(prefix) and
                                   "." not in key[len(prefix):] and key not in parts.values())
        if missing:
            return
        try:
            embedding.write_dynamic_table(
                self._name, state_dict[parts["keys"]], state_dict[parts["weight"]],
                {slot: state_dict[prefix + slot] for slot in slots} if slots else None)
        except ValueError as error:
            error_msgs.append(str(error))


class _Collection(torch.nn.Module):
    """What EmbeddingBagCollection and EmbeddingCollection share: configs, tables, optimizers,
    input checks."""

    _CONFIG = None   # the TorchRec config class of the tables
    _TABLES = ""     # the ModuleDict's attribute name (TorchRec's state_dict prefix)

    def __init__(self, tables, device, optimizer, dynamic, num_threads, seed):
        super().__init__()
        self._configs = list(tables)
        self._dynamic = dict(dynamic or {})
        self._check_configs(device)
        if isinstance(optimizer, torch.optim.Optimizer):
            optimizer = fused_optimizer(type(optimizer), optimizer)
        self._optimizer = optimizers.get(optimizer)
        if self._dynamic and self._optimizer is None:
            raise ValueError(f"dynamic table '{next(iter(self._dynamic))}' needs the "
                             "constructor's optimizer= (it has no weight Parameter for "
                             "apply_optimizer_in_backward)")
        self._num_threads = num_threads
        self._seed = seed
        self._embedding_names_by_table = get_embedding_names_by_table(self._configs)
        self._feature_names = [name for config in self._configs
                               for name in config.feature_names]
        self._fused = {}  # table -> the in-backward torch optimizer the engine applies
        self._tables = _Tables()
        self._tables.embedding = self._build_embedding({})
        modules = torch.nn.ModuleDict()
        for config in self._configs:
            if config.name in self._dynamic:
                modules[config.name] = _DynamicTable(self._tables, config.name)
            else:
                modules[config.name] = _TableWeight(
                    self._tables.embedding.embedding_tables[config.name])
        setattr(self, self._TABLES, modules)
        self.reset_parameters()

    def _check_configs(self, device):
        if device is not None and torch.device(device).type != "cpu":
            raise ValueError(f"device={device!r}: recemb's tables are on the CPU")
        kind = self._CONFIG.__name__
        unknown = [name for name in self._dynamic
                   if name not in [getattr(config, "name", None) for config in self._configs]]
        if unknown:
            raise ValueError(f"dynamic: no table named {unknown[0]!r}")
        names = set()
        for config in self._configs:
            if not isinstance(config, self._CONFIG):
                raise ValueError(f"tables: expected {kind}s, got {type(config).__name__}")
            owner = f"{kind} '{config.name}'"
            if not config.name or config.name in names:
                raise ValueError(f"{owner}: table names must be unique and non-empty")
            names.add(config.name)
            if config.data_type not in _DATA_TYPES:
                raise ValueError(f"{owner}: data_type=DataType.{config.data_type.name}: "
                                 "recemb's tables are DataType.FP32, BF16 or FP16")
            refuse_settings(owner, {field: getattr(config, field, value)
                                     for field, value in _UNSUPPORTED_CONFIG_FIELDS.items()},
                             **_UNSUPPORTED_CONFIG_FIELDS)
            if not config.feature_names:
                config.feature_names = [config.name]  # as TorchRec does
            if len(set(config.feature_names)) != len(config.feature_names):
                raise ValueError(f"{owner}: feature_names {config.feature_names} repeat a name")
            if config.name in self._dynamic:
                self._check_dynamic(owner, config)

    def _check_dynamic(self, owner, config):
        vocabulary = self._dynamic[config.name]
        if not isinstance(vocabulary, DynamicVocabulary):
            raise ValueError(f"dynamic['{config.name}'] must be a recemb.DynamicVocabulary, got "
                             f"{vocabulary!r}")
        if config.num_embeddings != vocabulary.capacity:
            raise ValueError(f"{owner}: num_embeddings={config.num_embeddings} differs from its "
                             f"DynamicVocabulary's capacity={vocabulary.capacity} (the rows a "
                             "dynamic table holds)")
        default_init = (isinstance(config.init_fn, functools.partial) and
                        config.init_fn.func is torch.nn.init.uniform_ and
                        config.init_fn.keywords == {"a": -math.sqrt(1 / config.num_embeddings),
                                                    "b": math.sqrt(1 / config.num_embeddings)})
        if (config.weight_init_min is not None or config.weight_init_max is not None or
                not default_init):
            raise ValueError(f"{owner}: a dynamic table initialises each row from (seed, key) "
                             "as its key arrives: init_fn, weight_init_min and weight_init_max "
                             "cannot be honoured (leave them unset)")

    def _combiner(self, config):
        return "sum"

    def _build_embedding(self, fused):
        """A recemb.torch.Embedding of the configs (static tables zeros, dynamic ones empty),
        with the recemb optimizers `fused` ({table: optimizer}) and the constructor's as the
        global optimizer."""
        features = {}
        for config, embedding_names in zip(self._configs, self._embedding_names_by_table):
            vocabulary = self._dynamic.get(config.name)
            table = TableConfig(
                vocabulary_size=None if vocabulary else config.num_embeddings,
                dim=config.embedding_dim, initializer=None if vocabulary else "zeros",
                optimizer=fused.get(config.name), combiner=self._combiner(config),
                name=config.name, vocabulary=vocabulary, dtype=_DATA_TYPES[config.data_type])
            for embedding_name in embedding_names:
                features[embedding_name] = FeatureConfig(table, name=embedding_name)
        return _TorchEmbedding(features, self._optimizer, num_threads=self._num_threads,
                               seed=self._seed)

    def _static_weights(self):
        return {name: module.weight for name, module in getattr(self, self._TABLES).items()
                if isinstance(module, _TableWeight)}

    def reset_parameters(self) -> None:
        """Initialises each static table with its config's init_fn (TorchRec's default: uniform
        in [weight_init_min, weight_init_max], +-sqrt(1 / num_embeddings) when unset), as
        TorchRec does; dynamic tables are left as they are."""
        weights = self._static_weights()
        with torch.no_grad():
            for config in self._configs:
                if config.name in weights:
                    config.init_fn(weights[config.name])

    def _sync_optimizers(self):
        """Rebuilds the engine when the optimizers apply_optimizer_in_backward attached to the
        weights differ from those it applies: the tables, the step, and the slots of every table
        whose optimizer stays carry over; a table with a new optimizer starts its state afresh,
        as a new torch optimizer does. Translation errors raise before anything changes."""
        weights = self._static_weights()
        attached = {name: _in_backward_optimizer(name, weight) for name, weight in weights.items()}
        attached = {name: optimizer for name, optimizer in attached.items()
                    if optimizer is not None}
        unchanged = [name for name in weights
                     if attached.get(name) is self._fused.get(name)]
        if len(unchanged) == len(weights):
            return
        fused = {}
        for name, optimizer in attached.items():
            try:
                fused[name] = fused_optimizer(weights[name]._optimizer_classes[0], optimizer,
                                              weights[name]._optimizer_kwargs[0])
            except ValueError as error:
                raise ValueError(f"table '{name}': {error}") from None
        old = self._tables.embedding
        new = self._build_embedding(fused)
        new_tables = new.embedding_tables
        for name, weight in weights.items():
            new_tables[name].copy_(weight.detach())
            weight.data = new_tables[name]
        old_slots, new_slots = old.slot_variables, new.slot_variables
        for name in unchanged:
            for slot, values in old_slots[name].items():
                new_slots[name][slot].copy_(values)
        for name in self._dynamic:
            new.write_dynamic_table(name, *old.read_dynamic_table(name))
        new.layer.step = old.step
        self._tables.embedding = new
        self._fused = attached

    def _check_trainable(self):
        """Raises ValueError naming the tables that have no optimizer, if any."""
        layer = self._tables.embedding.layer
        if layer.optimizer is not None:
            return
        untrained = [name for name, table in zip(layer.table_names, layer._resolved.tables)
                     if table.optimizer is None]
        if untrained:
            raise ValueError(
                f"table(s) {untrained} have no optimizer: recemb applies it in the backward "
                "pass (its weights get no gradient); attach one with torchrec.optim."
                "apply_optimizer_in_backward(..., module.parameters(), ...) or pass optimizer=; "
                "evaluate under module.eval() or torch.no_grad()")

    def _lookup(self, features, weighted, bags_of_one):
        """recemb's activations {embedding name: tensor} of the KeyedJaggedTensor `features`,
        and {feature: lengths tensor}."""
        inputs, weights, lengths = self._inputs(features, weighted, bags_of_one)
        training = self.training and torch.is_grad_enabled()
        if training:
            self._sync_optimizers()
            self._check_trainable()
        embedding = self._tables.embedding
        embedding.train(self.training)
        return embedding(inputs, weights), lengths

    def _inputs(self, features, weighted, bags_of_one):
        """Checks a KeyedJaggedTensor against the configured features and splits it into one
        recemb.Ragged per embedding name (each value its own bag when bags_of_one), with its
        weights when weighted; ValueError naming what is wrong, before any lookup."""
        if not isinstance(features, torchrec.KeyedJaggedTensor):
            raise ValueError(f"features must be a torchrec.KeyedJaggedTensor, got "
                             f"{type(features).__name__}")
        keys = list(features.keys())
        missing = [name for name in self._feature_names if name not in keys]
        unknown = [name for name in keys if name not in self._feature_names]
        if missing or unknown or len(set(keys)) != len(keys):
            raise ValueError(f"KeyedJaggedTensor keys {keys}: expected the configured features "
                             f"{sorted(set(self._feature_names))}, each once" +
                             (f"; missing {missing}" if missing else "") +
                             (f"; unknown {unknown}" if unknown else ""))
        if features.variable_stride_per_key():
            raise ValueError("KeyedJaggedTensor with a variable batch size per key: recemb "
                             "needs one batch size for every feature")
        values = features.values()
        lengths = features.lengths()
        if values.dim() != 1 or values.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"KeyedJaggedTensor values must be a 1-D int32 or int64 tensor, got "
                             f"{values.dtype} of shape {list(values.shape)}")
        batch_size = features.stride()
        if lengths.numel() != len(keys) * batch_size:
            raise ValueError(f"KeyedJaggedTensor lengths: {lengths.numel()} entries for "
                             f"{len(keys)} keys and batch size {batch_size}")
        lengths = lengths.detach().cpu().to(torch.int64)
        if lengths.numel() and int(lengths.min()) < 0:
            raise ValueError(f"KeyedJaggedTensor lengths: negative length {int(lengths.min())}")
        if int(lengths.sum()) != values.numel():
            raise ValueError(f"KeyedJaggedTensor lengths sum to {int(lengths.sum())}, but there "
                             f"are {values.numel()} values")
        sample_weights = features.weights_or_none() if weighted else None
        if weighted and (sample_weights is None or sample_weights.numel() != values.numel()):
            raise ValueError(f"is_weighted=True needs one weight per value in the "
                             f"KeyedJaggedTensor: {values.numel()} values, " +
                             ("no weights" if sample_weights is None else
                              f"{sample_weights.numel()} weights"))
        offsets = np.zeros(lengths.numel() + 1, dtype=np.int64)
        np.cumsum(lengths.numpy(), out=offsets[1:])
        values = values.detach().cpu().numpy()
        if sample_weights is not None:
            sample_weights = sample_weights.detach().cpu().to(torch.float32).numpy()
        by_feature = {}
        for index, key in enumerate(keys):
            splits = offsets[index * batch_size:(index + 1) * batch_size + 1]
            start, end = int(splits[0]), int(splits[-1])
            row_splits = (np.arange(end - start + 1, dtype=np.int64) if bags_of_one else
                          splits - start)
            by_feature[key] = (
                Ragged(values[start:end], row_splits),
                None if sample_weights is None else sample_weights[start:end],
                lengths[index * batch_size:(index + 1) * batch_size])
        inputs, weights, feature_lengths = {}, {} if weighted else None, {}
        for config, embedding_names in zip(self._configs, self._embedding_names_by_table):
            for feature, embedding_name in zip(config.feature_names, embedding_names):
                ids, feature_weights, feature_lengths[embedding_name] = by_feature[feature]
                inputs[embedding_name] = ids
                if weighted:
                    weights[embedding_name] = feature_weights
        return inputs, weights, feature_lengths

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    @property
    def recemb_embedding(self) -> _TorchEmbedding:
        """The recemb.torch.Embedding holding the tables and their optimizer state (slots, step):
        save / restore keep those, which TorchRec's state_dict keys do not."""
        return self._tables.embedding

    def __setstate__(self, state):
        """After copy.deepcopy or unpickling: points the weights at the copied engine again."""
        super().__setstate__(state)
        tables = self._tables.embedding.embedding_tables
        for name, weight in self._static_weights().items():
            weight.data = tables[name]


class EmbeddingBagCollection(_Collection, EmbeddingBagCollectionInterface):
    """torchrec.EmbeddingBagCollection over recemb: pooled embeddings of a KeyedJaggedTensor
    (an EmbeddingBagCollectionInterface, as TorchRec's).

    tables: torchrec.EmbeddingBagConfigs (unique names; feature_names shared by several tables
        give the keys "feature@table", as TorchRec). pooling SUM or MEAN; data_type FP32, or BF16 /
        FP16 (a static table's weight is then a torch.bfloat16 / float16 tensor over recemb's
        16-bit rows; the pooled values and their gradients stay float32);
        init_fn (default: uniform, TorchRec's weight_init_min / max) is applied to the table as
        TorchRec does. An empty feature_names becomes [name], as TorchRec sets it.
    is_weighted: the KJT's weights are per-sample weights (SUM pooling only, as TorchRec's
        EmbeddingBag: MEAN with weights is refused).
    device: None or the CPU.
    optimizer: the fused optimizer of the tables that apply_optimizer_in_backward does not
        cover: a recemb.optimizers object or name, or a torch optimizer (see fused_optimizer).
    dynamic: {table name: recemb.DynamicVocabulary}: those tables are dynamic (any int64 id is a
        key; num_embeddings must equal the capacity; rows start from recemb's default
        initializer, so init_fn / weight_init_* must be unset); they need optimizer=, and in the
        state_dict hold "<prefix>.keys", ".weight" ([n, dim]) and their slots.
    num_threads: recemb.torch.Embedding's (default "torch": torch's intra-op threads, docs/python.md
    "One set of threads"); seed: recemb.Embedding's.

    forward(features: KeyedJaggedTensor) -> KeyedTensor with keys in config order (each table's
    features in turn) and values [batch, sum of dims]; in training mode with grad enabled the
    values require grad and backward updates the touched rows. Raises ValueError, changing
    nothing, for keys other than the configured features, lengths that do not sum to the values,
    missing weights, and ids out of [0, num_embeddings) (naming feature, example and id).

    Refused at construction with ValueError naming the field: other poolings, data types,
    position weights (need_pos), pruning, virtual tables and TorchRec's other table options.
    """

    _CONFIG = torchrec.EmbeddingBagConfig
    _TABLES = "embedding_bags"

    def __init__(self, tables: List[torchrec.EmbeddingBagConfig], is_weighted: bool = False,
                 device: Optional[torch.device] = None, *, optimizer: Any = None,
                 dynamic: Optional[Mapping[str, DynamicVocabulary]] = None,
                 num_threads: Union[int, str] = "torch", seed: int = 0) -> None:
        self._is_weighted = bool(is_weighted)
        for config in tables:
            pooling = getattr(config, "pooling", None)
            if isinstance(config, self._CONFIG) and pooling not in _POOLING_COMBINERS:
                raise ValueError(f"EmbeddingBagConfig '{config.name}': pooling={pooling}: "
                                 "recemb pools with PoolingType.SUM or PoolingType.MEAN")
            if is_weighted and pooling == torchrec.PoolingType.MEAN:
                raise ValueError(f"EmbeddingBagConfig '{config.name}': pooling=PoolingType.MEAN "
                                 "with is_weighted=True: per-sample weights need SUM pooling "
                                 "(as TorchRec's EmbeddingBag)")
        super().__init__(tables, device, optimizer, dynamic, num_threads, seed)
        self._embedding_names = [name for names in self._embedding_names_by_table
                                 for name in names]
        self._dims = [config.embedding_dim for config in self._configs
                      for _ in config.feature_names]

    def _combiner(self, config):
        return _POOLING_COMBINERS[config.pooling]

    def forward(self, features: torchrec.KeyedJaggedTensor) -> torchrec.KeyedTensor:
        activations, _ = self._lookup(features, self._is_weighted, bags_of_one=False)
        return torchrec.KeyedTensor(
            keys=self._embedding_names, length_per_key=self._dims,
            values=torch.cat([activations[name] for name in self._embedding_names], dim=1))

    def is_weighted(self) -> bool:
        return self._is_weighted

    def embedding_bag_configs(self) -> List[torchrec.EmbeddingBagConfig]:
        """The configs given (DLRM reads the dims and feature names from them)."""
        return self._configs


class EmbeddingCollection(_Collection, EmbeddingCollectionInterface):
    """torchrec.EmbeddingCollection over recemb: the embedding of every id of a
    KeyedJaggedTensor, unpooled (an EmbeddingCollectionInterface, as TorchRec's).

    tables: torchrec.EmbeddingConfigs, all of one embedding_dim (as TorchRec). need_indices:
    each output JaggedTensor's weights are the ids, as TorchRec. device, optimizer, dynamic,
    num_threads, seed: as EmbeddingBagCollection's; the state_dict keys are
    "embeddings.<table>.weight".

    forward(features) -> {embedding name: JaggedTensor(values [number of ids, dim], the
    feature's lengths)}. Each id is looked up as a bag of its own (a sum of one row: the row
    itself), which gives the jagged layout directly: recemb's sequence features
    (max_sequence_length) pad every example to a fixed length instead. The KJT's weights are
    not used (as TorchRec). Errors as EmbeddingBagCollection's.
    """

    _CONFIG = torchrec.EmbeddingConfig
    _TABLES = "embeddings"

    def __init__(self, tables: List[torchrec.EmbeddingConfig],
                 device: Optional[torch.device] = None, need_indices: bool = False, *,
                 optimizer: Any = None,
                 dynamic: Optional[Mapping[str, DynamicVocabulary]] = None,
                 num_threads: Union[int, str] = "torch", seed: int = 0) -> None:
        dims = sorted({getattr(config, "embedding_dim", None) for config in tables})
        if len(dims) > 1:
            raise ValueError(f"EmbeddingCollection: every table needs the same embedding_dim "
                             f"(as TorchRec), got {dims}")
        self._need_indices = bool(need_indices)
        super().__init__(tables, device, optimizer, dynamic, num_threads, seed)

    def forward(self, features: torchrec.KeyedJaggedTensor) -> Dict[str, torchrec.JaggedTensor]:
        activations, lengths = self._lookup(features, weighted=False, bags_of_one=True)
        ids = features.to_dict() if self._need_indices else {}
        result = {}
        for config, embedding_names in zip(self._configs, self._embedding_names_by_table):
            for feature, name in zip(config.feature_names, embedding_names):
                result[name] = torchrec.JaggedTensor(
                    values=activations[name], lengths=lengths[name],
                    weights=ids[feature].values() if self._need_indices else None)
        return result

    def embedding_configs(self) -> List[torchrec.EmbeddingConfig]:
        return self._configs

    def embedding_dim(self) -> int:
        return self._configs[0].embedding_dim if self._configs else -1

    def need_indices(self) -> bool:
        return self._need_indices

    def embedding_names_by_table(self) -> List[List[str]]:
        return self._embedding_names_by_table
