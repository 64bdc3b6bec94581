"""ServingModel: a serving model file (written by Embedding.export), read into memory and looked
up as the layer that exported it (docs/serving.md).

    layer.export("ranker.recemb", dtype="int8")
    model = recemb.ServingModel.open("ranker.recemb", feature_config=layer.feature_config)
    activations = model.lookup(features)    # the structure of feature_config, as layer.lookup

The file holds the tables (float32, float16 or int8) and the flat list of named table and
feature configs, not the Python structure of the feature config: give that structure to open (it
is checked against the file), or use the default, a dict keyed by feature name. It may also hold
named float32 arrays and string metadata beside the tables (the dense part of a model exported by
`recemb export`, for instance): model.extra_arrays and model.metadata.

A dynamic table (TableConfig(vocabulary=...)) is exported with the keys it holds and their rows;
its features are looked up by any int64 key or str / bytes id (hashed as in training,
recemb.string_key), a key the table does not hold giving a zero row whose weight still counts in
mean and sqrtn, as the layer's pure lookup (docs/serving.md, "Dynamic tables").
"""

from recemb import _nest, _recemb
from recemb._activations import ActivationArrays
from recemb.config import (DynamicVocabulary, FeatureConfig, QuantizationConfig, Resolved,
                           TableConfig)
from recemb._lookup import _pure_lookup


def _file_tables(model):
    """{name: TableConfig} of the model's tables, in file order (no initializer, no optimizer)."""
    tables = {}
    for table in model.tables():
        quantization = table.quantization_config
        vocabulary = table.dynamic_vocabulary
        tables[table.name] = TableConfig(
            None if vocabulary is not None else table.vocabulary_size, table.dim,
            combiner=_recemb.combiner_name(table.combiner),
            name=table.name, quantization_config=None if quantization is None else
            QuantizationConfig(quantization.num_buckets, quantization.lower, quantization.upper),
            vocabulary=None if vocabulary is None else DynamicVocabulary(
                vocabulary.capacity, vocabulary.min_count, vocabulary.ttl_steps,
                _recemb.when_full_name(vocabulary.when_full)))
    return tables


def _table_fields(table):
    """The fields of a C++ TableConfig that change what a lookup returns."""
    quantization = table.quantization_config
    vocabulary = table.dynamic_vocabulary
    return {"vocabulary_size": table.vocabulary_size, "dim": table.dim,
            "dynamic": vocabulary is not None,
            "combiner": _recemb.combiner_name(table.combiner),
            "quantization_config": None if quantization is None else (
                quantization.num_buckets, quantization.lower, quantization.upper)}


def _feature_fields(feature):
    """The fields of a C++ FeatureConfig that change what a lookup accepts or returns."""
    return {"table": feature.table, "max_sequence_length": feature.max_sequence_length,
            "output_shape": list(feature.output_shape),
            "validate_weights_and_indices": feature.validate_weights_and_indices}


def _check_equal(where, mine, theirs):
    for field, value in mine.items():
        if value != theirs[field]:
            raise ValueError(f"{where}: {field} is {value!r} in feature_config, "
                             f"{theirs[field]!r} in the model")


def _feature_order(resolved, model):
    """For each feature of `resolved` (in its flattening order), the index of the model's feature
    of the same name. Raises ValueError naming the first feature or table whose config differs
    from the file's in a way that changes lookups."""
    where = f"serving model '{model.path()}'"
    features = model.features()
    index = {feature.name: i for i, feature in enumerate(features)}
    missing = [name for name in resolved.feature_names if name not in index]
    extra = sorted(set(index) - set(resolved.feature_names))
    if missing or extra:
        raise ValueError(f"{where}: feature_config does not have the model's features (not in "
                         f"the model: {missing}; not in feature_config: {extra})")
    tables = {table.name: table for table in model.tables()}
    mine = {table.name: table for table in resolved.cpp_tables()}
    for feature in resolved.cpp_features():
        _check_equal(f"{where}: feature '{feature.name}'", _feature_fields(feature),
                     _feature_fields(features[index[feature.name]]))
        _check_equal(f"{where}: table '{feature.table}'", _table_fields(mine[feature.table]),
                     _table_fields(tables[feature.table]))
    return [index[name] for name in resolved.feature_names]


class _Reordered:
    """The C++ model with its features addressed in another order: feature f here is the model's
    feature order[f]."""

    __slots__ = ("_model", "_order", "_inverse")

    def __init__(self, model, order):
        self._model = model
        self._order = order
        self._inverse = sorted(range(len(order)), key=order.__getitem__)

    def activation_shape(self, feature, view):
        return self._model.activation_shape(self._order[feature], view)

    def lookup(self, views, activations):
        self._model.lookup([views[f] for f in self._inverse],
                           [activations[f] for f in self._inverse])


