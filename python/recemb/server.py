"""`recemb serve` from Python: Server runs it on a model directory as a child process, Client asks
it for lookups (the binary body, numpy in and out), predictions and descriptions
(docs/serving.md, "recemb serve"; docs/python.md, "The serving server").

    with recemb.Server("models") as server:           # models/NAME/VERSION/model.recemb
        client = recemb.Client(server.address)
        acts = client.lookup("ctr", {"C1": np.array([[3, 4], [5, 6]]), ...})   # {"C1": [2, dim]}
        probabilities = client.predict("ctr", ["0\\t1\\t...", ...])

A refused request raises the error its status means, with the server's message: ValueError (400),
LookupError (404), RuntimeError (any other status).
"""

from __future__ import annotations

import http.client
import json
import os
import pathlib
import re
import shutil
import signal
import struct
import subprocess
import threading
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from recemb import _recemb
from recemb.inputs import Ragged

_REQUEST_MAGIC = 0x51424552  # "REBQ"
_ANSWER_MAGIC = 0x41424552  # "REBA"
_BINARY_VERSION = 1


def _binary() -> pathlib.Path:
    """The recemb program: the one built beside this package, else `recemb` on PATH."""
    # Not resolved: a development build links the package's files to the sources.
    beside = pathlib.Path(os.path.abspath(__file__)).parents[2] / "bin" / "recemb"
    if beside.is_file():
        return beside
    found = shutil.which("recemb")
    if found is None:
        raise FileNotFoundError("no recemb program beside the package or on PATH: build the "
                                "recemb_cli target (README) or pass binary=")
    return pathlib.Path(found)


