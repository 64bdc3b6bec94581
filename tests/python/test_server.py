"""recemb.Server and recemb.Client (python/recemb/server.py): the server started from Python, and
lookups through the binary body equal to recemb.ServingModel's bitwise for every kind of input;
predictions equal to `recemb predict`'s to float rounding; refusals raised as the error their status means."""

import os
import pathlib
import subprocess
import time

import numpy as np
import pytest

import recemb
from binaries import recemb_binary


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """models/emb/1: features a (table t: 40 x 3, sum), b (u: 12 x 2, mean), s (u, sequence of
    3) and user (a dynamic table of 3 keys, mean), random rows."""
    tmp = tmp_path_factory.mktemp("server")
    rng = np.random.default_rng(11)
    t = recemb.TableConfig(40, 3, initializer=rng.normal(size=(40, 3)), name="t",
                           combiner="sum")
    u = recemb.TableConfig(12, 2, initializer=rng.normal(size=(12, 2)), name="u",
                           combiner="mean")
    users = recemb.TableConfig(None, 2, name="users", combiner="mean",
                               vocabulary=recemb.DynamicVocabulary(capacity=16))
    layer = recemb.Embedding({"a": recemb.FeatureConfig(t, name="a"),
                              "b": recemb.FeatureConfig(u, name="b"),
                              "s": recemb.FeatureConfig(u, name="s", max_sequence_length=3),
                              "user": recemb.FeatureConfig(users, name="user")})
    layer.write_dynamic_table("users", keys=sorted([recemb.string_key("ann"), 7, -3]),
                              rows=rng.normal(size=(3, 2)).astype(np.float32))
    (tmp / "models" / "emb" / "1").mkdir(parents=True)
    layer.export(tmp / "models" / "emb" / "1" / "model.recemb", dtype="float16")
    return tmp / "models"


@pytest.fixture(scope="module")
def server(model_dir):
    with recemb.Server(model_dir, threads=2, binary=recemb_binary()) as running:
        yield running


def test_lookups_equal_the_serving_models(server, model_dir):
    model = recemb.ServingModel.open(model_dir / "emb" / "1" / "model.recemb")
    rng = np.random.default_rng(2)
    with recemb.Client(server.address) as client:
        assert client.health()
        for round in range(6):
            features = {
                "a": rng.integers(0, 40, size=(6, 4)),
                "b": recemb.Ragged.from_row_lengths(rng.integers(0, 12, size=9),
                                                    [2, 0, 3, 1, 1, 2]),
                "s": rng.integers(0, 12, size=(6, 3)),
                "user": (np.array(["ann", "zed", "ann", "bob", "", "ann"], dtype=object)
                         if round % 2 else np.array([7, -3, 99, 7, 0, -3]))}
            weights = {"a": rng.normal(size=(6, 4)).astype(np.float32)}
            expected = model.lookup(features, weights={"b": None, "s": None, "user": None,
                                                       **weights})
            got = client.lookup("emb", features, weights=weights)
            assert list(got) == ["a", "b", "s", "user"]
            for name, value in expected.items():
                assert got[name].dtype == np.float32
                np.testing.assert_array_equal(got[name], value)


def test_refusals_raise_with_the_servers_message(server):
    with recemb.Client(server.address) as client:
        good = {"a": np.array([[1]]), "b": np.array([[1]]), "s": np.array([[1, 2, 3]]),
                "user": np.array([7])}
        with pytest.raises(ValueError, match="out of range"):
            client.lookup("emb", {**good, "a": np.array([[40]])})
        with pytest.raises(LookupError, match="no model 'nothing'|model 'nothing'"):
            client.describe("nothing")
        with pytest.raises(ValueError, match="missing \\['user'\\]"):
            client.lookup("emb", {k: v for k, v in good.items() if k != "user"})
        with pytest.raises(ValueError, match="cannot predict"):
            client.predict("emb", ["0\t1"])
        assert client.lookup("emb", good)["a"].shape == (1, 3)  # the connection goes on


def test_ids_the_layer_refuses_are_refused_not_wrapped_or_truncated(server):
    """uint64 ids beyond int64 are refused naming them as given (never wrapped to -1, a key a
    dynamic table may hold); float row_splits and float ids are refused (never truncated)."""
    with recemb.Client(server.address) as client:
        good = {"a": np.array([[1]]), "b": np.array([[1]]), "s": np.array([[1, 2, 3]]),
                "user": np.array([7])}
        beyond = np.array([2**64 - 1], dtype=np.uint64)
        for name in ("a", "user"):  # a static table, a dynamic one
            with pytest.raises(ValueError, match=f"feature '{name}': ids: 18446744073709551615 "
                                                 "at index .* is out of range \\(beyond int64"):
                client.lookup("emb", {**good, name: beyond[:, None] if name == "a" else beyond})
        with pytest.raises(ValueError, match="feature 'b': row_splits must be integers, got "
                                             "dtype float64"):
            client.lookup("emb", {**good, "b": recemb.Ragged(np.array([1, 2]), [0, 0.5, 1])})
        with pytest.raises(ValueError, match="feature 'a': ids must be integers, got dtype "
                                             "float64"):
            client.lookup("emb", {**good, "a": np.array([[1.0]])})
        with pytest.raises(ValueError, match="feature 'a': ids are strings"):
            client.lookup("emb", {**good, "a": np.array([["x"]])})
        assert client.lookup("emb", good)["a"].shape == (1, 3)


