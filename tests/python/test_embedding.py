"""recemb.Embedding and serving_embedding_lookup, against the float64 reference (reference.py)."""

import collections
import copy
import itertools
import pickle
import threading
import zlib

import numpy as np
import pytest

import recemb
import reference
from random_inputs import make_input

RTOL, ATOL = 2e-5, 2e-6
KINDS = ["dense1", "dense2", "ragged", "sparse"]
COMBINERS = ["sum", "mean", "sqrtn"]


def seed_of(*parts):
    """A fixed seed per test case (printed by pytest through the case's parameters)."""
    return zlib.crc32("/".join(map(str, parts)).encode())


def random_table(rng, vocabulary_size, dim):
    return rng.normal(size=(vocabulary_size, dim)).astype(np.float32)


@pytest.mark.parametrize("kind,combiner,weighted,dtype", itertools.product(
    KINDS, COMBINERS, [False, True], [np.int32, np.int64]))
def test_lookup_and_sgd_step_match_reference(kind, combiner, weighted, dtype):
    rng = np.random.default_rng(seed_of(kind, combiner, weighted, dtype.__name__))
    table = random_table(rng, 30, 5)
    config = recemb.TableConfig(30, 5, initializer=table, combiner=combiner, name="t")
    layer = recemb.Embedding({"f": recemb.FeatureConfig(config)},
                             recemb.optimizers.SGD(learning_rate=0.5))
    ids, weights, ref_input = make_input(rng, kind, 30, 6, dtype, weighted)
    model = reference.Model({"t": (table, combiner,
                                   reference.Optimizer("sgd", 0.5))}, [("t", 0)])

    activations = layer({"f": ids}, None if weights is None else {"f": weights})
    expected = model.lookup([ref_input])[0]
    assert activations["f"].dtype == np.float32
    assert activations["f"].shape == expected.shape
    np.testing.assert_allclose(activations["f"], expected, rtol=RTOL, atol=ATOL)

    gradient = rng.normal(size=expected.shape).astype(np.float32)
    layer.apply_gradients({"f": gradient})
    model.apply_gradients([gradient])
    np.testing.assert_allclose(layer.embedding_tables["t"], model.tables["t"], rtol=RTOL,
                               atol=ATOL)
    assert layer.step == 1


@pytest.mark.parametrize("kind,combiner,weighted", itertools.product(
    ["dense2", "ragged", "sparse"], COMBINERS, [False, True]))
def test_sequence_features_match_reference(kind, combiner, weighted):
    rng = np.random.default_rng(seed_of("sequence", kind, combiner, weighted))
    table = random_table(rng, 25, 3)
    config = recemb.TableConfig(25, 3, initializer=table, combiner=combiner)
    layer = recemb.Embedding([recemb.FeatureConfig(config, max_sequence_length=3)], "sgd")
    ids, weights, ref_input = make_input(rng, kind, 25, 5, np.int64, weighted, width=5)
    model = reference.Model({"t": (table, combiner, reference.Optimizer("sgd", 0.01))},
                            [("t", 3)])
    activations = layer.lookup([ids], None if weights is None else [weights])
    expected = model.lookup([ref_input])[0]
    assert activations[0].shape == (5, 3, 3)
    np.testing.assert_allclose(activations[0], expected, rtol=RTOL, atol=ATOL)


def test_dense_rank3_and_output_shape():
    rng = np.random.default_rng(3)
    table = random_table(rng, 10, 2)
    config = recemb.TableConfig(10, 2, initializer=table, combiner="sum")
    ids = rng.integers(0, 10, size=(2, 3, 4))
    layer = recemb.Embedding({"x": recemb.FeatureConfig(config),
                              "y": recemb.FeatureConfig(config, output_shape=[3, 2])})
    out = layer.lookup({"x": ids, "y": ids})
    assert out["x"].shape == (2, 3, 2) and out["y"].shape == (3, 2, 2)
    np.testing.assert_allclose(out["x"], table[ids].sum(axis=2), rtol=RTOL)
    np.testing.assert_allclose(out["y"].reshape(6, 2), out["x"].reshape(6, 2))


def test_issue_example():
    video = recemb.TableConfig(vocabulary_size=1000, dim=16, name="video", combiner="mean")
    user = recemb.TableConfig(vocabulary_size=500, dim=8, name="user", initializer="zeros",
                              optimizer=recemb.optimizers.SGD(learning_rate=0.5))
    features = {
        "watched": recemb.FeatureConfig(table=video, name="watched"),
        "liked": recemb.FeatureConfig(table=video, name="liked"),
        "history": recemb.FeatureConfig(table=video, name="history", max_sequence_length=5),
        "user_id": recemb.FeatureConfig(table=user, name="user_id"),
    }
    layer = recemb.Embedding(features, optimizer=recemb.optimizers.Adagrad(learning_rate=0.1))
    inputs = {"watched": np.array([[1, 2], [3, 4]]),
              "liked": recemb.Ragged(values=np.array([5, 6, 7]), row_splits=np.array([0, 1, 3])),
              "history": recemb.Sparse(indices=np.array([[0, 0], [1, 2]]),
                                       values=np.array([8, 9]), dense_shape=(2, 5)),
              "user_id": np.array([10, 11])}
    acts = layer(inputs, weights=None)
    assert {name: a.shape for name, a in acts.items()} == {
        "watched": (2, 16), "liked": (2, 16), "history": (2, 5, 16), "user_id": (2, 8)}
    assert all(a.dtype == np.float32 for a in acts.values())
    layer.apply_gradients({name: np.ones_like(a) for name, a in acts.items()})
    assert layer.embedding_tables["video"].shape == (1000, 16)
    assert layer.embedding_tables[video].dtype == np.float32
    accumulators = layer.slot_variables["video"]["accumulators"]
    assert accumulators[1, 0] == pytest.approx(0.1 + 0.25)  # mean of 2 ids: gradient 1/2
    np.testing.assert_array_equal(layer.embedding_tables["user"][10], np.full(8, -0.5))
    layer.assign_table("user", np.zeros((500, 8), np.float32))
    assert not layer.embedding_tables["user"].any()
    assert layer.step == 1
    served = recemb.serving_embedding_lookup(inputs, None, layer.embedding_tables, features)
    for name, value in layer.lookup(inputs).items():
        np.testing.assert_array_equal(served[name], value)


