"""recemb._recemb.GraphOps: the plain-C functions of python/src/graph_op_abi.h that graph
frameworks' op libraries call (recemb.keras's TensorFlow ops; docs/keras.md), called here through
ctypes, against numpy sums of the table's rows."""

import ctypes

import numpy as np
import pytest

import recemb
from recemb import _recemb

I64P = ctypes.POINTER(ctypes.c_int64)
F32P = ctypes.POINTER(ctypes.c_float)


class GraphInput(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int32), ("ids", I64P), ("id_count", ctypes.c_int64),
                ("index", I64P), ("index_count", ctypes.c_int64), ("shape", I64P),
                ("shape_rank", ctypes.c_int32), ("weights", F32P),
                ("weight_count", ctypes.c_int64)]


SHAPE_FN = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int64, ctypes.c_int32,
                            ctypes.POINTER(GraphInput), I64P, ctypes.POINTER(ctypes.c_int32),
                            ctypes.c_char_p, ctypes.c_size_t)
LOOKUP_FN = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int64, ctypes.POINTER(GraphInput),
                             ctypes.c_int32, ctypes.POINTER(F32P), I64P, I64P, ctypes.c_char_p,
                             ctypes.c_size_t)
APPLY_FN = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int64, ctypes.c_int64,
                            ctypes.POINTER(F32P), I64P, ctypes.c_int32, ctypes.c_char_p,
                            ctypes.c_size_t)


STRING_KEYS_FN = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_char_p), I64P, ctypes.c_int64,
                                  I64P)


class GraphApi(ctypes.Structure):
    _fields_ = [("activation_shape", SHAPE_FN),
                ("lookup", LOOKUP_FN), ("apply_gradients", APPLY_FN),
                ("string_keys", STRING_KEYS_FN)]


OK, INVALID_ARGUMENT, FAILED_PRECONDITION = 0, 1, 2
DENSE, RAGGED, SPARSE = 0, 1, 2
VOCABULARY, DIM, LEARNING_RATE = 20, 3, 0.5


def _pointer(array, kind):
    return array.ctypes.data_as(kind) if array is not None and array.size else None


class Caller:
    """GraphOps' api called as an op library calls it; keeps the arrays alive."""

    def __init__(self, layer):
        self.ops = _recemb.GraphOps(layer._engine)
        self.api = GraphApi.from_address(_recemb.graph_api_address())
        self.layer = self.ops.layer_id()
        self.keep = []

    def graph_input(self, kind, ids, index=None, shape=None, weights=None):
        arrays = [np.ascontiguousarray(ids, np.int64),
                  None if index is None else np.ascontiguousarray(index, np.int64),
                  None if shape is None else np.ascontiguousarray(shape, np.int64),
                  None if weights is None else np.ascontiguousarray(weights, np.float32)]
        self.keep.append(arrays)
        ids, index, shape, weights = arrays
        return GraphInput(kind, _pointer(ids, I64P), ids.size, _pointer(index, I64P),
                          0 if index is None else index.size, _pointer(shape, I64P),
                          0 if shape is None else shape.size, _pointer(weights, F32P),
                          0 if weights is None else weights.size)

    def shape(self, feature, graph_input):
        dims = (ctypes.c_int64 * 8)()
        rank = ctypes.c_int32()
        message = ctypes.create_string_buffer(512)
        status = self.api.activation_shape(self.layer, feature, ctypes.byref(graph_input),
                                           dims, ctypes.byref(rank), message, 512)
        return status, tuple(dims[:rank.value]), message.value.decode()

    def lookup(self, inputs, training):
        outputs = [np.full(self.shape(f, x)[1], np.nan, np.float32) for f, x in enumerate(inputs)]
        array = (GraphInput * len(inputs))(*inputs)
        pointers = (F32P * len(inputs))(*[_pointer(o, F32P) for o in outputs])
        sizes = (ctypes.c_int64 * len(inputs))(*[o.size for o in outputs])
        batch = ctypes.c_int64(-7)
        message = ctypes.create_string_buffer(512)
        status = self.api.lookup(self.layer, array, len(inputs), pointers, sizes,
                                 ctypes.byref(batch) if training else None, message, 512)
        return status, outputs, batch.value, message.value.decode()

    def apply(self, batch, gradients):
        gradients = [np.ascontiguousarray(g, np.float32) for g in gradients]
        pointers = (F32P * len(gradients))(*[_pointer(g, F32P) for g in gradients])
        sizes = (ctypes.c_int64 * len(gradients))(*[g.size for g in gradients])
        message = ctypes.create_string_buffer(512)
        status = self.api.apply_gradients(self.layer, batch, pointers, sizes,
                                          len(gradients), message, 512)
        return status, message.value.decode()


@pytest.fixture
def problem():
    rng = np.random.default_rng(7)
    table = rng.normal(size=(VOCABULARY, DIM)).astype(np.float32)
    config = recemb.TableConfig(VOCABULARY, DIM, initializer=table, combiner="sum", name="t")
    features = {"a": recemb.FeatureConfig(config, name="a"),
                "b": recemb.FeatureConfig(config, name="b"),
                "c": recemb.FeatureConfig(config, name="c")}
    layer = recemb.Embedding(features, recemb.optimizers.SGD(learning_rate=LEARNING_RATE))
    return rng, table, layer, Caller(layer)