def test_models_are_listed_and_log_lines_have_no_newlines(server):
    with recemb.Client(server.address) as client:
        assert client.models() == [{"name": "emb", "version": 1, "versions": [1]}]
    assert any("listening on" in line for line in server.log)
    assert not any(line.endswith("\n") for line in server.log)


def _export(layer, models, version):
    """layer exported as models/m/VERSION, appearing at once (written aside, then renamed)."""
    staging = models.parent / f"staging-{version}"
    staging.mkdir()
    layer.export(staging / "model.recemb", dtype="float32")
    (models / "m").mkdir(parents=True, exist_ok=True)
    staging.rename(models / "m" / str(version))


def test_a_client_across_a_hot_swap_that_reorders_features(tmp_path):
    """A Client that looked up version 1 (features x, y) keeps giving each feature its own rows
    after a hot swap to version 2 (y, x: the same tables, the features in the other order): the
    server refuses its body encoded for version 1 (409), and the Client reads the description
    again and encodes the request anew, transparently."""
    rng = np.random.default_rng(21)
    rows = {"x": rng.normal(size=(10, 4)).astype(np.float32),
            "y": rng.normal(size=(10, 4)).astype(np.float32)}

    def layer(order):
        tables = {name: recemb.TableConfig(10, 4, initializer=rows[name], name=f"t{name}",
                                           combiner="sum") for name in order}
        # A list: the features in this order (a dict's would be sorted by name).
        return recemb.Embedding([recemb.FeatureConfig(tables[name], name=name) for name in order])

    models = tmp_path / "models"
    _export(layer(["x", "y"]), models, 1)
    with recemb.Server(models, threads=1, poll_seconds=0.1, binary=recemb_binary()) as server, \
            recemb.Client(server.address) as client, recemb.Client(server.address) as observer:
        for version in (1, 2):
            for _ in range(3):
                ids = {"x": rng.integers(0, 10, size=5), "y": rng.integers(0, 10, size=5)}
                expected = {name: rows[name][ids[name]] for name in ("x", "y")}
                got = client.lookup("m", ids)
                assert sorted(got) == ["x", "y"]
                for name in ("x", "y"):
                    np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
            if version == 1:
                _export(layer(["y", "x"]), models, 2)
                deadline = time.monotonic() + 30
                while observer.describe("m")["version"] != 2:
                    assert time.monotonic() < deadline, server.log
                    time.sleep(0.05)
        assert list(got) == ["y", "x"]  # the answer in the order of the description read anew


def test_requests_beyond_the_memory_budget_raise_with_the_limit(model_dir):
    with recemb.Server(model_dir, threads=1, max_request_memory=3000,
                       binary=recemb_binary()) as server, recemb.Client(server.address) as client:
        features = {"a": np.zeros((200, 1), dtype=np.int64), "b": np.zeros((200, 1), np.int64),
                    "s": np.zeros((200, 3), np.int64), "user": np.zeros(200, np.int64)}
        with pytest.raises(ValueError, match="413: .*more than --max-request-memory 3000"):
            client.lookup("emb", features)
        assert client.lookup("emb", {k: v[:2] for k, v in features.items()})["s"].shape == (2, 3, 2)


def test_a_server_that_cannot_start_says_why(tmp_path):
    with pytest.raises(RuntimeError, match="no model to serve"):
        recemb.Server(tmp_path, poll_seconds=0, binary=recemb_binary())


def test_the_program_beside_the_package_is_found(tmp_path):
    """Without binary=, the recemb program built beside the package runs (its refusal of an
    empty directory shows it ran)."""
    beside = pathlib.Path(os.path.abspath(recemb.__file__)).parents[2] / "bin" / "recemb"
    if not beside.is_file():
        pytest.skip("no recemb program beside the package in this build")
    with pytest.raises(RuntimeError, match="no model to serve"):
        recemb.Server(tmp_path, poll_seconds=0)


def test_predictions_equal_recemb_predicts(tmp_path):
    binary = str(recemb_binary())
    subprocess.run([binary, "train", "--set", "train.steps=3", "--set", "train.batch_size=64",
                    "--set", "data.table_budget_mib=1", "--set", "model.embedding_dim=4",
                    "--set", "model.bottom_mlp=[8, 4]", "--set", "model.top_mlp=[8]",
                    "--set", "train.eval_every=0", "--set", f'output.dir="{tmp_path / "run"}"'],
                   check=True, capture_output=True, timeout=120)
    subprocess.run([binary, "export", str(tmp_path / "run" / "checkpoints"),
                    str(tmp_path / "models" / "ctr" / "1")], check=True, capture_output=True,
                   timeout=120)
    rng = np.random.default_rng(4)
    lines = ["\t".join([str(rng.integers(0, 2))] + [str(rng.integers(0, 50)) for _ in range(13)]
                       + [f"{rng.integers(0, 1 << 32):08x}" for _ in range(26)])
             for _ in range(8)]
    predicted = subprocess.run([binary, "predict", str(tmp_path / "models" / "ctr" / "1")],
                               input="\n".join(lines) + "\n", check=True, capture_output=True,
                               text=True, timeout=120).stdout.split()
    with recemb.Server(tmp_path / "models", binary=recemb_binary()) as server:
        with recemb.Client(server.address) as client:
            probabilities = client.predict("ctr", lines)
            assert client.describe("ctr")["step"] == 3
    # To float rounding: the dense layers' blocking, and so their rounding, depends on the batch
    # (recemb predict's batches are not the request's).
    np.testing.assert_allclose(probabilities, np.asarray(predicted, dtype=np.float32),
                               rtol=4e-6, atol=1e-7)