# ---- structures

def test_nested_structures_and_table_naming():
    first = recemb.TableConfig(20, 3, initializer=recemb.initializers.RowId())
    second = recemb.TableConfig(10, 2, initializer=recemb.initializers.RowId(offset=100.0))
    # Flattened order: a/0, a/1, b/z -> tables named by first appearance: second, first.
    config = {"b": {"z": recemb.FeatureConfig(first)},
              "a": (recemb.FeatureConfig(second), recemb.FeatureConfig(first, name="named"))}
    layer = recemb.Embedding(config)
    assert layer.table_names == ["table_0", "table_1"]
    assert layer.feature_names == ["a/0", "named", "b/z"]
    assert layer.embedding_tables[second] is not None
    assert layer.embedding_tables["table_0"][0, 0] == 100.0
    out = layer.lookup({"a": (np.array([1]), np.array([2])), "b": {"z": np.array([3])}})
    assert list(out) == ["b", "a"] and isinstance(out["a"], tuple)
    np.testing.assert_array_equal(out["a"][0], [[101.0, 101.0]])
    np.testing.assert_array_equal(out["a"][1], [[2.0, 2.0, 2.0]])
    np.testing.assert_array_equal(out["b"]["z"], [[3.0, 3.0, 3.0]])


Pair = collections.namedtuple("Pair", ["left", "right"])


@pytest.mark.parametrize("make", [
    lambda f: f,
    lambda f: [f, f],
    lambda f: (f,),
    lambda f: {"k": f, "j": [f, (f,)]},
    lambda f: Pair(f, {"x": f}),
])
def test_structures_mirror_the_config(make):
    table = recemb.TableConfig(10, 2, initializer=recemb.initializers.RowId())
    counter = itertools.count()

    def feature():
        return recemb.FeatureConfig(table, name=f"f{next(counter)}")

    shape = make(0)  # the structure, with distinct FeatureConfig objects as leaves

    config = recemb._nest.map_structure(lambda _: feature(), shape)
    layer = recemb.Embedding(config, "sgd")
    ids = recemb._nest.map_structure(lambda _: np.array([4, 5]), shape)
    out = layer(ids)
    same_shape = recemb._nest.map_structure(lambda _: 0, out)
    assert same_shape == shape and type(same_shape) is type(shape)
    for value in recemb._nest.flatten(out):
        np.testing.assert_array_equal(value, [[4, 4], [5, 5]])
    gradients = recemb._nest.map_structure(lambda a: np.ones_like(a), out)
    layer.apply_gradients(gradients)
    count = len(recemb._nest.flatten(shape))
    np.testing.assert_allclose(layer.embedding_tables[table][4], 4 - 0.01 * count)


def test_weights_may_be_none_per_feature():
    table = recemb.TableConfig(10, 2, initializer=recemb.initializers.RowId(), combiner="sum")
    layer = recemb.Embedding({"a": recemb.FeatureConfig(table), "b": recemb.FeatureConfig(table)})
    out = layer.lookup({"a": np.array([[1, 2]]), "b": np.array([[1, 2]])},
                       {"a": np.array([[2.0, 0.5]]), "b": None})
    np.testing.assert_allclose(out["a"], [[3.0, 3.0]])
    np.testing.assert_allclose(out["b"], [[3.0, 3.0]])


# ---- optimizers

