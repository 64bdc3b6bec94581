"""`recemb serve` end to end: the program started on a model directory, talked to with
http.client (JSON and binary lookups equal recemb.ServingModel's bitwise, errors answered with
4xx), and stopped by SIGTERM (exit 0). docs/serving.md, "recemb serve"."""

import contextlib
import http.client
import json
import struct
import threading
import time

import numpy as np
import pytest

import recemb
from binaries import recemb_binary

TIMEOUT = 30  # seconds, for every wait


@contextlib.contextmanager
def running_server(model_dir, poll_seconds=1.0):
    """(port, log lines) of `recemb serve model_dir` (recemb.Server) on a free loopback port,
    stopped at the end by SIGTERM, which must end it with exit status 0."""
    server = recemb.Server(model_dir, threads=2, poll_seconds=poll_seconds,
                           binary=recemb_binary(), timeout=TIMEOUT)
    try:
        yield server.port, server.log
    finally:
        status = server.stop()
    assert status == 0, server.log


def lookup_layer(seed):
    """A layer of features a (table t: 30 x 3, sum) and b (u: 10 x 2, mean), random rows."""
    rng = np.random.default_rng(seed)
    tables = {"t": recemb.TableConfig(30, 3, initializer=rng.normal(size=(30, 3)), name="t",
                                      combiner="sum"),
              "u": recemb.TableConfig(10, 2, initializer=rng.normal(size=(10, 2)), name="u",
                                      combiner="mean")}
    return recemb.Embedding([recemb.FeatureConfig(tables["t"], name="a"),
                             recemb.FeatureConfig(tables["u"], name="b")])


