"""Embedding.lookup / __call__ and ServingModel.lookup with out=: the activations written into the
caller's arrays equal fresh results bit for bit, and every rejected out (or input) leaves the
arrays as they were."""

import itertools
import zlib

import numpy as np
import pytest
import torch

import recemb
import sharded_problem as problem
from recemb import _nest
from random_inputs import make_input

SENTINEL = np.float32(-12345.5)
KINDS = ["dense1", "dense2", "ragged", "sparse"]


def seed_of(*parts):
    return zlib.crc32("/".join(map(str, parts)).encode())


def make_structure(nest, combiner="sum"):
    """A feature config of the given nest over two tables, with a sequence feature (and an
    output_shape) where the nest has room for them."""
    video = recemb.TableConfig(40, 6, name="video", combiner=combiner)
    user = recemb.TableConfig(25, 3, name="user", combiner=combiner)
    if nest == "single":
        return recemb.FeatureConfig(video, name="watched")
    if nest == "single_sequence":
        return recemb.FeatureConfig(video, max_sequence_length=3, name="history")
    if nest == "dict":
        return {"watched": recemb.FeatureConfig(video, name="watched"),
                "history": recemb.FeatureConfig(video, max_sequence_length=3, name="history"),
                "user": recemb.FeatureConfig(user, name="user")}
    if nest == "list":
        return [recemb.FeatureConfig(video, name="watched"),
                recemb.FeatureConfig(user, max_sequence_length=2, name="history"),
                recemb.FeatureConfig(user, output_shape=[3, 2], name="user")]
    assert nest == "nested"
    return {"a": [recemb.FeatureConfig(video, name="watched"),
                  recemb.FeatureConfig(user, name="user")],
            "b": (recemb.FeatureConfig(video, max_sequence_length=4, name="history"),),
            "c": {"d": recemb.FeatureConfig(user, name="liked")}}


NESTS = ["single", "single_sequence", "dict", "list", "nested"]


def random_inputs(rng, structure, kind, weighted, batch=None):
    """(features, weights) in the structure of `structure`, one layout for every feature (dense1
    becomes dense2 for sequence features, which need a bag axis), `batch` examples per feature
    (None: 4 to 8 at random; a feature with output_shape [3, 2] always gets 6)."""
    features, weights = [], []
    for config in _nest.flatten(structure):
        feature_kind = "dense2" if kind == "dense1" and config.max_sequence_length else kind
        examples = int(rng.integers(4, 9)) if batch is None else batch
        examples = 6 if config.output_shape else examples
        ids, w, _ = make_input(rng, feature_kind, config.table.vocabulary_size, examples,
                               (np.int32, np.int64)[int(rng.integers(2))], weighted)
        features.append(ids)
        weights.append(w)
    return (_nest.pack_sequence_as(structure, features),
            _nest.pack_sequence_as(structure, weights) if weighted else None)


def filled_like(activations):
    """Arrays of the activations' shapes (the same structure) holding SENTINEL."""
    return _nest.map_structure(lambda a: np.full(a.shape, SENTINEL, np.float32), activations)


def assert_bitwise_equal(got, want):
    assert got.dtype == want.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def shapes_of(activations):
    return [a.shape for a in _nest.flatten(activations)]


def assert_returns_out(got, out, leaves):
    """`got` is `out` itself (for a single feature: the array), still holding the arrays
    `leaves` (flattened before the call)."""
    assert got is out
    assert all(a is b for a, b in zip(_nest.flatten(out), leaves, strict=True))


