"""recemb.Server and recemb.Client (python/recemb/server.py): the server started from Python, and
lookups through the binary body equal to recemb.ServingModel's bitwise for every kind of input;
predictions equal to `recemb predict`'s to float rounding; refusals raised as the error their status means."""

import os
import pathlib
import subprocess

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
