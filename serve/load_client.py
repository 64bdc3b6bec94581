#!/usr/bin/env python3
"""A bounded load run against `recemb serve` (docs/serving.md, "recemb serve", "Load"): exports a
model of 26 features (one table each, int8, like the trainer's default shape) into a fresh model
directory, starts `recemb serve` on it, sends binary lookups of EXAMPLES examples from CLIENTS
processes (one keep-alive connection each) until REQUESTS are answered, checks every answer is
200, and prints requests/s and latency percentiles. Needs the Python package (PYTHONPATH).

  PYTHONPATH=build/python/python /usr/bin/python3 serve/load_client.py build/release/bin/recemb
"""

import argparse
import http.client
import multiprocessing
import pathlib
import re
import signal
import struct
import subprocess
import tempfile
import time

import numpy as np

import recemb

FEATURES = 26


def export_model(directory, vocabulary, dim):
    rng = np.random.default_rng(0)
    tables = [recemb.TableConfig(vocabulary, dim, initializer=rng.normal(size=(vocabulary, dim)),
                                 name=f"T{i}", combiner="sum") for i in range(FEATURES)]
    layer = recemb.Embedding([recemb.FeatureConfig(t, name=f"C{i + 1}")
                              for i, t in enumerate(tables)])
    (directory / "ctr" / "1").mkdir(parents=True)
    layer.export(directory / "ctr" / "1" / "model.recemb", dtype="int8")


def binary_body(rng, examples, vocabulary):
    body = struct.pack("<4I", 0x51424552, 1, FEATURES, 0)
    offsets = np.arange(examples + 1, dtype="<i8").tobytes()
    for _ in range(FEATURES):
        body += struct.pack("<qqII", examples, examples, 0, 0) + offsets
        body += rng.integers(0, vocabulary, size=examples).astype("<i8").tobytes()
    return body


def client(arguments):
    port, requests, examples, vocabulary, seed = arguments
    rng = np.random.default_rng(seed)
    bodies = [binary_body(rng, examples, vocabulary) for _ in range(16)]
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    latencies = []
    began = time.monotonic()  # the system's clock: comparable between the client processes
    for i in range(requests):
        start = time.perf_counter()
        try:
            connection.request("POST", "/v1/models/ctr:lookup", body=bodies[i % len(bodies)],
                               headers={"Content-Type": "application/octet-stream"})
            response = connection.getresponse()
        except (ConnectionError, http.client.HTTPException):  # the server closed a keep-alive
            connection.close()
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            connection.request("POST", "/v1/models/ctr:lookup", body=bodies[i % len(bodies)],
                               headers={"Content-Type": "application/octet-stream"})
            response = connection.getresponse()
        response.read()
        assert response.status == 200, response.status
        latencies.append(time.perf_counter() - start)
    return latencies, began, time.monotonic()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("recemb", help="the recemb binary")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--examples", type=int, default=64)
    parser.add_argument("--threads", type=int, default=8, help="recemb serve --threads")
    parser.add_argument("--vocabulary", type=int, default=100000)
    parser.add_argument("--dim", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        models = pathlib.Path(tmp)
        export_model(models, args.vocabulary, args.dim)
        server = subprocess.Popen([args.recemb, "serve", str(models), "--listen", "127.0.0.1:0",
                                   "--threads", str(args.threads)],
                                  stderr=subprocess.PIPE, text=True)
        try:
            port = None
            deadline = time.monotonic() + 60
            while port is None and time.monotonic() < deadline:
                match = re.search(r"listening on 127\.0\.0\.1:(\d+)", server.stderr.readline())
                port = int(match.group(1)) if match else None
            assert port, "recemb serve did not start"
            per_client = args.requests // args.clients
            with multiprocessing.Pool(args.clients) as pool:
                results = pool.map(client, [(port, per_client, args.examples, args.vocabulary, c)
                                            for c in range(args.clients)])
            # From the first client's first request to the last client's last answer.
            seconds = max(r[2] for r in results) - min(r[1] for r in results)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=60)
    latencies = np.sort(np.concatenate([r[0] for r in results])) * 1000
    count = len(latencies)
    print(f"{count} binary requests of {args.examples} examples x {FEATURES} features, "
          f"{args.clients} clients, --threads {args.threads}: {count / seconds:.0f} requests/s, "
          f"p50 {np.percentile(latencies, 50):.2f} ms, p99 {np.percentile(latencies, 99):.2f} ms")


if __name__ == "__main__":
    main()
