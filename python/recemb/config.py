"""Tables and the features looked up in them, as TF's `tf.tpu.experimental.embedding` configs.

Several FeatureConfigs share a table by referring to the same TableConfig object (identity, as
TF). Configs are plain values; an Embedding copies what it needs and never changes them.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable
from typing import Any, Optional, Sequence, Union

import numpy as np

from recemb import _nest, _recemb, optimizers

# Keras's names of the initializers recemb computes in C++.
_NAMED_INITIALIZERS = {"zeros": lambda: _recemb.Constant(value=0.0),
                       "ones": lambda: _recemb.Constant(value=1.0),
                       "truncated_normal": _recemb.TruncatedNormal}
_CPP_INITIALIZERS = (_recemb.TruncatedNormal, _recemb.Constant, _recemb.RowId)


def _parse_name(parse, argument, value):
    """What `parse` (a bound parse_X function) gives for the name `value` of the argument
    `argument`; otherwise ValueError 'argument=value: ' and the C++ message, which lists the
    valid names (a value that is not a str is parsed as its repr, which no valid name is)."""
    try:
        return parse(value if isinstance(value, str) else repr(value))
    except ValueError as error:
        raise ValueError(f"{argument}={value!r}: {error}") from None


def _int(owner, field, value, minimum=None):
    """`value` as an int of the C++ fields' type (int64) and >= minimum (when given), or
    ValueError naming the field as TF's configs do ("must be an int and must be >= 1")."""
    requirement = "an int" if minimum is None else f"an int and must be >= {minimum}"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{owner}: {field} must be {requirement}, got {value!r}")
    if not -2**63 <= value < 2**63:
        raise ValueError(f"{owner}: {field}={value}: outside the 64-bit integers "
                         "[-2**63, 2**63)")
    if minimum is not None and value < minimum:
        raise ValueError(f"{owner}: {field} must be {requirement}, got {value!r}")
    return int(value)


def _name(owner, value):
    """`value` (a config's name) when it is None or a non-empty str, else ValueError."""
    if value is not None and (not isinstance(value, str) or not value):
        raise ValueError(f"{owner}: name must be None or a non-empty str, got {value!r}")
    return value


class QuantizationConfig:
    """Simulated quantization of looked-up rows (forward only; the backward pass is
    straight-through): x = clip(x, lower, upper), snapped to num_buckets evenly spaced values."""

    def __init__(self, num_buckets: int, lower: float, upper: float) -> None:
        owner = "QuantizationConfig"
        self.num_buckets = _int(owner, "num_buckets", num_buckets, minimum=2)
        for field, value in (("lower", lower), ("upper", upper)):
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise ValueError(f"{owner}: {field} must be a float, got {value!r}")
        self.lower = float(lower)
        self.upper = float(upper)
        if not (np.isfinite(self.lower) and np.isfinite(self.upper) and self.lower < self.upper):
            raise ValueError(f"{owner}: needs finite lower < upper, got lower {self.lower}, "
                             f"upper {self.upper}")

    def __repr__(self):
        return (f"QuantizationConfig(num_buckets={self.num_buckets}, lower={self.lower}, "
                f"upper={self.upper})")


class DynamicVocabulary:
    """The keys of a dynamic table (TableConfig(vocabulary=...)): rows keyed by any int64 id (or a
    str / bytes id, by its string key), admitted and evicted as training sees them
    (docs/semantics.md, "Dynamic vocabularies").

    capacity: the most keys held, all shards together (>= 1).
    min_count: occurrences in training lookups before a key gets a row (>= 1).
    ttl_steps: None (keys stay until evicted to make room), or T >= 1: keys not seen by a training
        lookup for T steps are removed at the end of apply_gradients.
    when_full: what admitting a key beyond capacity does: "evict_least_recent",
        "evict_least_frequent" or "error".

    Every argument is checked here (ValueError naming the field), as optimizers are.
    """

    def __init__(self, capacity: int, min_count: int = 1, ttl_steps: Optional[int] = None,
                 when_full: str = "evict_least_recent") -> None:
        owner = "recemb.DynamicVocabulary"
        self.capacity = _int(owner, "capacity", capacity)
        self.min_count = _int(owner, "min_count", min_count)
        self.ttl_steps = None if ttl_steps is None else _int(owner, "ttl_steps", ttl_steps)
        try:
            _parse_name(_recemb.parse_when_full, "when_full", when_full)
        except ValueError as error:
            raise ValueError(f"{owner}: {error}") from None
        self.when_full = when_full
        _recemb.validate_dynamic_vocabulary(self._to_cpp(), owner)

    def __repr__(self):
        return (f"DynamicVocabulary(capacity={self.capacity}, min_count={self.min_count}, "
                f"ttl_steps={self.ttl_steps}, when_full={self.when_full!r})")

    def _to_cpp(self):
        return _recemb.DynamicVocabulary(capacity=self.capacity, min_count=self.min_count,
                                         ttl_steps=self.ttl_steps,
                                         when_full=_recemb.parse_when_full(self.when_full))


