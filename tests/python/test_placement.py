"""Sharding from Python: recemb.Placement, Embedding(placement=, communicator=), layer.placement,
rank / world_size, views and copies of the tables, and training that equals the unsharded layer's
(sharded_problem.py) in one process, across in-process ranks (threads) and under mpirun
(mpi_sharded_script.py)."""

import itertools

import numpy as np
import pytest

import recemb
import recemb.torch
import sharded_problem as problem
from mpi_jobs import needs_mpi, run_mpi_job
from recemb import _recemb

SEED = 20240611
STEPS = 3


@pytest.fixture(scope="module")
def reference():
    """The unsharded layer trained on the global batches, and its activations per step (read
    only)."""
    return problem.train_reference(SEED, STEPS)


def make_layer(**kwargs):
    features, optimizer = problem.make_features()
    return recemb.Embedding(features, optimizer, seed=SEED, num_threads=1, **kwargs)



run_ranks = problem.run_ranks


def expected_strategy(strategy, table):
    if strategy == "column_wise" and table in problem.COLUMN_WISE_OVERRIDES:
        return problem.COLUMN_WISE_OVERRIDES[table]
    return strategy


@pytest.mark.parametrize("strategy,num_shards", itertools.product(problem.STRATEGIES, [1, 2, 3, 4]))
def test_sharded_layer_trains_as_the_unsharded_one(reference, strategy, num_shards):
    layer = make_layer(placement=problem.placement(strategy, num_shards))
    plan = layer.placement
    assert plan.num_shards == num_shards and len(plan.shards) == num_shards
    assert [t.table for t in plan.tables] == layer.table_names
    for table in plan.tables:
        name = _recemb.sharding_strategy_name(table.strategy)
        assert name != "auto"
        if strategy != "auto":
            assert name == expected_strategy(strategy, table.table)
    history = problem.train_shard(layer, SEED, STEPS, 0, 1)
    assert problem.mismatches(layer, *reference[:1], history, reference[1], 0, 1) == []


@pytest.mark.parametrize("strategy,world_size,num_shards", [
    ("auto", 2, None), ("table_wise", 2, 2), ("row_wise", 2, 2), ("column_wise", 3, 3),
    ("replicated", 2, 2), ("row_wise", 2, 4), ("table_wise", 3, 2), ("replicated", 3, 2)])
def test_in_process_ranks_train_as_the_unsharded_layer(reference, strategy, world_size,
                                                       num_shards):
    def work(rank, communicator):
        layer = make_layer(communicator=communicator, placement=None if num_shards is None else
                           problem.placement(strategy, num_shards))
        history = problem.train_shard(layer, SEED, STEPS, rank, world_size)
        return (layer.rank, layer.world_size, layer.placement.num_shards,
                problem.mismatches(layer, reference[0], history, reference[1], rank,
                                   world_size))

    results = run_ranks(world_size, work)
    for rank, result in enumerate(results):
        if isinstance(result, Exception):
            raise result
        assert result[:3] == (rank, world_size, num_shards or world_size)
        assert result[3] == [], f"rank {rank}"


def test_placement_checks_its_arguments():
    valid = "valid names are 'auto', 'table_wise', 'row_wise', 'column_wise', 'replicated'"
    for bad in ["rows", "RowWise", "kRowWise"]:
        with pytest.raises(ValueError, match=f"strategy: unknown sharding strategy '{bad}'; "
                                             f"{valid}"):
            recemb.Placement(strategy=bad)
    for bad in [None, 1]:
        with pytest.raises(ValueError, match="strategy: expected a name"):
            recemb.Placement(strategy=bad)
    with pytest.raises(ValueError, match=r"table_strategies\['video'\]: unknown sharding"):
        recemb.Placement(table_strategies={"video": "by_row"})
    for bad in [True, 2.0, "2"]:
        with pytest.raises(ValueError, match="num_shards must be an int"):
            recemb.Placement(num_shards=bad)
    for bad in [0, -1, 65537]:  # the C++ planner checks the range when the layer is built
        with pytest.raises(ValueError, match=rf"num_shards must be in \[1, 65536\], got {bad}"):
            make_layer(placement=recemb.Placement(num_shards=bad))
    for bad in ["1", None]:
        with pytest.raises(ValueError, match=r"expected_lookups\['watched'\] must be a number"):
            recemb.Placement(expected_lookups={"watched": bad})
    for bad in [-1.0, float("nan"), float("inf")]:
        with pytest.raises(ValueError, match=r"expected_lookups\['watched'\]: must be finite "
                                             r"and >= 0"):
            make_layer(placement=recemb.Placement(expected_lookups={"watched": bad}))
    placement = recemb.Placement(num_shards=3, strategy="row_wise",
                                 table_strategies={"video": "replicated"},
                                 expected_lookups={"watched": 2})
    assert repr(placement) == ("Placement(num_shards=3, strategy='row_wise', table_strategies="
                               "{'video': 'replicated'}, expected_lookups={'watched': 2.0})")


