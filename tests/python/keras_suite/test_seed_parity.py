"""recemb.keras against the seed itself: TensorFlow Recommenders' TPUEmbedding layer
(tfrs.layers.embedding.TPUEmbedding, ../shared/seed/tpu_embedding_layer.py) built on the CPU
with the same tf.tpu.experimental.embedding configs, the same initial tables and the same
batches. Activations are compared for every input kind, combiner, weights, sequence features and
shared tables; tables after several steps of each optimizer.

The seed on the CPU trains its tables as ordinary variables with the Keras (tf_keras legacy)
optimizer given to it, while recemb applies TF's TPU embedding optimizer fused into the backward
pass (the seed's TPU path). For SGD, Adagrad and FTRL the two are the same update (recemb gets the
Keras optimizer and translates it as the seed's translate_keras_optimizer does; Keras's Adagrad
adds epsilon 1e-7 to sqrt(accumulator), far below float32 here). For Adam they differ on purpose:
Keras's legacy Adam decays every row's moments each step and corrects the bias, the TPU's lazy
Adam does neither; so recemb is given recemb.optimizers.Adam(lazy_adam=False,
sum_inside_sqrt=False, bias_correction=True), the same update as Keras's. AdagradMomentum has no
Keras optimizer to run on the seed's CPU path: tests/python/test_optimizers.py checks it against a
float64 model of TF's TPU math.
"""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_recommenders as tfrs

import recemb
import recemb.keras

E = tf.tpu.experimental.embedding

VOCABULARY = 40
DIM = 6
BATCH = 5
TOLERANCE = {"rtol": 2e-6, "atol": 2e-6}


def _tables(rng, combiner):
    """Two TF tables with random initial rows (constant initializers: both layers start equal)."""
    first = rng.normal(size=(VOCABULARY, DIM)).astype(np.float32)
    second = rng.normal(size=(VOCABULARY + 7, DIM + 2)).astype(np.float32)
    return (E.TableConfig(VOCABULARY, DIM, initializer=tf.constant_initializer(first),
                          combiner=combiner, name="first"),
            E.TableConfig(VOCABULARY + 7, DIM + 2, initializer=tf.constant_initializer(second),
                          combiner=combiner, name="second"))


def _ragged(rng, vocabulary, max_length=4, with_empty=True):
    lengths = rng.integers(0 if with_empty else 1, max_length + 1, size=BATCH)
    ids = rng.integers(0, vocabulary, size=int(lengths.sum()))
    weights = rng.uniform(0.25, 2.0, size=ids.size).astype(np.float32)
    splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return (tf.RaggedTensor.from_row_splits(tf.constant(ids, tf.int64), splits),
            tf.RaggedTensor.from_row_splits(tf.constant(weights), splits))


def _sparse(ragged):
    return ragged.to_sparse()


def _problem(rng, combiner, kind, with_empty=True):
    """(feature configs, features, weights): three features, two sharing table "first", of input
    kind "ragged", "sparse" or "dense" (dense: one id an example, [B], no weights: the seed
    rejects weights with dense ids); with_empty: whether bags may be empty."""
    first, second = _tables(rng, combiner)
    config = {"watched": E.FeatureConfig(first, name="watched"),
              "liked": E.FeatureConfig(first, name="liked"),
              "genre": E.FeatureConfig(second, name="genre")}
    vocabularies = {"watched": VOCABULARY, "liked": VOCABULARY, "genre": VOCABULARY + 7}
    features, weights = {}, {}
    for name, vocabulary in vocabularies.items():
        if kind == "dense":
            features[name] = tf.constant(rng.integers(0, vocabulary, size=BATCH), tf.int64)
            continue
        ids, values = _ragged(rng, vocabulary, with_empty=with_empty)
        features[name], weights[name] = ((ids, values) if kind == "ragged"
                                         else (_sparse(ids), _sparse(values)))
    return config, features, (weights or None)


def _both(config, optimizer_seed, optimizer_recemb):
    seed = tfrs.layers.embedding.TPUEmbedding(config, optimizer=optimizer_seed)
    ours = recemb.keras.Embedding(config, optimizer=optimizer_recemb)
    return seed, ours


