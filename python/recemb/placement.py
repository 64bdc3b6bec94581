"""Placement: how an Embedding splits its tables into shards, and the communicators that spread the
shards over ranks (processes under MPI, or threads of this process).

    layer = recemb.Embedding(features, optimizer,
                             placement=recemb.Placement(num_shards=4, strategy="row_wise"))
    print(layer.placement)      # the plan: one line per shard, then one per table part

    # under `mpirun -np 4 python3 train.py`: every rank builds the same layer, passes its own batch
    layer = recemb.Embedding(features, optimizer, communicator="mpi")

Strategies (include/recemb/placement.h has the exact rules): "table_wise" (a table whole on one
shard), "row_wise" (row r on shard r % num_shards), "column_wise" (contiguous column ranges),
"replicated" (a full copy per shard, gradients all-reduced) and "auto" (the planner: tables bigger
or hotter than a fair share are row-wise, the others table-wise, balanced over the shards).
"""

import numbers
import os
import sys
import warnings

from recemb import _recemb


def _enum(parse, owner, name):
    """The C++ enumerator that `parse` (a bound parse_X function) finds for the name `name`;
    ValueError starting with `owner` for anything else (the C++ message lists the valid names)."""
    if not isinstance(name, str):
        raise ValueError(f"{owner}: expected a name (a str), got {name!r}")
    try:
        return parse(name)
    except ValueError as error:
        raise ValueError(f"{owner}: {error}") from None


def _strategy(owner, name):
    return _enum(_recemb.parse_sharding_strategy, owner, name)


class Placement:
    """How the tables of an Embedding are split into shards (C++ PlacementOptions).

    num_shards: the number of shards K, >= 1. With a communicator of N ranks, shard s lives on
        rank s % N; None of these settings changes what the layer computes (to float rounding).
    strategy: the strategy of every table not in table_strategies: "auto" (default),
        "table_wise", "row_wise", "column_wise" or "replicated".
    table_strategies: {table name or TableConfig: strategy}, overriding `strategy`.
    expected_lookups: {feature name: ids per example}, finite and >= 0 (features not named: 1);
        the planner balances the shards' lookups with them.

    Raises ValueError here for a value of the wrong type or an unknown strategy name, and when
    the Embedding is built for the others (num_shards < 1, a negative or non-finite rate, a table
    or feature the feature config does not have), naming the field.
    """

    def __init__(self, num_shards=1, strategy="auto", table_strategies=None,
                 expected_lookups=None):
        if isinstance(num_shards, bool) or not isinstance(num_shards, numbers.Integral):
            raise ValueError(f"Placement: num_shards must be an int, got {num_shards!r}")
        _strategy("Placement: strategy", strategy)
        table_strategies = dict(table_strategies or {})
        for table, name in table_strategies.items():
            _strategy(f"Placement: table_strategies[{table!r}]", name)
        expected_lookups = dict(expected_lookups or {})
        for feature, rate in expected_lookups.items():
            if isinstance(rate, bool) or not isinstance(rate, numbers.Real):
                raise ValueError(f"Placement: expected_lookups[{feature!r}] must be a number, "
                                 f"got {rate!r}")
        self.num_shards = int(num_shards)
        self.strategy = strategy
        self.table_strategies = table_strategies
        self.expected_lookups = {feature: float(rate) for feature, rate in
                                 expected_lookups.items()}

    def __repr__(self):
        return (f"Placement(num_shards={self.num_shards}, strategy={self.strategy!r}, "
                f"table_strategies={self.table_strategies!r}, "
                f"expected_lookups={self.expected_lookups!r})")

    def _to_cpp(self, resolved):
        """The C++ PlacementOptions, table keys resolved to names by `resolved` (a Resolved)."""
        try:
            table_strategies = {resolved.table_name(table): _recemb.parse_sharding_strategy(name)
                                for table, name in self.table_strategies.items()}
        except ValueError as error:
            raise ValueError(f"Placement: table_strategies: {error}") from None
        return _recemb.PlacementOptions(
            num_shards=self.num_shards, strategy=_strategy("Placement: strategy", self.strategy),
            table_strategies=table_strategies, expected_lookups=dict(self.expected_lookups))


def _cpp_communicator(value):
    """The C++ communicator for Embedding(communicator=value): None (this process alone), "mpi"
    (the ranks of mpirun) or a recemb.Communicator (e.g. from recemb.in_process_communicators).
    None in a process that an MPI launcher started among several warns (once per process): each
    would train a model of its own.
    """
    if value is None or isinstance(value, _recemb.Communicator):
        if value is None:
            _warn_if_launched_among_several()
        return value
    if isinstance(value, str) and value == "mpi":
        if not _recemb.mpi_available():
            raise RuntimeError("communicator='mpi': this recemb was built without MPI "
                               "(recemb.mpi_available() is False); rebuild it with "
                               "-DRECEMB_WITH_MPI=ON and an MPI library (libopenmpi-dev)")
        return _recemb.mpi_communicator()
    raise ValueError(f"communicator must be None, 'mpi' or a recemb.Communicator, got {value!r}")


_warned_launched_among_several = False


def _warn_if_launched_among_several():
    """The RuntimeWarning of a layer without a communicator in one of several processes an MPI
    launcher started (the rule `recemb train` follows to use MPI itself), the first time only."""
    global _warned_launched_among_several
    processes = _recemb.launched_processes()
    if processes <= 1 or _warned_launched_among_several:
        return
    _warned_launched_among_several = True
    warnings.warn(
        f"this process is one of {processes} that an MPI launcher (mpirun) started, but the "
        f"layer has no communicator: each process trains a model of its own on its own batches. "
        f"Pass communicator=\"mpi\" to train one model over all of them (docs/python.md, "
        f"\"Sharding and MPI\"), or communicator=recemb.local_communicator() if independent "
        f"models are what you want (no warning then)", RuntimeWarning,
        stacklevel=_stack_level_outside_recemb())


def _stack_level_outside_recemb():
    """The stacklevel that makes a warnings.warn in the function calling this one name the first
    frame outside the recemb package (the user's code that built the layer)."""
    package = os.path.dirname(os.path.abspath(__file__))
    level, frame = 2, sys._getframe(2)
    while frame is not None and os.path.dirname(
            os.path.abspath(frame.f_code.co_filename)) == package:
        level, frame = level + 1, frame.f_back
    return level