OPTIMIZERS = {
    "sgd": (lambda: recemb.optimizers.SGD(learning_rate=0.3),
            lambda: reference.Optimizer("sgd", 0.3)),
    "sgd_clip_decay": (
        lambda: recemb.optimizers.SGD(
            learning_rate=0.3, clipvalue=0.05, weight_decay_factor=0.1,
            multiply_weight_decay_factor_by_learning_rate=True, clip_weight_min=-0.8,
            clip_weight_max=0.8),
        lambda: reference.Optimizer(
            "sgd", 0.3, clip_gradient_min=-0.05, clip_gradient_max=0.05, weight_decay_factor=0.1,
            multiply_weight_decay_factor_by_learning_rate=True, clip_weight_min=-0.8,
            clip_weight_max=0.8)),
    "adagrad": (lambda: recemb.optimizers.Adagrad(learning_rate=0.2,
                                                  initial_accumulator_value=0.5),
                lambda: reference.Optimizer("adagrad", 0.2, initial_accumulator_value=0.5)),
    "adagrad_clip_decay": (
        lambda: recemb.optimizers.Adagrad(learning_rate=0.2, clipvalue=(None, 0.02),
                                          weight_decay_factor=0.05),
        lambda: reference.Optimizer("adagrad", 0.2, clip_gradient_max=0.02,
                                    weight_decay_factor=0.05)),
    "adagrad_momentum": (
        lambda: recemb.optimizers.AdagradMomentum(learning_rate=0.1, momentum=0.9,
                                                  use_nesterov=True, exponent=3.0, beta2=0.9,
                                                  epsilon=1e-6),
        lambda: reference.Optimizer("adagrad_momentum", 0.1, momentum=0.9, use_nesterov=True,
                                    exponent=3.0, beta2=0.9, epsilon=1e-6)),
    "adagrad_momentum_plain": (
        lambda: recemb.optimizers.AdagradMomentum(learning_rate=0.1, momentum=0.5),
        lambda: reference.Optimizer("adagrad_momentum", 0.1, momentum=0.5)),
    # Adam's m / sqrt(v) amplifies float32 rounding of small gradients: see ADAM_ATOL.
    "adam": (lambda: recemb.optimizers.Adam(learning_rate=0.05),
             lambda: reference.Optimizer("adam", 0.05)),
    "adam_outside_sqrt": (
        lambda: recemb.optimizers.Adam(learning_rate=0.05, sum_inside_sqrt=False, epsilon=1e-3,
                                       beta_1=0.8, beta_2=0.99),
        lambda: reference.Optimizer("adam", 0.05, sum_inside_sqrt=False, epsilon=1e-3,
                                    beta_1=0.8, beta_2=0.99)),
    "ftrl": (
        lambda: recemb.optimizers.FTRL(learning_rate=0.5, l1_regularization_strength=0.001,
                                       l2_regularization_strength=0.01, beta=0.1,
                                       initial_accumulator_value=0.2),
        lambda: reference.Optimizer("ftrl", 0.5, l1_regularization_strength=0.001,
                                    l2_regularization_strength=0.01, beta=0.1,
                                    initial_accumulator_value=0.2)),
    "rowwise_adagrad": (
        lambda: recemb.optimizers.RowWiseAdagrad(learning_rate=0.1,
                                                 initial_accumulator_value=0.1, epsilon=1e-6),
        lambda: reference.Optimizer("rowwise_adagrad", 0.1, initial_accumulator_value=0.1,
                                    epsilon=1e-6)),
    "sgd_schedule": (
        lambda: recemb.optimizers.SGD(learning_rate=recemb.schedules.ExponentialDecay(
            initial_learning_rate=0.5, decay_steps=2, decay_rate=0.5)),
        lambda: reference.Optimizer("sgd", lambda step: 0.5 * 0.5 ** (step / 2))),
    "adagrad_piecewise": (
        lambda: recemb.optimizers.Adagrad(learning_rate=recemb.schedules.PiecewiseConstantDecay(
            boundaries=[0, 2], values=[0.3, 0.2, 0.1])),
        lambda: reference.Optimizer("adagrad", lambda step: [0.3, 0.2, 0.2, 0.1][step])),
}


ADAM_ATOL = 2e-5  # 4e-4 of the step size lr = 0.05


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_matches_reference(name):
    make_optimizer, make_reference = OPTIMIZERS[name]
    atol = ADAM_ATOL if name.startswith("adam") else ATOL
    rng = np.random.default_rng(seed_of("optimizer", name))
    shared = random_table(rng, 30, 4) * 0.5
    own = random_table(rng, 20, 3) * 0.5
    shared_config = recemb.TableConfig(30, 4, initializer=shared, name="shared")
    own_config = recemb.TableConfig(20, 3, initializer=own, combiner="sum", name="own",
                                    optimizer=make_optimizer())
    layer = recemb.Embedding([recemb.FeatureConfig(shared_config, name="f1"),
                              recemb.FeatureConfig(shared_config, name="f2"),
                              recemb.FeatureConfig(own_config, name="f3")], make_optimizer())
    model = reference.Model({"shared": (shared, "mean", make_reference()),
                             "own": (own, "sum", make_reference())},
                            [("shared", 0), ("shared", 0), ("own", 0)])
    for step in range(4):
        f1 = make_input(rng, "dense2", 30, 6, np.int64, False)
        f2 = make_input(rng, "ragged", 30, 6, np.int32, True)
        f3 = make_input(rng, "dense1", 20, 6, np.int64, False)
        activations = layer([f1[0], f2[0], f3[0]], [f1[1], f2[1], f3[1]])
        expected = model.lookup([f1[2], f2[2], f3[2]])
        for got, want in zip(activations, expected):
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
        gradients = [rng.normal(size=a.shape).astype(np.float32) for a in activations]
        layer.apply_gradients(gradients)
        model.apply_gradients(gradients)
        for table in ("shared", "own"):
            np.testing.assert_allclose(layer.embedding_tables[table], model.tables[table],
                                       rtol=RTOL, atol=atol, err_msg=f"step {step} {table}")
            for slot, values in model.slots[table].items():
                # Slots such as Adam's velocities are tiny: the tolerance scales with them.
                np.testing.assert_allclose(layer.slot_variables[table][slot], values,
                                           rtol=RTOL, atol=ATOL * np.abs(values).max(),
                                           err_msg=f"step {step} {table}/{slot}")
    assert layer.step == 4


def test_callable_learning_rate_is_evaluated_once_per_step():
    calls = []

    def learning_rate():
        calls.append(len(calls))
        return 0.1 * len(calls)

    table = recemb.TableConfig(10, 2, initializer="zeros", combiner="sum")
    layer = recemb.Embedding([recemb.FeatureConfig(table)],
                             recemb.optimizers.SGD(learning_rate=learning_rate))
    for _ in range(3):
        layer([np.array([1])])
        layer.apply_gradients([np.ones((1, 2), np.float32)])
    assert calls == [0, 1, 2]
    np.testing.assert_allclose(layer.embedding_tables[table][1], -(0.1 + 0.2 + 0.3) * np.ones(2),
                               rtol=1e-6)


