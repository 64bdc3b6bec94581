"""One rank of an MPI job (tests/python/test_checkpoint_sharded.py runs it under mpirun): trains
the sharded problem row-wise on every rank, saves collectively into argv[1], restores into a
fresh column-wise layer (other initial values) and checks that the tables, slots and step are
bit for bit those saved, and that one process loads the same checkpoint with the same values.
Two of the tables are 16-bit (float16, bfloat16): their rows are saved as they are by the ranks
holding them and read back into the other placement.
Prints "rank R of W: ok", or the mismatches and exits 1."""

import sys

import numpy as np

import recemb
import sharded_problem as problem

SEED = 20240611
STEPS = 2


def state_of(layer):
    tables = {name: np.array(value) for name, value in layer.embedding_tables.items()}
    slots = {(name, slot): np.array(value) for name, table_slots in layer.slot_variables.items()
             for slot, value in table_slots.items()}
    return tables, slots, layer.step


def differences(a, b):
    found = [] if a[2] == b[2] else [f"step {a[2]} != {b[2]}"]
    for part in (0, 1):
        for key in a[part]:
            if a[part][key].tobytes() != b[part][key].tobytes():
                found.append(str(key))
    return found


def main():
    root = sys.argv[1]
    features, optimizer = problem.make_features(sixteen_bit=True)
    layer = recemb.Embedding(features, optimizer, seed=SEED, num_threads=1,
                             placement=problem.placement("row_wise", 4), communicator="mpi")
    rank, world_size = layer.rank, layer.world_size
    problem.train_shard(layer, SEED, STEPS, rank, world_size)
    path = layer.save(root)
    saved = state_of(layer)

    restored = recemb.Embedding(features, optimizer, seed=SEED + 1, num_threads=1,
                                placement=problem.placement("column_wise", world_size),
                                communicator="mpi")
    step = restored.restore(root)
    found = differences(state_of(restored), saved)
    if step != STEPS:
        found.append(f"restore returned step {step}")
    # One process alone (no communicator) reads the same checkpoint.
    alone = recemb.Embedding(features, optimizer, seed=SEED + 2, num_threads=1)
    alone.restore(path)
    found += [f"alone: {name}" for name in differences(state_of(alone), saved)]
    if found:
        print(f"rank {rank} of {world_size}: mismatches {found}", flush=True)
        sys.exit(1)
    print(f"rank {rank} of {world_size}: ok", flush=True)


if __name__ == "__main__":
    main()
