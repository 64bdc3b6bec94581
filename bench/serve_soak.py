#!/usr/bin/python3
"""A soak of `recemb serve` (docs/serving.md, "Soak and freshness"): for --seconds, a trainer in
this process publishes deltas of model "ctr" every --publish-every seconds and exports a new
version of model "swap" every --swap-every seconds, while client threads send valid lookups
(checked: every answer 200 and of the right shapes) and one thread sends invalid requests
(checked: every one answered 4xx); the server's resident size is sampled every second and its log
read. Freshness: after each publish the trainer changes one probe row by a training step and
records when; a thread looks the row up until the server returns its new value (bitwise, the
model is float32) and records the delay. Bounded in time and requests; stops by itself.

    PYTHONPATH=build/python/python /usr/bin/python3 bench/serve_soak.py \
        --binary build/release/bin/recemb --seconds 600

Exit status 0 when no valid request failed, every invalid one got a 4xx, the server exited 0, its
log holds nothing but loads, swaps and deltas, the resident size stayed flat (the median of the
last fifth of the run within --rss-growth of the median of the second fifth) and every probe row
was served within --freshness seconds; 1 otherwise, saying which. Prints a JSON summary.
"""

import argparse
import http.client
import json
import os
import pathlib
import re
import statistics
import struct
import sys
import tempfile
import threading
import time

import numpy as np

import recemb

FEATURES = ("item", "user")
ITEMS, DIM = 200_000, 16
PROBES = 1000  # the last PROBES item rows change only by the freshness probes' steps
BATCH, BAG = 64, 4


def make_layer(seed):
    """Model "ctr": item (a static table of ITEMS x DIM, sum) and user (a dynamic table of
    capacity 4096 that evicts its least recently seen keys, mean), SGD."""
    rng = np.random.default_rng(seed)
    item = recemb.TableConfig(ITEMS, DIM, name="item", combiner="sum",
                              initializer=rng.normal(size=(ITEMS, DIM)) * 0.1)
    user = recemb.TableConfig(None, DIM, name="user", combiner="mean",
                              vocabulary=recemb.DynamicVocabulary(capacity=4096))
    return recemb.Embedding({"item": recemb.FeatureConfig(item, name="item"),
                             "user": recemb.FeatureConfig(user, name="user")},
                            optimizer=recemb.optimizers.SGD(learning_rate=0.05))


def random_batch(rng, size=BATCH):
    return {"item": rng.zipf(1.2, size=(size, BAG)) % (ITEMS - PROBES),
            "user": rng.integers(0, 1 << 20, size=(size, 1))}


def train(layer, rng, steps):
    for _ in range(steps):
        activations = layer(random_batch(rng))
        layer.apply_gradients({name: rng.normal(size=a.shape).astype(np.float32)
                               for name, a in activations.items()})


class Counters:
    def __init__(self):
        self.lock = threading.Lock()
        self.values = {}
        self.failures = []

    def add(self, name, count=1):
        with self.lock:
            self.values[name] = self.values.get(name, 0) + count

    def fail(self, message):
        with self.lock:
            if len(self.failures) < 20:
                self.failures.append(message)
            self.values["failures"] = self.values.get("failures", 0) + 1


def valid_client(address, stop, counters, seed, max_requests):
    rng = np.random.default_rng(seed)
    with recemb.Client(address) as client:
        while not stop.is_set() and counters.values.get("valid", 0) < max_requests:
            model = "ctr" if rng.random() < 0.7 else "swap"
            features = random_batch(rng, int(rng.integers(1, BATCH + 1)))
            try:
                activations = client.lookup(model, features)
                batch = len(features["item"])
                if any(activations[f].shape != (batch, DIM) for f in FEATURES) or not all(
                        np.isfinite(activations[f]).all() for f in FEATURES):
                    counters.fail(f"{model}: activations of wrong shapes or not finite")
                counters.add("valid")
            except Exception as error:  # every valid request must be answered with 200
                counters.fail(f"{model}: {type(error).__name__}: {error}")


