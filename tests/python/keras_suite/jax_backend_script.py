"""recemb.keras on Keras's JAX backend, run by test_keras_jax.py in a process of its own
(KERAS_BACKEND=jax): model.fit against the same model built from keras.layers.Embedding, a jitted
custom step with jax.grad, evaluation without updates, save_weights round trip. Exits 0 and prints
"ok" when every check holds."""

import os
import sys
import tempfile

os.environ["KERAS_BACKEND"] = "jax"

import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

import recemb  # noqa: E402
import recemb.keras  # noqa: E402

VOCABULARY, DIM = 30, 4
rng = np.random.default_rng(20261207)
assert keras.backend.backend() == "jax"


def feature(table):
    return recemb.FeatureConfig(recemb.TableConfig(VOCABULARY, DIM, initializer=table,
                                                   combiner="sum", name="items"), name="ids")


# model.fit against keras.layers.Embedding trained by the same SGD.
table = rng.normal(size=(VOCABULARY, DIM)).astype(np.float32)
kernel = rng.normal(size=(DIM, 1)).astype(np.float32)
ids = rng.integers(0, VOCABULARY, size=(64, 1)).astype(np.int32)
labels = rng.normal(size=(64, 1)).astype(np.float32)


def model_with(embedding):
    model = keras.Sequential([keras.Input(shape=(1,), dtype="int32"), embedding,
                              keras.layers.Dense(1, name="dense", kernel_initializer=(
                                  keras.initializers.Constant(kernel)))])
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1), loss="mse")
    return model


ours = recemb.keras.Embedding(feature(table), optimizer=keras.optimizers.SGD(0.1))
model = model_with(ours)
reference_table = keras.layers.Embedding(VOCABULARY, DIM, embeddings_initializer=(
    keras.initializers.Constant(table)))
reference = model_with(keras.Sequential([reference_table, keras.layers.Reshape((DIM,))]))
model.fit(ids, labels, batch_size=16, epochs=2, shuffle=False, verbose=0)
reference.fit(ids, labels, batch_size=16, epochs=2, shuffle=False, verbose=0)
assert ours.step == 8, ours.step
np.testing.assert_allclose(ours.embedding_tables["items"],
                           np.asarray(reference_table.embeddings), rtol=1e-5, atol=1e-6)
np.testing.assert_allclose(model.predict(ids, verbose=0), reference.predict(ids, verbose=0),
                           rtol=1e-5, atol=1e-6)

# A jitted step of our own: jax.grad through the layer's trigger applies the gradients.
layer = recemb.keras.Embedding(feature(table), optimizer="adagrad")
trigger = layer.trainable_variables[0]
batch = rng.integers(0, VOCABULARY, size=(8, 3)).astype(np.int32)


@jax.jit
def gradient(trigger_value, ids):
    def loss(value):
        outputs, _ = layer.stateless_call([value], [], ids, training=True)
        return (outputs * 2.0).sum()
    return jax.grad(loss)(trigger_value)


before = layer.embedding_tables["items"].copy()
evaluation = layer(batch, training=False)
np.testing.assert_array_equal(layer.embedding_tables["items"], before)
assert float(gradient(trigger.value, batch)) == 0.0
assert float(gradient(trigger.value, batch)) == 0.0
assert layer.step == 2, layer.step
touched = np.unique(batch)
untouched = np.setdiff1d(np.arange(VOCABULARY), touched)
np.testing.assert_array_equal(layer.embedding_tables["items"][untouched], before[untouched])
assert np.all(layer.embedding_tables["items"][touched] != before[touched])
np.testing.assert_allclose(np.asarray(evaluation), table[batch].sum(axis=1), rtol=1e-6)

# save_weights / load_weights.
with tempfile.TemporaryDirectory() as directory:
    path = os.path.join(directory, "model.weights.h5")
    model.save_weights(path)
    other = recemb.keras.Embedding(feature(np.zeros_like(table)), optimizer="sgd")
    restored = model_with(other)
    restored.load_weights(path)
    assert other.step == 8
    np.testing.assert_array_equal(other.embedding_tables["items"], ours.embedding_tables["items"])
print("ok")
sys.exit(0)