@pytest.mark.parametrize("nest,kind,weighted", itertools.product(NESTS, KINDS, [False, True]))
def test_out_equals_fresh_results_bitwise_and_is_reused(nest, kind, weighted):
    rng = np.random.default_rng(seed_of("lookup", nest, kind, weighted))
    structure = make_structure(nest, combiner=["sum", "mean", "sqrtn"][int(rng.integers(3))])
    layer = recemb.Embedding(structure, "sgd", seed=int(rng.integers(1 << 30)))
    features, weights = random_inputs(rng, structure, kind, weighted)
    fresh = layer.lookup(features, weights)
    out = filled_like(fresh)
    for call in range(3):  # the same out arrays, reused by later calls
        if call:  # other ids, the same shapes: each feature's ids permuted in place
            for ids in _nest.flatten(features):
                target = ids.values if isinstance(ids, (recemb.Ragged, recemb.Sparse)) else ids
                target[...] = rng.permutation(target.reshape(-1)).reshape(target.shape)
            fresh = layer.lookup(features, weights)
            assert shapes_of(fresh) == shapes_of(out)
        leaves = _nest.flatten(out)
        got = layer.lookup(features, weights, out=out)
        assert_returns_out(got, out, leaves)
        for a, b in zip(_nest.flatten(got), _nest.flatten(fresh)):
            assert_bitwise_equal(a, b)


@pytest.mark.parametrize("nest", NESTS)
def test_training_call_with_out_keeps_the_batch(nest):
    """layer(features, out=...) writes the activations and keeps the batch as layer(features):
    two layers, one with out= and one without, train to the same tables bit for bit."""
    rng = np.random.default_rng(seed_of("train", nest))
    structure = make_structure(nest)
    with_out = recemb.Embedding(structure, recemb.optimizers.Adagrad(learning_rate=0.3), seed=7)
    without = recemb.Embedding(structure, recemb.optimizers.Adagrad(learning_rate=0.3), seed=7)
    out = None
    for step in range(4):
        kind = "dense2" if step < 2 else KINDS[step]  # steps 0 and 1 reuse the out arrays
        features, weights = random_inputs(rng, structure, kind, step == 1, batch=5)
        fresh = without(features, weights)
        if out is None or shapes_of(out) != shapes_of(fresh):
            out = filled_like(fresh)
        leaves = _nest.flatten(out)
        got = with_out(features, weights, out=out)
        assert_returns_out(got, out, leaves)
        for a, b in zip(_nest.flatten(got), _nest.flatten(fresh)):
            assert_bitwise_equal(a, b)
        gradients = _nest.map_structure(
            lambda a: rng.normal(size=a.shape).astype(np.float32), fresh)
        without.apply_gradients(gradients)
        with_out.apply_gradients(gradients)
    assert with_out.step == without.step == 4
    for name in without.table_names:
        assert_bitwise_equal(with_out.embedding_tables[name], without.embedding_tables[name])


def test_batch_lookup_with_out():
    rng = np.random.default_rng(seed_of("batch"))
    structure = make_structure("dict")
    layer = recemb.Embedding(structure, "sgd", seed=3)
    twin = recemb.Embedding(structure, "sgd", seed=3)
    features, weights = random_inputs(rng, structure, "ragged", True)
    batch = recemb.LookupBatch()
    fresh = twin(features, weights)
    out = filled_like(fresh)
    assert layer.lookup(features, weights, batch=batch, out=out) is out
    assert batch.applicable
    gradients = _nest.map_structure(lambda a: rng.normal(size=a.shape).astype(np.float32), fresh)
    layer.apply_gradients(gradients, batch=batch)
    twin.apply_gradients(gradients)
    for name in layer.table_names:
        assert_bitwise_equal(layer.embedding_tables[name], twin.embedding_tables[name])


def test_out_may_be_disjoint_views_of_one_block():
    """Slices of one preallocated block (one owner) are accepted when they do not overlap, as are
    arrays over one foreign buffer (no numpy owner)."""
    rng = np.random.default_rng(seed_of("block"))
    table = recemb.TableConfig(30, 4, name="t")
    structure = {name: recemb.FeatureConfig(table, name=name) for name in ("a", "b", "c")}
    layer = recemb.Embedding(structure, seed=5)
    features = {name: rng.integers(0, 30, size=(5, 2)) for name in structure}
    fresh = layer.lookup(features)
    block = np.full((3, 5, 4), SENTINEL, np.float32)
    out = {"a": block[2], "b": block[0], "c": block[1]}
    assert layer.lookup(features, out=out) is out
    for name in structure:
        assert_bitwise_equal(out[name], fresh[name])
    buffer = bytearray(3 * 5 * 4 * 4)
    views = [np.frombuffer(memoryview(buffer)[i * 80:(i + 1) * 80], np.float32).reshape(5, 4)
             for i in range(3)]
    out = dict(zip(("c", "a", "b"), views))
    assert layer.lookup(features, out=out) is out
    for name in structure:
        assert_bitwise_equal(out[name], fresh[name])