def invalid_requests():
    """(method, path, body, content type) of requests the server must refuse with a 4xx."""
    good = {"item": [[1, 2]], "user": [[3]]}
    binary = struct.pack("<4I", 0x51424552, 1, 2, 0)
    return [
        ("POST", "/v1/models/ctr:lookup", "{not json", "application/json"),
        ("POST", "/v1/models/ctr:lookup", json.dumps({"inputs": {**good, "item": [[ITEMS]]}}),
         "application/json"),
        ("POST", "/v1/models/ctr:lookup", json.dumps({"inputs": {"item": [[1]]}}),
         "application/json"),
        ("POST", "/v1/models/ctr:lookup", json.dumps({"inputs": {**good, "x": [[1]]}}),
         "application/json"),
        ("POST", "/v1/models/nothing:lookup", json.dumps({"inputs": good}), "application/json"),
        ("POST", "/v1/models/ctr/versions/99:lookup", json.dumps({"inputs": good}),
         "application/json"),
        ("POST", "/v1/models/ctr:lookup", binary, "application/octet-stream"),
        ("POST", "/v1/models/ctr:lookup", b"\x00" * 40, "application/octet-stream"),
        ("POST", "/v1/models/ctr:predict", json.dumps({"instances": ["1\t2"]}),
         "application/json"),
        ("GET", "/v1/models/ctr:lookup", None, None),
        ("POST", "/v1/models/../../etc:lookup", "{}", "application/json"),
        ("POST", "/v1/models/ctr:lookup", "{}", "text/plain"),
    ]


def invalid_client(port, stop, counters, max_requests):
    requests = invalid_requests()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    index = 0
    while not stop.is_set() and index < max_requests:
        method, path, body, content_type = requests[index % len(requests)]
        index += 1
        try:
            connection.request(method, path, body=body,
                               headers={"Content-Type": content_type} if content_type else {})
            response = connection.getresponse()
            response.read()
            if 400 <= response.status < 500:
                counters.add("invalid")
            else:
                counters.fail(f"{method} {path}: status {response.status}, expected a 4xx")
        except Exception as error:
            counters.fail(f"invalid request {method} {path}: {type(error).__name__}: {error}")
            connection.close()
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        time.sleep(0.002)


def resident_mib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def freshness_watcher(address, probes, stop, delays, counters, limit):
    """Looks each probe (time, id, expected row) up until the server returns the row; records
    the delay from the training step."""
    with recemb.Client(address) as client:
        while not stop.is_set():  # the probe of the last publish is never published: left
            if not probes:
                time.sleep(0.02)
                continue
            stepped, item, expected = probes[0]
            got = client.lookup("ctr", {"item": np.array([[item]]), "user": np.array([[0]])})
            if np.array_equal(got["item"][0], expected):
                delays.append(time.monotonic() - stepped)
                probes.pop(0)
            elif time.monotonic() - stepped > limit:
                counters.fail(f"probe row {item} not served within {limit} s")
                probes.pop(0)
            else:
                time.sleep(0.02)


