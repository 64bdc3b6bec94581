"""Dynamic vocabularies from Python and recemb.torch: configs, string ids, the stats / read / write
API, and training steps compared with a plain dict-of-rows reference (below, written for clarity
from docs/semantics.md, "Dynamic vocabularies"; it shares nothing with the engine)."""

import copy
import math
import pickle
import re
import zlib
from collections import defaultdict

import numpy as np
import pytest

import recemb
from reference import gains

# ---------------------------------------------------------------------------------------------
# The reference: one dynamic table as a dict of rows.


class DynamicTableReference:
    """A dynamic table in float64: key -> row (list), its optimizer slot, occurrence count and
    last-seen step, the occurrence counts of keys without a row, and the stats.

    Rows start as RowId(offset) gives them: every value offset + key. SGD: w -= lr * g. Adagrad:
    a += g^2; w -= lr * g / sqrt(a), a starting at initial_accumulator_value."""

    def __init__(self, dim, vocabulary, optimizer, offset):
        self.dim = dim
        self.capacity = vocabulary.capacity
        self.min_count = vocabulary.min_count
        self.ttl_steps = vocabulary.ttl_steps
        self.when_full = vocabulary.when_full
        self.optimizer = optimizer  # ("sgd", lr) or ("adagrad", lr, initial accumulator)
        self.offset = offset
        self.rows = {}
        self.accumulators = {}
        self.count = {}
        self.last_seen = {}
        self.pending = defaultdict(int)  # occurrences of keys without a row
        self.stats = {"size": 0, "inserted": 0, "evicted": 0, "not_admitted_lookups": 0}

    def row(self, key):
        """What a lookup reads: the key's row, or zeros for a key without one."""
        return self.rows.get(key, [0.0] * self.dim)

    def _remove(self, key):
        for table in (self.rows, self.accumulators, self.count, self.last_seen):
            del table[key]
        self.stats["evicted"] += 1

    def training_lookup(self, keys, step):
        """Counts every occurrence of `keys` (all of one training lookup's keys of the table),
        admits the keys whose count reaches min_count, evicting to make room. Raises
        RuntimeError, changing nothing, when_full="error" and full."""
        occurrences = {}
        for key in keys:
            occurrences[key] = occurrences.get(key, 0) + 1
        admitted = [key for key in occurrences if key not in self.rows and
                    self.pending[key] + occurrences[key] >= self.min_count]
        excess = len(self.rows) + len(admitted) - self.capacity
        if excess > 0:
            if self.when_full == "error":
                raise RuntimeError("full")
            if self.when_full == "evict_least_recent":
                order = lambda k: (self.last_seen[k], self.count[k], k)  # noqa: E731
            else:
                order = lambda k: (self.count[k], self.last_seen[k], k)  # noqa: E731
            candidates = sorted((k for k in self.rows if k not in occurrences), key=order)
            for key in candidates[:excess]:
                self._remove(key)
        for key, n in occurrences.items():
            if key in self.rows:
                self.count[key] += n
                self.last_seen[key] = step
            elif key in admitted:
                self.rows[key] = [float(self.offset + key)] * self.dim
                self.accumulators[key] = [self.optimizer[2] if self.optimizer[0] == "adagrad"
                                          else 0.0] * self.dim
                self.count[key] = self.pending.pop(key, 0) + n
                self.last_seen[key] = step
                self.stats["inserted"] += 1
            else:
                self.pending[key] += n
                self.stats["not_admitted_lookups"] += n
        self.stats["size"] = len(self.rows)

    def apply_gradients(self, gradients, step):
        """gradients: {key: summed gradient row} of the keys the lookup touched; keys without a
        row take no update. Then the TTL removes keys last seen before step - ttl_steps + 1."""
        for key, g in gradients.items():
            if key not in self.rows:
                continue
            w = self.rows[key]
            if self.optimizer[0] == "sgd":
                self.rows[key] = [w[d] - self.optimizer[1] * g[d] for d in range(self.dim)]
            else:
                a = [self.accumulators[key][d] + g[d] ** 2 for d in range(self.dim)]
                self.accumulators[key] = a
                self.rows[key] = [w[d] - self.optimizer[1] * g[d] / math.sqrt(a[d])
                                  for d in range(self.dim)]
        if self.ttl_steps is not None:
            for key in [k for k in self.rows if self.last_seen[k] < step - self.ttl_steps + 1]:
                self._remove(key)
        self.stats["size"] = len(self.rows)


def reference_bags(dense_ids, dense_weights, ragged_rows):
    """The bags (lists of (key, weight)) of the two features of make_layer's config."""
    dense = [list(zip(row, weights)) for row, weights in zip(dense_ids.tolist(),
                                                                dense_weights.tolist())]
    ragged = [[(key, 1.0) for key in row] for row in ragged_rows]
    return {"clicks": dense, "visits": ragged}


# ---------------------------------------------------------------------------------------------
# The layer under test and its random inputs.

DIM = 3
OFFSET = 0.25


