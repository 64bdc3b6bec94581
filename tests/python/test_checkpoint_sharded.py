"""layer.save / layer.restore under several ranks (collective; in-process ranks as threads, and
under mpirun through mpi_checkpoint_script.py): a checkpoint saved at one placement and rank
count restores at another with tables, slots and step bit for bit, training then continues as the
unsharded layer's (to 1e-5), and a damaged file fails every rank naming it; export and copies,
which need one process, say what to do instead."""

import errno
import os

import numpy as np
import pytest

import recemb
import sharded_problem as problem
from mpi_jobs import needs_mpi, run_mpi_job

SEED = 20240611
SAVED_AT, STEPS = 2, 4



run_ranks = problem.run_ranks


def make_layer(placement, communicator, seed=SEED):
    features, optimizer = problem.make_features()
    return recemb.Embedding(features, optimizer, seed=seed, num_threads=1, placement=placement,
                            communicator=communicator)


def state_of(layer):
    """Every table and slot (whole; collective) and the step."""
    tables = {name: np.array(value) for name, value in layer.embedding_tables.items()}
    slots = {(name, slot): np.array(value) for name, table_slots in layer.slot_variables.items()
             for slot, value in table_slots.items()}
    return tables, slots, layer.step


def assert_bitwise(a, b):
    assert a[2] == b[2]
    for part in (0, 1):
        assert a[part].keys() == b[part].keys()
        for key in a[part]:
            assert a[part][key].tobytes() == b[part][key].tobytes(), key


def values_of(results):
    for rank, result in enumerate(results):
        if isinstance(result, Exception):
            raise AssertionError(f"rank {rank}") from result
    return results


# (ranks, strategy or None for the default, shards)
SETUPS = {
    "whole": (1, None, None),
    "rows4_in1": (1, "row_wise", 4),
    "rows4_on2": (2, "row_wise", 4),
    "columns3_on3": (3, "column_wise", 3),
    "replicated_on2": (2, "replicated", 2),
    "tables2_on2": (2, "table_wise", 2),
}


def placement_of(setup):
    _, strategy, shards = setup
    return None if strategy is None else problem.placement(strategy, shards)


@pytest.mark.parametrize("saved,restored", [("whole", "rows4_on2"), ("rows4_on2", "whole"),
                                            ("columns3_on3", "replicated_on2"),
                                            ("replicated_on2", "rows4_in1"),
                                            ("rows4_in1", "tables2_on2"),
                                            ("tables2_on2", "columns3_on3")])
def test_a_checkpoint_moves_between_placements_and_rank_counts(tmp_path, saved, restored):
    reference, _ = problem.train_reference(SEED, STEPS)
    saved_setup, restored_setup = SETUPS[saved], SETUPS[restored]

    def save(rank, communicator):
        layer = make_layer(placement_of(saved_setup), communicator)
        problem.train_shard(layer, SEED, SAVED_AT, rank, saved_setup[0])
        path = layer.save(tmp_path, keep_last=1)
        return path, state_of(layer)

    saved_results = values_of(run_ranks(saved_setup[0], save))
    for path, state in saved_results:
        assert path == saved_results[0][0] and path.name == f"ckpt-{SAVED_AT:012d}"
        assert_bitwise(state, saved_results[0][1])

    def restore(rank, communicator):
        layer = make_layer(placement_of(restored_setup), communicator, seed=SEED + 1)
        assert layer.restore(tmp_path) == SAVED_AT
        restored_state = state_of(layer)
        # The rest of the global batches, steps SAVED_AT.. (train_shard counts steps from 0).
        first, last = problem.example_range(rank, restored_setup[0])
        for step in range(SAVED_AT, STEPS):
            ids, weights = problem.global_batch(SEED, step)
            activations = layer(problem.take_all(ids, first, last),
                                problem.take_all(weights, first, last))
            global_activations = {name: np.empty((problem.BATCH, *a.shape[1:]), np.float32)
                                  for name, a in activations.items()}
            layer.apply_gradients(problem.take_all(
                problem.gradients(SEED, step, global_activations), first, last))
        return restored_state, state_of(layer)

    for restored_state, final in values_of(run_ranks(restored_setup[0], restore)):
        assert_bitwise(restored_state, saved_results[0][1])
        expected = state_of(reference)
        assert final[2] == expected[2] == STEPS
        for part in (0, 1):
            for key in expected[part]:
                np.testing.assert_allclose(final[part][key], expected[part][key], rtol=1e-5,
                                           atol=1e-6, err_msg=str(key))


def test_a_damaged_file_fails_every_rank_naming_it(tmp_path):
    layer = make_layer(None, None)
    problem.train_shard(layer, SEED, 1, 0, 1)
    checkpoint = layer.save(tmp_path)
    victim = sorted(name for name in os.listdir(checkpoint) if name.startswith("t"))[0]
    data = bytearray((checkpoint / victim).read_bytes())
    data[len(data) // 2] ^= 0x40
    (checkpoint / victim).write_bytes(bytes(data))

    def restore(rank, communicator):
        other = make_layer(problem.placement("row_wise", 2), communicator, seed=SEED + 1)
        before = state_of(other)
        with pytest.raises(recemb.DataLoss) as error:
            other.restore(checkpoint)
        assert_bitwise(state_of(other), before)
        return str(error.value)

    messages = values_of(run_ranks(2, restore))
    assert messages[0] == messages[1]
    assert victim in messages[0] and "is damaged" in messages[0]


def test_saving_an_existing_step_fails_every_rank(tmp_path):
    def save_twice(rank, communicator):
        layer = make_layer(problem.placement("row_wise", 2), communicator)
        layer.save(tmp_path)
        with pytest.raises(RuntimeError, match="rank 0: a checkpoint of step 0 already exists"):
            layer.save(tmp_path)

    values_of(run_ranks(2, save_twice))
    assert sorted(os.listdir(tmp_path)) == ["ckpt-000000000000"]


def test_a_file_system_error_is_the_same_os_error_on_every_rank(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_bytes(b"x")

    def save_into_a_file(rank, communicator):
        layer = make_layer(problem.placement("row_wise", 2), communicator)
        with pytest.raises(NotADirectoryError, match="rank 0: ") as error:
            layer.save(a_file)
        return error.value.errno

    assert values_of(run_ranks(2, save_into_a_file)) == [errno.ENOTDIR, errno.ENOTDIR]


def test_export_and_copies_of_several_ranks_say_what_to_do_instead(tmp_path):
    def export_and_copy(rank, communicator):
        import copy

        layer = make_layer(problem.placement("row_wise", 2), communicator)
        with pytest.raises(RuntimeError, match=r"export: the layer spans 2 ranks; save a "
                                               r"checkpoint \(layer.save\), restore it into a "
                                               r"layer in one process and export that"):
            layer.export(tmp_path / "model.recemb")
        with pytest.raises(RuntimeError, match="a layer sharded over 2 ranks cannot be copied or "
                                               "pickled: save a checkpoint"):
            copy.deepcopy(layer)
        return rank

    assert values_of(run_ranks(2, export_and_copy)) == [0, 1]
    assert list(tmp_path.iterdir()) == []


@needs_mpi
@pytest.mark.parametrize("num_processes", [2, 3])
def test_mpi_ranks_save_and_restore_collectively(tmp_path, num_processes):
    returncode, stdout, stderr, _ = run_mpi_job(num_processes, "mpi_checkpoint_script.py",
                                                str(tmp_path), timeout=120)
    assert returncode == 0, f"{stdout}\n{stderr}"
    for rank in range(num_processes):
        assert f"rank {rank} of {num_processes}: ok" in stdout, stdout
