"""recemb against torch.nn.EmbeddingBag, side by side: same table shapes, same id batches, same
gradients, in one process, recemb and torch runs alternating.

For each workload and thread count it measures four steps on both sides:

  forward   recemb: layer.lookup(inputs) (a pure lookup)
            torch:  EmbeddingBag(mode="sum") forward under torch.no_grad()
  sgd       recemb: layer(inputs); layer.apply_gradients(gradients) with optimizers.SGD
            torch:  forward, autograd.backward(outputs, gradients), optimizer.step(),
                    zero_grad(set_to_none=True), EmbeddingBag(sparse=True) + torch.optim.SGD
  adagrad   recemb optimizers.Adagrad          vs torch.optim.Adagrad (sparse gradients)
  adam      recemb optimizers.Adam(lazy_adam)  vs torch.optim.SparseAdam

Hyperparameters (set equal on both sides; `HYPERPARAMETERS` below):
  SGD      lr 0.01 (TF's default; torch.optim.SGD has no default lr).
  Adagrad  lr 0.001, initial accumulator 0.1 (TF's defaults; torch's defaults are lr 0.01 and
           initial_accumulator_value 0, which recemb's Adagrad, as TF's, has no epsilon for).
           torch's eps stays 1e-10: next to sqrt(0.1) it changes nothing in float32.
  Adam     lr 0.001, betas (0.9, 0.999), eps 1e-8 (torch SparseAdam's defaults); recemb with
           lazy_adam=True, sum_inside_sqrt=False, bias_correction=True is then the same update
           (recemb.torch.translate_optimizer's mapping; TF's defaults differ: eps 1e-7, eps
           inside the square root, no bias correction).

Equal work: both sides start every (threads, step) phase from the same table values (torch's
tables are reset to their initial values and copied into a freshly built recemb layer) and
fresh optimizer state. Before timing,
each phase checks on one batch that the forward outputs agree (1e-5, relative to the largest
value) and, for the training steps, that after one step the touched rows agree as well (for SGD
1e-5 * sqrt(n), n the most ids of one row in the batch: float32 sums of n contributions in
different orders) and have moved; a mismatch stops the script with exit status 1.

Timing: each side is warmed up, then its steps per run are chosen so that a run lasts about
--min-time seconds, and --repeats runs of each side alternate (recemb, torch, torch, recemb, ...).
With --interleave the two sides alternate every call instead, as in a training loop that runs
torch ops between recemb calls (each call timed alone; a run's first side alternates): what
torch leaves behind (its OpenMP threads still spinning, caches) is then in recemb's time, and
recemb's in torch's.
Figures are medians over the runs: examples/s (bags of the first feature per second) and Mrows/s
(ids looked up per second, over all features). ratio = recemb / torch.

Workloads (batch 4096; `--smoke` shrinks tables and batches):
  d64-uniform, d64-zipf      one table of 1 GiB, dim 64, 20 ids per bag ([B, 20] dense ids)
  d16-uniform, d128-uniform  the same at dim 16 / 128 (also d16-zipf, d128-zipf on request)
  dlrm                       26 tables, the Criteo Kaggle cardinality profile (or --criteo
                             terabyte) with the largest tables cut to one cap so that the total is
                             2 GiB at dim 64 (dlrm/criteo_profile.h's fit_to_budget), one id per
                             feature ([B] ids), Zipf ids
  dlrm-multihot              the same tables, 10..30 ids per bag (mean 20; recemb.Ragged, torch
                             input + offsets), Zipf ids
Uniform ids are uniform over the rows; Zipf ids follow a power law of exponent 1.05 over ranks,
rank r stored at row (r * 2654435761) mod rows, as bench/embedding_bench.cc.

Run (after building the Python package, see docs/python.md):
    PYTHONPATH=build/python/python /usr/bin/python3 bench/compare_torch.py [--markdown]
Memory: up to about 6x the largest workload's tables (dlrm with Adam: torch's table and its two
SparseAdam states, recemb's table and its two slots: 12 GiB). Each phase frees recemb's layer and
torch's optimizer state before the next one is built.
"""

