"""recemb.keras with keras-rs's configs, against keras-rs's own DistributedEmbedding (its CPU
path: Keras embedding layers, trained by the Keras optimizer): the same keras_rs.layers
TableConfig / FeatureConfig, the same initial tables and batches of dense [batch, N] ids, weighted
or not; activations, then the tables after several steps of SGD and Adagrad."""

import numpy as np
import pytest
import tensorflow as tf

import keras
import keras_rs
import recemb.keras

BATCH, BAG = 6, 3


def _configs(rng, optimizer):
    tables = [keras_rs.layers.TableConfig(
        name=name, vocabulary_size=size, embedding_dim=dim, combiner=combiner,
        initializer=keras.initializers.Constant(rng.normal(size=(size, dim)).astype(np.float32)),
        optimizer=optimizer) for name, size, dim, combiner in
        (("users", 45, 4, "sum"), ("items", 51, 6, "mean"), ("tags", 37, 5, "sqrtn"))]
    return {f"{table.name}_{k}": keras_rs.layers.FeatureConfig(
        name=f"{table.name}_{k}", table=table, input_shape=(BATCH, BAG),
        output_shape=(BATCH, table.embedding_dim)) for table in tables for k in range(2)}


def _batch(rng, configs, distinct=False):
    """(ids, weights); distinct: no id twice in one table's lookups of the batch."""
    ids = {}
    for table in sorted({feature.table.name for feature in configs.values()}):
        names = [name for name, feature in configs.items() if feature.table.name == table]
        size = configs[names[0]].table.vocabulary_size
        drawn = (rng.choice(size, size=(len(names), BATCH, BAG), replace=False) if distinct
                 else rng.integers(0, size, size=(len(names), BATCH, BAG)))
        ids.update({name: tf.constant(values, tf.int64) for name, values in zip(names, drawn)})
    weights = {name: tf.constant(rng.uniform(0.25, 2.0, size=(BATCH, BAG)).astype(np.float32))
               for name in configs}
    return ids, weights


@pytest.mark.parametrize("weighted", [False, True])
def test_activations_match_keras_rs(rng, weighted):
    configs = _configs(rng, "sgd")
    peer = keras_rs.layers.DistributedEmbedding(configs)
    ours = recemb.keras.Embedding(configs)
    ids, weights = _batch(rng, configs)
    expected = peer(ids, weights if weighted else None)
    got = ours(ids, weights if weighted else None)
    for name in configs:
        assert got[name].shape == expected[name].shape == (BATCH, configs[name].table.embedding_dim)
        np.testing.assert_allclose(got[name], expected[name], rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("optimizer", ["SGD", "Adagrad"])
def test_tables_after_training_match_keras_rs(rng, optimizer):
    """Each table's ids of a batch are distinct for Adagrad: keras-rs's CPU path trains with
    Keras 3's Adagrad, which squares each occurrence's gradient into the accumulator, where TF's
    embedding Adagrad (the TPU's, recemb's) squares the row's summed gradient (docs/keras.md)."""
    def make():
        return getattr(keras.optimizers, optimizer)(learning_rate=0.2)
    configs = _configs(rng, make())
    peer = keras_rs.layers.DistributedEmbedding(configs)
    ours = recemb.keras.Embedding(configs)
    peer_optimizer = make()
    for _ in range(3):
        ids, weights = _batch(rng, configs, distinct=optimizer == "Adagrad")
        cotangents = {name: tf.constant(rng.normal(size=(BATCH, f.table.embedding_dim))
                                        .astype(np.float32)) for name, f in configs.items()}
        with tf.GradientTape() as tape:
            out = peer(ids, weights)
            loss = sum(tf.reduce_sum(out[k] * cotangents[k]) for k in out)
        variables = peer.trainable_variables
        peer_optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        with tf.GradientTape() as tape:
            out = ours(ids, weights, training=True)
            loss = sum(tf.reduce_sum(out[k] * cotangents[k]) for k in out)
        tape.gradient(loss, ours.trainable_variables)
    assert ours.step == 3
    peer_tables = {}
    for variable in peer.trainable_variables:
        values = keras.ops.convert_to_numpy(variable)
        matches = [name for name, table in ours.embedding_tables.items()
                   if table.shape == values.shape]
        assert len(matches) == 1, (variable.path, values.shape)
        peer_tables[matches[0]] = values
    assert sorted(peer_tables) == ["items", "tags", "users"]
    for name, table in peer_tables.items():
        np.testing.assert_allclose(ours.embedding_tables[name], table, rtol=1e-5, atol=1e-5)