def export_version(layer, model_dir, version):
    """Exports `layer` as model_dir/emb/VERSION, appearing at once (written aside, renamed)."""
    staging = model_dir.parent / f"staging-{version}"
    staging.mkdir()
    layer.export(staging / "model.recemb")
    (model_dir / "emb").mkdir(parents=True, exist_ok=True)
    staging.rename(model_dir / "emb" / str(version))
    return recemb.ServingModel.open(model_dir / "emb" / str(version) / "model.recemb")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(port, model, log lines) of `recemb serve` on a model "emb" (version 4)."""
    tmp = tmp_path_factory.mktemp("serve")
    model = export_version(lookup_layer(5), tmp / "models", 4)
    with running_server(tmp / "models") as (port, log):
        yield port, model, log


def request(port, method, path, body=None, content_type="application/json"):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    headers = {"Content-Type": content_type} if body is not None else {}
    connection.request(method, path, body=body, headers=headers)
    response = connection.getresponse()
    data = response.read()
    connection.close()
    return response.status, response.getheader("Content-Type"), data


def test_json_lookups_equal_the_models(served):
    port, model, log = served
    assert any("serving model 'emb' version 4" in line for line in log)
    rng = np.random.default_rng(7)
    a = rng.integers(0, 30, size=(5, 3))
    b = rng.integers(0, 10, size=(5, 2))
    expected = model.lookup({"a": a, "b": b})
    body = json.dumps({"inputs": {"a": a.tolist(), "b": b.tolist()}})
    status, content_type, data = request(port, "POST", "/v1/models/emb:lookup", body)
    assert status == 200, data
    assert content_type == "application/json"
    outputs = json.loads(data)["outputs"]
    for name in ("a", "b"):
        np.testing.assert_array_equal(np.array(outputs[name], dtype=np.float32), expected[name])


def test_binary_lookups_equal_the_models(served):
    port, model, _ = served
    rng = np.random.default_rng(8)
    a = rng.integers(0, 30, size=(4, 2))
    b = rng.integers(0, 10, size=(4, 1))
    fingerprint = json.loads(request(port, "GET", "/v1/models/emb")[2])["feature_fingerprint"]
    # Version 2: the header, then the fingerprint of the features it is encoded for.
    body = struct.pack("<4IQ", 0x51424552, 2, 2, 0, int(fingerprint, 16))
    for ids in (a, b):
        examples, bag = ids.shape
        body += struct.pack("<qqII", examples, ids.size, 0, 0)
        body += np.arange(0, ids.size + 1, bag, dtype="<i8").tobytes()
        body += ids.astype("<i8").tobytes()
    status, content_type, data = request(port, "POST", "/v1/models/emb:lookup", body,
                                         "application/octet-stream")
    assert status == 200, data
    assert content_type == "application/octet-stream"
    magic, version, features, _, answered_for = struct.unpack_from("<4IQ", data)
    assert (magic, version, features, answered_for) == (0x41424552, 2, 2, int(fingerprint, 16))
    offset = 24
    expected = model.lookup({"a": a, "b": b})
    for name in ("a", "b"):
        rank, _ = struct.unpack_from("<II", data, offset)
        shape = struct.unpack_from(f"<{rank}q", data, offset + 8)
        offset += 8 + 8 * rank
        values = np.frombuffer(data, dtype="<f4", count=int(np.prod(shape)), offset=offset)
        offset += values.nbytes
        np.testing.assert_array_equal(values.reshape(shape), expected[name])
    assert offset == len(data)


def test_bad_requests_get_4xx_and_the_server_goes_on(served):
    port, _, _ = served
    for method, path, body, status, code in [
            ("POST", "/v1/models/nope:lookup", "{}", 404, "NotFound"),
            ("POST", "/v1/models/emb:lookup", "{\"inputs\": {", 400, "InvalidArgument"),
            ("POST", "/v1/models/emb:lookup", '{"inputs": {"a": [[99]], "b": [[1]]}}', 400,
             "InvalidArgument"),
            ("POST", "/v1/models/emb:predict", '{"instances": ["1"]}', 400, "InvalidArgument"),
            ("GET", "/v1/models/emb:lookup", None, 405, "MethodNotAllowed")]:
        got, _, data = request(port, method, path, body)
        assert got == status, data
        assert json.loads(data)["error"]["code"] == code
    status, _, data = request(port, "GET", "/v1/models/emb")
    assert status == 200
    description = json.loads(data)
    assert description["version"] == 4 and description["versions"] == [4]
    assert [table["dim"] for table in description["tables"]] == [3, 2]
    status, _, data = request(port, "GET", "/metrics")
    assert status == 200
    assert 'recemb_serve_model_version{model="emb"} 4' in data.decode()
    assert request(port, "GET", "/healthz")[0] == 200


def test_new_versions_are_swapped_in_while_lookups_go_on(tmp_path):
    """A version written into the model directory is served within the poll period; every
    lookup meanwhile is answered (200) with one version's activations; a damaged version is
    refused (logged) and the one served goes on."""
    models = tmp_path / "models"
    first = export_version(lookup_layer(1), models, 1)
    rng = np.random.default_rng(3)
    a, b = rng.integers(0, 30, size=(4, 3)), rng.integers(0, 10, size=(4, 2))
    body = json.dumps({"inputs": {"a": a.tolist(), "b": b.tolist()}})
    expected = {1: first.lookup({"a": a, "b": b})}
    answers, stop = [], threading.Event()
    with running_server(models, poll_seconds=0.1) as (port, log):
        def client():
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
            while not stop.is_set() and len(answers) < 20000:
                connection.request("POST", "/v1/models/emb:lookup", body=body,
                                   headers={"Content-Type": "application/json"})
                response = connection.getresponse()
                answers.append((response.status, response.read()))
        thread = threading.Thread(target=client)
        thread.start()
        try:
            second = export_version(lookup_layer(2), models, 2)
            expected[2] = second.lookup({"a": a, "b": b})
            deadline = time.monotonic() + TIMEOUT
            while json.loads(request(port, "GET", "/v1/models/emb")[2])["version"] != 2:
                assert time.monotonic() < deadline, log
                time.sleep(0.05)
            damaged = tmp_path / "damaged"
            damaged.mkdir()
            data = bytearray((models / "emb" / "2" / "model.recemb").read_bytes())
            data[-8] ^= 0x55
            (damaged / "model.recemb").write_bytes(bytes(data))
            damaged.rename(models / "emb" / "3")
            while not any("refusing model 'emb' version 3" in line for line in log):
                assert time.monotonic() < deadline, log
                time.sleep(0.05)
            described = json.loads(request(port, "GET", "/v1/models/emb")[2])
            assert described["version"] == 2 and described["versions"] == [1, 2, 3]
        finally:
            stop.set()
            thread.join(timeout=TIMEOUT)
    assert answers
    versions_seen = []
    for status, data in answers:
        assert status == 200, data
        outputs = json.loads(data)["outputs"]
        matches = [v for v, e in expected.items()
                   if all(np.array_equal(np.asarray(outputs[f], dtype=np.float32), e[f])
                          for f in ("a", "b"))]
        assert len(matches) == 1
        if not versions_seen or versions_seen[-1] != matches[0]:
            versions_seen.append(matches[0])
    assert versions_seen[-1] == 2 and versions_seen == sorted(versions_seen)
    assert any("model 'emb': replacing version 1" in line for line in log)


def test_published_deltas_are_served(tmp_path):
    """layer.publish writes a base, then deltas; the server applies each within its poll period,
    and then answers as the layer's own pure lookup, bitwise (float32), dynamic keys included."""
    rng = np.random.default_rng(9)
    t = recemb.TableConfig(50, 4, name="t", combiner="sum",
                           initializer=rng.normal(size=(50, 4)))
    users = recemb.TableConfig(None, 4, name="users", combiner="mean",
                               vocabulary=recemb.DynamicVocabulary(capacity=8))
    layer = recemb.Embedding({"a": recemb.FeatureConfig(t, name="a"),
                              "user": recemb.FeatureConfig(users, name="user")},
                             optimizer=recemb.optimizers.SGD(learning_rate=0.5))
    models = tmp_path / "models"
    models.mkdir()
    assert layer.publish(models / "ctr").sequence == 0
    with running_server(models, poll_seconds=0.1) as (port, log):
        client = recemb.Client(f"127.0.0.1:{port}")
        for sequence in (1, 2, 3):
            for _ in range(3):  # new user keys come, and (capacity 8) old ones go
                features = {"a": rng.integers(0, 50, size=(6, 2)),
                            "user": rng.integers(0, 20, size=(6, 1))}
                acts = layer(features)
                layer.apply_gradients({n: rng.normal(size=a.shape).astype(np.float32)
                                       for n, a in acts.items()})
            assert layer.publish(models / "ctr").sequence == sequence
            deadline = time.monotonic() + TIMEOUT
            while client.describe("ctr")["delta_sequence"] != sequence:
                assert time.monotonic() < deadline, log
                time.sleep(0.05)
            probe = {"a": np.arange(50).reshape(25, 2), "user": np.arange(-2, 23).reshape(25, 1)}
            expected = layer(probe, training=False)
            got = client.lookup("ctr", probe)
            for name in ("a", "user"):
                np.testing.assert_array_equal(got[name], expected[name])
        client.close()
    assert any("model 'ctr' version 1: delta 3 applied" in line for line in log)


def test_a_server_started_empty_serves_the_first_model_published(tmp_path):
    """With polling on, an empty model directory is served (a warning logged; unknown models
    404) until a trainer publishes into it."""
    models = tmp_path / "models"
    models.mkdir()
    with running_server(models, poll_seconds=0.1) as (port, log):
        assert any("warning: no model to serve" in line for line in log), log
        assert request(port, "GET", "/v1/models/emb")[0] == 404
        assert request(port, "GET", "/healthz")[0] == 200
        layer = lookup_layer(8)
        layer.publish(models / "emb")
        deadline = time.monotonic() + TIMEOUT
        while request(port, "GET", "/v1/models/emb")[0] != 200:
            assert time.monotonic() < deadline, log
            time.sleep(0.05)
        a = np.array([[1, 2]])
        b = np.array([[3]])
        status, _, data = request(port, "POST", "/v1/models/emb:lookup",
                                  json.dumps({"inputs": {"a": a.tolist(), "b": b.tolist()}}))
        assert status == 200, data
        expected = layer([a, b], training=False)  # the layer's features are a list
        np.testing.assert_array_equal(
            np.asarray(json.loads(data)["outputs"]["a"], dtype=np.float32), expected[0])
