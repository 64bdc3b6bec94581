"""`recemb serve` from Python: Server runs it on a model directory as a child process, Client asks
it for lookups (the binary body, numpy in and out), predictions and descriptions
(docs/serving.md, "recemb serve"; docs/python.md, "The serving server").

    with recemb.Server("models") as server:           # models/NAME/VERSION/model.recemb
        client = recemb.Client(server.address)
        acts = client.lookup("ctr", {"C1": np.array([[3, 4], [5, 6]]), ...})   # {"C1": [2, dim]}
        probabilities = client.predict("ctr", ["0\\t1\\t...", ...])

A refused request raises the error its status means, with the server's message: ValueError (400,
and 413: a request beyond the server's limits), LookupError (404), RuntimeError (any other status).
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

from recemb.inputs import Ragged, float32_array, id_array

_REQUEST_MAGIC = 0x51424552  # "REBQ"
_ANSWER_MAGIC = 0x41424552  # "REBA"
_BINARY_VERSION = 2


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
    `timeout` seconds. `log` holds the lines it has written to standard error so far (without their newlines)."""

    def __init__(self, model_dir, listen: str = "127.0.0.1:0", threads: int = 0,
                 poll_seconds: float = 1.0, max_body_bytes: int = 64 << 20,
                 max_examples: int = 4096, max_request_memory: int = 256 << 20,
                 max_buffered_bytes: int = 1 << 30, binary=None, timeout: float = 30.0) -> None:
        self.log: list[str] = []
        self._timeout = timeout
        self._process = subprocess.Popen(
            [str(binary or _binary()), "serve", str(model_dir), "--listen", listen, "--threads",
             str(threads), "--poll-seconds", str(poll_seconds), "--max-body-bytes",
             str(max_body_bytes), "--max-examples", str(max_examples), "--max-request-memory",
             str(max_request_memory), "--max-buffered-bytes", str(max_buffered_bytes)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        listening = threading.Event()
        self._address: Optional[str] = None

        def read_log() -> None:
            for line in self._process.stderr:
                line = line.rstrip("\n")
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
            raise RuntimeError("recemb serve did not start:\n" + "\n".join(self.log))

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


class _Layout:
    """What a binary request of a model is encoded against, from its description: the features in
    order, the dynamic table of each (None for a static one) and their fingerprint."""

    def __init__(self, description: dict) -> None:
        dynamic = {table["name"] for table in description["tables"] if table["dynamic"]}
        self.names = [feature["name"] for feature in description["features"]]
        self.dynamic_tables = [feature["table"] if feature["table"] in dynamic else None
                               for feature in description["features"]]
        self.fingerprint = int(description["feature_fingerprint"], 16)


def _ids_and_splits(name: str, value: Any, dynamic_table: Optional[str]
                    ) -> tuple[np.ndarray, np.ndarray]:
    """(int64 ids, int64 row_splits) of one feature's ids: an array [B] or [B, L], or a Ragged;
    str / bytes ids of a dynamic table as recemb.string_key. ValueError naming the feature for
    ids or row_splits that are not integers (never truncated) or beyond int64 (never wrapped), as
    recemb.ServingModel.lookup refuses them."""
    if isinstance(value, Ragged):
        ids = id_array(f"feature '{name}': values", value.values, 1, dynamic_table)
        splits = id_array(f"feature '{name}': row_splits", value.row_splits, 1)
        return ids.astype(np.int64, copy=False), splits.astype(np.int64, copy=False)
    ids = id_array(f"feature '{name}': ids", value, dynamic_table=dynamic_table)
    if ids.ndim == 1:
        ids = ids[:, None]
    if ids.ndim != 2:
        raise ValueError(f"feature '{name}': ids of shape {ids.shape}: give [B], [B, L] or a "
                         "recemb.Ragged")
    splits = np.arange(ids.shape[0] + 1, dtype=np.int64) * ids.shape[1]
    return ids.reshape(-1).astype(np.int64, copy=False), splits


def _weights_of(name: str, value: Any, count: int) -> np.ndarray:
    weights = float32_array(value.values if isinstance(value, Ragged) else value,
                            f"feature '{name}': weights").reshape(-1)
    if weights.size != count:
        raise ValueError(f"feature '{name}': {weights.size} weights for {count} ids")
    return weights


class _FeatureOrderChanged(Exception):
    """409 to a binary lookup: the model's features changed since its description was read."""


class Client:
    """Requests to a `recemb serve` at `address` (HOST:PORT), over one keep-alive connection
    (reopened when the server closes it). Not for concurrent use: one Client per thread."""

    def __init__(self, address: str, timeout: float = 30.0) -> None:
        host, port = address.rsplit(":", 1)
        self._connection = http.client.HTTPConnection(host.strip("[]"), int(port),
                                                      timeout=timeout)
        self._layouts: dict[str, _Layout] = {}

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
            message = f"{method} {path}: {response.status}: {message}"
            if response.status == 409:
                raise _FeatureOrderChanged(message)
            error = {400: ValueError, 404: LookupError, 413: ValueError}.get(response.status,
                                                                             RuntimeError)
            raise error(message)
        return data

    def health(self) -> bool:
        """Whether the server answers GET /healthz."""
        return json.loads(self._request("GET", "/healthz")).get("status") == "ok"

    def models(self) -> list[dict]:
        """GET /v1/models: the models served, each {"name", "version", "versions"}."""
        return json.loads(self._request("GET", "/v1/models"))["models"]

    def describe(self, model: str) -> dict:
        """GET /v1/models/MODEL: versions, tables, features, metadata, the step trained to."""
        return json.loads(self._request("GET", f"/v1/models/{model}"))

    def lookup(self, model: str, features: Mapping[str, Any],
               weights: Optional[Mapping[str, Any]] = None) -> dict[str, np.ndarray]:
        """The activations of a batch, {feature: float32 array of its activation shape}, equal to
        recemb.ServingModel.lookup's of the served version bitwise. `features` maps every feature
        of the model to its ids (an int array [B] or [B, L], a recemb.Ragged; str / bytes for a
        dynamic table), the same B for all; `weights` (optional) some of them to float weights of
        the same layout.

        The body lists the features in the model's order, read from its description (once, and
        again when the features given differ). A request encoded for a description that is no
        longer the served one (a new version whose features differ, or are in another order) is
        refused by the server (409): the description is then read again and the request encoded
        and sent once more, so that no feature's ids are ever read as another's."""
        layout = self._layouts.get(model)
        if layout is None or set(layout.names) != set(features):
            layout = self._read_layout(model)
        try:
            return self._lookup(model, layout, features, weights or {})
        except _FeatureOrderChanged:
            layout = self._read_layout(model)
        try:
            return self._lookup(model, layout, features, weights or {})
        except _FeatureOrderChanged as changed:
            raise RuntimeError(f"{changed} (again, after reading the description anew: the "
                               "model's features are changing)") from None

    def _read_layout(self, model: str) -> _Layout:
        layout = _Layout(self.describe(model))
        self._layouts[model] = layout
        return layout

    def _lookup(self, model: str, layout: _Layout, features: Mapping[str, Any],
                weights: Mapping[str, Any]) -> dict[str, np.ndarray]:
        names = layout.names
        missing = [name for name in names if name not in features]
        unknown = [name for name in features if name not in names]
        if missing or unknown:
            raise ValueError(f"model '{model}' has features {names}: missing {missing}, "
                             f"unknown {unknown}")
        parts = [struct.pack("<4IQ", _REQUEST_MAGIC, _BINARY_VERSION, len(names), 0,
                             layout.fingerprint)]
        for name, dynamic_table in zip(names, layout.dynamic_tables):
            ids, splits = _ids_and_splits(name, features[name], dynamic_table)
            has_weights = name in weights
            parts.append(struct.pack("<2q2I", len(splits) - 1, ids.size, int(has_weights), 0))
            parts += [splits.astype("<i8").tobytes(), ids.astype("<i8").tobytes()]
            if has_weights:
                parts.append(_weights_of(name, weights[name], ids.size).astype("<f4").tobytes())
        data = self._request("POST", f"/v1/models/{model}:lookup", b"".join(parts),
                             "application/octet-stream")
        magic, version, count, _, fingerprint = struct.unpack_from("<4IQ", data, 0)
        if (magic, version, count, fingerprint) != (_ANSWER_MAGIC, _BINARY_VERSION, len(names),
                                                    layout.fingerprint):
            raise RuntimeError(f"model '{model}': not a lookup answer of its features (magic "
                               f"{magic:#x}, version {version}, fingerprint {fingerprint:016x})")
        offset, activations = 24, {}
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
