"""Checks of recemb.keras that every Keras backend but TensorFlow runs the same way (PyTorch:
test_keras_torch.py; JAX: keras_suite/jax_backend_script.py): model.fit against the same model
built from keras.layers.Embedding, and the weights saved and loaded. The caller imports Keras with
its backend chosen first."""

import os

import keras
import numpy as np

import recemb
import recemb.keras

VOCABULARY, DIM = 30, 4


def feature(table):
    """One feature on one table "items" of VOCABULARY x DIM rows starting at `table`."""
    return recemb.FeatureConfig(recemb.TableConfig(VOCABULARY, DIM, initializer=table,
                                                   combiner="sum", name="items"), name="ids")


def sequential(embedding, id_dtype, kernel=None):
    """ids [B, 1] -> embedding -> Dense(1) (its kernel `kernel` when given), compiled with SGD."""
    dense = keras.layers.Dense(1, name="dense", kernel_initializer=(
        "glorot_uniform" if kernel is None else keras.initializers.Constant(kernel)))
    model = keras.Sequential([keras.Input(shape=(1,), dtype=id_dtype), embedding, dense])
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1), loss="mse")
    return model


def check_fit_matches_keras_embedding(rng, id_dtype):
    """model.fit: recemb's table (fused SGD) and a Dense trained by Keras's SGD give what
    keras.layers.Embedding trained by Keras's SGD gives. Returns (model, layer, ids)."""
    table = rng.normal(size=(VOCABULARY, DIM)).astype(np.float32)
    kernel = rng.normal(size=(DIM, 1)).astype(np.float32)
    ids = rng.integers(0, VOCABULARY, size=(64, 1)).astype(id_dtype)
    labels = rng.normal(size=(64, 1)).astype(np.float32)
    ours = recemb.keras.Embedding(feature(table), optimizer=keras.optimizers.SGD(0.1))
    model = sequential(ours, id_dtype, kernel)
    reference_table = keras.layers.Embedding(VOCABULARY, DIM, embeddings_initializer=(
        keras.initializers.Constant(table)))
    reference = sequential(keras.Sequential([reference_table, keras.layers.Reshape((DIM,))]),
                           id_dtype, kernel)
    model.fit(ids, labels, batch_size=16, epochs=2, shuffle=False, verbose=0)
    reference.fit(ids, labels, batch_size=16, epochs=2, shuffle=False, verbose=0)
    assert ours.step == 8, ours.step
    np.testing.assert_allclose(ours.embedding_tables["items"],
                               keras.ops.convert_to_numpy(reference_table.embeddings),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.predict(ids, verbose=0), reference.predict(ids, verbose=0),
                               rtol=1e-5, atol=1e-6)
    return model, ours, ids


def check_save_weights_round_trip(model, layer, ids, directory, id_dtype):
    """save_weights then load_weights into a new model: the same tables, slots, step and
    predictions."""
    path = os.path.join(str(directory), "model.weights.h5")
    model.save_weights(path)
    other = recemb.keras.Embedding(feature(np.zeros((VOCABULARY, DIM), np.float32)),
                                   optimizer=layer.embedding.optimizer)
    restored = sequential(other, id_dtype)
    restored.load_weights(path)
    assert other.step == layer.step
    np.testing.assert_array_equal(other.embedding_tables["items"], layer.embedding_tables["items"])
    for slot, values in layer.slot_variables["items"].items():
        np.testing.assert_array_equal(other.slot_variables["items"][slot], values)
    np.testing.assert_allclose(restored.predict(ids, verbose=0), model.predict(ids, verbose=0))
