"""recemb._recemb (python/src): the 1:1 bindings, their span conversions and the GIL policy."""

import threading
import time

import numpy as np
import pytest

from recemb import _recemb as r


def make_engine(num_threads=0, **table):
    config = r.TableConfig(**{"name": "t", "vocabulary_size": 10, "dim": 3,
                              "initializer": r.RowId(), **table})
    return r.Embedding([config], [r.FeatureConfig(name="f", table="t")],
                       r.EmbeddingOptions(optimizer=r.Sgd(learning_rate=0.5),
                                          num_threads=num_threads))


def test_structs_take_keywords_with_the_cpp_defaults():
    assert r.Adagrad().initial_accumulator_value == pytest.approx(0.1)
    assert r.TableConfig().combiner == r.Combiner.kMean
    assert isinstance(r.TableConfig().initializer, r.TruncatedNormal)
    assert r.TableConfig().optimizer is None
    assert r.EmbeddingOptions().non_finite_gradients == r.NonFiniteGradients.kReject
    table = r.TableConfig("t", 5, 2)  # positional, in declaration order
    assert (table.name, table.vocabulary_size, table.dim) == ("t", 5, 2)
    table.optimizer = r.Adam(learning_rate=0.5)
    assert table.optimizer.learning_rate == 0.5
    assert r.parse_combiner("sqrtn") == r.Combiner.kSqrtn
    assert r.combiner_name(r.Combiner.kSum) == "sum"
    with pytest.raises(ValueError, match="sum"):
        r.parse_combiner("max")


def test_structs_pickle_and_deep_copy_as_their_fields():
    import copy
    import pickle

    structs = [r.TableConfig(name="t", vocabulary_size=7, dim=3,
                             initializer=r.TruncatedNormal(mean=0.5, stddev=2.0),
                             optimizer=r.Adagrad(learning_rate=r.ExponentialDecay(0.1, 5, 0.5)),
                             combiner=r.parse_combiner("sqrtn"),
                             quantization_config=r.QuantizationConfig(4, -1.0, 1.0)),
               r.FeatureConfig(name="f", table="t", max_sequence_length=2, output_shape=[2, 2]),
               r.PiecewiseConstant(boundaries=[3, 9], values=[1.0, 0.5, 0.25]),
               r.CommonHyperparameters(clip_weight_min=-2.0)]

    def fields(value):
        """The fields, recursively, with floats compared as the C++ values."""
        if hasattr(type(value), "_fields"):
            return {name: fields(getattr(value, name)) for name in type(value)._fields}
        return value

    for struct in structs:
        for copied in (pickle.loads(pickle.dumps(struct)), copy.deepcopy(struct)):
            assert type(copied) is type(struct) and copied is not struct
            assert repr(fields(copied)) == repr(fields(struct))


def test_spans_accept_only_exact_contiguous_arrays():
    ids = np.array([1, 2], np.int64)
    with pytest.raises(TypeError):
        r.DenseIds(np.array([1.0, 2.0]), [2])  # float64
    with pytest.raises(TypeError):
        r.DenseIds(np.arange(4, dtype=np.int64)[::2], [2])  # not contiguous
    with pytest.raises(TypeError):
        r.DenseIds([1, 2], [2])  # a list
    engine = make_engine()
    view = r.DenseIds(ids, [2])
    with pytest.raises(TypeError):  # activations must be writable float32
        engine.lookup([view], [np.empty((2, 3), np.float64)])
    read_only = np.empty((2, 3), np.float32)
    read_only.flags.writeable = False
    with pytest.raises(TypeError):
        engine.lookup([view], [read_only])