@pytest.mark.parametrize("nest", ["single", "dict", "list"])
def test_serving_model_lookup_with_out(nest, tmp_path):
    rng = np.random.default_rng(seed_of("serving", nest))
    structure = make_structure(nest)
    layer = recemb.Embedding(structure, seed=11)
    layer.export(tmp_path / "model.recemb")
    model = recemb.ServingModel.open(tmp_path / "model.recemb", feature_config=structure)
    features, weights = random_inputs(rng, structure, "sparse", True)
    fresh = layer.lookup(features, weights)
    out = filled_like(fresh)
    leaves = _nest.flatten(out)
    got = model.lookup(features, weights, out=out)
    assert_returns_out(got, out, leaves)
    for a, b in zip(_nest.flatten(got), _nest.flatten(fresh)):
        assert_bitwise_equal(a, b)
    first = _nest.flatten(out)[0]
    first[...] = SENTINEL
    bad = _nest.pack_sequence_as(structure, [a.astype(np.float64) if i == 0 else a
                                             for i, a in enumerate(_nest.flatten(out))])
    with pytest.raises(ValueError, match="out is a float64 array"):
        model.lookup(features, weights, out=bad)
    assert np.all(first == SENTINEL)


# Validation: each case makes the out to pass from the good one (a dict of SENTINEL arrays for
# the features of validation_problem: "watched" and "liked" [6, 6], "history" [6, 3, 6], "user"
# [6, 3]) and the inputs, and gives the message expected.

def validation_problem():
    """(layer, features, weights, good out). The ids of "user" are int32 [6, 3] (bags of 3, dim
    3), so that a float32 view of them has the shape of its activation, and the weights of
    "watched" are float32 [6, 6] as its activation."""
    rng = np.random.default_rng(seed_of("validation"))
    video = recemb.TableConfig(40, 6, name="video")
    user = recemb.TableConfig(25, 3, name="user")
    structure = {"watched": recemb.FeatureConfig(video, name="watched"),
                 "liked": recemb.FeatureConfig(video, name="liked"),
                 "history": recemb.FeatureConfig(video, max_sequence_length=3, name="history"),
                 "user": recemb.FeatureConfig(user, name="user")}
    layer = recemb.Embedding(structure, "sgd", seed=1)
    features = {"watched": rng.integers(0, 40, size=(6, 6)),
                "liked": rng.integers(0, 40, size=(6, 2)),
                "history": recemb.Ragged.from_row_lengths(rng.integers(0, 40, size=18),
                                                          [3, 0, 5, 4, 4, 2]),
                "user": rng.integers(0, 25, size=(6, 3)).astype(np.int32)}
    weights = {"watched": rng.uniform(0.5, 1.5, size=(6, 6)).astype(np.float32),
               "liked": None, "history": None, "user": None}
    shapes = {"watched": (6, 6), "liked": (6, 6), "history": (6, 3, 6), "user": (6, 3)}
    out = {name: np.full(shape, SENTINEL, np.float32) for name, shape in shapes.items()}
    return layer, features, weights, out


def _replace(out, **arrays):
    bad = dict(out)
    bad.update(arrays)
    return bad


def _strided(shape):
    wide = np.full(shape[:-1] + (2 * shape[-1],), SENTINEL, np.float32)
    return wide[..., ::2]


def _read_only(shape):
    array = np.full(shape, SENTINEL, np.float32)
    array.flags.writeable = False
    return array


