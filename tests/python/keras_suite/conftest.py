"""pytest setup of the Keras suite (docs/keras.md): it runs where TensorFlow, Keras 3, tf_keras
and TensorFlow Recommenders are installed (scripts/keras-env) and recemb was built with its
TensorFlow ops; elsewhere (make test's Debian Python) it is skipped as a whole. tf.keras is
tf_keras (Keras 2), as the seed's TPUEmbedding layer needs; `keras` is Keras 3, recemb.keras's."""

import os

import pytest

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

_NEEDED = ("tensorflow", "keras", "tf_keras", "tensorflow_recommenders")


def _missing():
    import importlib.util  # pylint: disable=import-outside-toplevel
    return [name for name in _NEEDED if importlib.util.find_spec(name) is None]


collect_ignore_glob = ["test_*.py"] if _missing() else []


def pytest_report_header(config):
    missing = _missing()
    if missing:
        return f"recemb Keras suite skipped: {missing} not installed (scripts/keras-env)"
    return None


@pytest.fixture
def rng():
    import numpy as np  # pylint: disable=import-outside-toplevel
    return np.random.default_rng(20261207)
