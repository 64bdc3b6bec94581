"""An Embedding's state as named arrays: "<table>.<variable>" for the static tables' variables
(the table as "parameters", then its slots), "<table>.keys" / ".parameters" / slots for the
dynamic tables (read_dynamic_table's arrays), and "step": exactly the variables of a recemb
checkpoint. recemb.torch's state_dict and recemb.keras's saved weights are these arrays."""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from recemb.inputs import float32_array


def _variables(layer, prefix):
    """{key: (table, variable)} of the static tables' variables."""
    return {f"{prefix}{name}.{variable}": (name, variable)
            for name in layer._static_table_names()
            for variable in layer.variable_names(name)}


def _dynamic_entries(layer, prefix):
    """{table: {part: key}} of the dynamic tables: "keys", "parameters" and each slot."""
    return {name: {part: f"{prefix}{name}.{part}"
                   for part in ["keys"] + layer.variable_names(name)}
            for name in layer._dynamic_table_names()}


def state_keys(layer, prefix: str = "") -> set[str]:
    """The keys of state_arrays(layer, prefix), without reading any table."""
    keys = set(_variables(layer, prefix))
    keys.update(key for parts in _dynamic_entries(layer, prefix).values()
                for key in parts.values())
    return keys | {prefix + "step"}


def state_arrays(layer, prefix: str = "",
                 table_of: Optional[Callable[[str], Any]] = None) -> dict[str, Any]:
    """The layer's state: views of the static variables where the engine holds them whole
    (copies otherwise, as embedding_tables), copies of the dynamic tables, and "step" (a 0-d
    int64 array). table_of(name), when given, gives a static table's "parameters" instead (a
    binding's tensor of the table in its own type)."""
    arrays = {key: (table_of(name) if table_of is not None and variable == "parameters"
                    else layer._variable(name, variable))
              for key, (name, variable) in _variables(layer, prefix).items()}
    for name, keys in _dynamic_entries(layer, prefix).items():
        table_keys, rows, slots = layer.read_dynamic_table(name)
        for part, values in {"keys": table_keys, "parameters": rows, **slots}.items():
            arrays[keys[part]] = values
    arrays[prefix + "step"] = np.array(layer.step, dtype=np.int64)
    return arrays


def load_state_arrays(layer, arrays: Any, prefix: str = "",
                      to_numpy: Callable[[Any], Any] = np.asarray, strict: bool = True,
                      complete: bool = False) -> tuple[list[str], list[str], list[str]]:
    """Writes state_arrays' entries of `arrays` (a mapping; values converted by to_numpy) into
    the layer, all or nothing. Returns (missing keys, unexpected keys (when strict: those under
    `prefix` that the layer does not have), errors); when there are errors nothing was changed.
    A missing entry leaves its variable as it was; with `complete`, a missing or unexpected entry
    changes nothing at all (the caller wants the whole state or none)."""
    expected = _variables(layer, prefix)
    dynamic = _dynamic_entries(layer, prefix)
    step_key = prefix + "step"
    missing, unexpected, errors, updates = [], [], [], []
    for key, (name, variable) in expected.items():
        if key not in arrays:
            missing.append(key)
            continue
        values = float32_array(to_numpy(arrays[key]))
        shape = tuple(layer._engine.variable_shape(name, variable))
        if values.shape != shape:
            errors.append(f"size mismatch for {key}: copying a param with shape {values.shape} "
                          f"from checkpoint, the shape in current model is {shape}.")
        elif not np.isfinite(values).all():
            errors.append(f"{key}: holds non-finite values")
        else:
            updates.append((name, variable, values))
    dynamic_updates = {}
    for name, keys in dynamic.items():
        absent = [key for key in keys.values() if key not in arrays]
        missing.extend(absent)
        if not absent:
            parts = {part: to_numpy(arrays[key]) for part, key in keys.items()}
            dynamic_updates[name] = (parts.pop("keys"), parts.pop("parameters"), parts)
    if step_key not in arrays:
        missing.append(step_key)
    if strict:
        known = set(expected) | {key for keys in dynamic.values() for key in keys.values()}
        unexpected.extend(key for key in arrays if key.startswith(prefix) and
                          key not in known and key != step_key)
    if errors or (complete and (missing or unexpected)):
        return missing, unexpected, errors
    error = _write_dynamic_tables(layer, dynamic_updates)
    if error is not None:
        return missing, unexpected, [error]
    for name, variable, values in updates:
        layer.assign_variable(name, variable, values)
    if step_key in arrays:
        layer.step = int(to_numpy(arrays[step_key]))
    return missing, unexpected, []


def _write_dynamic_tables(layer, contents) -> Optional[str]:
    """Writes {table: (keys, rows, slots)} into the dynamic tables, all or none: returns None, or
    the message of the first table's ValueError after writing back what the tables held."""
    before = {name: layer.read_dynamic_table(name) for name in contents}
    written = []
    for name, (keys, rows, slots) in contents.items():
        try:
            layer.write_dynamic_table(name, keys, rows, slots)
        except ValueError as error:
            for done in written:
                layer.write_dynamic_table(done, *before[done])
            return str(error)
        written.append(name)
    return None