def _unaligned(shape):
    size = int(np.prod(shape))
    array = np.frombuffer(bytearray(4 * size + 1), np.float32, count=size, offset=1)
    array = array.reshape(shape)
    array[...] = SENTINEL
    assert not array.flags.aligned and array.flags.writeable
    return array


def _overlapping_views(out):
    """"watched" and "history" as views of one array, sharing one row of "watched"."""
    flat = np.full(36 + 108, SENTINEL, np.float32)
    return _replace(out, watched=flat[:36].reshape(6, 6),
                    history=flat[30:30 + 108].reshape(6, 3, 6))


def _foreign_overlap(out):
    """"watched" and "history" over one bytearray through two memoryviews (no numpy owner),
    sharing 4 bytes."""
    buffer = bytearray(4 * (36 + 108))
    watched = np.frombuffer(memoryview(buffer)[:144], np.float32).reshape(6, 6)
    history = np.frombuffer(memoryview(buffer)[140:140 + 432], np.float32).reshape(6, 3, 6)
    watched[...] = SENTINEL
    history[...] = SENTINEL
    return _replace(out, watched=watched, history=history)


# case: (make the bad out from the good out o, the features f and the weights w, message).
BAD_OUTS = {
    "float64": (lambda o, f, w: _replace(o, history=np.full((6, 3, 6), SENTINEL, np.float64)),
                r"feature 'history': out is a float64 array of shape \(6, 3, 6\), expected "
                r"float32 of shape \(6, 3, 6\)"),
    "float16": (lambda o, f, w: _replace(o, user=np.full((6, 3), SENTINEL, np.float16)),
                r"feature 'user': out is a float16 array"),
    "big-endian": (lambda o, f, w: _replace(o, user=np.full((6, 3), SENTINEL, ">f4")),
                   r"feature 'user': out is a >f4 array"),
    "shape": (lambda o, f, w: _replace(o, watched=np.full((5, 6), SENTINEL, np.float32)),
              r"feature 'watched': out is a float32 array of shape \(5, 6\), expected float32 "
              r"of shape \(6, 6\)"),
    "flat shape": (lambda o, f, w: _replace(o, user=np.full(18, SENTINEL, np.float32)),
                   r"feature 'user': out is a float32 array of shape \(18,\), expected float32 "
                   r"of shape \(6, 3\)"),
    "strided": (lambda o, f, w: _replace(o, watched=_strided((6, 6))),
                r"feature 'watched': the out array \(shape \(6, 6\)\) is not C-contiguous"),
    "fortran": (lambda o, f, w: _replace(o, user=np.asfortranarray(o["user"])),
                r"feature 'user': the out array \(shape \(6, 3\)\) is not C-contiguous"),
    "read-only": (lambda o, f, w: _replace(o, history=_read_only((6, 3, 6))),
                  r"feature 'history': the out array \(shape \(6, 3, 6\)\) is not writeable"),
    "unaligned": (lambda o, f, w: _replace(o, user=_unaligned((6, 3))),
                  r"feature 'user': the out array \(shape \(6, 3\)\) is not aligned"),
    "list leaf": (lambda o, f, w: _replace(o, user=[[0.0] * 3] * 6),
                  r"feature 'user': out must be a numpy float32 array of shape \(6, 3\), got "
                  r"list"),
    "torch leaf": (lambda o, f, w: _replace(o, user=torch.zeros(6, 3)),
                   r"feature 'user': out must be a numpy float32 array of shape \(6, 3\), got "
                   r"Tensor"),
    "nested leaf": (lambda o, f, w: _replace(o, user=[o["user"]]),
                    r"feature 'user': out must be a numpy float32 array .* got list"),
    "missing key": (lambda o, f, w: {k: v for k, v in o.items() if k != "user"},
                    r"out: keys do not match the feature config \(missing \['user'\], "
                    r"unexpected \[\]\)"),
    "extra key": (lambda o, f, w: _replace(o, other=np.zeros(3, np.float32)),
                  r"out: keys do not match the feature config \(missing \[\], unexpected "
                  r"\['other'\]\)"),
    "list nest": (lambda o, f, w: [o[k] for k in sorted(o)],
                  r"out: expected a dict with keys \['history', 'liked', 'user', 'watched'\], "
                  r"got list"),
    "one array": (lambda o, f, w: o["watched"], r"out: expected a dict with keys .* got ndarray"),
    "same array twice": (lambda o, f, w: _replace(o, liked=o["watched"]),
                         r"feature '(liked|watched)': the out array shares memory with the out "
                         r"array of feature '(liked|watched)'"),
    "view of another": (lambda o, f, w: _replace(o, user=o["history"].reshape(-1)[:18].reshape(
        6, 3)), r"feature '(history|user)': the out array shares memory with the out array of "
                r"feature '(history|user)'"),
    "overlapping views": (lambda o, f, w: _overlapping_views(o),
                          r"feature 'watched': the out array shares memory with the out array "
                          r"of feature 'history'"),
    "foreign overlap": (lambda o, f, w: _foreign_overlap(o),
                        r"feature 'watched': the out array shares memory with the out array of "
                        r"feature 'history'"),
    "ids": (lambda o, f, w: _replace(o, user=f["user"].view(np.float32)),
            r"feature 'user': the out array shares memory with the ids of feature 'user'"),
    "other feature's ids": (lambda o, f, w: _replace(
        o, liked=f["history"].values.view(np.float32).reshape(6, 6)),
        r"feature 'liked': the out array shares memory with the ids of feature 'history'"),
    "weights": (lambda o, f, w: _replace(o, watched=w["watched"]),
                r"feature 'watched': the out array shares memory with the weights of feature "
                r"'watched'"),
}