ALLOWED_LOG = re.compile(r"recemb serve: (serving model|model '\w+': replacing version|"
                         r"model '\w+' version \d+: delta \d+ applied|listening on|SIGTERM|"
                         r"SIGINT|stopped)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", required=True, help="the recemb program to serve with")
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--threads", type=int, default=4, help="the server's request threads")
    parser.add_argument("--publish-every", type=float, default=2.0)
    parser.add_argument("--swap-every", type=float, default=5.0)
    parser.add_argument("--poll-seconds", type=float, default=0.5)
    parser.add_argument("--rss-growth", type=float, default=0.10)
    parser.add_argument("--freshness", type=float, default=10.0)
    parser.add_argument("--max-requests", type=int, default=10_000_000)
    args = parser.parse_args()

    work = pathlib.Path(tempfile.mkdtemp(prefix="recemb-soak-"))
    models = work / "models"
    models.mkdir()
    rng = np.random.default_rng(1)
    layer = make_layer(1)
    train(layer, rng, 5)
    layer.publish(models / "ctr")
    swap_version = 1
    (models / "swap" / "1").mkdir(parents=True)
    layer.export(models / "swap" / "1" / "model.recemb", dtype="int8")

    counters, stop = Counters(), threading.Event()
    rss, delays, probes = [], [], []
    started = time.monotonic()
    with recemb.Server(models, threads=args.threads, poll_seconds=args.poll_seconds,
                       binary=args.binary, timeout=120) as server:
        threads = [threading.Thread(target=valid_client, args=(server.address, stop, counters,
                                                               100 + i, args.max_requests))
                   for i in range(args.clients)]
        threads.append(threading.Thread(target=invalid_client, args=(
            server.port, stop, counters, args.max_requests)))
        threads.append(threading.Thread(target=freshness_watcher, args=(
            server.address, probes, stop, delays, counters, args.freshness)))
        for thread in threads:
            thread.start()
        next_publish = next_swap = next_sample = time.monotonic()
        deltas = 0
        try:
            while time.monotonic() - started < args.seconds and counters.values.get(
                    "failures", 0) == 0:
                now = time.monotonic()
                if now >= next_sample:
                    rss.append(resident_mib(server._process.pid))
                    next_sample += 1.0
                if now >= next_publish:
                    layer.publish(models / "ctr")
                    deltas += 1
                    # The probe: one step that changes one row; its new value, as served.
                    item = ITEMS - PROBES + deltas % PROBES
                    activations = layer({"item": np.array([[item]]), "user": np.array([[0]])})
                    layer.apply_gradients({n: np.ones_like(a) for n, a in activations.items()})
                    expected = layer({"item": np.array([[item]]), "user": np.array([[0]])},
                                     training=False)["item"][0]
                    probes.append((time.monotonic(), item, expected))
                    next_publish += args.publish_every
                if now >= next_swap:
                    swap_version += 1
                    staging = work / f"staging-{swap_version}"
                    staging.mkdir()
                    layer.export(staging / "model.recemb", dtype="int8")
                    staging.rename(models / "swap" / str(swap_version))
                    for old in sorted(int(p.name) for p in (models / "swap").iterdir())[:-3]:
                        for file in (models / "swap" / str(old)).iterdir():
                            file.unlink()
                        (models / "swap" / str(old)).rmdir()
                    next_swap += args.swap_every
                train(layer, rng, 2)
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=60)
        status = server.stop()
        log = list(server.log)

    problems = list(counters.failures)
    if status != 0:
        problems.append(f"the server exited with status {status}")
    unexpected = [line.rstrip() for line in log if not ALLOWED_LOG.search(line)]
    if unexpected:
        problems.append(f"{len(unexpected)} unexpected log lines, first: {unexpected[:3]}")
    fifth = max(1, len(rss) // 5)
    early, late = statistics.median(rss[fifth:2 * fifth] or rss), statistics.median(rss[-fifth:])
    if late > early * (1 + args.rss_growth):
        problems.append(f"resident size grew from {early:.0f} to {late:.0f} MiB")
    summary = {
        "seconds": round(time.monotonic() - started, 1),
        "valid_requests": counters.values.get("valid", 0),
        "invalid_requests_refused": counters.values.get("invalid", 0),
        "failures": counters.values.get("failures", 0),
        "deltas_published": deltas,
        "delta_swaps": sum("applied" in line for line in log),  # several deltas may go in one
        "versions_swapped": sum("replacing version" in line for line in log),
        "rss_mib": {"second_fifth": round(early, 1), "last_fifth": round(late, 1),
                    "max": round(max(rss), 1)} if rss else None,
        "freshness_s": {"probes": len(delays),
                        "p50": round(statistics.median(delays), 3),
                        "max": round(max(delays), 3)} if delays else None,
        "problems": problems,
    }
    print(json.dumps(summary, indent=1))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