def _seed_tables(seed):
    return {table.name: variable.numpy() for table, variable in seed.embedding_tables.items()}


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
@pytest.mark.parametrize("kind", ["ragged", "sparse", "dense"])
def test_activations_match_the_seed(rng, combiner, kind):
    config, features, weights = _problem(rng, combiner, kind)
    seed, ours = _both(config, "sgd", "sgd")
    for name, table in _seed_tables(seed).items():
        np.testing.assert_array_equal(ours.embedding_tables[name], table)
    expected = seed(features, weights)
    eager = ours(features, weights)
    compiled = tf.function(lambda f, w: ours(f, w))(features, weights)
    assert set(eager) == set(expected)
    for name in expected:
        assert eager[name].shape == expected[name].shape
        np.testing.assert_allclose(eager[name], expected[name], **TOLERANCE)
        np.testing.assert_array_equal(compiled[name], eager[name])


def test_dense_ids_of_shape_batch_by_1_are_combined_as_on_the_tpu(rng):
    """Dense [B, 1] ids: the seed's TPU path gives [B, dim]; its CPU path gathers without
    combining ([B, 1, dim], TF's serving lookup). recemb gives the TPU's shape, with the rows."""
    config, features, _ = _problem(rng, "mean", "dense")
    features = {name: tf.reshape(ids, [BATCH, 1]) for name, ids in features.items()}
    seed, ours = _both(config, "sgd", "sgd")
    expected = seed(features)
    got = ours(features)
    for name in expected:
        assert expected[name].shape == (BATCH, 1, got[name].shape[-1])
        np.testing.assert_allclose(got[name], expected[name][:, 0, :], **TOLERANCE)


def test_sequence_features_match_the_seed(rng):
    first, _ = _tables(rng, "sum")
    config = {"history": E.FeatureConfig(first, max_sequence_length=3, name="history"),
              "watched": E.FeatureConfig(first, name="watched")}
    history, _ = _ragged(rng, VOCABULARY, max_length=5)  # longer than 3: cut, as the seed does
    watched, watched_weights = _ragged(rng, VOCABULARY)
    features = {"history": _sparse(history), "watched": _sparse(watched)}
    weights = {"history": None, "watched": _sparse(watched_weights)}
    seed, ours = _both(config, "sgd", "sgd")
    expected = seed(features, weights)
    got = ours(features, weights)
    assert got["history"].shape == (BATCH, 3, DIM)
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], **TOLERANCE)


def _keras_legacy(name, **hyperparameters):
    return getattr(tf.keras.optimizers.legacy, name)(**hyperparameters)


OPTIMIZERS = {
    # name: (the seed's Keras optimizer, recemb's: None to translate the same Keras optimizer)
    "SGD": (lambda: _keras_legacy("SGD", learning_rate=0.2), None),
    "Adagrad": (lambda: _keras_legacy("Adagrad", learning_rate=0.3,
                                      initial_accumulator_value=0.2), None),
    "Ftrl": (lambda: _keras_legacy("Ftrl", learning_rate=0.25, l1_regularization_strength=0.01,
                                   l2_regularization_strength=0.02,
                                   initial_accumulator_value=0.15), None),
    "Adam": (lambda: _keras_legacy("Adam", learning_rate=0.05, beta_1=0.8, beta_2=0.95),
             lambda: recemb.optimizers.Adam(learning_rate=0.05, beta_1=0.8, beta_2=0.95,
                                            epsilon=1e-7, lazy_adam=False,
                                            sum_inside_sqrt=False, bias_correction=True)),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("kind", ["ragged", "sparse"])
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_tables_after_training_match_the_seed(rng, optimizer, kind, compiled):
    make_seed_optimizer, make_ours = OPTIMIZERS[optimizer]
    config, _, _ = _problem(rng, "sqrtn", kind)
    seed_optimizer = make_seed_optimizer()
    seed, ours = _both(config, seed_optimizer,
                       make_seed_optimizer() if make_ours is None else make_ours())

    def seed_step(features, weights, cotangents):
        with tf.GradientTape() as tape:
            activations = seed(features, weights)
            loss = sum(tf.reduce_sum(activations[k] * cotangents[k]) for k in activations)
        variables = seed.trainable_variables
        seed_optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))

    def our_step(features, weights, cotangents):
        with tf.GradientTape() as tape:
            activations = ours(features, weights, training=True)
            loss = sum(tf.reduce_sum(activations[k] * cotangents[k]) for k in activations)
        gradients = tape.gradient(loss, ours.trainable_variables)
        return gradients[0]

    if compiled:
        our_step = tf.function(our_step)
    initial = _seed_tables(seed)
    # The seed's CPU lookup of sparse ids fills an empty bag with id 0 of weight 0
    # (safe_embedding_lookup_sparse), and so gives row 0 a zero gradient, which FTRL's update
    # moves (test_an_empty_bag_leaves_row_0_alone): no empty bags there.
    with_empty = not (optimizer == "Ftrl" and kind == "sparse")
    for _ in range(4):
        _, features, weights = _problem(rng, "sqrtn", kind, with_empty)
        cotangents = {name: tf.constant(rng.normal(size=(BATCH, table.dim)).astype(np.float32))
                      for name, table in (("watched", config["watched"].table),
                                          ("liked", config["liked"].table),
                                          ("genre", config["genre"].table))}
        seed_step(features, weights, cotangents)
        trigger_gradient = our_step(features, weights, cotangents)
        assert float(trigger_gradient) == 0.0
    assert ours.step == 4
    for name, table in _seed_tables(seed).items():
        assert np.abs(table - initial[name]).max() > 1e-2  # the steps moved the table
        np.testing.assert_allclose(ours.embedding_tables[name], table, rtol=1e-5, atol=1e-5)