def make_layer(vocabulary, combiner, optimizer, num_threads=1):
    optimizers = {"sgd": lambda o: recemb.optimizers.SGD(learning_rate=o[1]),
                  "adagrad": lambda o: recemb.optimizers.Adagrad(
                      learning_rate=o[1], initial_accumulator_value=o[2])}
    table = recemb.TableConfig(dim=DIM, name="user", combiner=combiner, vocabulary=vocabulary,
                               initializer=recemb.initializers.RowId(offset=OFFSET))
    features = {"clicks": recemb.FeatureConfig(table, name="clicks"),
                "visits": recemb.FeatureConfig(table, name="visits")}
    return recemb.Embedding(features, optimizers[optimizer[0]](optimizer), num_threads=num_threads)


def random_batch(rng, batch=3, bag=2, low=-15, high=15):
    """Dense [batch, bag] ids with weights, and ragged rows of 0..3 ids, keys in [low, high):
    at most 15 distinct keys a step, of 30."""
    dense = rng.integers(low, high, size=(batch, bag))
    weights = rng.uniform(0.5, 2.0, size=(batch, bag)).astype(np.float32)
    ragged = [rng.integers(low, high, size=rng.integers(0, 4)).tolist() for _ in range(batch)]
    return dense, weights, ragged


def layer_inputs(dense, weights, ragged):
    return ({"clicks": dense, "visits": recemb.Ragged.from_lists(ragged)},
            {"clicks": weights, "visits": None})


SETTINGS = [
    # (capacity, min_count, ttl_steps, when_full): admission, TTL and both eviction orders (a
    # capacity of 16 holds the keys of one step, not those of all steps).
    (1000, 1, None, "evict_least_recent"),
    (1000, 2, None, "evict_least_recent"),
    (1000, 1, 2, "evict_least_recent"),
    (16, 1, None, "evict_least_recent"),
    (16, 2, 3, "evict_least_frequent"),
    (16, 1, None, "evict_least_frequent"),
]
OPTIMIZERS = [("sgd", 0.5), ("adagrad", 0.3, 0.1)]


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
@pytest.mark.parametrize("optimizer", OPTIMIZERS, ids=lambda o: o[0])
@pytest.mark.parametrize("setting", SETTINGS, ids=str)
def test_training_matches_the_dict_reference(setting, optimizer, combiner):
    capacity, min_count, ttl_steps, when_full = setting
    vocabulary = recemb.DynamicVocabulary(capacity=capacity, min_count=min_count,
                                          ttl_steps=ttl_steps, when_full=when_full)
    layer = make_layer(vocabulary, combiner, optimizer)
    reference = DynamicTableReference(DIM, vocabulary, optimizer, OFFSET)
    rng = np.random.default_rng(zlib.crc32(repr((setting, optimizer, combiner)).encode()))
    for step in range(1, 9):
        dense, weights, ragged = random_batch(rng)
        inputs, input_weights = layer_inputs(dense, weights, ragged)
        # A pure lookup first: it reads the rows as they are and changes nothing.
        bags = reference_bags(dense, weights, ragged)
        before = dict(reference.stats)
        evaluation = layer(inputs, input_weights, training=False)
        assert layer.vocabulary_stats("user") == before
        for name, feature_bags in bags.items():
            expected = [[sum(g * reference.row(key)[d] for (key, _), g in
                             zip(bag, gains(bag, combiner)))
                         for d in range(DIM)] for bag in feature_bags]
            np.testing.assert_allclose(evaluation[name], expected, rtol=1e-5, atol=1e-6)
        # The training lookup: admission and eviction first, then the rows of this step.
        activations = layer(inputs, input_weights)
        reference.training_lookup([key for name in ("clicks", "visits")
                                   for bag in bags[name] for key, _ in bag], step)
        gradients = {}
        summed = defaultdict(lambda: [0.0] * DIM)
        for name, feature_bags in bags.items():
            expected = [[sum(g * reference.row(key)[d] for (key, _), g in
                             zip(bag, gains(bag, combiner)))
                         for d in range(DIM)] for bag in feature_bags]
            np.testing.assert_allclose(activations[name], expected, rtol=1e-5, atol=1e-6,
                                       err_msg=f"step {step} feature {name}")
            gradient = rng.normal(size=(len(feature_bags), DIM)).astype(np.float32)
            gradients[name] = gradient
            for b, bag in enumerate(feature_bags):
                for (key, _), g in zip(bag, gains(bag, combiner)):
                    summed[key] = [summed[key][d] + g * float(gradient[b, d])
                                   for d in range(DIM)]
        layer.apply_gradients(gradients)
        reference.apply_gradients(summed, step)
        assert layer.vocabulary_stats("user") == reference.stats, f"step {step}"
        keys, rows, slots = layer.read_dynamic_table("user")
        assert keys.dtype == np.int64 and keys.tolist() == sorted(reference.rows), f"step {step}"
        np.testing.assert_allclose(
            rows, np.reshape([reference.rows[k] for k in keys.tolist()], (-1, DIM)), rtol=1e-5,
            atol=1e-6, err_msg=f"step {step}")
        if optimizer[0] == "adagrad":
            np.testing.assert_allclose(
                slots["accumulators"],
                np.reshape([reference.accumulators[k] for k in keys.tolist()], (-1, DIM)),
                rtol=1e-5, err_msg=f"step {step}")
        else:
            assert slots == {}
    assert reference.stats["inserted"] > 0
    if capacity < 1000 or ttl_steps is not None:
        assert reference.stats["evicted"] > 0  # the setting exercises eviction
    if min_count > 1:
        assert reference.stats["not_admitted_lookups"] > 0