class TableConfig:
    """One embedding table: vocabulary_size rows of dim float32 values, or a dynamic table
    (vocabulary=DynamicVocabulary(...), no vocabulary_size) of rows keyed by any int64, str or
    bytes id.

    initializer: None or "truncated_normal" (TF's default: truncated normal with stddev
        1/sqrt(dim)), "zeros", "ones", a float constant, an array of shape [vocabulary_size,
        dim], a callable shape -> array (called once with (vocabulary_size, dim) when the
        Embedding is built), or one of recemb.initializers. A dynamic table's rows are initialised
        as keys arrive, from (seed, table name, key) alone: not by an array or a callable
        (RowId gives the key's row offset + key).
    optimizer: this table's optimizer (a recemb.optimizers object or name); None uses the
        Embedding's optimizer.
    combiner: "mean" (default, as TF), "sum" or "sqrtn"; applies to every feature of the table.
    name: unique among the tables of an Embedding; None gives "table_<i>", i being the table's
        index in order of first appearance in the flattened feature config (as TF).
    vocabulary: None (a static table of vocabulary_size rows) or a DynamicVocabulary (a dynamic
        table; vocabulary_size must then be None).
    dtype: the rows' type: "float32" (default), "bfloat16" or "float16", half the memory
        (docs/semantics.md, "16-bit tables"; a dynamic float16 table needs an initializer within
        float16's range for any key). Lookups and updates compute in
        float32; reading a table gives float32 copies.
    rounding: how updates round a 16-bit table's rows: "stochastic" (default; unbiased, the same
        for any thread count and placement) or "nearest".

    Every argument is checked here, as TF's constructor does (ValueError naming the field:
    vocabulary_size and dim ints >= 1, a known combiner, ...); the Embedding checks its configs
    again when it is built.
    """

    def __init__(self, vocabulary_size: Optional[int] = None, dim: Optional[int] = None,
                 initializer: Any = None,
                 optimizer: Union[None, str, optimizers._Optimizer] = None,
                 combiner: str = "mean", name: Optional[str] = None,
                 quantization_config: Optional[QuantizationConfig] = None,
                 vocabulary: Optional[DynamicVocabulary] = None, dtype: str = "float32",
                 rounding: str = "stochastic") -> None:
        owner = f"TableConfig '{name}'" if name is not None else "TableConfig"
        if vocabulary is not None and not isinstance(vocabulary, DynamicVocabulary):
            raise ValueError(f"{owner}: vocabulary must be None or a recemb.DynamicVocabulary, "
                             f"got {vocabulary!r}")
        if (vocabulary_size is None) == (vocabulary is None):
            raise ValueError(
                f"{owner}: give vocabulary_size (a static table) or vocabulary="
                "recemb.DynamicVocabulary(...) (a dynamic table), " +
                ("not both" if vocabulary is not None else "got neither"))
        self.vocabulary_size = (None if vocabulary_size is None else
                                _int(owner, "vocabulary_size", vocabulary_size, minimum=1))
        if dim is None:
            raise ValueError(f"{owner}: dim is required")
        self.dim = _int(owner, "dim", dim, minimum=1)
        rows = vocabulary.capacity if vocabulary is not None else self.vocabulary_size
        if rows * self.dim >= 2**63:
            raise ValueError(f"{owner}: " + ("vocabulary.capacity" if vocabulary is not None else
                                             "vocabulary_size") +
                             f" * dim = {rows} * {self.dim} overflows the 64-bit integers")
        try:
            _parse_name(_recemb.parse_combiner, "combiner", combiner)
        except ValueError as error:
            raise ValueError(f"{owner}: {error}") from None
        if isinstance(initializer, str) and initializer not in _NAMED_INITIALIZERS:
            raise ValueError(f"{owner}: initializer names are {list(_NAMED_INITIALIZERS)}, got "
                             f"{initializer!r}")
        if not (initializer is None or callable(initializer) or hasattr(initializer, "__array__")
                or isinstance(initializer, (str, numbers.Real, *_CPP_INITIALIZERS))):
            raise ValueError(f"{owner}: initializer must be None, a name, a float, an array, a "
                             f"callable or a recemb.initializers object, got {initializer!r}")
        if quantization_config is not None and not isinstance(quantization_config,
                                                              QuantizationConfig):
            raise ValueError(f"{owner}: quantization_config must be a QuantizationConfig")
        if vocabulary is not None and _cpp_initializer(initializer) is None:
            raise ValueError(f"{owner}: a dynamic table's rows are initialised from (seed, key) "
                             "as keys arrive: its initializer must be None, a name, a float or "
                             "one of recemb.initializers, not an array or a callable")
        try:
            _parse_name(_recemb.parse_dtype, "dtype", dtype)
            _parse_name(_recemb.parse_rounding, "rounding", rounding)
        except ValueError as error:
            raise ValueError(f"{owner}: {error}") from None
        self.dtype = dtype
        self.rounding = rounding
        self.initializer = initializer
        self.optimizer = optimizers.get(optimizer)
        self.combiner = combiner
        self.name = _name(owner, name)
        self.quantization_config = quantization_config
        self.vocabulary = vocabulary

    def __repr__(self):
        size = (f"vocabulary_size={self.vocabulary_size}" if self.vocabulary is None else
                f"vocabulary={self.vocabulary!r}")
        return (f"TableConfig({size}, dim={self.dim}, "
                f"initializer={_initializer_repr(self.initializer)}, "
                f"optimizer={self.optimizer!r}, combiner={self.combiner!r}, name={self.name!r}, "
                f"quantization_config={self.quantization_config!r}" +
                ("" if self.dtype == "float32" else
                 f", dtype={self.dtype!r}, rounding={self.rounding!r}") + ")")


