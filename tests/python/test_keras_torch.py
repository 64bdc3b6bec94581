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

import keras_backends  # noqa: E402
from keras_backends import DIM, VOCABULARY, feature  # noqa: E402


@pytest.fixture
def rng():
    return np.random.default_rng(20261207)


def test_model_fit_equals_keras_own_embedding_layer(rng):
    """model.fit on the PyTorch backend (fused SGD in torch's backward pass) against
    keras.layers.Embedding."""
    _, ours, _ = keras_backends.check_fit_matches_keras_embedding(rng, "int64")
    assert ours.trainable_variables == []  # the tables are recemb's, trained in the backward


def test_custom_loop_and_evaluation_change_only_what_they_should(rng):
    table = rng.normal(size=(VOCABULARY, DIM)).astype(np.float32)
    layer = recemb.keras.Embedding(feature(table), optimizer="adagrad")
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


def _trained(rng, examples):
    """A Sequential model with recemb's table (Adagrad), trained one epoch of batches of 8."""
    table = rng.normal(size=(VOCABULARY, DIM)).astype(np.float32)
    layer = recemb.keras.Embedding(feature(table), optimizer="adagrad")
    model = keras_backends.sequential(layer, "int64")
    ids = rng.integers(0, VOCABULARY, size=(examples, 1)).astype(np.int64)
    model.fit(ids, rng.normal(size=(examples, 1)).astype(np.float32), batch_size=8, verbose=0)
    return model, layer, ids


def test_save_weights_round_trip(rng, tmp_path):
    model, layer, ids = _trained(rng, 32)
    assert layer.step == 4
    keras_backends.check_save_weights_round_trip(model, layer, ids, tmp_path, "int64")


def test_model_save_and_load_model(rng, tmp_path):
    model, layer, ids = _trained(rng, 16)
    model.save(tmp_path / "model.keras")
    loaded = keras.models.load_model(tmp_path / "model.keras")
    (restored,) = [lay for lay in loaded.layers if isinstance(lay, recemb.keras.Embedding)]
    assert restored.step == 2
    np.testing.assert_array_equal(restored.embedding_tables["items"],
                                  layer.embedding_tables["items"])
    np.testing.assert_allclose(loaded.predict(ids, verbose=0), model.predict(ids, verbose=0))
