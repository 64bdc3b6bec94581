"""pytest setup: the tests import the built package `recemb` (and this folder's helpers)."""

try:
    import recemb  # noqa: F401
except ImportError as error:
    raise ImportError(
        "cannot import recemb: build it with CMake (-DRECEMB_BUILD_PYTHON=ON) and run pytest with "
        "PYTHONPATH=<build>/python, or pip install the repository (see docs/python.md)") from error
