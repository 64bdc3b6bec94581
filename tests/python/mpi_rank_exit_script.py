"""One rank of the MPI jobs of test_mpi_jobs.py, run under
`mpirun --allow-run-as-root --oversubscribe -np 2 /usr/bin/python3 mpi_rank_exit_script.py CASE`.

Every rank trains a row-wise sharded layer with communicator="mpi" for a few steps; rank 1 then
does what CASE says:

  raise          raises an uncaught RuntimeError at step 2 (a bug in the dense model)
  sys_exit_1     calls sys.exit(1) at step 2
  system_exit_7  raises SystemExit(7) at step 2
  exit_0         calls sys.exit(0) at step 2, skipping the steps the other ranks make
  exit_0_caught  as exit_0, but rank 0 catches the errors of its steps, printing "rank 0: step T:
                 <message>", and carries on
  busy           (rank 0, not 1) computes for 5 s after the last step; every rank exits 0
  agreement      fails a check made in Python (float ids, a gradient of the wrong shape, a
                 missing feature, through recemb.Embedding and recemb.torch.Embedding), alone;
                 every rank prints "rank R: <case>: <error type>: <message>", then every rank
                 makes a good step and prints "rank R: steps after the errors: <step>"

Rank 0 prints "rank 0: done" at the end.
"""

import sys
import time

import numpy as np

import recemb

BATCH = 16
STEPS = 5


def features():
    table = recemb.TableConfig(vocabulary_size=100, dim=8, name="t")
    return {"a": recemb.FeatureConfig(table=table), "b": recemb.FeatureConfig(table=table)}


def inputs(step):
    rng = np.random.default_rng(step)
    return {"a": rng.integers(0, 100, BATCH), "b": rng.integers(0, 100, BATCH)}


def make_layer(module):
    return module.Embedding(features(), optimizer="sgd", placement=recemb.Placement(
        num_shards=2, strategy="row_wise"), communicator="mpi")


def step(layer, ids):
    activations = layer(ids)
    layer.apply_gradients({name: np.ones_like(value) for name, value in activations.items()})


def leave_early(case):
    if case == "raise":
        raise RuntimeError("a bug in the dense model of rank 1")
    if case == "sys_exit_1":
        sys.exit(1)
    if case == "system_exit_7":
        raise SystemExit(7)
    if case in ("exit_0", "exit_0_caught"):
        sys.exit(0)


def report(rank, case, call):
    try:
        call()
        print(f"rank {rank}: {case}: no error", flush=True)
    except (ValueError, RuntimeError) as error:
        print(f"rank {rank}: {case}: {type(error).__name__}: {error}", flush=True)


def agreement(layer):
    """The checks made in Python failing on rank 1 only (see the top of the file)."""
    rank = layer.rank
    ids = inputs(0)
    bad = dict(ids)
    if rank == 1:
        bad["a"] = bad["a"].astype(np.float64)
    report(rank, "float ids", lambda: layer(bad))
    activations = layer(ids)
    gradients = {name: np.ones_like(value) for name, value in activations.items()}
    if rank == 1:
        gradients["b"] = np.ones((3, 3), np.float32)
    report(rank, "gradient shape", lambda: layer.apply_gradients(gradients))
    layer.apply_gradients({name: np.ones_like(value) for name, value in activations.items()})
    missing = {"a": ids["a"]} if rank == 1 else ids
    report(rank, "missing feature", lambda: layer(missing))
    try:
        import torch
        import recemb.torch
    except ImportError:
        return
    torch_layer = make_layer(recemb.torch)
    tensors = {name: torch.from_numpy(value) for name, value in ids.items()}
    bad = dict(tensors)
    if rank == 1:
        bad["a"] = bad["a"].double()
    report(rank, "torch float ids", lambda: torch_layer(bad))
    missing = {"a": tensors["a"]} if rank == 1 else tensors
    report(rank, "torch missing feature", lambda: torch_layer(missing))
    torch_layer(tensors)["a"].sum().backward()


def main():
    case = sys.argv[1]
    layer = make_layer(recemb)
    rank = layer.rank
    for t in range(STEPS):
        if rank == 1 and t == 2:
            leave_early(case)
        try:
            step(layer, inputs(t))
        except RuntimeError as error:
            if case != "exit_0_caught":
                raise
            print(f"rank {rank}: step {t}: {error}", flush=True)
    if case == "agreement":
        agreement(layer)
        step(layer, inputs(STEPS))
        print(f"rank {rank}: steps after the errors: {layer.step}", flush=True)
    if case == "busy" and rank == 0:
        time.sleep(5)
    if rank == 0:
        print("rank 0: done", flush=True)


if __name__ == "__main__":
    main()