import argparse
import dataclasses
import gc
import math
import mmap
import os
import pathlib
import statistics
import subprocess
import sys
import time

import numpy as np
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bench_common import (CRITEO_KAGGLE, CRITEO_TERABYTE, cpu_model,  # noqa: F401
                          fit_to_budget, git_commit)

import recemb

GIB = 1 << 30
BATCH_SIZE = 4096
NUM_BATCHES = 8  # distinct id batches per workload, used in turn
ZIPF_EXPONENT = 1.05
ZIPF_SCATTER = 2654435761  # rank -> row multiplier, as bench/embedding_bench.cc
INITIAL_SCALE = 0.05  # tables start uniform in [-scale, scale]
TOLERANCE = 1e-5  # the agreement check, relative to the largest value compared
STEPS = ("forward", "sgd", "adagrad", "adam")

HYPERPARAMETERS = {
    "sgd": {"learning_rate": 0.01},
    "adagrad": {"learning_rate": 0.001, "initial_accumulator_value": 0.1, "torch_eps": 1e-10},
    "adam": {"learning_rate": 0.001, "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-8},
}

# The targets of recemb / torch, per step (docs/performance.md, "Known unmet targets").
TARGETS = {"forward": 1.2, "sgd": 3.0, "adagrad": 5.0, "adam": 3.0}


class CheckFailed(AssertionError):
    """recemb and torch disagree: the comparison would not be of equal work."""


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    vocabulary_sizes: tuple  # one table per feature
    dim: int
    bag_size: int  # ids per bag: exactly (dense ids), or the mean of 10..30 (ragged)
    ragged: bool
    ids: str  # "uniform" or "zipf"
    batch_size: int

    @property
    def table_bytes(self):
        return sum(self.vocabulary_sizes) * self.dim * 4


def make_workloads(smoke, criteo):
    """{name: Workload}; smoke divides table bytes by 4096 and the batch by 32."""
    shrink = 4096 if smoke else 1
    batch_size = BATCH_SIZE // 32 if smoke else BATCH_SIZE
    one_table = GIB // shrink
    profile = CRITEO_KAGGLE if criteo == "kaggle" else CRITEO_TERABYTE
    dlrm_tables = fit_to_budget(profile, 64, 2 * GIB // shrink)
    workloads = {}
    for dim in (64, 16, 128):
        for ids in ("uniform", "zipf"):
            name = f"d{dim}-{ids}"
            workloads[name] = Workload(name, (one_table // (4 * dim),), dim, 20, False, ids,
                                       batch_size)
    workloads["dlrm"] = Workload("dlrm", dlrm_tables, 64, 1, False, "zipf", batch_size)
    workloads["dlrm-multihot"] = Workload("dlrm-multihot", dlrm_tables, 64, 20, True, "zipf",
                                          batch_size)
    return workloads


DEFAULT_WORKLOADS = ("d64-uniform", "d64-zipf", "d16-uniform", "d128-uniform", "dlrm",
                     "dlrm-multihot")


# ---------------------------------------------------------------------------------------------
# Data: tables, id batches, gradients.


def random_ids(rng, rows, count, distribution):
    """`count` int64 ids in [0, rows), uniform or Zipf with scattered hot rows."""
    if distribution == "uniform":
        return rng.integers(0, rows, size=count, dtype=np.int64)
    # Inverse CDF of the density ~ x^-s on [1, rows + 1), rank = floor(x) - 1.
    power = 1.0 - ZIPF_EXPONENT
    top = (rows + 1.0) ** power
    x = (1.0 + rng.random(count) * (top - 1.0)) ** (1.0 / power)
    rank = np.clip(x.astype(np.int64) - 1, 0, rows - 1).astype(np.uint64)
    return (rank * np.uint64(ZIPF_SCATTER) % np.uint64(rows)).astype(np.int64)


class Batch:
    """One batch of every feature, in both sides' forms (sharing the same id memory)."""

    def __init__(self, workload, rng):
        self.recemb_inputs = []  # per feature: int64 array [B, L] or [B], or recemb.Ragged
        self.torch_inputs = []  # per feature: (input,) or (input, offsets) tensors
        self.ids = []  # per feature: the flat ids
        for rows in workload.vocabulary_sizes:
            if workload.ragged:
                lengths = rng.integers(10, 31, size=workload.batch_size)
                ragged = recemb.Ragged.from_row_lengths(
                    random_ids(rng, rows, int(lengths.sum()), workload.ids), lengths)
                self.recemb_inputs.append(ragged)
                self.torch_inputs.append((torch.from_numpy(ragged.values),
                                          torch.from_numpy(ragged.row_splits[:-1])))
                self.ids.append(ragged.values)
            else:
                shape = ((workload.batch_size,) if workload.bag_size == 1 else
                         (workload.batch_size, workload.bag_size))
                ids = random_ids(rng, rows, math.prod(shape), workload.ids).reshape(shape)
                self.recemb_inputs.append(ids)
                # EmbeddingBag takes 2-D ids as bags: [B] ids as a [B, 1] view.
                self.torch_inputs.append((torch.from_numpy(ids.reshape(workload.batch_size, -1)),))
                self.ids.append(ids.reshape(-1))
        self.num_ids = sum(len(ids) for ids in self.ids)


class Data:
    """A workload's id batches and its fixed gradient (uniform in [-1, 1], one per feature)."""

    def __init__(self, workload, seed):
        rng = np.random.default_rng(seed)
        self.batches = [Batch(workload, rng) for _ in range(NUM_BATCHES)]
        self.gradients = [rng.uniform(-1.0, 1.0, size=(workload.batch_size, workload.dim))
                          .astype(np.float32) for _ in workload.vocabulary_sizes]
        self.torch_gradients = [torch.from_numpy(g) for g in self.gradients]
        self.ids_per_batch = statistics.fmean(batch.num_ids for batch in self.batches)


def huge_page_array(rows, dim):
    """A zero float32 [rows, dim] array on an anonymous mapping advised to use huge pages (as
    recemb maps its tables)."""
    buffer = mmap.mmap(-1, max(rows * dim * 4, 1))
    if hasattr(mmap, "MADV_HUGEPAGE"):
        buffer.madvise(mmap.MADV_HUGEPAGE)
    return np.frombuffer(buffer, dtype=np.float32, count=rows * dim).reshape(rows, dim)


class TorchTables:
    """torch's side: one EmbeddingBag(mode="sum", sparse=True) per feature, uniform initial
    values, and a copy of the initial values of every row the workload's batches touch, so that
    each phase can start from the same tables (the optimizers only change touched rows)."""

    def __init__(self, workload, data, seed, huge_pages):
        rng = np.random.default_rng(seed + 1)
        self.bags, self._touched, self._initial = [], [], []
        for f, rows in enumerate(workload.vocabulary_sizes):
            weight = (huge_page_array(rows, workload.dim) if huge_pages else
                      np.empty((rows, workload.dim), dtype=np.float32))
            rng.random(out=weight, dtype=np.float32)
            weight -= 0.5
            weight *= 2 * INITIAL_SCALE
            touched = torch.from_numpy(np.unique(np.concatenate([b.ids[f] for b in data.batches])))
            weight = torch.from_numpy(weight)
            self._touched.append(touched)
            self._initial.append(weight[touched].clone())
            self.bags.append(torch.nn.EmbeddingBag.from_pretrained(
                weight, freeze=False, mode="sum", sparse=True))

    def reset(self):
        """Gives every table its initial values back."""
        with torch.no_grad():
            for bag, touched, initial in zip(self.bags, self._touched, self._initial):
                bag.weight.index_copy_(0, touched, initial)


# ---------------------------------------------------------------------------------------------
# The two sides.


def recemb_optimizer(step):
    if step == "forward":
        return None
    h = HYPERPARAMETERS[step]
    if step == "sgd":
        return recemb.optimizers.SGD(learning_rate=h["learning_rate"])
    if step == "adagrad":
        return recemb.optimizers.Adagrad(learning_rate=h["learning_rate"],
                                         initial_accumulator_value=h["initial_accumulator_value"])
    return recemb.optimizers.Adam(learning_rate=h["learning_rate"], beta_1=h["beta_1"],
                                  beta_2=h["beta_2"], epsilon=h["epsilon"], lazy_adam=True,
                                  sum_inside_sqrt=False, bias_correction=True)


def torch_optimizer(step, parameters):
    if step == "forward":
        return None
    h = HYPERPARAMETERS[step]
    if step == "sgd":
        return torch.optim.SGD(parameters, lr=h["learning_rate"])
    if step == "adagrad":
        return torch.optim.Adagrad(parameters, lr=h["learning_rate"],
                                   initial_accumulator_value=h["initial_accumulator_value"],
                                   eps=h["torch_eps"])
    return torch.optim.SparseAdam(parameters, lr=h["learning_rate"],
                                  betas=(h["beta_1"], h["beta_2"]), eps=h["epsilon"])


def build_recemb(workload, step, threads, bags):
    """A recemb layer with torch's current table values: a list of features, feature f looked up
    in table "t<f>" (sum combiner)."""
    features = []
    for f, rows in enumerate(workload.vocabulary_sizes):
        table = recemb.TableConfig(rows, workload.dim, initializer="zeros", combiner="sum",
                                   name=f"t{f}")
        features.append(recemb.FeatureConfig(table, name=f"f{f}"))
    layer = recemb.Embedding(features, recemb_optimizer(step), num_threads=threads)
    tables = layer.embedding_tables  # views of the engine's memory
    for f, bag in enumerate(bags):
        np.copyto(tables[f"t{f}"], bag.weight.detach().numpy())
    return layer


class Phase:
    """One (workload, threads, step): a recemb layer and torch's bags + optimizer, and the step
    function of each side on one batch."""

    def __init__(self, workload, step, threads, bags, data):
        self.workload, self.step, self.bags, self.data = workload, step, bags, data
        self.layer = build_recemb(workload, step, threads, bags)
        self.optimizer = torch_optimizer(step, [bag.weight for bag in bags])

    def close(self):
        self.layer = self.optimizer = None

    def recemb_step(self, batch):
        if self.step == "forward":
            return self.layer.lookup(batch.recemb_inputs)
        activations = self.layer(batch.recemb_inputs)
        self.layer.apply_gradients(self.data.gradients)
        return activations

    def torch_step(self, batch):
        if self.step == "forward":
            with torch.no_grad():
                return [bag(*inputs) for bag, inputs in zip(self.bags, batch.torch_inputs)]
        outputs = [bag(*inputs) for bag, inputs in zip(self.bags, batch.torch_inputs)]
        torch.autograd.backward(outputs, self.data.torch_gradients)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return outputs

    def check(self):
        """Raises CheckFailed unless both sides compute the same forward on the first batch
        and, for training steps, leave the touched rows equal after one step (the phase starts
        from equal tables and fresh optimizer state)."""
        batch = self.data.batches[0]
        where = f"{self.workload.name}, {self.step}"
        expected = [out.detach().numpy().copy() for out in self._torch_forward(batch)]
        got = self.layer.lookup(batch.recemb_inputs)
        for f, (a, b) in enumerate(zip(got, expected)):
            assert_agree(f"{where}: forward of feature f{f}", a, b)
        if self.step == "forward":
            return
        rows = [np.unique(ids) for ids in batch.ids]
        before = [bag.weight.detach()[torch.from_numpy(r)].numpy() for bag, r in
                  zip(self.bags, rows)]
        self.recemb_step(batch)
        self.torch_step(batch)
        tables = self.layer.embedding_tables
        for f, (bag, r) in enumerate(zip(self.bags, rows)):
            after = bag.weight.detach()[torch.from_numpy(r)].numpy()
            # SGD adds a row's n contributions as they are: float32 sums of them in different
            # orders differ by about sqrt(n) roundings. The other optimizers normalise the sum.
            most = int(np.unique(batch.ids[f], return_counts=True)[1].max())
            widen = math.sqrt(most) if self.step == "sgd" else 1.0
            assert_agree(f"{where}: rows of table t{f} after one step", tables[f"t{f}"][r], after,
                         widen)
            moved = np.abs(after - before[f]).max()
            if not moved > 10 * widen * TOLERANCE * max(1.0, np.abs(after).max()):
                raise CheckFailed(f"{where}: one step moved the rows of table t{f} by only "
                                  f"{moved:.3g}: the check could not tell them apart")

    def _torch_forward(self, batch):
        with torch.no_grad():
            return [bag(*inputs) for bag, inputs in zip(self.bags, batch.torch_inputs)]


def assert_agree(what, got, expected, widen=1.0):
    """Raises CheckFailed unless max |got - expected| <= TOLERANCE * widen * max(1, max
    |expected|)."""
    got, expected = np.asarray(got), np.asarray(expected)
    if got.shape != expected.shape:
        raise CheckFailed(f"{what}: recemb shape {got.shape}, torch shape {expected.shape}")
    scale = widen * max(1.0, float(np.abs(expected).max(initial=0.0)))
    error = float(np.abs(got - expected).max(initial=0.0))
    if not error <= TOLERANCE * scale:
        index = np.unravel_index(np.argmax(np.abs(got - expected)), got.shape)
        raise CheckFailed(f"{what}: recemb and torch differ by {error:.3g} (tolerance "
                          f"{TOLERANCE * scale:.3g}) at {tuple(int(i) for i in index)}: "
                          f"recemb {got[index]!r}, torch {expected[index]!r}")


# ---------------------------------------------------------------------------------------------
# Timing.


def run(step_function, batches, steps):
    """Seconds for `steps` steps over the batches in turn."""
    start = time.perf_counter()
    for i in range(steps):
        step_function(batches[i % len(batches)])
    return time.perf_counter() - start


def steps_per_run(step_function, batches, warm_up, min_time):
    """Warms up (at least 2 steps and `warm_up` seconds), then returns the number of steps that
    last about min_time."""
    step_function(batches[0])  # first touch: torch's SparseAdam state, page faults
    steps, elapsed = 0, 0.0
    while steps < 2 or elapsed < warm_up:
        start = time.perf_counter()
        step_function(batches[steps % len(batches)])
        elapsed += time.perf_counter() - start
        steps += 1
    return max(1, round(min_time / (elapsed / steps)))


@dataclasses.dataclass
class Result:
    workload: str
    threads: int
    step: str
    recemb_seconds: list  # per step, one entry per run
    torch_seconds: list
    batch_size: int
    ids_per_batch: float

    def rate(self, side, per):
        seconds = statistics.median(self.recemb_seconds if side == "recemb" else
                                    self.torch_seconds)
        return (self.batch_size if per == "examples" else self.ids_per_batch) / seconds

    def spread(self, side):
        """Half the range of the runs' rates, in percent of the median."""
        seconds = self.recemb_seconds if side == "recemb" else self.torch_seconds
        rates = [1.0 / s for s in seconds]
        return 50.0 * (max(rates) - min(rates)) / statistics.median(rates)

    @property
    def ratio(self):
        return self.rate("recemb", "examples") / self.rate("torch", "examples")


def run_interleaved(sides, order, batches, steps):
    """Seconds per step of each side when the sides take turns every step, in `order`."""
    totals = dict.fromkeys(order, 0.0)
    for i in range(steps):
        batch = batches[i % len(batches)]
        for side in order:
            start = time.perf_counter()
            sides[side](batch)
            totals[side] += time.perf_counter() - start
    return {side: total / steps for side, total in totals.items()}


def measure(phase, repeats, warm_up, min_time, interleave=False):
    batches = phase.data.batches
    sides = {"recemb": phase.recemb_step, "torch": phase.torch_step}
    steps = {side: steps_per_run(fn, batches, warm_up, min_time) for side, fn in sides.items()}
    seconds = {side: [] for side in sides}
    for repeat in range(repeats):
        order = ("recemb", "torch") if repeat % 2 == 0 else ("torch", "recemb")
        if interleave:
            # About 2 * min_time a run: each side's calls add up to about min_time.
            per_step = run_interleaved(sides, order, batches, min(steps.values()))
            for side in order:
                seconds[side].append(per_step[side])
            continue
        for side in order:
            seconds[side].append(run(sides[side], batches, steps[side]) / steps[side])
    return seconds


# ---------------------------------------------------------------------------------------------
# Output.

COLUMNS = ("workload", "threads", "step", "recemb ex/s", "recemb Mrows/s", "±%", "torch ex/s",
           "torch Mrows/s", "±%", "recemb/torch", "target")


def row_cells(result):
    cells = [result.workload, str(result.threads), result.step]
    for side in ("recemb", "torch"):
        cells += [f"{result.rate(side, 'examples') / 1e3:,.0f}k",
                  f"{result.rate(side, 'rows') / 1e6:.2f}", f"{result.spread(side):.0f}"]
    target = TARGETS[result.step]
    verdict = "met" if result.ratio >= target else "NOT met"
    cells += [f"{result.ratio:.2f}", f">={target:g} {verdict}"]
    return cells


def format_table(results, markdown):
    rows = [list(COLUMNS)] + [row_cells(r) for r in results]
    if markdown:
        lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(COLUMNS)]
        lines += ["| " + " | ".join(cells) + " |" for cells in rows[1:]]
        return "\n".join(lines)
    widths = [max(len(cells[i]) for cells in rows) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(cell.rjust(w) if i >= 3 else cell.ljust(w)
                               for i, (cell, w) in enumerate(zip(cells, widths))).rstrip()
                     for cells in rows)


def describe(workload):
    tables = workload.vocabulary_sizes
    size = workload.table_bytes / GIB
    bag = (f"{workload.bag_size} ids/bag" if not workload.ragged else "10..30 ids/bag (mean 20)")
    table_text = (f"1 table of {tables[0]:,} rows" if len(tables) == 1 else
                  f"{len(tables)} tables, {sum(tables):,} rows (largest {max(tables):,})")
    return (f"{workload.name}: {table_text} x dim {workload.dim} = {size:.3g} GiB, "
            f"batch {workload.batch_size}, {bag}, {workload.ids} ids")


def log(message):
    print(message, file=sys.stderr, flush=True)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", default="1,2",
                        help="comma-separated thread counts (recemb num_threads = "
                             "torch.set_num_threads); default 1,2")
    parser.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS),
                        help=f"comma-separated subset; default {','.join(DEFAULT_WORKLOADS)}; "
                             "also d16-zipf, d128-zipf")
    parser.add_argument("--steps", default=",".join(STEPS),
                        help=f"comma-separated subset of {','.join(STEPS)}")
    parser.add_argument("--repeats", type=int, default=5,
                        help="alternating runs per side (median); default 5")
    parser.add_argument("--min-time", type=float, default=0.5,
                        help="seconds per run (its number of steps is set from the warm-up); "
                             "default 0.5")
    parser.add_argument("--criteo", choices=("kaggle", "terabyte"), default="kaggle",
                        help="cardinality profile of the dlrm workloads; default kaggle")
    parser.add_argument("--torch-huge-pages", action="store_true",
                        help="put torch's tables on memory advised for transparent huge pages, "
                             "as recemb's (default: torch's own allocator)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--smoke", action="store_true",
                        help="tables / 4096, batch 128, 1 run of ~10 ms per side: seconds, for CI")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    parser.add_argument("--interleave", action="store_true",
                        help="alternate recemb and torch every call (a training loop's pattern)")
    parser.add_argument("--recemb-threads", choices=("own", "openmp"), default="own",
                        help="recemb's loops on its own --threads threads (default) or on "
                             "torch's OpenMP threads (num_threads=\"openmp\", docs/python.md "
                             "\"One set of threads\")")
    args = parser.parse_args(argv)
    workloads = make_workloads(args.smoke, args.criteo)
    args.threads = [int(t) for t in args.threads.split(",")]
    args.workloads = args.workloads.split(",")
    args.steps = args.steps.split(",")
    for name in args.workloads:
        if name not in workloads:
            parser.error(f"unknown workload {name!r}; valid: {', '.join(workloads)}")
    for step in args.steps:
        if step not in STEPS:
            parser.error(f"unknown step {step!r}; valid: {', '.join(STEPS)}")
    if any(t < 1 for t in args.threads) or args.repeats < 1 or args.min_time <= 0:
        parser.error("--threads, --repeats and --min-time must be positive")
    args.workloads = [workloads[name] for name in args.workloads]
    if args.smoke:
        args.repeats, args.min_time = 1, 0.01
    return args