def test_several_batches_pending_applied_in_any_order():
    rng = np.random.default_rng(11)
    table = random_table(rng, 15, 3)
    config = recemb.TableConfig(15, 3, initializer=table, combiner="sum")
    layer = recemb.Embedding([recemb.FeatureConfig(config)], recemb.optimizers.Adagrad(0.1))
    model = reference.Model({"t": (table, "sum", reference.Optimizer("adagrad", 0.1))},
                            [("t", 0)])
    first, second = recemb.LookupBatch(), recemb.LookupBatch()
    ids_1, ids_2 = rng.integers(0, 15, size=(4, 2)), rng.integers(0, 15, size=(4, 2))
    layer.lookup([ids_1], batch=first)
    layer.lookup([ids_2], batch=second)
    assert first.applicable and second.applicable
    g_1, g_2 = (rng.normal(size=(4, 3)).astype(np.float32) for _ in range(2))
    layer.apply_gradients([g_2], batch=second)
    layer.apply_gradients([g_1], batch=first)
    assert not first.applicable and layer.step == 2
    model.lookup([("dense", ids_2, None)])
    model.apply_gradients([g_2])
    model.lookup([("dense", ids_1, None)])
    model.apply_gradients([g_1])
    np.testing.assert_allclose(layer.embedding_tables["table_0"], model.tables["t"], rtol=RTOL,
                               atol=ATOL)


def test_gradient_none_counts_rows_as_touched():
    table = recemb.TableConfig(10, 2, initializer="ones", combiner="sum")
    layer = recemb.Embedding({"a": recemb.FeatureConfig(table), "b": recemb.FeatureConfig(table)},
                             recemb.optimizers.Adam(learning_rate=0.1))
    layer({"a": np.array([1]), "b": np.array([2])})
    layer.apply_gradients({"a": np.ones((1, 2), np.float32), "b": None})
    velocities = layer.slot_variables["table_0"]["velocities"]
    assert velocities[1, 0] > 0 and velocities[2, 0] == 0
    momenta = layer.slot_variables["table_0"]["momenta"]
    assert momenta[1, 0] > 0 and momenta[2, 0] == 0


def test_set_step_restores_schedules():
    def make():
        table = recemb.TableConfig(5, 2, initializer="zeros", combiner="sum", name="t")
        return recemb.Embedding([recemb.FeatureConfig(table)], recemb.optimizers.SGD(
            learning_rate=recemb.schedules.PiecewiseConstant(boundaries=[2], values=[1.0, 0.1])))

    trained, restored = make(), make()
    for _ in range(3):
        trained([np.array([0])])
        trained.apply_gradients([np.ones((1, 2), np.float32)])
    restored.assign_table("t", trained.embedding_tables["t"])
    restored.step = trained.step
    assert restored.step == 3
    for layer in (trained, restored):
        layer([np.array([0])])
        layer.apply_gradients([np.ones((1, 2), np.float32)])
    np.testing.assert_array_equal(restored.embedding_tables["t"], trained.embedding_tables["t"])
    np.testing.assert_allclose(trained.embedding_tables["t"][0], [-3.1, -3.1], rtol=1e-6)


def test_set_step_checks():
    table = recemb.TableConfig(5, 2, name="t")
    layer = recemb.Embedding([recemb.FeatureConfig(table)],
                             recemb.optimizers.Adam(bias_correction=True))
    with pytest.raises(ValueError, match=">= 0"):
        layer.step = -1
    for bad in (1.5, 2.0, "3", True):
        with pytest.raises(ValueError, match=rf"step={bad!r}: must be an int"):
            layer.step = bad
    with pytest.raises(ValueError, match=r"step=9223372036854775808: must be >= 0 and <= "):
        layer.step = 2**63
    assert layer.step == 0
    layer.step = np.int64(2)
    assert layer.step == 2


# ---- training and evaluation lookups: which batch apply_gradients applies

def sgd_layer(rng):
    """A layer of one sum-combined table with random values, trained by SGD at 0.5, and its
    initial table (float64)."""
    table = random_table(rng, 12, 3)
    layer = recemb.Embedding(
        {"f": recemb.FeatureConfig(recemb.TableConfig(12, 3, initializer=table,
                                                      combiner="sum", name="t"))},
        recemb.optimizers.SGD(learning_rate=0.5))
    return layer, table.astype(np.float64)


def sgd_step(table, ids, gradients):
    """The table after SGD at 0.5 applies `gradients` to the rows of `ids` (one id per row)."""
    result = table.copy()
    np.add.at(result, ids, -0.5 * gradients.astype(np.float64))
    return result


def test_evaluation_lookup_with_training_false_keeps_nothing():
    rng = np.random.default_rng(41)
    layer, table = sgd_layer(rng)
    train_ids, eval_ids = np.array([1, 4, 4, 7]), np.array([2, 3, 9, 11])
    gradients = rng.normal(size=(4, 3)).astype(np.float32)
    layer({"f": train_ids})
    evaluation = layer({"f": eval_ids}, training=False)
    np.testing.assert_allclose(evaluation["f"], table[eval_ids], rtol=1e-6)
    layer.apply_gradients({"f": gradients})  # the training batch's rows, not the evaluation's
    np.testing.assert_allclose(layer.embedding_tables["t"], sgd_step(table, train_ids, gradients),
                               rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="training must be True or False, got None"):
        layer({"f": eval_ids}, training=None)