def run_steps(num_threads, steps=5, seed=5):
    """The contents of a layer after a few training steps (TruncatedNormal rows, eviction)."""
    table = recemb.TableConfig(dim=8, name="user", vocabulary=recemb.DynamicVocabulary(
        capacity=40, min_count=2, ttl_steps=3))
    layer = recemb.Embedding(recemb.FeatureConfig(table, name="f"),
                             recemb.optimizers.Adagrad(learning_rate=0.1),
                             num_threads=num_threads, seed=11)
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        ids = rng.integers(-2**62, 2**62, size=(16, 2)) // (2**57)  # of 64 keys
        activations = layer(ids)
        layer.apply_gradients(rng.normal(size=activations.shape).astype(np.float32))
    return layer.read_dynamic_table("user"), layer.vocabulary_stats("user")


def test_results_are_bitwise_identical_for_any_thread_count():
    (keys, rows, slots), stats = run_steps(1)
    for threads in (2, 3):
        (keys_t, rows_t, slots_t), stats_t = run_steps(threads)
        assert stats_t == stats
        np.testing.assert_array_equal(keys_t, keys)
        np.testing.assert_array_equal(rows_t, rows)
        np.testing.assert_array_equal(slots_t["accumulators"], slots["accumulators"])
    assert stats["evicted"] > 0 and stats["not_admitted_lookups"] > 0


def test_a_new_key_gets_a_row_from_seed_and_key_alone():
    def first_rows(ids):
        table = recemb.TableConfig(dim=4, name="t", vocabulary=recemb.DynamicVocabulary(100))
        layer = recemb.Embedding(recemb.FeatureConfig(table, name="f"), "sgd", seed=3)
        layer(np.array(ids))
        layer.apply_gradients(None)
        keys, rows, _ = layer.read_dynamic_table("t")
        return dict(zip(keys.tolist(), rows.tolist()))

    one = first_rows([5, -7, 2**63 - 1, 9])
    other = first_rows([9, 2**63 - 1, 123, -7, 5])
    for key in (5, -7, 2**63 - 1, 9):
        assert one[key] == other[key]
    assert len({tuple(row) for row in other.values()}) == 5  # different keys, different rows


def test_any_int64_value_is_a_key():
    extremes = np.array([-2**63, -1, 0, 1, 2**63 - 1], dtype=np.int64)
    table = recemb.TableConfig(dim=2, name="t", initializer=1.5,
                               vocabulary=recemb.DynamicVocabulary(capacity=8))
    layer = recemb.Embedding(recemb.FeatureConfig(table, name="f"), "sgd")
    assert layer(extremes[::-1].copy(), training=False).tolist() == [[0.0, 0.0]] * 5
    layer(extremes[::-1].copy())
    layer.apply_gradients(None)
    keys, rows, _ = layer.read_dynamic_table("t")
    assert keys.tolist() == extremes.tolist()
    assert rows.tolist() == [[1.5, 1.5]] * 5
    for dtype in (np.int32, np.uint8, np.int16):  # other integer types are keys too
        assert layer(np.array([1, 0], dtype), training=False).tolist() == [[1.5, 1.5]] * 2


def test_when_full_error_raises_and_changes_nothing():
    table = recemb.TableConfig(dim=2, name="t", vocabulary=recemb.DynamicVocabulary(
        capacity=3, when_full="error"))
    layer = recemb.Embedding(recemb.FeatureConfig(table, name="f"), "sgd")
    layer(np.array([1, 2, 3]))
    layer.apply_gradients(np.ones((3, 2), np.float32))
    before = layer.read_dynamic_table("t"), layer.vocabulary_stats("t"), layer.step
    with pytest.raises(RuntimeError, match=r"table 't'.*capacity"):
        layer(np.array([1, 4]))
    keys, rows, _ = layer.read_dynamic_table("t")
    np.testing.assert_array_equal(keys, before[0][0])
    np.testing.assert_array_equal(rows, before[0][1])
    assert layer.vocabulary_stats("t") == before[1] and layer.step == before[2]
    layer(np.array([1, 3]))  # known keys still train
    layer.apply_gradients(None)