class FeatureConfig:
    """One input feature, looked up in `table`.

    max_sequence_length: 0 combines each example's ids into one row ([batch, dim]); L > 0 makes a
        sequence feature with activation [batch, L, dim].
    output_shape: the activation shape without dim (TF's output_shape); None derives it from the
        input.
    validate_weights_and_indices: True rejects non-finite weights (ids are always checked).
    name: unique among the features; None uses the feature's path in the config structure
        (for example "watched" for a dict key).

    Every argument is checked here, as TF's constructor does (ValueError naming the field:
    max_sequence_length an int >= 0, output_shape entries ints >= 1, ...).
    """

    def __init__(self, table: TableConfig, max_sequence_length: int = 0,
                 validate_weights_and_indices: bool = True,
                 output_shape: Optional[Sequence[int]] = None, name: Optional[str] = None) -> None:
        owner = f"FeatureConfig '{name}'" if name is not None else "FeatureConfig"
        if not isinstance(table, TableConfig):
            raise ValueError(f"{owner}: table must be a TableConfig, got {type(table).__name__}")
        self.table = table
        self.max_sequence_length = _int(owner, "max_sequence_length", max_sequence_length,
                                        minimum=0)
        if not isinstance(validate_weights_and_indices, bool):
            raise ValueError(f"{owner}: validate_weights_and_indices must be a bool, got "
                             f"{validate_weights_and_indices!r}")
        self.validate_weights_and_indices = validate_weights_and_indices
        if output_shape is not None and (isinstance(output_shape, (str, bytes)) or
                                         not isinstance(output_shape, Iterable)):
            raise ValueError(f"{owner}: output_shape must be None or a sequence of ints, got "
                             f"{output_shape!r}")
        self.output_shape = None if output_shape is None else [
            _int(owner, "output_shape entries", d, minimum=1) for d in output_shape]
        self.name = _name(owner, name)

    def __repr__(self):
        return (f"FeatureConfig(table={self.table!r}, max_sequence_length="
                f"{self.max_sequence_length}, validate_weights_and_indices="
                f"{self.validate_weights_and_indices}, output_shape={self.output_shape}, "
                f"name={self.name!r})")


def _initializer_repr(initializer):
    if hasattr(initializer, "__array__"):
        return f"<array of shape {tuple(np.shape(initializer))}>"
    return repr(initializer)