def test_a_training_lookup_over_an_unapplied_one_raises_unless_asked_for():
    rng = np.random.default_rng(42)
    layer, table = sgd_layer(rng)
    train_ids, eval_ids = np.array([1, 4, 4, 7]), np.array([2, 3, 9, 11])
    gradients = rng.normal(size=(4, 3)).astype(np.float32)
    layer({"f": train_ids})
    with pytest.raises(recemb.FailedPrecondition,
                       match=r"previous training lookup .* is not applied yet.*"
                             r"layer\(features, training=False\).*apply_gradients.*"
                             r"replace_pending=True"):
        layer({"f": eval_ids})
    layer.apply_gradients({"f": gradients})
    table = sgd_step(table, train_ids, gradients)
    np.testing.assert_allclose(layer.embedding_tables["t"], table, rtol=1e-6, atol=1e-6)
    # Asked for: the pending lookup is dropped, the new one applied.
    layer({"f": train_ids})
    layer({"f": eval_ids}, replace_pending=True)
    layer.apply_gradients({"f": gradients})
    np.testing.assert_allclose(layer.embedding_tables["t"], sgd_step(table, eval_ids, gradients),
                               rtol=1e-6, atol=1e-6)
    assert layer.step == 2


def test_a_failed_lookup_leaves_the_pending_batch_as_it_was():
    rng = np.random.default_rng(43)
    layer, table = sgd_layer(rng)
    ids, bad = np.array([1, 4, 4, 7]), np.array([2, 3, 12, 1])
    gradients = rng.normal(size=(4, 3)).astype(np.float32)
    # The layer's own batch: the engine rejects id 12 (replacing was asked for).
    layer({"f": ids})
    with pytest.raises(ValueError, match=r"feature 'f'.*id 12 is out of range"):
        layer({"f": bad}, replace_pending=True)
    layer.apply_gradients({"f": gradients})
    table = sgd_step(table, ids, gradients)
    np.testing.assert_allclose(layer.embedding_tables["t"], table, rtol=1e-6, atol=1e-6)
    # A batch of the caller's.
    batch = recemb.LookupBatch()
    layer.lookup({"f": ids}, batch=batch)
    with pytest.raises(ValueError, match=r"id 12 is out of range"):
        layer.lookup({"f": bad}, batch=batch)
    assert batch.applicable
    layer.apply_gradients({"f": gradients}, batch)
    np.testing.assert_allclose(layer.embedding_tables["t"], sgd_step(table, ids, gradients),
                               rtol=1e-6, atol=1e-6)


def test_each_thread_trains_with_its_own_batch():
    """Two threads share a layer, their calls interleaved by barriers (no timing): each
    apply_gradients applies its own thread's lookup."""
    rng = np.random.default_rng(44)
    layer, table = sgd_layer(rng)
    ids = [np.array([0, 1, 2, 3]), np.array([8, 9, 10, 11])]
    gradients = [rng.normal(size=(4, 3)).astype(np.float32) for _ in ids]
    barrier = threading.Barrier(2, timeout=60)
    errors = []

    def first():
        try:
            layer({"f": ids[0]})
            barrier.wait()  # the second thread looks up and applies
            barrier.wait()
            layer.apply_gradients({"f": gradients[0]})
        except Exception as error:  # reported by the main thread
            errors.append(error)
            barrier.abort()

    def second():
        try:
            barrier.wait()
            layer({"f": ids[1]})
            layer.apply_gradients({"f": gradients[1]})
            barrier.wait()
        except Exception as error:
            errors.append(error)
            barrier.abort()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    expected = sgd_step(sgd_step(table, ids[1], gradients[1]), ids[0], gradients[0])
    np.testing.assert_allclose(layer.embedding_tables["t"], expected, rtol=1e-6, atol=1e-6)
    assert layer.step == 2


# ---- copies: copy.deepcopy and pickle

def variables(layer):
    return {(name, v): np.array(layer._variable(name, v))
            for name in layer.table_names for v in layer.variable_names(name)}


def assert_same_state(layer, other):
    assert other.step == layer.step
    mine, theirs = variables(layer), variables(other)
    assert mine.keys() == theirs.keys()
    for key, values in mine.items():
        assert values.tobytes() == theirs[key].tobytes(), key


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_a_copy_is_an_independent_layer_with_the_same_state(how):
    rng = np.random.default_rng(45)
    video = recemb.TableConfig(20, 4, name="video", initializer=recemb.initializers.RowId(1.0),
                               optimizer=recemb.optimizers.Adam(
                                   learning_rate=recemb.schedules.ExponentialDecay(0.1, 2, 0.5)))
    user = recemb.TableConfig(9, 2, combiner="sqrtn")
    features = {"watched": recemb.FeatureConfig(video),
                "user": recemb.FeatureConfig(user, name="user_id")}
    layer = recemb.Embedding(features, "adagrad", seed=3, non_finite_gradients="skip_rows",
                             pipeline_staleness="one_step")

    def step(target, seed):
        data = np.random.default_rng(seed)
        target({"watched": data.integers(0, 20, (5, 3)), "user": data.integers(0, 9, 5)})
        target.apply_gradients({"watched": data.normal(size=(5, 4)),
                                "user": data.normal(size=(5, 2))})

    for seed in range(2):
        step(layer, seed)
    layer({"watched": rng.integers(0, 20, (5, 3)), "user": rng.integers(0, 9, 5)})  # pending
    copy_ = copy.deepcopy(layer) if how == "deepcopy" else pickle.loads(pickle.dumps(layer))
    assert_same_state(layer, copy_)
    assert copy_.table_names == layer.table_names
    assert copy_.feature_names == layer.feature_names
    assert repr(copy_.optimizer) == repr(layer.optimizer)
    with pytest.raises(RuntimeError, match="lookup first"):  # the pending batch is not copied
        copy_.apply_gradients(None)
    before = variables(layer)
    step(copy_, 7)
    for key, values in variables(layer).items():  # training the copy leaves the original
        assert values.tobytes() == before[key].tobytes(), key
    layer({"watched": np.array([[1, 2, 3]]), "user": np.array([1])}, replace_pending=True)
    layer.apply_gradients(None)  # the original's pending batch went on
    layer.step = 2
    layer.assign_table("video", before[("video", "parameters")])
    for name, variable in before:
        layer.assign_variable(name, variable, before[(name, variable)])
    step(layer, 7)
    assert_same_state(layer, copy_)  # the same step from the same state: bitwise the same