def test_embedding_rejects_bad_placements_and_communicators():
    with pytest.raises(ValueError, match="table_strategies: no table named 'videos'"):
        make_layer(placement=recemb.Placement(num_shards=2,
                                              table_strategies={"videos": "row_wise"}))
    with pytest.raises(ValueError, match="expected_lookups.*'clicks'"):
        make_layer(placement=recemb.Placement(num_shards=2, expected_lookups={"clicks": 1.0}))
    with pytest.raises(ValueError, match="item"):  # RowwiseAdagrad needs whole rows
        make_layer(placement=recemb.Placement(num_shards=2, strategy="column_wise"))
    with pytest.raises(ValueError, match="placement must be None or a recemb.Placement"):
        make_layer(placement="row_wise")
    with pytest.raises(ValueError, match="communicator must be None, 'mpi' or a "):
        make_layer(communicator="tcp")
    with pytest.raises(recemb.InvalidArgument, match="size"):
        recemb.in_process_communicators(0)


def test_mpi_communicator_needs_an_mpi_build(monkeypatch):
    monkeypatch.setattr(_recemb, "mpi_available", lambda: False)
    with pytest.raises(RuntimeError, match=r"built without MPI \(recemb.mpi_available\(\) is "
                                           "False\\)"):
        make_layer(communicator="mpi")


def test_placement_text_and_plan():
    features, optimizer = problem.make_features()
    placement = recemb.Placement(num_shards=2, strategy="row_wise",
                                 table_strategies={features["user_id"].table: "replicated",
                                                   "item": "table_wise"},
                                 expected_lookups={"watched": 4.0})
    layer = recemb.Embedding(features, optimizer, placement=placement)
    plan = layer.placement
    text = str(plan)
    assert text == _recemb.format_placement(plan)
    lines = text.splitlines()
    assert lines[0].split()[0] == "shard" and lines[3].split()[0] == "total"
    rows = {(line.split()[0], line.split()[2]): line.split()[1] for line in lines[6:]}
    assert rows == {("query", "0"): "row_wise", ("query", "1"): "row_wise",
                    ("item", "0"): "table_wise", ("video", "0"): "row_wise",
                    ("video", "1"): "row_wise", ("user", "0"): "replicated",
                    ("user", "1"): "replicated"}
    video = plan.tables[layer.table_names.index("video")]
    assert video.strategy == _recemb.ShardingStrategy.kRowWise
    assert [(s.shard, s.rows, s.first_column, s.num_columns) for s in video.shards] == [
        (0, 25, 0, 8), (1, 25, 0, 8)]
    # watched (4 ids per example) and liked (1) look up video: 5 per example, half on each shard.
    assert [s.expected_lookups for s in video.shards] == [2.5, 2.5]
    assert sum(s.num_tables for s in plan.shards) == 7
    assert sum(s.bytes for s in plan.shards) == sum(
        shard.bytes for table in plan.tables for shard in table.shards)
    # The same plan as the bound planner's, from the engine's own configs.
    engine = layer._engine
    assert str(_recemb.plan_placement(engine.tables(), engine.features(),
                                      engine.options().optimizer,
                                      engine.options().placement)) == text
    # Without a placement: the automatic planner over one shard.
    default = make_layer().placement
    assert default.num_shards == 1
    assert {t.strategy for t in default.tables} == {_recemb.ShardingStrategy.kTableWise}


def test_rank_and_world_size():
    layer = make_layer()
    assert (layer.rank, layer.world_size) == (0, 1)
    local = recemb.local_communicator()
    assert (local.rank(), local.size(), local.name()) == (0, 1, "local")
    assert (make_layer(communicator=local).world_size, make_layer(communicator=None).rank) == (1, 0)
    group = recemb.in_process_communicators(3)
    assert [(c.rank(), c.size(), c.name()) for c in group] == [(r, 3, "in-process")
                                                               for r in range(3)]
    results = run_ranks(3, lambda rank, c: (make_layer(communicator=c).rank,
                                            make_layer(communicator=c).world_size))
    assert results == [(0, 3), (1, 3), (2, 3)]
    features, optimizer = problem.make_features()
    module = recemb.torch.Embedding(features, optimizer, communicator=local,
                                    placement=recemb.Placement(num_shards=2))
    assert (module.rank, module.world_size, module.placement.num_shards) == (0, 1, 2)