def main(argv=None):
    args = parse_args(argv)
    warm_up = 0.0 if args.smoke else min(0.3, args.min_time)
    log(f"recemb vs torch {torch.__version__}: threads {args.threads}, {args.repeats} "
        f"alternating runs of ~{args.min_time:g} s per side"
        f"{', calls interleaved' if args.interleave else ''}, recemb on "
        f"{'its own threads' if args.recemb_threads == 'own' else 'torch' + chr(39) + 's threads'}"
        f", torch tables on "
        f"{'huge pages' if args.torch_huge_pages else 'its own allocator'}, load average "
        f"{os.getloadavg()[0]:.2f}")
    results = []
    try:
        for workload in args.workloads:
            log(describe(workload))
            started = time.perf_counter()
            data = Data(workload, args.seed)
            tables = TorchTables(workload, data, args.seed, args.torch_huge_pages)
            log(f"  data and torch tables: {time.perf_counter() - started:.1f} s")
            for threads in args.threads:
                torch.set_num_threads(threads)
                for step in args.steps:
                    started = time.perf_counter()
                    tables.reset()
                    phase = Phase(workload, step,
                                  threads if args.recemb_threads == "own" else "openmp",
                                  tables.bags, data)
                    phase.check()
                    built = time.perf_counter() - started
                    seconds = measure(phase, args.repeats, warm_up, args.min_time,
                                      args.interleave)
                    phase.close()
                    del phase
                    gc.collect()
                    result = Result(workload.name, threads, step, seconds["recemb"],
                                    seconds["torch"], workload.batch_size, data.ids_per_batch)
                    results.append(result)
                    log(f"  {threads}T {step:8} recemb {result.rate('recemb', 'rows') / 1e6:7.2f}"
                        f" Mrows/s, torch {result.rate('torch', 'rows') / 1e6:7.2f} Mrows/s, "
                        f"ratio {result.ratio:.2f} (build + check {built:.1f} s)")
            del tables, data
            gc.collect()
    except CheckFailed as error:
        log(f"check failed: {error}")
    log(f"load average {os.getloadavg()[0]:.2f}")
    print(format_table(results, args.markdown))
    return 0 if len(results) == len(args.workloads) * len(args.threads) * len(args.steps) else 1


if __name__ == "__main__":
    sys.exit(main())
