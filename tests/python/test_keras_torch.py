"""recemb.keras on Keras 3's PyTorch backend (docs/keras.md, "Backends"), where recemb.torch's
module does the work: model.fit against the same model built from keras.layers.Embedding, a
custom loop with torch's backward pass, saving and loading weights. Runs where Keras 3 and torch
2.x are installed (scripts/python-env); skipped elsewhere, and in a process whose Keras already
runs another backend."""

import os

import numpy as np
import pytest

os.environ["KERAS_BACKEND"] = "torch"
torch = pytest.importorskip("torch")
keras = pytest.importorskip("keras")
if keras.backend.backend() != "torch":
    pytest.skip(f"Keras already runs on {keras.backend.backend()!r} in this process",
                allow_module_level=True)

import recemb  # noqa: E402
import recemb.keras  # noqa: E402

VOCABULARY, DIM = 30, 4


@pytest.fixture
def rng():
    return np.random.default_rng(20261207)


def _feature(table, name="ids"):
    return recemb.FeatureConfig(recemb.TableConfig(VOCABULARY, DIM, initializer=table,
                                                   combiner="sum", name="items"), name=name)


def test_model_fit_equals_keras_own_embedding_layer(rng):
    """model.fit on the PyTorch backend: recemb's table (fused SGD in torch's backward pass) and
    a Dense trained by Keras's SGD give what keras.layers.Embedding trained by Keras's SGD
    gives."""
    table = rng.normal(size=(VOCABULARY, DIM)).astype(np.float32)
    kernel = rng.normal(size=(DIM, 1)).astype(np.float32)
    ids = rng.integers(0, VOCABULARY, size=(64, 1)).astype(np.int64)
    labels = rng.normal(size=(64, 1)).astype(np.float32)

    def model_with(embedding):
        model = keras.Sequential([keras.Input(shape=(1,), dtype="int64"), embedding,
                                  keras.layers.Dense(
            1, kernel_initializer=keras.initializers.Constant(kernel), name="dense")])
        model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1), loss="mse")
        return model

    ours = recemb.keras.Embedding(_feature(table), optimizer=keras.optimizers.SGD(0.1))
    model = model_with(ours)
    reference_table = keras.layers.Embedding(VOCABULARY, DIM, embeddings_initializer=(
        keras.initializers.Constant(table)))
    reference = model_with(keras.Sequential([reference_table, keras.layers.Reshape((DIM,))]))
    model.fit(ids, labels, batch_size=16, epochs=2, shuffle=False, verbose=0)
    reference.fit(ids, labels, batch_size=16, epochs=2, shuffle=False, verbose=0)
    assert ours.step == 8
    np.testing.assert_allclose(ours.embedding_tables["items"],
                               keras.ops.convert_to_numpy(reference_table.embeddings),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.predict(ids, verbose=0), reference.predict(ids, verbose=0),
                               rtol=1e-5, atol=1e-6)
    assert ours.trainable_variables == []  # the tables are recemb's, trained in the backward


def test_custom_loop_and_evaluation_change_only_what_they_should(rng):
    table = rng.normal(size=(VOCABULARY, DIM)).astype(np.float32)
    layer = recemb.keras.Embedding(_feature(table), optimizer="adagrad")
    ids = torch.from_numpy(rng.integers(0, VOCABULARY, size=(8, 3)))
    evaluation = layer(ids, training=False)
    assert not evaluation.requires_grad and tuple(evaluation.shape) == (8, DIM)
    np.testing.assert_array_equal(layer.embedding_tables["items"], table)
    activations = layer(ids, training=True)
    (activations * 2.0).sum().backward()
    assert layer.step == 1
    touched = np.unique(ids.numpy())
    untouched = np.setdiff1d(np.arange(VOCABULARY), touched)
    np.testing.assert_array_equal(layer.embedding_tables["items"][untouched], table[untouched])
    assert np.all(layer.embedding_tables["items"][touched] != table[touched])


def test_save_weights_round_trip(rng, tmp_path):
    table = rng.normal(size=(VOCABULARY, DIM)).astype(np.float32)
    layer = recemb.keras.Embedding(_feature(table), optimizer="adagrad")
    model = keras.Sequential([keras.Input(shape=(1,), dtype="int64"), layer,
                              keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    ids = rng.integers(0, VOCABULARY, size=(32, 1)).astype(np.int64)
    model.fit(ids, rng.normal(size=(32, 1)).astype(np.float32), batch_size=8, verbose=0)
    path = tmp_path / "model.weights.h5"
    model.save_weights(path)
    other = recemb.keras.Embedding(_feature(np.zeros_like(table)), optimizer="adagrad")
    restored = keras.Sequential([keras.Input(shape=(1,), dtype="int64"), other,
                                 keras.layers.Dense(1)])
    restored.load_weights(path)
    assert other.step == layer.step == 4
    np.testing.assert_array_equal(other.embedding_tables["items"], layer.embedding_tables["items"])
    np.testing.assert_array_equal(other.slot_variables["items"]["accumulators"],
                                  layer.slot_variables["items"]["accumulators"])
    np.testing.assert_allclose(restored.predict(ids, verbose=0), model.predict(ids, verbose=0))


def test_model_save_and_load_model(rng, tmp_path):
    table = rng.normal(size=(VOCABULARY, DIM)).astype(np.float32)
    layer = recemb.keras.Embedding(_feature(table), optimizer="adagrad")
    model = keras.Sequential([keras.Input(shape=(1,), dtype="int64"), layer,
                              keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    ids = rng.integers(0, VOCABULARY, size=(16, 1)).astype(np.int64)
    model.fit(ids, rng.normal(size=(16, 1)).astype(np.float32), batch_size=8, verbose=0)
    model.save(tmp_path / "model.keras")
    loaded = keras.models.load_model(tmp_path / "model.keras")
    (restored,) = [lay for lay in loaded.layers if isinstance(lay, recemb.keras.Embedding)]
    assert restored.step == 2
    np.testing.assert_array_equal(restored.embedding_tables["items"],
                                  layer.embedding_tables["items"])
    np.testing.assert_allclose(loaded.predict(ids, verbose=0), model.predict(ids, verbose=0))