def snapshot(*values):
    """Copies of every numpy array in `values` (ids, weights, out), to compare after a call."""
    arrays = []
    for value in values:
        for leaf in _nest.flatten(value):
            if isinstance(leaf, recemb.Ragged):
                arrays += [leaf.values, leaf.row_splits]
            elif isinstance(leaf, np.ndarray):
                arrays.append(leaf)
    return [(array, array.copy()) for array in arrays]


@pytest.mark.parametrize("case", sorted(BAD_OUTS))
@pytest.mark.parametrize("call", ["lookup", "call", "batch"])
def test_bad_out_raises_and_changes_nothing(case, call):
    layer, features, weights, out = validation_problem()
    make_bad, message = BAD_OUTS[case]
    bad = make_bad(out, features, weights)
    before = snapshot(features, weights, out, bad)
    tables = {name: table.copy() for name, table in layer.embedding_tables.items()}
    batch = recemb.LookupBatch()
    with pytest.raises(ValueError, match=message):
        if call == "lookup":
            layer.lookup(features, weights, out=bad)
        elif call == "call":
            layer(features, weights, out=bad)
        else:
            layer.lookup(features, weights, batch=batch, out=bad)
    for array, copy in before:
        np.testing.assert_array_equal(array, copy)
    assert not batch.applicable
    with pytest.raises(RuntimeError, match="needs a training lookup first"):
        layer.apply_gradients(None)  # the failed call kept no batch
    for name, table in layer.embedding_tables.items():
        assert_bitwise_equal(table, tables[name])
    # The layer still works, with the good out.
    assert layer.lookup(features, weights, out=out) is out
    fresh = layer.lookup(features, weights)
    for name in out:
        assert_bitwise_equal(out[name], fresh[name])


@pytest.mark.parametrize("bad_input", ["id out of range", "negative id", "weights shape"])
def test_inputs_the_engine_rejects_leave_out_unchanged(bad_input):
    layer, features, weights, out = validation_problem()
    if bad_input == "id out of range":
        features["watched"] = features["watched"].copy()
        features["watched"][4, 2] = 40
        message = r"feature 'watched'.*40"
    elif bad_input == "negative id":
        values = features["history"].values.copy()
        values[5] = -1
        features["history"] = recemb.Ragged(values, features["history"].row_splits)
        message = r"feature 'history'.*-1"
    else:
        weights["watched"] = weights["watched"][:, :5].copy()
        message = r"feature 'watched': weights of shape \(6, 5\)"
    with pytest.raises(ValueError, match=message):
        layer.lookup(features, weights, out=out)
    for array in out.values():
        assert np.all(array == SENTINEL)