def placement_run(placement=None, communicator=None, rank=0, world_size=1, steps=4):
    """Trains a layer with a dynamic table (min_count 2, TTL; capacity for every key, so that no
    part fills up) on global batches of string and int ids, this rank passing its half; returns
    the layer and its activations per step."""
    table = recemb.TableConfig(dim=5, name="user", combiner="sqrtn", vocabulary=recemb.
                               DynamicVocabulary(capacity=200, min_count=2, ttl_steps=2))
    features = {"names": recemb.FeatureConfig(table, name="names"),
                "ids": recemb.FeatureConfig(table, name="ids")}
    layer = recemb.Embedding(features, recemb.optimizers.Adagrad(learning_rate=0.2), seed=6,
                             num_threads=1, placement=placement, communicator=communicator)
    rng = np.random.default_rng(12)
    words = np.array([f"w{i}" for i in range(30)])
    first, last = rank * 4 // world_size, (rank + 1) * 4 // world_size
    history = []
    for _ in range(steps):
        names = words[rng.integers(0, 30, size=(4, 3))]
        ids = rng.integers(-2**63, 2**63 - 1, size=(4, 2), dtype=np.int64) // 2**59  # 32 keys
        gradients = {name: rng.normal(size=(4, 5)).astype(np.float32) for name in features}
        activations = layer({"names": names[first:last], "ids": ids[first:last]})
        layer.apply_gradients({name: g[first:last] for name, g in gradients.items()})
        history.append(activations)
    return layer, history


