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

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import keras_backends  # noqa: E402
from keras_backends import VOCABULARY, feature  # noqa: E402

rng = np.random.default_rng(20261207)
assert keras.backend.backend() == "jax"

# model.fit against keras.layers.Embedding trained by the same SGD (JAX's ids: int32).
model, ours, ids = keras_backends.check_fit_matches_keras_embedding(rng, "int32")
table = ours.embedding_tables["items"].copy()

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
    keras_backends.check_save_weights_round_trip(model, ours, ids, directory, "int32")
print("ok")
sys.exit(0)
