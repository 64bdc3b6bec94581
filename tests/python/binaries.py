"""The programs the Python tests run beside the package."""

import pathlib

import pytest
import recemb

REPOSITORY = pathlib.Path(__file__).resolve().parents[2]


def recemb_binary():
    """The recemb binary built beside the package (the Python build builds it), or the release
    build's; skips the test when there is none."""
    for candidate in (pathlib.Path(recemb.__file__).parents[2] / "bin" / "recemb",
                      REPOSITORY / "build" / "release" / "bin" / "recemb"):
        if candidate.is_file():
            return candidate
    pytest.skip("no recemb binary: build the recemb_cli target")