def shares(layer, table):
    return np.shares_memory(layer.embedding_tables[table], layer.embedding_tables[table])


def test_whole_tables_are_views_and_split_ones_copies():
    unsharded = make_layer()
    table_wise = make_layer(placement=recemb.Placement(num_shards=3, strategy="table_wise"))
    replicated = make_layer(placement=recemb.Placement(num_shards=2, strategy="replicated"))
    for layer in (unsharded, table_wise, replicated):  # this process holds every table whole
        for name in layer.table_names:
            assert shares(layer, name)
            slots = layer.slot_variables[name]
            assert all(np.shares_memory(v, layer.slot_variables[name][s]) for s, v in slots.items())
    row_wise = make_layer(placement=problem.placement("row_wise", 2))
    column_wise = make_layer(placement=problem.placement("column_wise", 2))
    for layer in (row_wise, column_wise):
        for name in layer.table_names:
            assert not shares(layer, name) and not layer._engine.has_whole_table(name)
            slots = layer.slot_variables[name]
            assert not any(np.shares_memory(v, layer.slot_variables[name][s])
                           for s, v in slots.items())
    # Copies hold the whole table, equal to the unsharded layer's (same seed, same initializers).
    for layer in (table_wise, replicated, row_wise, column_wise):
        for name in layer.table_names:
            np.testing.assert_array_equal(layer.embedding_tables[name],
                                          unsharded.embedding_tables[name])
            for slot, value in layer.slot_variables[name].items():
                np.testing.assert_array_equal(value, unsharded.slot_variables[name][slot])

    # A copy changes nothing until written back with assign_table.
    copy = row_wise.embedding_tables["video"]
    copy[3] = 7.0
    assert not (row_wise.embedding_tables["video"][3] == 7.0).any()
    row_wise.assign_table("video", copy)
    np.testing.assert_array_equal(row_wise.embedding_tables["video"], copy)
    accumulators = np.full((20,), 0.5, np.float32)  # RowWiseAdagrad: one per row
    row_wise.assign_variable("item", "accumulators", accumulators)
    np.testing.assert_array_equal(row_wise.slot_variables["item"]["accumulators"], accumulators)
    ids, weights = problem.global_batch(SEED, 0)
    ids, weights = problem.take_all(ids, 0, 2), problem.take_all(weights, 0, 2)
    acts = row_wise.lookup({**ids, "watched": np.full((2, 1), 3)}, {**weights, "watched": None})
    np.testing.assert_array_equal(acts["watched"], np.full((2, 8), 7.0, np.float32))
    # Checks still apply, and change nothing.
    with pytest.raises(ValueError, match="shape"):
        row_wise.assign_table("video", copy[:-1])
    with pytest.raises(ValueError, match="not finite"):
        row_wise.assign_table("video", np.full_like(copy, np.nan))
    np.testing.assert_array_equal(row_wise.embedding_tables["video"], copy)

    # A view sees later updates; assigning it to itself is allowed.
    view = unsharded.embedding_tables["video"]
    unsharded.assign_table("video", view)
    unsharded.assign_table("video", np.zeros_like(view))
    assert not view.any()


def test_views_and_copies_agree_across_ranks():
    """With several ranks a table is a view only where every rank holds it whole, so that every
    rank reads the same tables collectively (table-wise: one rank holds each table)."""
    def work(rank, communicator, placement):
        layer = make_layer(communicator=communicator, placement=placement)
        holds = {name: layer._engine.has_whole_table(name) for name in layer.table_names}
        views = {name: shares(layer, name) for name in layer.table_names}
        tables = {name: table.copy() for name, table in layer.embedding_tables.items()}
        layer.assign_table("user", np.arange(21, dtype=np.float32).reshape(7, 3))
        return holds, views, tables, layer.embedding_tables["user"]

    unsharded = make_layer()
    for placement, viewed in [(recemb.Placement(num_shards=2, strategy="table_wise"), False),
                              (recemb.Placement(num_shards=2, strategy="replicated"), True),
                              (recemb.Placement(num_shards=1, strategy="replicated"), False)]:
        results = run_ranks(2, lambda rank, c, p=placement: work(rank, c, p))
        for rank, result in enumerate(results):
            if isinstance(result, Exception):
                raise result
            holds, views, tables, user = result
            assert views == {name: viewed for name in views}, (placement, rank)
            if placement.strategy == "table_wise":
                assert any(holds.values()) and not all(holds.values())
            for name, table in tables.items():
                np.testing.assert_array_equal(table, unsharded.embedding_tables[name])
            # Each rank passed the same whole table, and reads it back whole.
            np.testing.assert_array_equal(user, np.arange(21).reshape(7, 3))


