"""The tables of an Embedding as arrays: the static tables' variables (views of the engine's
memory or gathered copies) and the dynamic tables' keys, rows and slots (recemb.Embedding's
methods for them, kept here as a base class of it)."""

from __future__ import annotations

from typing import Optional, Union

import numpy as np

from recemb.config import TableConfig
from recemb.inputs import ArrayLike, float32_array, id_array

# A table given by name or TableConfig.
TableKey = Union[str, TableConfig]



def dynamic_contents(keys: np.ndarray, parameters: np.ndarray, slots, dim: int
                     ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """A dynamic table's flat contents from the engine (keys [n], parameters [n * dim], [(slot,
    values [n * width])]) in the layout read_dynamic_table returns: rows [n, dim], each slot
    [n, dim], or [n] when row-wise."""
    n = keys.size
    # A slot has dim or 1 floats per key; without keys its width is unknown: [0, dim].
    return keys, parameters.reshape(n, dim), {
        slot: values.reshape((n,) if n and values.size == n else (n, values.size // n if n
                                                                   else dim))
        for slot, values in slots}

class _Tables(dict):
    """A dict keyed by table name that also accepts the table's TableConfig as a key."""

    def __init__(self, items, resolved):
        super().__init__(items)
        self._resolved = resolved

    def _key(self, key):
        return self._resolved.table_name(key) if isinstance(key, TableConfig) else key

    def __getitem__(self, key):
        name = self._key(key)
        if not super().__contains__(name):
            raise KeyError(f"no table named {key!r}; the tables are {list(self)}")
        return super().__getitem__(name)

    def __contains__(self, key):
        return super().__contains__(self._key(key)) if not isinstance(key, TableConfig) else (
            key in self._resolved.tables)

    def get(self, key, default=None):
        return self[key] if key in self else default


def _viewable_tables(engine, resolved):
    """{table name: whether its variables are views of the engine's memory (else copies)}. A
    table is a view where this rank holds it whole, but with several ranks only where every rank
    does (from the plan: shard s is on rank s % world_size), so that all ranks read the same
    tables collectively."""
    world_size = engine.world_size()
    plan = {table.table: table for table in engine.placement().tables}
    views = {}
    for table, name in zip(resolved.tables, resolved.table_names):
        if table.vocabulary is not None:  # keys, not rows
            views[name] = False
            continue
        holders = {shard.shard % world_size for shard in plan[name].shards
                   if shard.rows == table.vocabulary_size and shard.num_columns == table.dim}
        views[name] = engine.has_whole_table(name) and len(holders) == world_size
    return views



class _TableAccess:
    """Embedding's calls on whole tables; uses the layer's _engine, _lock, _views, _resolved and
    _checked."""

    def _variable(self, table, variable):
        """A whole variable as float32: a view of the engine's memory for a table in self._views
        (but a 16-bit table's rows), else a copy (read_variable: collective with several ranks;
        a 16-bit table's values widened exactly)."""
        shape = self._engine.variable_shape(table, variable)
        if self._float32_view(table, variable):
            return self._engine.variable_data(table, variable).reshape(shape)
        copy = np.empty(shape, dtype=np.float32)
        with self._lock:
            self._engine.read_variable(table, variable, copy)
        return copy

    def _dtype(self, table):
        """The rows' type of the table named `table` ("float32", "bfloat16" or "float16")."""
        return self._resolved.tables[self._resolved.table_names.index(table)].dtype

    def _float32_view(self, table, variable):
        """Whether the variable is a float32 array of the engine's memory (a table in
        self._views, but not a 16-bit table's rows)."""
        return self._views[table] and not (variable == "parameters" and
                                           self._dtype(table) != "float32")

    def _half_rows(self, table):
        """A 16-bit table's rows as it stores them, a uint16 array [vocabulary_size, dim] of
        bfloat16 or float16 bit patterns sharing the engine's memory, for a table in
        self._views; None otherwise (read _variable's float32 copy)."""
        if not self._views[table]:
            return None
        shape = self._engine.variable_shape(table, "parameters")
        return self._engine.half_parameter_data(table).reshape(shape)

    def _static_table_names(self):
        return [name for name, table in zip(self._resolved.table_names, self._resolved.tables)
                if table.vocabulary is None]

    def _dynamic_table_names(self):
        return [name for name, table in zip(self._resolved.table_names, self._resolved.tables)
                if table.vocabulary is not None]

    @property
    def embedding_tables(self) -> dict[str, np.ndarray]:
        """{table name: float32 array [vocabulary_size, dim]} (a TableConfig works as a key too)
        of the static tables (a dynamic table has keys, not rows: see read_dynamic_table).

        A table this rank holds whole (every table of an unsharded layer) is a view sharing
        memory with the engine: reads see every later update; writes through it are allowed
        between calls and are not validated (assign_table validates). Any other table (split
        into shards; with several ranks, unless every rank holds it whole) is a copy of the whole
        table, gathered from its shards: write it back with assign_table. A 16-bit table
        (TableConfig dtype) is always a float32 copy, its values widened exactly (numpy has no
        bfloat16; recemb.torch gives the table in its own type). With several ranks
        this is collective: every rank reads the property, in the same order as its other calls.
        """
        return _Tables({name: self._variable(name, "parameters")
                        for name in self._static_table_names()}, self._resolved)

    @property
    def slot_variables(self) -> dict[str, dict[str, np.ndarray]]:
        """{table name: {slot name: float32 array}} (TF's slot names, e.g. "accumulators") of
        the static tables: views or copies as embedding_tables (collective with several
        ranks)."""
        return _Tables({name: {slot: self._variable(name, slot)
                               for slot in self._engine.variable_names(name)[1:]}
                        for name in self._static_table_names()}, self._resolved)

    def variable_names(self, table: TableKey) -> list[str]:
        """"parameters" (the table), then the table's slots."""
        return self._engine.variable_names(self._resolved.table_name(table))

    def assign_table(self, table: TableKey, values: ArrayLike) -> None:
        """Copies `values` (shape [vocabulary_size, dim], finite) into the table."""
        self.assign_variable(table, "parameters", values)

    def assign_variable(self, table: TableKey, variable: str, values: ArrayLike) -> None:
        """Copies `values` (the variable's shape, finite) into a table or slot variable; raises
        ValueError (changing nothing) on a wrong shape or a non-finite value. The whole variable,
        whatever the placement: with several ranks every rank passes the whole variable (each
        keeps the parts it holds), and the call is collective."""
        def checked_arguments():
            name = self._resolved.table_name(table)
            array = float32_array(values, f"table '{name}' variable '{variable}'")
            shape = tuple(self._engine.variable_shape(name, variable))
            if array.shape != shape:
                raise ValueError(f"table '{name}' variable '{variable}': shape {array.shape}, "
                                 f"expected {shape}")
            return name, array

        with self._lock:
            name, array = self._checked(checked_arguments)
            if self._float32_view(name, variable) and np.may_share_memory(
                    array, self._engine.variable_data(name, variable)):
                if self._engine.world_size() == 1:
                    return  # the variable itself: nothing to copy
                array = array.copy()  # every rank still takes part in the collective write
            self._engine.write_variable(name, variable, array)

    def vocabulary_stats(self, table: TableKey) -> dict[str, int]:
        """A dynamic table's keys: {"size": keys held now, "inserted": keys admitted,
        "evicted": keys removed (TTL or when_full), "not_admitted_lookups": occurrences in
        training lookups of keys that had no row}, the last three since the layer was built (or
        restored). Raises RuntimeError (recemb.FailedPrecondition) for a static table, or one
        split over ranks (every part of it must be on this rank)."""
        stats = self._engine.vocabulary_stats(self._resolved.table_name(table))
        return {field: getattr(stats, field) for field in stats._fields}

    def read_dynamic_table(self, table: TableKey) -> tuple[np.ndarray, np.ndarray,
                                                           dict[str, np.ndarray]]:
        """A dynamic table's contents, copied: (keys, rows, slots): keys int64 [n] in increasing
        order, rows float32 [n, dim] (row i is key i's), slots {slot name: float32 [n, dim], or
        [n] for a row-wise slot} (the shapes of the static tables' slot_variables). Collective
        with several ranks (gathered from every rank). Raises RuntimeError
        (recemb.FailedPrecondition) for a static table."""
        name = self._resolved.table_name(table)
        with self._lock:
            contents = self._engine.read_dynamic_table(name)
        return dynamic_contents(*contents, dim=self._table_config(name).dim)

    def _table_config(self, name):
        return self._resolved.tables[self._resolved.table_names.index(name)]

    def write_dynamic_table(self, table: TableKey, keys: ArrayLike, rows: ArrayLike,
                            slots: Optional[dict[str, ArrayLike]] = None) -> None:
        """Replaces a dynamic table's keys, rows and slots with those given, in the layout
        read_dynamic_table returns (keys int64 [n] strictly increasing, rows [n, dim], every slot
        of the table's optimizer by name; slots may be None for a table without one), each key
        counted as seen once at the current step. Raises ValueError, changing nothing, for keys
        out of order, wrong shapes, missing or unknown slots, non-finite values or more keys than
        the table holds; RuntimeError (recemb.FailedPrecondition) for a static table or while a
        training lookup is not applied yet. With several ranks every rank passes the same
        contents (collective)."""
        name = self._resolved.table_name(table)
        owner = f"write_dynamic_table: table '{name}'"
        key_array = id_array(f"{owner}: keys", keys, ndim=1).astype(np.int64, copy=False)
        n = key_array.size
        dim = self._table_config(name).dim
        row_array = float32_array(rows, f"{owner}: rows")
        if row_array.shape != (n, dim):
            raise ValueError(f"{owner}: rows of shape {row_array.shape}, expected {(n, dim)} "
                             f"({n} keys)")
        slot_names = self._engine.variable_names(name)[1:]
        given = {} if slots is None else dict(slots)
        if sorted(given) != sorted(slot_names):
            raise ValueError(f"{owner}: slots {sorted(given)}, expected the optimizer's "
                             f"{slot_names}")
        slot_arrays = []
        for slot in slot_names:
            array = float32_array(given[slot], f"{owner}: slot '{slot}'")
            if array.ndim not in (1, 2) or array.shape[0] != n:
                raise ValueError(f"{owner}: slot '{slot}' of shape {array.shape}, expected "
                                 f"[{n}, ...] ({n} keys)")
            slot_arrays.append((slot, array))
        with self._lock:
            self._engine.write_dynamic_table(name, key_array, row_array, slot_arrays)
