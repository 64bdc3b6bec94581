"""`recemb serve` end to end: the program started on a model directory, talked to with
http.client (JSON and binary lookups equal recemb.ServingModel's bitwise, errors answered with
4xx), and stopped by SIGTERM (exit 0). docs/serving.md, "recemb serve"."""

import http.client
import json
import queue
import re
import signal
import struct
import subprocess
import threading

import numpy as np
import pytest

import recemb
from binaries import recemb_binary

TIMEOUT = 30  # seconds, for every wait


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(port, model, log lines) of `recemb serve` on a model "emb" (version 4), stopped at the
    end by SIGTERM, which must end it with exit status 0."""
    tmp = tmp_path_factory.mktemp("serve")
    rng = np.random.default_rng(5)
    tables = {"t": recemb.TableConfig(30, 3, initializer=rng.normal(size=(30, 3)), name="t",
                                      combiner="sum"),
              "u": recemb.TableConfig(10, 2, initializer=rng.normal(size=(10, 2)), name="u",
                                      combiner="mean")}
    layer = recemb.Embedding([recemb.FeatureConfig(tables["t"], name="a"),
                              recemb.FeatureConfig(tables["u"], name="b")])
    (tmp / "models" / "emb" / "4").mkdir(parents=True)
    layer.export(tmp / "models" / "emb" / "4" / "model.recemb")
    model = recemb.ServingModel.open(tmp / "models" / "emb" / "4" / "model.recemb")
    process = subprocess.Popen(
        [str(recemb_binary()), "serve", str(tmp / "models"), "--listen", "127.0.0.1:0",
         "--threads", "2"], stderr=subprocess.PIPE, text=True)
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in process.stderr], daemon=True).start()
    log, port = [], None
    try:
        while port is None:
            log.append(lines.get(timeout=TIMEOUT))
            match = re.search(r"listening on 127\.0\.0\.1:(\d+)", log[-1])
            port = int(match.group(1)) if match else None
        yield port, model, log
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            status = process.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
    assert status == 0, log


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
    body = struct.pack("<4I", 0x51424552, 1, 2, 0)
    for ids in (a, b):
        examples, bag = ids.shape
        body += struct.pack("<qqII", examples, ids.size, 0, 0)
        body += np.arange(0, ids.size + 1, bag, dtype="<i8").tobytes()
        body += ids.astype("<i8").tobytes()
    status, content_type, data = request(port, "POST", "/v1/models/emb:lookup", body,
                                         "application/octet-stream")
    assert status == 200, data
    assert content_type == "application/octet-stream"
    magic, version, features, _ = struct.unpack_from("<4I", data)
    assert (magic, version, features) == (0x41424552, 1, 2)
    offset = 16
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