def test_embedding_tables_key_error_lists_the_tables(trained_layer):
    with pytest.raises(KeyError, match=r"no table named 'audio'; the tables are \['video'\]"):
        trained_layer.embedding_tables["audio"]
    assert trained_layer.embedding_tables.get("audio") is None


@pytest.mark.parametrize("setting,value,message", [
    ("seed", -1, r"seed=-1: must be >= 0 and <= 18446744073709551615"),
    ("seed", 2**64, r"seed=18446744073709551616: must be >= 0"),
    ("seed", 1.5, r"seed=1.5: must be an int"),
    ("num_threads", -2, r"num_threads=-2: must be >= 0"),
    ("num_threads", "4", r"num_threads='4': must be an int"),
    ("pipeline_execution_with_tensor_core", 1, r"pipeline_execution_with_tensor_core=1: "
                                               r"expected True, False or None"),
])
def test_settings_are_checked_naming_the_argument(setting, value, message):
    with pytest.raises(ValueError, match=message):
        recemb.Embedding(recemb.FeatureConfig(recemb.TableConfig(4, 2)), **{setting: value})


# ---- errors: ValueError naming the feature and the value; nothing changes

def snapshot(layer):
    return {name: [np.array(layer._variable(name, v)) for v in layer.variable_names(name)]
            for name in layer.table_names}, layer.step


def assert_unchanged(layer, before):
    tables, step = snapshot(layer)
    assert step == before[1]
    for name, values in before[0].items():
        for got, want in zip(tables[name], values):
            np.testing.assert_array_equal(got, want)


@pytest.fixture
def trained_layer():
    rng = np.random.default_rng(5)
    table = recemb.TableConfig(10, 3, initializer=random_table(rng, 10, 3), name="video")
    layer = recemb.Embedding({"watched": recemb.FeatureConfig(table, name="watched"),
                              "liked": recemb.FeatureConfig(table, name="liked")},
                             recemb.optimizers.Adagrad(0.1))
    layer({"watched": np.array([[1, 2]]), "liked": np.array([3])})
    layer.apply_gradients({"watched": np.ones((1, 3)), "liked": np.ones((1, 3))})
    return layer


@pytest.mark.parametrize("inputs,weights,message", [
    ({"watched": np.array([[1, 12]]), "liked": np.array([3])}, None,
     r"feature 'watched'.*id 12 is out of range"),
    ({"watched": np.array([[1, 2]]), "liked": recemb.Ragged(np.array([4, -1]), np.array([0, 2]))},
     None, r"feature 'liked'.*id -1"),
    ({"watched": np.array([[1, 2]]), "liked": np.array([3])},
     {"watched": np.array([[1.0, np.nan]]), "liked": None}, r"feature 'watched'.*nan"),
    ({"watched": np.array([[1, 2]]),
      "liked": recemb.Sparse(np.array([[0, 1], [0, 0]]), np.array([1, 2]), (1, 3))},
     None, r"feature 'liked'"),
    ({"watched": np.array([[1, 2]]), "liked": recemb.Ragged(np.array([4, 5]), np.array([0, 3]))},
     None, r"feature 'liked'.*row_splits"),
    ({"watched": np.array([[1.5, 2]]), "liked": np.array([3])}, None,
     r"feature 'watched': ids must be integers"),
    ({"watched": np.array([[1, 2]])}, None, r"missing \['liked'\]"),
    ({"watched": np.array([[1, 2]]), "liked": np.array([3])},
     {"watched": np.ones((2, 2)), "liked": None}, r"feature 'watched': weights of shape"),
])
def test_bad_inputs_raise_value_error_and_change_nothing(trained_layer, inputs, weights, message):
    before = snapshot(trained_layer)
    with pytest.raises(ValueError, match=message):
        trained_layer(inputs, weights)
    with pytest.raises(ValueError, match=message):
        trained_layer.lookup(inputs, weights)
    assert_unchanged(trained_layer, before)


def test_bad_gradients_raise_and_change_nothing(trained_layer):
    trained_layer({"watched": np.array([[1, 2]]), "liked": np.array([3])})
    before = snapshot(trained_layer)
    with pytest.raises(ValueError, match=r"feature 'liked'.*nan"):
        trained_layer.apply_gradients({"watched": np.ones((1, 3)),
                                       "liked": np.array([[0.0, np.nan, 1.0]])})
    with pytest.raises(ValueError, match=r"feature 'watched': gradient of shape \(3, 1\)"):
        trained_layer.apply_gradients({"watched": np.ones((3, 1)), "liked": np.ones((1, 3))})
    with pytest.raises(ValueError, match="gradients"):
        trained_layer.apply_gradients({"watched": np.ones((1, 3))})
    with pytest.raises(ValueError, match=r"feature 'liked': gradient must be real numbers, got "
                                         r"dtype complex128"):  # not the real part alone
        trained_layer.apply_gradients({"watched": np.ones((1, 3)),
                                       "liked": np.array([[1.0 + 2j, 0.0, 1.0]])})
    with pytest.raises(ValueError, match=r"feature 'watched': gradient must be real numbers, got "
                                         r"dtype <U1"):
        trained_layer.apply_gradients({"watched": [["x", "y", "z"]], "liked": np.ones((1, 3))})
    assert_unchanged(trained_layer, before)
    trained_layer.apply_gradients({"watched": np.ones((1, 3)), "liked": np.ones((1, 3))})
    assert trained_layer.step == before[1] + 1
    with pytest.raises(RuntimeError, match="applied at most once"):
        trained_layer.apply_gradients({"watched": np.ones((1, 3)), "liked": np.ones((1, 3))})


