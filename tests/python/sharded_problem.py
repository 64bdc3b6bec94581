"""The problem the sharding tests train (test_placement.py and mpi_sharded_script.py): tables of
several optimizers and sizes, features of every input layout, random global batches from a fixed
seed, and the slice of a global batch that one rank passes (rank r of W gets examples
[r * B / W, (r + 1) * B / W))."""

import threading

import numpy as np

import recemb
from random_inputs import make_input

BATCH = 12  # the global batch: divisible by every world size the tests use (1, 2, 3, 4)
RTOL, ATOL = 1e-5, 1e-6

# Every strategy name of recemb.Placement. "column_wise" cannot split the RowWiseAdagrad table
# (its update needs whole rows): COLUMN_WISE_OVERRIDES keeps that table row-wise.
STRATEGIES = ["auto", "table_wise", "row_wise", "column_wise", "replicated"]
COLUMN_WISE_OVERRIDES = {"item": "row_wise"}


def make_features(sixteen_bit=False):
    """(feature config, global optimizer). "user" has fewer columns (3) than some shard counts and
    few rows (7), so that column-wise and row-wise plans leave shards out. sixteen_bit: "query" is
    float16 and "item" bfloat16 (docs/semantics.md, "16-bit tables")."""
    video = recemb.TableConfig(50, 8, name="video", combiner="mean")  # the global Adagrad
    user = recemb.TableConfig(7, 3, name="user", combiner="sum",
                              optimizer=recemb.optimizers.Adam(learning_rate=0.05))
    query = recemb.TableConfig(30, 5, name="query", combiner="sqrtn",
                               optimizer=recemb.optimizers.FTRL(learning_rate=0.2),
                               dtype="float16" if sixteen_bit else "float32")
    item = recemb.TableConfig(20, 4, name="item", combiner="sum",
                              optimizer=recemb.optimizers.RowWiseAdagrad(learning_rate=0.1),
                              dtype="bfloat16" if sixteen_bit else "float32")
    features = {
        "watched": recemb.FeatureConfig(video),
        "liked": recemb.FeatureConfig(video),
        "user_id": recemb.FeatureConfig(user),
        "terms": recemb.FeatureConfig(query),
        "history": recemb.FeatureConfig(query, max_sequence_length=3),
        "item": recemb.FeatureConfig(item),
    }
    return features, recemb.optimizers.Adagrad(learning_rate=0.1)


def placement(strategy, num_shards):
    return recemb.Placement(
        num_shards=num_shards, strategy=strategy,
        table_strategies=COLUMN_WISE_OVERRIDES if strategy == "column_wise" else None)


def global_batch(seed, step):
    """(features, weights) of one global batch of BATCH examples, the same on every rank."""
    rng = np.random.default_rng([seed, step])
    layouts = {"watched": ("dense2", 50, np.int64, True), "liked": ("ragged", 50, np.int32, True),
               "user_id": ("dense1", 7, np.int64, False), "terms": ("sparse", 30, np.int64, True),
               "history": ("sparse", 30, np.int32, False), "item": ("ragged", 20, np.int64, False)}
    features, weights = {}, {}
    for name, (kind, vocabulary_size, dtype, weighted) in layouts.items():
        ids, w, _ = make_input(rng, kind, vocabulary_size, BATCH, dtype, weighted,
                               width=3 if name == "history" else 4)
        features[name] = ids
        weights[name] = w
    return features, weights


def gradients(seed, step, activations):
    """Random gradients shaped as the global batch's activations."""
    rng = np.random.default_rng([seed, step, 1])
    return {name: rng.normal(size=value.shape).astype(np.float32)
            for name, value in sorted(activations.items())}


def example_range(rank, world_size):
    return rank * BATCH // world_size, (rank + 1) * BATCH // world_size


def take(value, first, last):
    """Examples [first, last) of one feature's ids, weights, activation or gradient."""
    if value is None:
        return None
    if isinstance(value, recemb.Ragged):
        splits = value.row_splits
        return recemb.Ragged(value.values[splits[first]:splits[last]],
                             splits[first:last + 1] - splits[first])
    if isinstance(value, recemb.Sparse):
        rows = value.indices[:, 0]
        keep = (rows >= first) & (rows < last)
        indices = value.indices[keep].copy()
        indices[:, 0] -= first
        return recemb.Sparse(indices, value.values[keep],
                             (last - first, *value.dense_shape[1:]))
    return value[first:last]


def take_all(values, first, last):
    return {name: take(value, first, last) for name, value in values.items()}


def train_reference(seed, steps):
    """The unsharded layer trained on the global batches: (layer, activations of each step)."""
    features, optimizer = make_features()
    layer = recemb.Embedding(features, optimizer, seed=seed, num_threads=1)
    history = []
    for step in range(steps):
        ids, weights = global_batch(seed, step)
        activations = layer(ids, weights)
        layer.apply_gradients(gradients(seed, step, activations))
        history.append(activations)
    return layer, history


def train_shard(layer, seed, steps, rank, world_size):
    """Trains `layer` (one rank's) on its slices of the global batches; its activations per step."""
    first, last = example_range(rank, world_size)
    history = []
    for step in range(steps):
        ids, weights = global_batch(seed, step)
        activations = layer(take_all(ids, first, last), take_all(weights, first, last))
        # The gradients of the global batch, sliced: each rank draws them all, as the data loader
        # of a data-parallel job would.
        global_activations = {name: np.empty((BATCH, *a.shape[1:]), np.float32)
                              for name, a in activations.items()}
        layer.apply_gradients(take_all(gradients(seed, step, global_activations), first, last))
        history.append(activations)
    return history


def mismatches(layer, reference, history, reference_history, rank, world_size):
    """Every difference beyond RTOL / ATOL between a rank's layer and the unsharded one: its
    activations against the reference's slice, then the whole tables and slots (collective)."""
    first, last = example_range(rank, world_size)
    found = []

    def compare(what, actual, expected):
        try:
            np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL)
        except AssertionError as error:
            found.append(f"{what}: {error}")

    for step, (mine, theirs) in enumerate(zip(history, reference_history)):
        for name in theirs:
            compare(f"step {step} activation '{name}'", mine[name], take(theirs[name], first, last))
    tables, slots = layer.embedding_tables, layer.slot_variables
    for name, expected in reference.embedding_tables.items():
        compare(f"table '{name}'", tables[name], expected)
        for slot, value in reference.slot_variables[name].items():
            compare(f"table '{name}' slot '{slot}'", slots[name][slot], value)
    if layer.step != reference.step:
        found.append(f"step {layer.step}, expected {reference.step}")
    return found


def run_ranks(world_size, work, timeout=60):
    """Runs work(rank, communicator) on one thread per rank of an in-process group (for one rank:
    on this thread, with communicator None); returns each rank's result or raised exception.
    Fails (rather than hangs) if a rank does not finish."""
    if world_size == 1:
        try:
            return [work(0, None)]
        except Exception as error:  # noqa: BLE001 - handed to the test
            return [error]
    communicators = recemb.in_process_communicators(world_size)
    results = [None] * world_size

    def run(rank):
        try:
            results[rank] = work(rank, communicators[rank])
        except Exception as error:  # noqa: BLE001 - handed to the test
            results[rank] = error

    threads = [threading.Thread(target=run, args=(rank,), daemon=True)
               for rank in range(world_size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    assert not any(thread.is_alive() for thread in threads), "a rank is stuck in a collective"
    return results