def test_translated_optimizers_are_the_seeds(rng):
    """translate_keras_optimizer gives the hyperparameters the seed's translation gives."""
    from tensorflow_recommenders.layers.embedding import tpu_embedding_layer as seed_module
    cases = [_keras_legacy("SGD", learning_rate=0.5),
             _keras_legacy("Adagrad", learning_rate=0.1, initial_accumulator_value=0.3),
             _keras_legacy("Adam", learning_rate=0.01, beta_1=0.7, beta_2=0.9, epsilon=1e-5),
             _keras_legacy("Ftrl", learning_rate=0.2, learning_rate_power=-0.6,
                           l1_regularization_strength=0.1, l2_regularization_strength=0.2,
                           beta=0.05, initial_accumulator_value=0.4)]
    for keras_optimizer in cases:
        expected = seed_module.translate_keras_optimizer(keras_optimizer)
        got = recemb.keras.translate_keras_optimizer(keras_optimizer)
        assert type(got).__name__.lower() == type(expected).__name__.lower()
        for field in got._OWN:
            if hasattr(expected, field):
                assert getattr(got, field) == pytest.approx(getattr(expected, field)), field
            else:  # recemb's own (Adam's bias_correction): off, as TF's
                assert getattr(got, field) == type(got)._OWN[field], field
        assert got.learning_rate == pytest.approx(expected.learning_rate)


def test_an_empty_bag_leaves_row_0_alone(rng):
    """An empty bag touches no row in recemb, as on the TPU; the seed's CPU lookup of sparse ids
    fills it with id 0 of weight 0, whose zero gradient FTRL turns into a move of row 0."""
    table = E.TableConfig(VOCABULARY, DIM, combiner="sum", name="table",
                          initializer=tf.constant_initializer(
                              rng.normal(size=(VOCABULARY, DIM)).astype(np.float32)))
    config = {"f": E.FeatureConfig(table, name="f")}
    seed_optimizer = _keras_legacy("Ftrl", learning_rate=0.5, l1_regularization_strength=0.5)
    seed, ours = _both(config, seed_optimizer, seed_optimizer)
    features = {"f": tf.ragged.constant([[3], []], dtype=tf.int64).to_sparse()}
    initial = _seed_tables(seed)["table"]
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(seed(features)["f"])
    seed_optimizer.apply_gradients(zip(tape.gradient(loss, seed.trainable_variables),
                                       seed.trainable_variables))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(ours(features, training=True)["f"])
    tape.gradient(loss, ours.trainable_variables)
    assert not np.array_equal(_seed_tables(seed)["table"][0], initial[0])
    np.testing.assert_array_equal(ours.embedding_tables["table"][0], initial[0])
    np.testing.assert_allclose(ours.embedding_tables["table"][3], _seed_tables(seed)["table"][3],
                               **TOLERANCE)