def test_lookup_apply_and_variables():
    engine = make_engine()
    ids = np.array([[1, 2], [3, 3]], np.int32)
    view = r.DenseIds(ids, list(ids.shape), np.ones((2, 2), np.float32))
    assert np.shares_memory(view.ids, ids) and view.shape == [2, 2]
    assert engine.activation_shape(0, view) == [2, 3]
    out = np.empty((2, 3), np.float32)
    batch = r.LookupBatch()
    engine.lookup([view], [out], batch)
    np.testing.assert_array_equal(out, [[1.5] * 3, [3.0] * 3])
    assert batch.applicable()
    engine.apply_gradients(batch, [np.ones((2, 3), np.float32)])
    assert not batch.applicable() and engine.step() == 1
    with pytest.raises(r.FailedPrecondition):
        engine.apply_gradients(batch, [np.ones((2, 3), np.float32)])
    data = engine.variable_data("t", "parameters")
    assert data.base is engine and data.shape == (30,) and data.flags.writeable
    np.testing.assert_allclose(data.reshape(10, 3)[3], [2.5] * 3)
    out = np.empty(30, np.float32)
    engine.read_variable("t", "parameters", out)
    np.testing.assert_array_equal(out, data)
    engine.write_variable("t", "parameters", np.zeros(30, np.float32))
    assert not data.any()
    assert engine.variable_names("t") == ["parameters"]
    assert engine.variable_shape("t", "parameters") == [10, 3]
    assert [t.name for t in engine.tables()] == ["t"]
    assert engine.features()[0].table == "t"
    with pytest.raises(r.InvalidArgument, match="no table named 'u'"):
        engine.variable_data("u", "parameters")


def test_callbacks_run_with_the_interpreter_lock():
    blocks = []

    def initialize(first_row, num_rows, dim, values):
        blocks.append((first_row, num_rows, dim))
        values[:] = np.repeat(np.arange(first_row, first_row + num_rows), dim)

    steps = []

    def learning_rate(step):
        steps.append(step)
        return 1.0

    engine = make_engine(initializer=initialize, optimizer=r.Sgd(learning_rate=learning_rate))
    assert blocks and blocks[0][0] == 0 and sum(b[1] for b in blocks) == 10
    np.testing.assert_array_equal(engine.variable_data("t", "parameters")[:6], [0, 0, 0, 1, 1, 1])
    batch = r.LookupBatch()
    engine.lookup([r.DenseIds(np.array([2], np.int64), [1])], [np.empty((1, 3), np.float32)],
                  batch)
    engine.apply_gradients(batch, [np.ones((1, 3), np.float32)])
    assert steps == [0]

    def failing(step):
        raise KeyError("learning rate")

    engine = make_engine(optimizer=r.Sgd(learning_rate=failing))
    engine.lookup([r.DenseIds(np.array([2], np.int64), [1])], [np.empty((1, 3), np.float32)],
                  batch)
    with pytest.raises(KeyError, match="learning rate"):
        engine.apply_gradients(batch, [np.ones((1, 3), np.float32)])
    assert batch.applicable() and engine.step() == 0


def test_lookup_releases_the_interpreter_lock():
    """While a lookup of ~0.2 s runs on another thread, this thread keeps running Python code.
    Holding the lock, the lookup would let this thread run only around its start and end (a few
    switch intervals), never in its middle half. Retried in case the machine is too busy to
    schedule this thread."""
    config = r.TableConfig(name="t", vocabulary_size=1000, dim=64, initializer=r.Constant())
    engine = r.Embedding([config], [r.FeatureConfig(name="f", table="t")],
                         r.EmbeddingOptions(num_threads=1))
    rng = np.random.default_rng(0)

    def inputs(rows):
        ids = rng.integers(0, 1000, size=(rows, 200)).astype(np.int32)
        return [r.DenseIds(ids, list(ids.shape))], [np.empty((rows, 64), np.float32)]

    start = time.perf_counter()
    engine.lookup(*inputs(4000))
    rows = int(min(4000 * 0.2 / (time.perf_counter() - start), 200000))
    views, outputs = inputs(rows)
    durations = []
    for _ in range(3):
        times = {}

        def lookup():
            times["start"] = time.perf_counter()
            engine.lookup(views, outputs)
            times["end"] = time.perf_counter()

        worker = threading.Thread(target=lookup)
        stamps = []
        worker.start()
        while worker.is_alive():
            stamps.append(time.perf_counter())
        worker.join()
        duration = times["end"] - times["start"]
        durations.append(duration)
        middle = (times["start"] + 0.25 * duration, times["end"] - 0.25 * duration)
        if any(middle[0] < t < middle[1] for t in stamps):
            return
    pytest.fail(f"no Python code ran during lookups of {durations} s on another thread")