class Server:
    """`recemb serve model_dir` in a child process, listening on 127.0.0.1 (a free port by
    default); stopped (SIGTERM, then waited for) by stop() or at the end of a with block.

    The constructor returns once the server listens, or raises RuntimeError with its log when it
    exits first (no model to serve, a bad option, an address in use) or does not listen within
    `timeout` seconds. `log` holds the lines it has written to standard error so far."""

    def __init__(self, model_dir, listen: str = "127.0.0.1:0", threads: int = 0,
                 poll_seconds: float = 1.0, max_body_bytes: int = 64 << 20,
                 max_examples: int = 4096, binary=None, timeout: float = 30.0) -> None:
        self.log: list[str] = []
        self._timeout = timeout
        self._process = subprocess.Popen(
            [str(binary or _binary()), "serve", str(model_dir), "--listen", listen, "--threads",
             str(threads), "--poll-seconds", str(poll_seconds), "--max-body-bytes",
             str(max_body_bytes), "--max-examples", str(max_examples)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        listening = threading.Event()
        self._address: Optional[str] = None

        def read_log() -> None:
            for line in self._process.stderr:
                self.log.append(line)
                match = re.search(r"listening on (\S+):(\d+) ", line)
                if match and self._address is None:
                    self._address = f"{match.group(1)}:{match.group(2)}"
                    listening.set()
            listening.set()  # exited
        self._reader = threading.Thread(target=read_log, daemon=True)
        self._reader.start()
        if not listening.wait(timeout) or self._address is None:
            self.stop()
            raise RuntimeError("recemb serve did not start:\n" + "".join(self.log))

    @property
    def address(self) -> str:
        """HOST:PORT the server listens on ([HOST]:PORT for IPv6)."""
        assert self._address is not None
        return self._address

    @property
    def port(self) -> int:
        return int(self.address.rsplit(":", 1)[1])

    def stop(self) -> int:
        """Stops the server (it answers the requests in flight first); returns its exit status."""
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
        try:
            status = self._process.wait(timeout=self._timeout)
        except subprocess.TimeoutExpired:
            self._process.kill()
            status = self._process.wait()
        self._reader.join(timeout=self._timeout)
        return status

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _ids_and_splits(name: str, value: Any) -> tuple[np.ndarray, np.ndarray]:
    """(int64 ids, int64 row_splits) of one feature's ids: an array [B] or [B, L], or a Ragged;
    str / bytes ids (a dynamic table's) as recemb.string_key."""
    if isinstance(value, Ragged):
        values = np.asarray(value.values)
        splits = np.asarray(value.row_splits, dtype=np.int64)
    else:
        values = np.asarray(value)
        if values.ndim == 1:
            values = values[:, None]
        if values.ndim != 2:
            raise ValueError(f"feature '{name}': ids of shape {values.shape}: give [B], [B, L] "
                             "or a recemb.Ragged")
        splits = np.arange(values.shape[0] + 1, dtype=np.int64) * values.shape[1]
        values = values.reshape(-1)
    if values.dtype.kind in "OUS":
        ids = np.asarray(_recemb.string_keys(values), dtype=np.int64)
    elif values.dtype.kind in "iu" or values.size == 0:
        ids = values.astype(np.int64)
    else:
        raise ValueError(f"feature '{name}': ids of dtype {values.dtype}: give integers or "
                         "strings")
    return ids, splits


def _weights_of(name: str, value: Any, count: int) -> np.ndarray:
    weights = np.asarray(value.values if isinstance(value, Ragged) else value, dtype=np.float32)
    weights = weights.reshape(-1)
    if weights.size != count:
        raise ValueError(f"feature '{name}': {weights.size} weights for {count} ids")
    return weights


class Client:
    """Requests to a `recemb serve` at `address` (HOST:PORT), over one keep-alive connection
    (reopened when the server closes it). Not for concurrent use: one Client per thread."""

    def __init__(self, address: str, timeout: float = 30.0) -> None:
        host, port = address.rsplit(":", 1)
        self._connection = http.client.HTTPConnection(host.strip("[]"), int(port),
                                                      timeout=timeout)
        self._features: dict[str, list[str]] = {}

    def close(self) -> None:
        self._connection.close()

    def _request(self, method: str, path: str, body: Optional[bytes] = None,
                 content_type: str = "application/json") -> bytes:
        headers = {"Content-Type": content_type} if body is not None else {}
        self._connection.request(method, path, body=body, headers=headers)
        response = self._connection.getresponse()
        data = response.read()
        if response.status != 200:
            try:
                message = json.loads(data)["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = data.decode(errors="replace")
            error = {400: ValueError, 404: LookupError}.get(response.status, RuntimeError)
            raise error(f"{method} {path}: {response.status}: {message}")
        return data

    def health(self) -> bool:
        """Whether the server answers GET /healthz."""
        return json.loads(self._request("GET", "/healthz")).get("status") == "ok"

    def describe(self, model: str) -> dict:
        """GET /v1/models/MODEL: versions, tables, features, metadata, the step trained to."""
        return json.loads(self._request("GET", f"/v1/models/{model}"))

    def lookup(self, model: str, features: Mapping[str, Any],
               weights: Optional[Mapping[str, Any]] = None) -> dict[str, np.ndarray]:
        """The activations of a batch, {feature: float32 array of its activation shape}, equal to
        recemb.ServingModel.lookup's of the served version bitwise. `features` maps every feature
        of the model to its ids (an int array [B] or [B, L], a recemb.Ragged; str / bytes for a
        dynamic table), the same B for all; `weights` (optional) some of them to float weights of
        the same layout."""
        names = self._features.get(model)
        if names is None or set(names) != set(features):
            names = [f["name"] for f in self.describe(model)["features"]]
            self._features[model] = names
        missing = [name for name in names if name not in features]
        unknown = [name for name in features if name not in names]
        if missing or unknown:
            raise ValueError(f"model '{model}' has features {names}: missing {missing}, "
                             f"unknown {unknown}")
        weights = weights or {}
        parts = [struct.pack("<4I", _REQUEST_MAGIC, _BINARY_VERSION, len(names), 0)]
        for name in names:
            ids, splits = _ids_and_splits(name, features[name])
            has_weights = name in weights
            parts.append(struct.pack("<2q2I", len(splits) - 1, ids.size, int(has_weights), 0))
            parts += [splits.astype("<i8").tobytes(), ids.astype("<i8").tobytes()]
            if has_weights:
                parts.append(_weights_of(name, weights[name], ids.size).astype("<f4").tobytes())
        data = self._request("POST", f"/v1/models/{model}:lookup", b"".join(parts),
                             "application/octet-stream")
        magic, version, count, _ = struct.unpack_from("<4I", data, 0)
        if magic != _ANSWER_MAGIC or version != _BINARY_VERSION or count != len(names):
            raise RuntimeError(f"model '{model}': not a lookup answer (magic {magic:#x})")
        offset, activations = 16, {}
        for name in names:
            rank, _ = struct.unpack_from("<2I", data, offset)
            shape = struct.unpack_from(f"<{rank}q", data, offset + 8)
            offset += 8 + 8 * rank
            size = int(np.prod(shape))
            activations[name] = np.frombuffer(data, dtype="<f4", count=size,
                                              offset=offset).reshape(shape).astype(np.float32)
            offset += 4 * size
        return activations

    def predict(self, model: str, lines: Sequence[str]) -> np.ndarray:
        """Click probabilities (float32) of Criteo TSV lines, by a model exported from
        `recemb train`: the server's train::Predictor of the lines as one batch."""
        body = json.dumps({"instances": list(lines)}).encode()
        answer = json.loads(self._request("POST", f"/v1/models/{model}:predict", body))
        return np.asarray(answer["predictions"], dtype=np.float32)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
