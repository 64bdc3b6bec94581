"""One rank of the MPI test (test_placement.py runs it under
`mpirun --allow-run-as-root --oversubscribe -np W /usr/bin/python3 mpi_sharded_script.py`).

Every rank trains, for several placements, a layer with communicator="mpi" on its slice of the
global batches (rank r: examples [r * B / W, (r + 1) * B / W)), and an unsharded layer of its own
on the whole global batches; it compares its activations with the unsharded layer's slice, and the
whole tables and slots (read collectively) with the unsharded layer's. Prints "rank R of W: ok"
and exits 0, or prints every mismatch and exits 1. Every rank makes the same collective calls
whatever it finds, so a mismatch never leaves another rank waiting.
"""

import os
import sys
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import recemb  # noqa: E402
import sharded_problem as problem  # noqa: E402

SEED = 31337
STEPS = 4


def placements(world_size):
    """(description, recemb.Placement or None) of every run."""
    yield "default (auto over one shard per rank)", None
    for strategy in problem.STRATEGIES:
        yield strategy, problem.placement(strategy, world_size)
    yield "row_wise over 2W shards", problem.placement("row_wise", 2 * world_size)
    yield "table_wise over 1 shard", problem.placement("table_wise", 1)
    yield "mixed", recemb.Placement(
        num_shards=world_size, strategy="table_wise",
        table_strategies={"video": "row_wise", "query": "column_wise", "user": "replicated"})


def error_agreement(features, optimizer):
    """Failures of a check made in Python on the last rank only, while a prefetch is pending:
    every rank must raise (the others "rank W-1: ..."), and the prefetch completes after."""
    layer = recemb.Embedding(features, optimizer, seed=SEED, num_threads=1, communicator="mpi")
    rank, world_size = layer.rank, layer.world_size
    first, last = problem.example_range(rank, world_size)
    ids, weights = problem.global_batch(SEED, 0)
    ids, weights = problem.take_all(ids, first, last), problem.take_all(weights, first, last)
    batch = layer.prefetch(ids, weights)
    activations = layer.finish_lookup(batch)
    pending = layer.prefetch(ids, weights)
    gradients = {name: np.ones_like(value) for name, value in activations.items()}
    if rank == world_size - 1:
        gradients["item"] = np.ones((1, 4), np.float32)
    failures = []
    try:
        layer.apply_gradients(gradients, batch)
        failures.append("error agreement: apply_gradients did not raise")
    except ValueError as error:
        prefix = "" if rank == world_size - 1 else f"rank {world_size - 1}: "
        if not str(error).startswith(prefix) or "gradient of shape (1, 4)" not in str(error):
            failures.append(f"error agreement: unexpected message {error}")
    layer.finish_lookup(pending)
    layer.apply_gradients({name: np.ones_like(value) for name, value in activations.items()},
                          pending)
    if layer.step != 1:
        failures.append(f"error agreement: step {layer.step} after one apply_gradients")
    return failures


def main():
    if not recemb.mpi_available():
        print("recemb was built without MPI", flush=True)
        return 1
    reference, reference_history = problem.train_reference(SEED, STEPS)
    failures = []
    rank = world_size = None
    features, optimizer = problem.make_features()
    for description, placement in placements(recemb.mpi_communicator().size()):
        layer = recemb.Embedding(features, optimizer, seed=SEED, num_threads=1,
                                 placement=placement, communicator="mpi")
        rank, world_size = layer.rank, layer.world_size
        history = problem.train_shard(layer, SEED, STEPS, rank, world_size)
        failures += [f"{description}: {message}" for message in problem.mismatches(
            layer, reference, history, reference_history, rank, world_size)]
    failures += error_agreement(features, optimizer)
    for failure in failures:
        print(f"rank {rank} of {world_size}: {failure}", flush=True)
    if failures:
        return 1
    print(f"rank {rank} of {world_size}: ok", flush=True)
    return 0


if __name__ == "__main__":
    try:
        status = main()
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        # Without MPI_Finalize (an exit handler, a barrier the other ranks may never reach):
        # mpirun sees this rank end abnormally and ends the job.
        os._exit(1)
    sys.exit(status)
