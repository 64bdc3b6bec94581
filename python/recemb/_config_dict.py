"""A feature config and its optimizer as JSON-able dicts and back: what recemb.keras's get_config /
from_config hold, so that model.save('*.keras') and keras.models.load_model rebuild the layer
(docs/keras.md, "Saving, checkpoints and serving"). The rows are not in the config: the saved
weights restore them, so a static table's initializer that is an array, a callable or an
initializer object is kept as "zeros". What has no JSON form (a learning-rate callable, a dynamic
table's initializer object) raises NotImplementedError naming it."""

from __future__ import annotations

import numbers
from typing import Any

from recemb import _nest, optimizers
from recemb.config import DynamicVocabulary, FeatureConfig, QuantizationConfig, TableConfig


def _optimizer_dict(optimizer: Any, owner: str) -> Any:
    if optimizer is None:
        return None
    if not isinstance(optimizer.learning_rate, numbers.Real):
        raise NotImplementedError(f"{owner}: a learning rate that is a callable or schedule "
                                  f"({optimizer.learning_rate!r}) has no Keras config: save with "
                                  "model.save_weights or tf.train.Checkpoint")
    names = ["learning_rate"] + list(optimizer._OWN) + list(optimizers._COMMON)
    fields = {name: getattr(optimizer, name) for name in names}
    if isinstance(fields.get("clipvalue"), tuple):
        fields["clipvalue"] = list(fields["clipvalue"])
    return {"class": type(optimizer).__name__, "fields": fields}


def _optimizer_from(entry: Any) -> Any:
    if entry is None:
        return None
    fields = dict(entry["fields"])
    if isinstance(fields.get("clipvalue"), list):
        fields["clipvalue"] = tuple(fields["clipvalue"])
    return getattr(optimizers, entry["class"])(**fields)


def _initializer_entry(table: TableConfig) -> Any:
    initializer = table.initializer
    if initializer is None or isinstance(initializer, str) or (
            isinstance(initializer, numbers.Real) and not isinstance(initializer, bool)):
        return initializer
    if table.vocabulary is not None:
        raise NotImplementedError(f"table {table.name!r}: its initializer {initializer!r} has no "
                                  "Keras config (a dynamic table initialises rows as keys "
                                  "arrive): save with model.save_weights or tf.train.Checkpoint")
    return "zeros"  # the saved weights hold the rows


def _table_dict(table: TableConfig) -> dict:
    vocabulary = table.vocabulary
    quantization = table.quantization_config
    return {
        "vocabulary_size": table.vocabulary_size, "dim": table.dim,
        "initializer": _initializer_entry(table),
        "optimizer": _optimizer_dict(table.optimizer, f"table {table.name!r}"),
        "combiner": table.combiner, "name": table.name,
        "quantization_config": None if quantization is None else {
            "num_buckets": quantization.num_buckets, "lower": quantization.lower,
            "upper": quantization.upper},
        "vocabulary": None if vocabulary is None else {
            "capacity": vocabulary.capacity, "min_count": vocabulary.min_count,
            "ttl_steps": vocabulary.ttl_steps, "when_full": vocabulary.when_full},
        "dtype": table.dtype, "rounding": table.rounding,
    }


def _table_from(entry: dict) -> TableConfig:
    entry = dict(entry)
    entry["optimizer"] = _optimizer_from(entry["optimizer"])
    if entry["quantization_config"] is not None:
        entry["quantization_config"] = QuantizationConfig(**entry["quantization_config"])
    if entry["vocabulary"] is not None:
        entry["vocabulary"] = DynamicVocabulary(**entry["vocabulary"])
    return TableConfig(**entry)


def _structure(structure: Any, encode: Any) -> Any:
    """The nest as JSON: {"dict": [[key, ...], ...]}, {"list": [...]}, {"tuple": [...]}, leaves
    by encode(leaf)."""
    if isinstance(structure, dict):
        return {"dict": [[key, _structure(value, encode)] for key, value in structure.items()]}
    if isinstance(structure, list):
        return {"list": [_structure(value, encode) for value in structure]}
    if isinstance(structure, tuple):  # a namedtuple comes back as a tuple
        return {"tuple": [_structure(value, encode) for value in structure]}
    return {"leaf": encode(structure)}


def _unstructure(entry: dict, decode: Any) -> Any:
    if "dict" in entry:
        return {key: _unstructure(value, decode) for key, value in entry["dict"]}
    if "list" in entry:
        return [_unstructure(value, decode) for value in entry["list"]]
    if "tuple" in entry:
        return tuple(_unstructure(value, decode) for value in entry["tuple"])
    return decode(entry["leaf"])


def to_dict(feature_config: Any, optimizer: Any) -> dict:
    """The feature config (recemb.FeatureConfig leaves) and the layer's optimizer as JSON-able
    dicts; tables shared by several features are stored once."""
    tables, index = [], {}
    for feature in _nest.flatten(feature_config):
        if id(feature.table) not in index:
            index[id(feature.table)] = len(tables)
            tables.append(_table_dict(feature.table))

    def encode(feature):
        return {"table": index[id(feature.table)], "name": feature.name,
                "max_sequence_length": feature.max_sequence_length,
                "validate_weights_and_indices": feature.validate_weights_and_indices,
                "output_shape": None if feature.output_shape is None
                else list(feature.output_shape)}

    return {"tables": tables, "features": _structure(feature_config, encode),
            "optimizer": _optimizer_dict(optimizer, "the layer's optimizer")}


def from_dict(config: dict) -> tuple[Any, Any]:
    """(feature config, optimizer) of to_dict's result."""
    tables = [_table_from(entry) for entry in config["tables"]]

    def decode(entry):
        return FeatureConfig(table=tables[entry["table"]], name=entry["name"],
                             max_sequence_length=entry["max_sequence_length"],
                             validate_weights_and_indices=entry["validate_weights_and_indices"],
                             output_shape=entry["output_shape"])

    return _unstructure(config["features"], decode), _optimizer_from(config["optimizer"])