@pytest.mark.parametrize("strategy", ["table_wise", "row_wise", "column_wise", "replicated"])
def test_sharded_dynamic_table_trains_as_the_unsharded_one(strategy):
    reference, expected = placement_run()
    layer, history = placement_run(recemb.Placement(num_shards=3, strategy=strategy))
    for step, (mine, theirs) in enumerate(zip(history, expected)):
        for name in theirs:
            np.testing.assert_allclose(mine[name], theirs[name], rtol=1e-5, atol=1e-6,
                                       err_msg=f"step {step} feature {name}")
    assert layer.vocabulary_stats("user") == reference.vocabulary_stats("user")
    keys, rows, slots = layer.read_dynamic_table("user")
    want_keys, want_rows, want_slots = reference.read_dynamic_table("user")
    np.testing.assert_array_equal(keys, want_keys)
    np.testing.assert_allclose(rows, want_rows, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(slots["accumulators"], want_slots["accumulators"], rtol=1e-5)
    assert reference.vocabulary_stats("user")["evicted"] > 0


def test_in_process_ranks_train_a_dynamic_table_as_one_process():
    import threading

    _, expected = placement_run()
    communicators = recemb.in_process_communicators(2)
    results = [None, None]

    def work(rank):
        try:
            results[rank] = placement_run(recemb.Placement(num_shards=2, strategy="row_wise"),
                                          communicators[rank], rank, 2)[1]
        except Exception as error:  # noqa: BLE001 - raised by the test below
            results[rank] = error

    threads = [threading.Thread(target=work, args=(rank,), daemon=True) for rank in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for rank, history in enumerate(results):
        if isinstance(history, Exception) or history is None:
            raise AssertionError(f"rank {rank}: {history!r}")
        for step, (mine, theirs) in enumerate(zip(history, expected)):
            for name in theirs:
                np.testing.assert_allclose(mine[name], theirs[name][rank * 2:rank * 2 + 2],
                                           rtol=1e-5, atol=1e-6,
                                           err_msg=f"rank {rank} step {step} feature {name}")


# ---------------------------------------------------------------------------------------------
# String ids.


def sanity_buffer(size):
    """xxHash's sanity-test buffer (xxhsum's BMK_fillTestBuffer)."""
    out = bytearray()
    generator = 2654435761
    for _ in range(size):
        out.append(generator >> 56)
        generator = (generator * 11400714785074694797) % 2**64
    return bytes(out)


def signed(value):
    return value - 2**64 if value >= 2**63 else value


def test_string_key_is_xxh3_64_seed_0_as_a_signed_int64():
    # XXH3_64bits(sanity buffer prefix, seed 0), xxHash's own test vectors.
    known = {0: 0x2D06800538D394C2, 1: 0xC44BDFF4074EECDB, 6: 0x27B56A84CD2D7325,
             12: 0xA713DAF0DFBB77E7, 24: 0xA3FE70BF9D3510EB, 195: 0xCD94217EE362EC3A}
    buffer = sanity_buffer(200)
    for size, value in known.items():
        assert recemb.string_key(buffer[:size]) == signed(value), size
    assert recemb.string_key("") == 0x2D06800538D394C2
    assert recemb.string_key("héllo, 世界") == recemb.string_key("héllo, 世界".encode())
    with pytest.raises(ValueError, match="int, not a str or bytes"):
        recemb.string_key(5)


def test_string_arrays_and_lists_map_like_their_elements():
    words = ["ann", "bob", "", "héllo", "世界", "x" * 40]
    expected = [recemb.string_key(w) for w in words]
    encoded = [w.encode() for w in words]
    assert recemb.string_keys(np.array(words)).tolist() == expected              # U
    assert recemb.string_keys(np.array(words, dtype=object)).tolist() == expected
    assert recemb.string_keys(np.array(encoded)).tolist() == expected            # S
    assert recemb.string_keys(np.array(encoded, dtype=object)).tolist() == expected
    grid = np.array(words).reshape(2, 3)
    assert recemb.string_keys(grid.T).tolist() == np.array(expected).reshape(2, 3).T.tolist()
    mixed = np.array(["a", b"b", "c"], dtype=object)
    assert recemb.string_keys(mixed).tolist() == [recemb.string_key(v) for v in ("a", "b", "c")]


def string_layer(**options):
    table = recemb.TableConfig(dim=4, name="user", vocabulary=recemb.DynamicVocabulary(
        capacity=100), initializer="truncated_normal")
    features = {"dense": recemb.FeatureConfig(table, name="dense"),
                "ragged": recemb.FeatureConfig(table, name="ragged"),
                "sparse": recemb.FeatureConfig(table, name="sparse")}
    return recemb.Embedding(features, recemb.optimizers.Adagrad(learning_rate=0.2), seed=4,
                            **options)


def test_string_ids_train_as_their_keys():
    names = np.array([["ann", "bob"], ["cy", "ann"]])
    rows = [["dee", "ann", "eve"], [], ["bob"]]
    sparse_values = [b"fay", b"ann", b"cy"]
    by_string = string_layer()
    by_key = string_layer()
    key = recemb.string_key
    string_inputs = {"dense": names, "ragged": recemb.Ragged.from_lists(rows),
                     "sparse": recemb.Sparse([[0, 0], [0, 1], [1, 0]], sparse_values, (2, 2))}
    key_inputs = {"dense": recemb.string_keys(names),
                  "ragged": recemb.Ragged.from_lists([[key(w) for w in row] for row in rows]),
                  "sparse": recemb.Sparse([[0, 0], [0, 1], [1, 0]],
                                          [key(w) for w in sparse_values], (2, 2))}
    rng = np.random.default_rng(2)
    for _ in range(3):
        got = by_string(string_inputs)
        want = by_key(key_inputs)
        for name in got:
            np.testing.assert_array_equal(got[name], want[name])
        gradients = {name: rng.normal(size=a.shape).astype(np.float32)
                     for name, a in got.items()}
        by_string.apply_gradients(gradients)
        by_key.apply_gradients(gradients)
    # A prefetched lookup hashes its strings at once and keeps the keys until finish_lookup.
    batch = by_string.prefetch(string_inputs)
    got = by_string.finish_lookup(batch)
    want = by_key(key_inputs, training=False)
    for name in got:
        np.testing.assert_array_equal(got[name], want[name])
    by_string.apply_gradients(None, batch)
    keys, table, slots = by_string.read_dynamic_table("user")
    assert sorted(keys.tolist()) == sorted({key(w) for w in ["ann", "bob", "cy", "dee", "eve",
                                                               "fay"]})
    by_key(key_inputs)
    by_key.apply_gradients(None)
    np.testing.assert_array_equal(table, by_key.read_dynamic_table("user")[1])
    # Lists of str (and object arrays mixing str and bytes) work as dense ids too.
    np.testing.assert_array_equal(
        by_string({"dense": [["ann", "bob"]], "ragged": recemb.Ragged.from_lists([["cy"]]),
                   "sparse": recemb.Sparse([[0, 0]], np.array([b"fay"], dtype=object), (1, 2))},
                  training=False)["dense"],
        by_key({"dense": recemb.string_keys(np.array([["ann", "bob"]])),
                "ragged": recemb.Ragged.from_lists([[key("cy")]]),
                "sparse": recemb.Sparse([[0, 0]], [key(b"fay")], (1, 2))},
               training=False)["dense"])


# ---------------------------------------------------------------------------------------------
# Configs, state and bad input.


def test_dynamic_vocabulary_config_and_repr():
    vocabulary = recemb.DynamicVocabulary(capacity=10, min_count=2, ttl_steps=5,
                                          when_full="evict_least_frequent")
    table = recemb.TableConfig(dim=16, name="user", vocabulary=vocabulary)
    assert table.vocabulary_size is None and table.vocabulary is vocabulary
    assert repr(table).startswith(
        "TableConfig(vocabulary=DynamicVocabulary(capacity=10, min_count=2, ttl_steps=5, "
        "when_full='evict_least_frequent'), dim=16,")
    default = recemb.DynamicVocabulary(7)
    assert (default.min_count, default.ttl_steps, default.when_full) == (
        1, None, "evict_least_recent")
    assert repr(recemb.TableConfig(5, 2)).startswith("TableConfig(vocabulary_size=5, dim=2,")


@pytest.mark.parametrize("arguments, match", [
    ({"capacity": 0}, "capacity must be in [1, 2147483648], got 0"),
    ({"capacity": 5, "min_count": 0}, "min_count must be >= 1, got 0"),
    ({"capacity": 5, "ttl_steps": 0}, "ttl_steps must be >= 1"),
    ({"capacity": 5, "ttl_steps": -3}, "ttl_steps must be >= 1"),
])
def test_bad_vocabulary_ranges_raise_value_error_naming_the_field(arguments, match):
    expected = re.escape(f"DynamicVocabulary: dynamic_vocabulary.{match}")
    with pytest.raises(ValueError, match=expected):
        recemb.DynamicVocabulary(**arguments)
    # A C++ config is checked when the layer is built, naming the table.
    table = recemb.TableConfig(dim=2, name="user", vocabulary=recemb.DynamicVocabulary(5))
    table.vocabulary.__dict__.update(arguments)
    with pytest.raises(ValueError, match=re.escape(f"table 'user': dynamic_vocabulary.{match}")):
        recemb.Embedding(recemb.FeatureConfig(table, name="f"), "sgd")


def test_bad_vocabulary_configs_raise_value_error_at_once():
    with pytest.raises(ValueError, match="when_full='sometimes'.*evict_least_recent"):
        recemb.DynamicVocabulary(5, when_full="sometimes")
    with pytest.raises(ValueError, match="capacity must be an int"):
        recemb.DynamicVocabulary(2.5)
    with pytest.raises(ValueError, match="ttl_steps must be an int"):
        recemb.DynamicVocabulary(5, ttl_steps="3")
    vocabulary = recemb.DynamicVocabulary(5)
    with pytest.raises(ValueError, match="'user': give vocabulary_size .* not both"):
        recemb.TableConfig(10, 2, name="user", vocabulary=vocabulary)
    with pytest.raises(ValueError, match="got neither"):
        recemb.TableConfig(dim=2, name="user")
    with pytest.raises(ValueError, match="vocabulary must be None or a recemb.DynamicVocabulary"):
        recemb.TableConfig(dim=2, vocabulary=5)
    with pytest.raises(ValueError, match="dim is required"):
        recemb.TableConfig(vocabulary=vocabulary)
    for initializer in (np.zeros((5, 2)), lambda shape: np.zeros(shape)):
        with pytest.raises(ValueError, match="not an array or a callable"):
            recemb.TableConfig(dim=2, vocabulary=vocabulary, initializer=initializer)


def test_bad_ids_raise_value_error_naming_the_feature():
    dynamic = recemb.TableConfig(dim=2, name="user", vocabulary=recemb.DynamicVocabulary(50))
    static = recemb.TableConfig(10, 2, name="item")
    layer = recemb.Embedding({"u": recemb.FeatureConfig(dynamic, name="u"),
                              "i": recemb.FeatureConfig(static, name="i")}, "sgd")
    good = {"u": np.array([1, 2]), "i": np.array([1, 2])}
    cases = [
        ({"u": np.array([1.0, 2.0])}, "feature 'u': ids must be integers, got dtype float64"),
        ({"i": np.array(["a", "b"])}, "feature 'i': ids are strings .* only the ids of a "
                                      "dynamic table"),
        ({"u": np.array([1, "a"], dtype=object)}, "feature 'u': ids of dynamic table 'user': "
                                                  "the id at flat index 0: a int"),
        ({"u": [["a", 3]]}, "feature 'u': ids of dynamic table 'user': the id at flat index 1"),
        ({"u": recemb.Ragged(["a", None], [0, 1, 2])}, "feature 'u': values of dynamic table"),
        ({"i": np.array([1, 2], dtype=object)}, "feature 'i': ids must be integers, got dtype "
                                                "object"),
        # An int beyond int64 in a list makes numpy hold the ids as objects: named by its range.
        ({"u": [5, -2**63 - 1]}, r"feature 'u': ids: -9223372036854775809 at index \(1,\) is "
                                 r"outside the 64-bit integers \[-2\*\*63, 2\*\*63\)"),
        ({"u": [["a", 2**64]]}, r"feature 'u': ids: 18446744073709551616 at index \(0, 1\) is "
                                r"outside the 64-bit integers"),
        ({"i": [2**70]}, r"feature 'i': ids: 1180591620717411303424 at index \(0,\) is outside "
                         r"the 64-bit integers"),
    ]
    for bad, match in cases:
        with pytest.raises(ValueError, match=match):
            layer({**good, **bad})
    assert layer.vocabulary_stats("user")["not_admitted_lookups"] == 0  # nothing counted
    assert not layer._thread_batches.batch.applicable


def test_stats_read_write_and_copies():
    table = recemb.TableConfig(dim=3, name="user", vocabulary=recemb.DynamicVocabulary(20))
    static = recemb.TableConfig(4, 3, name="item")
    features = {"u": recemb.FeatureConfig(table, name="u"),
                "i": recemb.FeatureConfig(static, name="i")}
    layer = recemb.Embedding(features, recemb.optimizers.RowWiseAdagrad(learning_rate=0.1),
                             seed=9)
    rng = np.random.default_rng(4)
    inputs = {"u": np.array([[5, -3], [5, 8]]), "i": np.array([1, 2])}
    activations = layer(inputs)
    layer.apply_gradients({n: rng.normal(size=a.shape).astype(np.float32)
                           for n, a in activations.items()})
    assert layer.vocabulary_stats(table) == {"size": 3, "inserted": 3, "evicted": 0,
                                             "not_admitted_lookups": 0}
    keys, rows, slots = layer.read_dynamic_table("user")
    assert keys.tolist() == [-3, 5, 8] and rows.shape == (3, 3)
    assert list(slots) == ["accumulators"] and slots["accumulators"].shape == (3,)
    assert set(layer.embedding_tables) == {"item"} and set(layer.slot_variables) == {"item"}
    # Copies keep the dynamic table's keys, rows and slots.
    for clone in (copy.deepcopy(layer), pickle.loads(pickle.dumps(layer))):
        clone_keys, clone_rows, clone_slots = clone.read_dynamic_table("user")
        np.testing.assert_array_equal(clone_keys, keys)
        np.testing.assert_array_equal(clone_rows, rows)
        np.testing.assert_array_equal(clone_slots["accumulators"], slots["accumulators"])
        np.testing.assert_array_equal(clone(inputs, training=False)["u"],
                                      layer(inputs, training=False)["u"])
    # write_dynamic_table replaces the contents; lookups read them.
    new_keys = np.array([-3, 7, 2**62])
    new_rows = rng.normal(size=(3, 3)).astype(np.float32)
    layer.write_dynamic_table("user", new_keys, new_rows, {"accumulators": np.ones(3)})
    keys, rows, slots = layer.read_dynamic_table("user")
    assert keys.tolist() == new_keys.tolist()
    np.testing.assert_array_equal(rows, new_rows)
    np.testing.assert_array_equal(layer({"u": np.array([[7, 5]]), "i": np.array([0])},
                                        training=False)["u"], [new_rows[1] / 2])
    assert layer.vocabulary_stats("user")["size"] == 3
    bad_writes = [
        ((np.array([7, -3]), new_rows[:2], {"accumulators": np.ones(2)}),
         ValueError, "strictly increasing"),
        ((new_keys, new_rows[:, :2], {"accumulators": np.ones(3)}), ValueError, r"rows of shape"),
        ((new_keys, new_rows, {}), ValueError, r"slots \[\], expected the optimizer's"),
        ((new_keys, new_rows, {"accumulators": [1, np.nan, 1]}), ValueError, "not finite"),
        ((np.arange(21), np.zeros((21, 3)), {"accumulators": np.ones(21)}), ValueError,
         "at most 20"),
    ]
    for arguments, error, match in bad_writes:
        with pytest.raises(error, match=match):
            layer.write_dynamic_table("user", *arguments)
    assert layer.read_dynamic_table("user")[0].tolist() == new_keys.tolist()  # unchanged
    with pytest.raises(RuntimeError, match="'item' is static"):
        layer.vocabulary_stats("item")
    with pytest.raises(RuntimeError, match="'item' is static"):
        layer.read_dynamic_table("item")
    with pytest.raises(ValueError, match="no table named 'nope'"):
        layer.vocabulary_stats("nope")


@pytest.mark.parametrize("optimizer, slot, value, problem", [
    ("adagrad", "accumulators", -1.0, "is out of range: 'accumulators' must be finite and > 0"),
    ("adagrad", "accumulators", 0.0, "is out of range: 'accumulators' must be finite and > 0"),
    ("ftrl", "accumulators", 0.0, "is out of range: 'accumulators' must be finite and > 0"),
    ("adagrad_momentum", "accumulators", -1.0,
     "is out of range: 'accumulators' must be finite and >= 0"),
    ("rowwise_adagrad", "accumulators", -1.0,
     "is out of range: 'accumulators' must be finite and >= 0"),
    ("adam", "velocities", -0.5, "is out of range: 'velocities' must be finite and >= 0"),
    ("adam", "momenta", np.inf, "is not finite"),
    ("ftrl", "linears", np.nan, "is not finite"),
])
def test_write_refuses_slot_values_the_optimizer_cannot_hold(optimizer, slot, value, problem):
    # Adagrad accumulators of -1 were taken, and the next step turned the rows into -inf.
    table = recemb.TableConfig(dim=2, name="t", vocabulary=recemb.DynamicVocabulary(capacity=4))
    layer = recemb.Embedding({"f": recemb.FeatureConfig(table, name="f")}, optimizer=optimizer)
    ids = {"f": np.array([1, 2])}
    activations = layer(ids)
    layer.apply_gradients({"f": np.ones_like(activations["f"])})
    keys, rows, slots = layer.read_dynamic_table("t")
    bad = {name: values.copy() for name, values in slots.items()}
    bad[slot].reshape(-1)[bad[slot].size // 2] = value  # key 2's first value
    index = bad[slot].size // 2
    shown = re.escape(f"{np.float32(value):f}" if np.isfinite(value) else str(value).lower())
    with pytest.raises(ValueError, match=rf"write_dynamic_table: table 't': '{slot}': value "
                                         rf"{shown}0* at index {index} \(key 2\) {problem}"):
        layer.write_dynamic_table("t", keys, rows, bad)
    after = layer.read_dynamic_table("t")
    np.testing.assert_array_equal(after[1], rows)
    for name in slots:
        np.testing.assert_array_equal(after[2][name], slots[name])
    activations = layer(ids)
    layer.apply_gradients({"f": np.ones_like(activations["f"])})
    assert np.isfinite(layer.read_dynamic_table("t")[1]).all()


def test_a_static_checkpoint_converts_into_a_dynamic_table(tmp_path):
    static = recemb.TableConfig(6, 3, name="user")
    features = {"u": recemb.FeatureConfig(static, name="u")}
    optimizer = recemb.optimizers.Adagrad(learning_rate=0.2)
    layer = recemb.Embedding(features, optimizer, seed=3)
    rng = np.random.default_rng(8)
    for _ in range(3):
        activations = layer({"u": rng.integers(0, 6, size=(4, 2))})
        layer.apply_gradients({"u": rng.normal(size=activations["u"].shape).astype(np.float32)})
    layer.save(tmp_path / "ckpt")
    keys, rows, slots = recemb.read_static_table_as_dynamic(tmp_path / "ckpt", "user")
    assert keys.tolist() == list(range(6))
    np.testing.assert_array_equal(rows, layer.embedding_tables["user"])
    assert list(slots) == ["accumulators"]
    np.testing.assert_array_equal(slots["accumulators"],
                                  layer.slot_variables["user"]["accumulators"])
    dynamic = recemb.TableConfig(dim=3, name="user", vocabulary=recemb.DynamicVocabulary(10))
    converted = recemb.Embedding({"u": recemb.FeatureConfig(dynamic, name="u")}, optimizer, seed=3)
    converted.write_dynamic_table("user", keys, rows, slots)
    ids = rng.integers(0, 6, size=(5, 2))
    np.testing.assert_array_equal(converted({"u": ids}, training=False)["u"],
                                  layer({"u": ids}, training=False)["u"])
    with pytest.raises(ValueError, match="nope"):
        recemb.read_static_table_as_dynamic(tmp_path / "ckpt", "nope")


# ---------------------------------------------------------------------------------------------
# recemb.torch.

torch = pytest.importorskip("torch")
import recemb.torch  # noqa: E402


def test_torch_module_trains_a_dynamic_table_as_the_layer():
    def make(kind):
        table = recemb.TableConfig(dim=4, name="user", vocabulary=recemb.DynamicVocabulary(
            capacity=6, min_count=1), combiner="sum")
        features = {"names": recemb.FeatureConfig(table, name="names"),
                    "ids": recemb.FeatureConfig(table, name="ids")}
        return kind(features, recemb.optimizers.Adagrad(learning_rate=0.3), seed=1)

    module = make(recemb.torch.Embedding)
    layer = make(recemb.Embedding)
    rng = np.random.default_rng(8)
    words = ["ann", "bob", "cy", "dee", "eve", "fay", "gus"]
    for step in range(4):
        # At most 6 distinct keys a step (the capacity), of 13.
        names = [[words[i] for i in rng.integers(0, len(words), size=2)] for _ in range(2)]
        ids = torch.tensor(rng.choice([-2**63, -1, 0, 7, 2**62, 2**63 - 1], size=2))
        out = module({"names": names, "ids": ids})
        weights = torch.tensor(rng.normal(size=(2, 4)), dtype=torch.float32)
        (out["names"] * weights).sum().backward()  # "ids" gets no gradient: zeros
        want = layer({"names": np.array(names), "ids": ids.numpy()})
        np.testing.assert_array_equal(out["names"].detach().numpy(), want["names"])
        layer.apply_gradients({"names": weights.numpy(), "ids": None})
    assert module.vocabulary_stats("user") == layer.vocabulary_stats("user")
    assert module.vocabulary_stats("user")["evicted"] > 0
    keys, rows, slots = module.read_dynamic_table("user")
    np.testing.assert_array_equal(rows.numpy(), layer.read_dynamic_table("user")[1])
    # state_dict holds the keys, rows and slots; load_state_dict restores them.
    state = module.state_dict()
    assert state["user.keys"].dtype == torch.int64
    assert set(state) == {"user.keys", "user.parameters", "user.accumulators", "step"}
    other = make(recemb.torch.Embedding)
    other.load_state_dict(state)
    np.testing.assert_array_equal(other.read_dynamic_table("user")[0].numpy(), keys.numpy())
    np.testing.assert_array_equal(other.read_dynamic_table("user")[1].numpy(), rows.numpy())
    broken = dict(state, **{"user.keys": state["user.keys"].flip(0)})
    with pytest.raises(RuntimeError, match="strictly increasing"):
        other.load_state_dict(broken)
    np.testing.assert_array_equal(other.read_dynamic_table("user")[0].numpy(), keys.numpy())
    assert "'user': (dynamic, 4" in repr(module)