def _inputs(caller, rng):
    """Features a (dense [4, 2] bags), b (ragged, weighted), c (sparse [4, 3]) and their bags as
    (example, [(id, weight)]) lists per feature, in feature order (a, b, c)."""
    dense = rng.integers(0, VOCABULARY, size=(4, 2))
    lengths = [2, 0, 3, 1]
    ragged = rng.integers(0, VOCABULARY, size=sum(lengths))
    weights = rng.uniform(0.5, 2.0, size=ragged.size).astype(np.float32)
    splits = np.concatenate([[0], np.cumsum(lengths)])
    indices = np.array([[0, 0], [0, 2], [2, 1], [3, 0]])
    values = rng.integers(0, VOCABULARY, size=4)
    bags = [[[(i, 1.0) for i in row] for row in dense],
            [list(zip(ragged[splits[b]:splits[b + 1]], weights[splits[b]:splits[b + 1]]))
             for b in range(4)],
            [[(v, 1.0) for (e, _), v in zip(indices, values) if e == b] for b in range(4)]]
    return [caller.graph_input(DENSE, dense, shape=[4, 2]),
            caller.graph_input(RAGGED, ragged, index=splits, weights=weights),
            caller.graph_input(SPARSE, values, index=indices, shape=[4, 3])], bags


def _sums(table, bags):
    return [np.array([sum((w * table[i].astype(np.float64) for i, w in bag),
                          np.zeros(DIM)) for bag in feature]) for feature in bags]


def test_lookup_and_apply_gradients_against_numpy(problem):
    rng, table, layer, caller = problem
    inputs, bags = _inputs(caller, rng)
    assert caller.shape(0, inputs[0])[:2] == (OK, (4, DIM))
    status, outputs, batch, message = caller.lookup(inputs, training=False)
    assert (status, batch, message) == (OK, -7, "")
    for got, expected in zip(outputs, _sums(table, bags)):
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)

    status, _, batch, _ = caller.lookup(inputs, training=True)
    assert status == OK and batch >= 0 and caller.ops.pending() == 1
    gradients = [rng.normal(size=(4, DIM)).astype(np.float32) for _ in inputs]
    gradients[2] = np.zeros(0, np.float32)  # empty: zeros
    assert caller.apply(batch, gradients) == (OK, "")
    expected = table.astype(np.float64)
    for feature, gradient in zip(bags[:2], gradients[:2]):
        for example, bag in enumerate(feature):
            for i, w in bag:
                expected[i] -= LEARNING_RATE * w * gradient[example]
    np.testing.assert_allclose(layer.embedding_tables["t"], expected, rtol=1e-5, atol=1e-5)
    assert layer.step == 1 and caller.ops.pending() == 0
    status, message = caller.apply(batch, gradients)
    assert status == FAILED_PRECONDITION and "applied or dropped" in message


def test_errors_change_nothing(problem):
    rng, table, layer, caller = problem
    inputs, _ = _inputs(caller, rng)
    inputs[1] = caller.graph_input(RAGGED, [1, VOCABULARY], index=[0, 1, 2, 2, 2])
    status, shape, message = caller.shape(1, inputs[1])
    assert status == OK and shape == (4, DIM)
    status, _, _, message = caller.lookup(inputs, training=True)
    assert status == INVALID_ARGUMENT
    assert f"feature 'b' (table 't'): example 1, position 0: id {VOCABULARY}" in message
    assert caller.ops.pending() == 0
    status, _, message = caller.shape(5, inputs[0])
    assert status == INVALID_ARGUMENT and "feature 5 of 3" in message
    good, _ = _inputs(caller, rng)
    status, _, batch, _ = caller.lookup(good, training=True)
    status, message = caller.apply(batch, [np.ones(5, np.float32)] * 3)
    assert status == INVALID_ARGUMENT and caller.ops.pending() == 1  # kept: still applicable
    np.testing.assert_array_equal(layer.embedding_tables["t"], table)
    assert layer.step == 0


def test_at_most_eight_training_lookups_wait(problem):
    rng, table, layer, caller = problem
    inputs, _ = _inputs(caller, rng)
    batches = [caller.lookup(inputs, training=True)[2] for _ in range(10)]
    assert caller.ops.pending() == 8
    assert caller.apply(batches[0], [np.zeros(0, np.float32)] * 3)[0] == FAILED_PRECONDITION
    assert caller.apply(batches[-1], [np.zeros(0, np.float32)] * 3)[0] == OK
    assert caller.ops.pending() == 7 and layer.step == 1


def test_string_keys_are_recembs(problem):
    """The keys of string ids, as recemb.string_key gives them (XXH3-64, seed 0), bytes with a
    NUL inside and the empty string among them."""
    caller = problem[3]
    strings = [b"", b"user 1", "\u00e9t\u00e9".encode(), b"a\x00b", b"x" * 1000]
    data = (ctypes.c_char_p * len(strings))(*strings)
    sizes = (ctypes.c_int64 * len(strings))(*[len(value) for value in strings])
    keys = (ctypes.c_int64 * len(strings))()
    caller.api.string_keys(data, sizes, len(strings), keys)
    assert list(keys) == [_recemb.string_key(value) for value in strings]
    assert keys[0] == 0x2D06800538D394C2
    assert keys[3] != _recemb.string_key(b"a")


def test_a_layer_gone_is_an_error_not_freed_memory(problem):
    """Ops naming a layer id that is no longer registered (a graph that outlived its layer) get
    FAILED_PRECONDITION; ids are never reused; the Embedding outlives its last GraphOps call."""
    rng, table, layer, caller = problem
    inputs, _ = _inputs(caller, rng)
    second = _recemb.GraphOps(layer._engine)
    assert second.layer_id() > caller.layer
    gone = caller.layer
    del caller.ops
    import gc
    gc.collect()
    status, _, _, message = caller.lookup(inputs, training=False)
    assert status == FAILED_PRECONDITION and f"layer {gone}" in message
    status, _ = caller.apply(0, [np.zeros(0, np.float32)] * 3)
    assert status == FAILED_PRECONDITION
    caller.layer = second.layer_id()
    assert caller.lookup(inputs, training=False)[0] == OK