def test_errors_are_recemb_exception_classes(trained_layer):
    assert issubclass(recemb.InvalidArgument, ValueError)
    assert issubclass(recemb.FailedPrecondition, RuntimeError)
    with pytest.raises(recemb.InvalidArgument):
        trained_layer.lookup({"watched": np.array([[1, 99]]), "liked": np.array([3])})


def test_apply_without_lookup_and_without_optimizer():
    table = recemb.TableConfig(4, 2)
    layer = recemb.Embedding([recemb.FeatureConfig(table)])
    with pytest.raises(RuntimeError, match="lookup first"):
        layer.apply_gradients([np.ones((1, 2))])
    layer([np.array([1])])
    before = snapshot(layer)
    with pytest.raises(RuntimeError, match="no optimizer"):
        layer.apply_gradients([np.ones((1, 2))])
    assert_unchanged(layer, before)


def test_assign_variable_validates(trained_layer):
    before = snapshot(trained_layer)
    with pytest.raises(ValueError, match=r"table 'video' variable 'parameters': shape \(3, 10\)"):
        trained_layer.assign_table("video", np.zeros((3, 10)))
    bad = np.zeros((10, 3))
    bad[4, 1] = np.inf
    with pytest.raises(ValueError, match="not finite"):
        trained_layer.assign_table("video", bad)
    with pytest.raises(ValueError, match="no table named 'audio'"):
        trained_layer.assign_table("audio", np.zeros((10, 3)))
    with pytest.raises(ValueError, match="has no variable 'momenta'"):
        trained_layer.assign_variable("video", "momenta", np.zeros((10, 3)))
    assert_unchanged(trained_layer, before)
    trained_layer.assign_variable("video", "accumulators", np.full((10, 3), 2.0))
    assert (trained_layer.slot_variables["video"]["accumulators"] == 2.0).all()


def test_config_errors():
    table = recemb.TableConfig(4, 2, name="t")
    with pytest.raises(ValueError, match="vocabulary_size must be an int"):
        recemb.TableConfig(4.5, 2)
    with pytest.raises(ValueError, match="TableConfig: vocabulary_size must be an int and must "
                                         "be >= 1, got 0"):
        recemb.TableConfig(0, 2)
    with pytest.raises(ValueError, match="combiner"):
        recemb.TableConfig(4, 2, combiner="max")
    with pytest.raises(ValueError, match="table must be a TableConfig"):
        recemb.FeatureConfig("t")
    with pytest.raises(ValueError, match="unknown optimizer name 'rmsprop'.*sgd"):
        recemb.Embedding([recemb.FeatureConfig(table)], "rmsprop")
    with pytest.raises(ValueError, match="at 'x': expected a FeatureConfig"):
        recemb.Embedding({"x": table})
    with pytest.raises(ValueError, match="duplicate|unique"):
        recemb.Embedding([recemb.FeatureConfig(table, name="a"),
                          recemb.FeatureConfig(recemb.TableConfig(4, 2, name="t"))])
    with pytest.raises(ValueError, match="non_finite_gradients='ignore': unknown "
                                         "non_finite_gradients 'ignore'; valid names are "
                                         "'reject', 'skip_rows'"):
        recemb.Embedding([recemb.FeatureConfig(table)], non_finite_gradients="ignore")


def test_skip_rows_policy():
    table = recemb.TableConfig(5, 2, initializer="ones", combiner="sum", name="t")
    layer = recemb.Embedding({"a": recemb.FeatureConfig(table)}, "sgd",
                             non_finite_gradients="skip_rows")
    layer({"a": np.array([1, 2])})
    layer.apply_gradients({"a": np.array([[np.nan, 0.0], [1.0, 1.0]])})
    np.testing.assert_array_equal(layer.embedding_tables["t"][1], [1, 1])
    np.testing.assert_allclose(layer.embedding_tables["t"][2], [0.99, 0.99])
    assert layer.skipped_rows == 1


# ---- initializers

