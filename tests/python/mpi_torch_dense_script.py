"""One rank of the dense-gradient test (test_torch.py runs it under
`mpirun --allow-run-as-root --oversubscribe -np W /usr/bin/python3 mpi_torch_dense_script.py
PORT`), the recipe of docs/python.md ("Dense layers under mpirun").

Every rank trains a recemb.torch.Embedding (communicator="mpi": the tables are sharded over the
ranks) and a torch MLP on its slice of the global batches, its loss its share of the global loss
(the sum over its examples / the global batch size), and sums the MLP's gradients over the ranks
with torch.distributed (gloo, a TCP rendezvous at 127.0.0.1:PORT) before its torch optimizer's
step. It then checks that the MLP's parameters are bitwise the same on every rank, and that they
and the tables equal those of the same model trained in one process on the whole global batches
(to float rounding). Prints "rank R of W: ok" and exits 0, or prints every mismatch and exits 1.
"""

import sys

import numpy as np
import torch
import torch.distributed as dist

import recemb
import recemb.torch

SEED = 7
STEPS = 5
GLOBAL_BATCH = 24
TOLERANCE = 1e-5  # relative: sums over the ranks' examples round differently


def make_model(communicator):
    torch.manual_seed(SEED)  # the same initial MLP on every rank and in the reference
    table = recemb.TableConfig(vocabulary_size=50, dim=4, name="item")
    features = {"item": recemb.FeatureConfig(table, name="item")}
    embedding = recemb.torch.Embedding(features, recemb.optimizers.Adagrad(learning_rate=0.2),
                                       seed=SEED, num_threads=1, communicator=communicator)
    mlp = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    return embedding, mlp, torch.optim.SGD(mlp.parameters(), lr=0.5)


def global_batch(step):
    rng = np.random.default_rng([SEED, step])
    items = rng.integers(0, 50, size=(GLOBAL_BATCH, 3))
    labels = (items.sum(axis=1) % 3 == 0).astype(np.float32).reshape(-1, 1)
    return items, torch.from_numpy(labels)


def train_step(embedding, mlp, optimizer, items, labels, sync_dense):
    logits = mlp(embedding({"item": items})["item"])
    # This rank's share of the global loss: a sum over its examples / the global batch size.
    loss = torch.nn.functional.binary_cross_entropy_with_logits(
        logits, labels, reduction="sum") / GLOBAL_BATCH
    optimizer.zero_grad()
    loss.backward()  # also applies the embedding gradients of every rank (collective)
    if sync_dense:
        for parameter in mlp.parameters():
            dist.all_reduce(parameter.grad, op=dist.ReduceOp.SUM)
    optimizer.step()


def main():
    port = sys.argv[1]
    embedding, mlp, optimizer = make_model("mpi")
    rank, world_size = embedding.rank, embedding.world_size
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size)
    first, last = rank * GLOBAL_BATCH // world_size, (rank + 1) * GLOBAL_BATCH // world_size
    reference = make_model(recemb.local_communicator())
    for step in range(STEPS):
        items, labels = global_batch(step)
        train_step(embedding, mlp, optimizer, items[first:last], labels[first:last], True)
        train_step(*reference, items, labels, False)

    failures = []
    flat = torch.cat([parameter.detach().reshape(-1) for parameter in mlp.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world_size)]
    dist.all_gather(gathered, flat)
    for other, values in enumerate(gathered):
        if not torch.equal(values, flat):
            failures.append(f"the MLP's parameters of rank {other} differ from rank {rank}'s")
    reference_flat = torch.cat([parameter.detach().reshape(-1)
                                for parameter in reference[1].parameters()])
    if not torch.allclose(flat, reference_flat, rtol=TOLERANCE, atol=1e-7):
        failures.append(f"the MLP differs from the one-process run by "
                        f"{(flat - reference_flat).abs().max().item()}")
    tables = embedding.embedding_tables  # collective: the whole tables on every rank
    reference_tables = reference[0].embedding_tables
    if not torch.allclose(tables["item"], reference_tables["item"], rtol=TOLERANCE, atol=1e-7):
        failures.append(f"the table differs from the one-process run by "
                        f"{(tables['item'] - reference_tables['item']).abs().max().item()}")
    if embedding.step != STEPS:
        failures.append(f"the embedding step counter is {embedding.step}, expected {STEPS}")
    dist.destroy_process_group()
    for failure in failures:
        print(f"rank {rank}: {failure}", flush=True)
    print(f"rank {rank} of {world_size}: {'ok' if not failures else 'FAILED'}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