def test_errors_on_one_rank_raise_on_every_rank():
    """A check failing on one rank (in Python or in the engine) makes every rank raise, and
    nothing changes: no rank waits forever in the collective."""
    def work(rank, communicator):
        layer = make_layer(communicator=communicator, placement=problem.placement("row_wise", 2))
        before = layer.embedding_tables
        first, last = problem.example_range(rank, 2)
        ids, weights = problem.global_batch(SEED, 0)
        ids, weights = problem.take_all(ids, first, last), problem.take_all(weights, first, last)
        errors = []
        # In Python, on rank 1 only: a feature missing from the structure.
        bad = {k: v for k, v in ids.items() if k != "liked"} if rank == 1 else ids
        with pytest.raises(ValueError) as error:
            layer(bad, weights)
        errors.append(str(error.value))
        # In the engine, on rank 0 only: an id out of range.
        bad = {**ids, "user_id": np.where(np.arange(6) == 2, 99, ids["user_id"])} \
            if rank == 0 else ids
        with pytest.raises(ValueError) as error:
            layer(bad, weights)
        errors.append(str(error.value))
        activations = layer(ids, weights)
        # A gradient of the wrong shape, on rank 1 only (checked in Python).
        gradients = {name: np.ones_like(value) for name, value in activations.items()}
        if rank == 1:
            gradients["item"] = np.ones((1, 4), np.float32)
        with pytest.raises(ValueError) as error:
            layer.apply_gradients(gradients)
        errors.append(str(error.value))
        # Assigning a table of the wrong shape, on rank 0 only.
        with pytest.raises(ValueError) as error:
            layer.assign_table("user", np.zeros((7, 3 + (rank == 0)), np.float32))
        errors.append(str(error.value))
        after = layer.embedding_tables
        unchanged = all(np.array_equal(before[name], after[name]) for name in before)
        layer.apply_gradients({name: np.ones_like(value) for name, value in activations.items()})
        return errors, unchanged, layer.step

    results = run_ranks(2, work)
    for result in results:
        if isinstance(result, Exception):
            raise result
    (errors_0, unchanged_0, step_0), (errors_1, unchanged_1, step_1) = results
    assert unchanged_0 and unchanged_1 and step_0 == step_1 == 1
    assert "liked" in errors_1[0] and errors_0[0].startswith("rank 1: ")
    assert "id 99" in errors_0[1] and errors_1[1].startswith("rank 0: ") and "id 99" in errors_1[1]
    assert "gradient of shape (1, 4)" in errors_1[2] and errors_0[2].startswith("rank 1: ")
    assert "shape (7, 4)" in errors_0[3] and errors_1[3].startswith("rank 0: ")


def test_torch_module_shards_too():
    features, optimizer = problem.make_features()
    modules = [recemb.torch.Embedding(features, optimizer, seed=SEED, num_threads=1,
                                      placement=placement)
               for placement in (None, problem.placement("row_wise", 3))]
    for step in range(STEPS):
        ids, weights = problem.global_batch(SEED, step)
        for module in modules:
            out = module(ids, weights)
            loss = sum((value * (i + 1)).sum() for i, (_, value) in enumerate(sorted(out.items())))
            loss.backward()
    unsharded, sharded = modules
    for name, table in unsharded.embedding_tables.items():
        np.testing.assert_allclose(sharded.embedding_tables[name], table, rtol=problem.RTOL,
                                   atol=problem.ATOL)
    state = sharded.state_dict()
    assert set(state) == set(unsharded.state_dict())
    for key, value in unsharded.state_dict().items():
        np.testing.assert_allclose(state[key], value, rtol=problem.RTOL, atol=problem.ATOL)
    fresh = recemb.torch.Embedding(features, optimizer, placement=problem.placement("row_wise", 2))
    fresh.load_state_dict(state)
    for key, value in fresh.state_dict().items():
        np.testing.assert_array_equal(value, state[key])


@needs_mpi
@pytest.mark.parametrize("num_processes", [2, 4])
def test_mpi_ranks_train_as_the_unsharded_layer(num_processes):
    returncode, stdout, stderr, _ = run_mpi_job(num_processes, "mpi_sharded_script.py",
                                                timeout=120)
    assert returncode == 0, f"{stdout}\n{stderr}"
    for rank in range(num_processes):
        assert f"rank {rank} of {num_processes}: ok" in stdout, stdout