def test_single_feature_out_is_one_array():
    rng = np.random.default_rng(seed_of("single"))
    layer = recemb.Embedding(make_structure("single"), seed=2)
    ids = rng.integers(0, 40, size=(7, 3))
    out = np.full((7, 6), SENTINEL, np.float32)
    assert layer.lookup(ids, out=out) is out
    assert_bitwise_equal(out, layer.lookup(ids))
    for bad, message in (({"watched": out}, r"feature 'watched': out must be a numpy float32 "
                                            r"array of shape \(7, 6\), got dict"),
                         ([out], r"got list"),
                         (out[:6], r"shape \(6, 6\), expected float32 of shape \(7, 6\)")):
        out[...] = SENTINEL
        with pytest.raises(ValueError, match=message):
            layer.lookup(ids, out=bad)
        assert np.all(out == SENTINEL)


def test_out_is_keyword_only():
    layer, features, weights, out = validation_problem()
    with pytest.raises(TypeError):
        layer.lookup(features, weights, None, out)
    with pytest.raises(TypeError):
        layer(features, weights, out)


def test_bad_out_on_one_rank_raises_on_every_rank():
    """A check of out failing on one rank makes the other rank's lookup fail too (its out
    unchanged), and the ranks carry on together."""
    features, optimizer = problem.make_features()
    inputs, weights = problem.global_batch(9, 0)
    reference = recemb.Embedding(features, optimizer, seed=4, num_threads=1).lookup(inputs,
                                                                                    weights)

    def work(rank, communicator):
        layer = recemb.Embedding(features, optimizer, seed=4, num_threads=1,
                                 communicator=communicator,
                                 placement=recemb.Placement(num_shards=2, strategy="row_wise"))
        first, last = problem.example_range(rank, 2)
        mine = problem.take_all(inputs, first, last)
        my_weights = problem.take_all(weights, first, last)
        out = {name: np.full((last - first,) + value.shape[1:], SENTINEL, np.float32)
               for name, value in reference.items()}
        bad = _replace(out, item=out["item"].astype(np.float64)) if rank == 0 else out
        try:
            layer.lookup(mine, my_weights, out=bad)
            raised = None
        except (ValueError, RuntimeError) as error:
            raised = error
        unchanged = all(np.all(array == SENTINEL) for array in out.values())
        got = layer.lookup(mine, my_weights, out=out)
        return raised, unchanged, got is out, out, (first, last)

    results = problem.run_ranks(2, work)
    assert not any(isinstance(result, Exception) for result in results), results
    for rank, (raised, unchanged, returned_out, out, (first, last)) in enumerate(results):
        assert raised is not None, f"rank {rank} did not raise"
        if rank == 0:
            assert "feature 'item': out is a float64 array" in str(raised)
        assert unchanged and returned_out
        for name, value in out.items():
            np.testing.assert_allclose(value, problem.take(reference[name], first, last),
                                       rtol=1e-5, atol=1e-6)


def test_numpy_views_of_torch_tensors_as_out():
    """docs/python.md: torch tensors are not accepted, their .numpy() views are (memory without a
    numpy owner: the overlap checks compare them all)."""
    rng = np.random.default_rng(seed_of("torch"))
    structure = make_structure("dict")
    layer = recemb.Embedding(structure, seed=8)
    features, weights = random_inputs(rng, structure, "sparse", True, batch=5)
    fresh = layer.lookup(features, weights)
    tensors = {name: torch.full(value.shape, float(SENTINEL)) for name, value in fresh.items()}
    out = {name: tensor.numpy() for name, tensor in tensors.items()}
    assert layer.lookup(features, weights, out=out) is out
    for name, tensor in tensors.items():
        assert_bitwise_equal(tensor.numpy(), fresh[name])
