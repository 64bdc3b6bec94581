"""recemb.keras on Keras's JAX backend (docs/keras.md, "Backends"): jax_backend_script.py in a
process of its own (this suite's process runs Keras on TensorFlow)."""

import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parent / "jax_backend_script.py"


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
def test_the_layer_trains_on_the_jax_backend():
    environment = dict(os.environ, KERAS_BACKEND="jax")
    result = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                            timeout=600, env=environment)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), (
        result.stdout[-2000:] + result.stderr[-4000:])