class ServingModel:
    """A serving model file opened read-only: open reads the whole file into memory the model
    owns, and its tables are looked up there. Immutable but for apply_delta: lookups from several
    threads run in parallel (the interpreter lock is released). The model never reads the file
    again, so the file may be replaced, rewritten in place, truncated or deleted meanwhile: the
    model keeps serving what it opened."""

    __slots__ = ("_model", "_resolved", "_engine", "_tables", "_new_arrays", "_extra_arrays",
                 "_metadata")

    def __init__(self, model, feature_config):
        """Use ServingModel.open."""
        self._model = model
        self._tables = _file_tables(model)
        if feature_config is None:
            feature_config = {feature.name: FeatureConfig(
                self._tables[feature.table], max_sequence_length=feature.max_sequence_length,
                validate_weights_and_indices=feature.validate_weights_and_indices,
                output_shape=list(feature.output_shape) or None, name=feature.name)
                for feature in model.features()}
        self._resolved = Resolved(feature_config)
        self._engine = _Reordered(model, _feature_order(self._resolved, model))
        self._new_arrays = ActivationArrays()
        self._extra_arrays = model.extra_arrays()
        self._metadata = model.metadata()

    @classmethod
    def open(cls, path, feature_config=None, *, verify=True):
        """Maps the serving model file `path`.

        feature_config: the structure of inputs and activations: the exporting layer's
            feature_config (any structure holding FeatureConfigs whose names, tables, combiners
            and shapes match the file's; features are matched by name), or None for a dict
            keyed by feature name (the layer's own structure if that was a flat dict of features
            named by their keys).
        verify: True checks every checksum (one pass over the file's bytes in memory); False
            only the header and manifest (damaged table bytes then go unnoticed). Either way the
            whole file is read into memory the model owns.
        Raises recemb.DataLoss (a ValueError) naming the file when it is not a serving model, of
        another format version, truncated or damaged; FileNotFoundError when it is missing;
        ValueError when feature_config does not match it.
        """
        return cls(_recemb.ServingModel.open(path, _recemb.OpenOptions(verify=bool(verify))),
                   feature_config)

    @property
    def path(self):
        return self._model.path()

    @property
    def dtype(self):
        """"float32", "float16" or "int8": how the tables are stored."""
        return _recemb.serving_dtype_name(self._model.dtype())

    @property
    def feature_config(self):
        """The structure of inputs and activations (as given to open, or the default dict)."""
        return self._resolved.structure

    @property
    def feature_names(self):
        """The features' names, in flattening order of feature_config."""
        return list(self._resolved.feature_names)

    @property
    def tables(self):
        """{name: TableConfig} of the file's tables, in the exporting layer's order (no
        initializer, no optimizer: a serving model is not trained)."""
        return dict(self._tables)

    def num_keys(self, table):
        """The keys dynamic table `table` (its name) holds, as exported. Raises ValueError for a
        static table or a name the model lacks."""
        return self._model.num_keys(table)

    @property
    def extra_arrays(self):
        """{name: numpy float32 array of its shape} of the arrays exported beside the tables, in
        export order (bitwise as exported; none in a file of format version 1). The arrays are
        read-only views of the model's memory, valid as long as they are referenced."""
        return dict(self._extra_arrays)

    @property
    def metadata(self):
        """{key: str} exported beside the tables (none in a file of format version 1)."""
        return dict(self._metadata)

    def clone(self):
        """A deep copy, in memory of its own, with this model's feature_config: a replica to
        apply deltas to while this one serves (apply_delta)."""
        return ServingModel(self._model.clone(), self._resolved.structure)

    def apply_delta(self, path):
        """Applies the delta file `path` (written by Embedding.publish) in place: its rows, keys,
        removed keys, extra arrays (their values, in this model's arrays) and metadata replace
        this model's (docs/serving.md, "Publishing deltas"). Not concurrent with this object's
        lookups: apply to a clone no thread looks up in, then swap. Raises RuntimeError
        (recemb.FailedPrecondition) for a delta of another base or not the next sequence, naming
        both; recemb.DataLoss (a ValueError) for a damaged, truncated or mismatched file; the
        model is then as it was."""
        self._model.apply_delta(path)
        self._metadata = self._model.metadata()

    @property
    def delta_sequence(self):
        """Deltas applied: 0 for a model opened from a base."""
        return self._model.delta_sequence()

    def lookup(self, features, weights=None, *, out=None):
        """The activations of `features` (and `weights`), in the structure of feature_config:
        Embedding.lookup's inputs, validation and results, computed from the stored values (so
        equal to the exporting layer's lookup bitwise for float32). Bad inputs raise ValueError
        naming the feature, example and value. out: as Embedding.lookup's (arrays in the
        structure of feature_config written in place and returned as given); concurrent lookups
        need out arrays of their own."""
        activations = _pure_lookup(self._engine, self._resolved, features, weights,
                                   self._new_arrays, out)
        if out is not None:
            return out
        return _nest.pack_sequence_as(self._resolved.structure, activations)

    def __repr__(self):
        return (f"ServingModel(path={str(self.path)!r}, dtype={self.dtype!r}, "
                f"features={self.feature_names})")