def _cpp_initializer(init):
    """The C++ initializer of a table's initializer `init`; None for an array or a callable (see
    initial_values)."""
    if init is None:
        return _recemb.TruncatedNormal()
    if isinstance(init, _CPP_INITIALIZERS):
        return init
    if isinstance(init, str):
        return _NAMED_INITIALIZERS[init]()
    if isinstance(init, numbers.Real):
        return _recemb.Constant(value=float(init))
    return None


class Resolved:
    """A feature config structure resolved into C++ configs: features in flattening order,
    tables in order of first appearance, and their names."""

    def __init__(self, feature_config):
        self.structure = feature_config
        flat = _nest.flatten_with_paths(feature_config)
        if not flat:
            raise ValueError("feature_config holds no FeatureConfig")
        self.features = []
        self.feature_names = []
        self.tables = []
        self._table_names = {}  # id(TableConfig) -> name
        for index, (path, feature) in enumerate(flat):
            if not isinstance(feature, FeatureConfig):
                where = f" at '{_nest.path_string(path)}'" if path else ""
                raise ValueError(f"feature_config{where}: expected a FeatureConfig, got "
                                 f"{type(feature).__name__}")
            self.features.append(feature)
            self.feature_names.append(feature.name or _nest.path_string(path) or
                                      f"feature_{index}")
            if id(feature.table) not in self._table_names:
                self._table_names[id(feature.table)] = (feature.table.name or
                                                        f"table_{len(self.tables)}")
                self.tables.append(feature.table)
        self.table_names = [self._table_names[id(table)] for table in self.tables]
        # Per feature: its table's name if the table is dynamic (its ids are keys, and may be
        # strings), else None.
        self.dynamic_tables = [self._table_names[id(feature.table)]
                               if feature.table.vocabulary is not None else None
                               for feature in self.features]

    def table_name(self, key):
        """The name of a table given by name or by its TableConfig."""
        if isinstance(key, TableConfig):
            if id(key) not in self._table_names:
                raise ValueError(f"{key!r} is not a table of this feature config")
            return self._table_names[id(key)]
        if key not in self.table_names:
            raise ValueError(f"no table named {key!r}; the tables are {self.table_names}")
        return key

    def initial_values(self):
        """(name, float32 [vocabulary_size, dim]) of each table initialized by an array or a
        callable. They are written into the engine after it is built (rather than given to it as
        a C++ initializer callback, which the engine's configs would keep alive)."""
        result = []
        for table, name in zip(self.tables, self.table_names):
            init = table.initializer
            if _cpp_initializer(init) is not None:  # always, for a dynamic table
                continue
            if callable(init) and not hasattr(init, "__array__"):
                init = init((table.vocabulary_size, table.dim))
            values = np.asarray(init, dtype=np.float32)
            if values.shape != (table.vocabulary_size, table.dim):
                raise ValueError(f"table '{name}': the initializer gives shape {values.shape}, "
                                 f"expected {(table.vocabulary_size, table.dim)}")
            result.append((name, np.ascontiguousarray(values)))
        return result

    def cpp_tables(self, zero_tables=False):
        """The C++ TableConfigs; zero_tables initializes every static table to zeros."""
        result = []
        for table, name in zip(self.tables, self.table_names):
            quantization = table.quantization_config
            # A dynamic table initialises the rows of keys as they arrive: it keeps its own.
            initializer = (None if zero_tables and table.vocabulary is None else
                           _cpp_initializer(table.initializer))
            result.append(_recemb.TableConfig(
                name=name,
                vocabulary_size=table.vocabulary_size or 0,  # None (dynamic) is 0 in C++
                dim=table.dim,
                initializer=_recemb.Constant() if initializer is None else initializer,
                optimizer=(None if table.optimizer is None else
                           table.optimizer._to_cpp()),
                combiner=_recemb.parse_combiner(table.combiner),
                quantization_config=(None if quantization is None else _recemb.QuantizationConfig(
                    num_buckets=quantization.num_buckets, lower=quantization.lower,
                    upper=quantization.upper)),
                dynamic_vocabulary=None if table.vocabulary is None else (
                    table.vocabulary._to_cpp()),
                dtype=_recemb.parse_dtype(table.dtype),
                rounding=_recemb.parse_rounding(table.rounding)))
        return result

    def cpp_features(self):
        return [_recemb.FeatureConfig(
            name=name,
            table=self._table_names[id(feature.table)],
            max_sequence_length=feature.max_sequence_length,
            output_shape=list(feature.output_shape or []),
            validate_weights_and_indices=feature.validate_weights_and_indices)
            for feature, name in zip(self.features, self.feature_names)]