def test_initializers():
    calls = []

    def from_shape(shape):
        calls.append(shape)
        return np.arange(shape[0] * shape[1], dtype=np.float64).reshape(shape)

    array = np.random.default_rng(1).normal(size=(7, 3))
    configs = {
        "default": recemb.TableConfig(2000, 16, name="default"),
        "zeros": recemb.TableConfig(7, 3, initializer="zeros", name="zeros"),
        "constant": recemb.TableConfig(7, 3, initializer=0.25, name="constant"),
        "array": recemb.TableConfig(7, 3, initializer=array, name="array"),
        "callable": recemb.TableConfig(7, 3, initializer=from_shape, name="callable"),
    }
    layer = recemb.Embedding({name: recemb.FeatureConfig(c) for name, c in configs.items()})
    tables = layer.embedding_tables
    default = tables["default"]
    assert abs(default.mean()) < 0.01 and abs(default).max() <= 2 / 4 + 1e-6
    assert 0.2 < default.std() < 0.25  # truncated normal, stddev 1/sqrt(16) before truncation
    assert not tables["zeros"].any() and (tables["constant"] == 0.25).all()
    np.testing.assert_array_equal(tables["array"], array.astype(np.float32))
    assert calls == [(7, 3)]
    np.testing.assert_array_equal(tables["callable"], from_shape((7, 3)))
    same_seed = recemb.Embedding({"default": recemb.FeatureConfig(configs["default"])}, seed=0)
    np.testing.assert_array_equal(same_seed.embedding_tables["default"], default)
    other_seed = recemb.Embedding({"default": recemb.FeatureConfig(configs["default"])}, seed=1)
    assert not np.array_equal(other_seed.embedding_tables["default"], default)
    with pytest.raises(ValueError, match=r"table 'table_0': the initializer gives shape \(3, 7\)"):
        recemb.Embedding([recemb.FeatureConfig(recemb.TableConfig(7, 3, initializer=array.T))])
    array[2, 1] = np.nan
    with pytest.raises(ValueError, match="table 'bad'.*not finite"):
        recemb.Embedding([recemb.FeatureConfig(recemb.TableConfig(7, 3, initializer=array,
                                                                  name="bad"))])


# ---- zero copy

def test_tables_and_slots_share_memory_with_the_engine(trained_layer):
    table = trained_layer.embedding_tables["video"]
    accumulators = trained_layer.slot_variables["video"]["accumulators"]
    assert np.shares_memory(table, trained_layer.embedding_tables["video"])
    assert np.shares_memory(accumulators, trained_layer.slot_variables["video"]["accumulators"])
    before = table.copy()
    trained_layer({"watched": np.array([[4, 5]]), "liked": np.array([6])})
    trained_layer.apply_gradients({"watched": np.ones((1, 3)), "liked": np.ones((1, 3))})
    assert not np.array_equal(table[4], before[4])  # the same array sees the update
    np.testing.assert_array_equal(table, trained_layer.embedding_tables["video"])
    table[7] = 42.0  # writes through the array are allowed between calls
    out = trained_layer.lookup({"watched": np.array([[7, 7]]), "liked": np.array([7])})
    np.testing.assert_array_equal(out["liked"], np.full((1, 3), 42.0))
    del trained_layer  # the arrays keep the engine alive
    assert table[7, 0] == 42.0


def test_ids_are_read_in_place_from_views_of_larger_arrays():
    table = recemb.TableConfig(100, 2, initializer=recemb.initializers.RowId(), combiner="sum")
    layer = recemb.Embedding([recemb.FeatureConfig(table)])
    big = np.arange(200, dtype=np.int64).reshape(40, 5) % 100
    rows = big[10:14]  # C-contiguous view: read in place
    np.testing.assert_array_equal(layer.lookup([rows])[0][:, 0], rows.sum(axis=1))
    columns = big[10:14, ::2]  # not contiguous: converted once
    np.testing.assert_array_equal(layer.lookup([columns])[0][:, 0], columns.sum(axis=1))


# ---- serving

def test_serving_embedding_lookup():
    rng = np.random.default_rng(2)
    video = recemb.TableConfig(12, 3, combiner="sqrtn")
    user = recemb.TableConfig(5, 2, combiner="sum")
    features = {"v": recemb.FeatureConfig(video), "u": recemb.FeatureConfig(user)}
    # Flattened order "u", "v": user is table_0.
    tables = {video: random_table(rng, 12, 3), "table_0": random_table(rng, 5, 2)}
    inputs = {"v": recemb.Ragged.from_lists([[1, 2, 3], [], [11]]), "u": np.array([[0, 4]] * 3)}
    weights = {"v": np.array([1.0, 2.0, 3.0, 0.5], np.float32), "u": None}
    out = recemb.serving_embedding_lookup(inputs, weights, tables, features)
    np.testing.assert_allclose(out["v"][0], (tables[video][[1, 2, 3]] * [[1], [2], [3]]).sum(0)
                               / np.sqrt(14), rtol=RTOL)
    np.testing.assert_array_equal(out["v"][1], 0)
    np.testing.assert_allclose(out["u"], np.tile(tables["table_0"][[0, 4]].sum(0), (3, 1)),
                               rtol=RTOL)
    with pytest.raises(ValueError, match="no entry for table 'table_0'"):
        recemb.serving_embedding_lookup(inputs, weights, {video: tables[video]}, features)
    with pytest.raises(ValueError, match=r"table 'table_1': shape \(3, 12\)"):
        recemb.serving_embedding_lookup(inputs, weights, {video: tables[video].T,
                                                          "table_0": tables["table_0"]}, features)


def test_the_package_is_typed():
    """PEP 561: the py.typed marker and the extension's stub ship with the package, and the
    public API's annotations all resolve."""
    import inspect
    import pathlib
    import typing

    import recemb.torch

    package = pathlib.Path(recemb.__file__).parent
    assert (package / "py.typed").exists() and (package / "_recemb.pyi").exists()
    functions = [recemb.serving_embedding_lookup, recemb.latest_checkpoint,
                 recemb.inspect_checkpoint, recemb.read_static_table_as_dynamic,
                 recemb.optimizers.get,
                 recemb.torch.translate_optimizer]
    for cls in (recemb.Embedding, recemb.TableConfig, recemb.FeatureConfig, recemb.Ragged,
                recemb.Sparse, recemb.torch.Embedding):
        functions += [member for name, member in vars(cls).items()
                      if inspect.isfunction(member) and not name.startswith("_")
                      or name in ("__init__", "__call__")]
    for function in functions:
        hints = typing.get_type_hints(function)
        assert "return" in hints, function.__qualname__
