"""recemb beside FBGEMM's table-batched embedding (TBE) as its wheel ships it (fbgemm-gpu-cpu),
on the same table and ids, in one process, the two alternating:

  lookup             recemb: recemb.Embedding.lookup(ids) (a pure lookup)
                     FBGEMM: SplitTableBatchedEmbeddingBagsCodegen(indices, offsets) under
                             torch.no_grad(), pooling SUM
  lookup + update    recemb: layer(ids); layer.apply_gradients(gradient), with
                             recemb.optimizers.RowWiseAdagrad
                     FBGEMM: the same module's forward, then backward of the gradient: its
                             backward applies the fused EXACT_ROWWISE_ADAGRAD to the touched rows

SplitTableBatchedEmbeddingBagsCodegen is FBGEMM's training TBE; with its table in host memory
(EmbeddingLocation.HOST) and ComputeDevice.CPU it runs FBGEMM's CPU kernels, the module that
TorchRec's sharded EmbeddingBagCollection builds on the CPU (its BatchedFusedEmbeddingBag). Its
defaults are kept, as TorchRec keeps them (the ids' bounds checked every call, as recemb checks
them).

The workload, as bench/peer/compare.sh's (where recemb meets FBGEMM's kernels rebuilt from
source): one float32 table of 1 GiB at dim 64 (4,194,304 rows; --rows to shrink), batches of 4096
bags of 20 int64 ids, pooled by sum; ids uniform over the rows or Zipf (exponent 1.05, hot rows
scattered; bench/compare_torch.py's random_ids); 1 and 2 threads (torch.set_num_threads for
FBGEMM, which runs on torch's intra-op threads; num_threads for recemb). Row-wise Adagrad on both
sides: a += mean_d(g_d^2); w -= lr * g / (sqrt(a) + eps), lr 0.01, eps 1e-8, accumulators from 0
(FBGEMM's TBE has no other start); the gradient of the pooled outputs is fixed, uniform in
[-1, 1].

Equal work: for each thread count the script builds recemb's layer from FBGEMM's current table
and sets FBGEMM's accumulators to zero, then checks on one batch that the pooled outputs agree
and that after one update step of each the touched rows agree (both to 1e-5 relative to the
largest value, bench/compare_torch.py's assert_agree) and have moved; a mismatch stops the script
with exit status 1 before any timing.

Timing: for each thread count, id distribution and step, --rounds rounds of one run of each side
(recemb, FBGEMM, then FBGEMM, recemb, ...), a run being --steps steps over --batches distinct
batches in turn, after a warm-up of two steps each. Figures are medians over the rounds: Mrows/s
counts ids looked up (4096 x 20 per step) per second; ratio = recemb / FBGEMM, the median of the
per-round ratios.

Run (after building the Python package, see docs/python.md), in an environment with torch and
fbgemm-gpu-cpu (scripts/python-env):
    PYTHONPATH=build/python/python python bench/compare_tbe.py [--rows 4194304]
    ... --smoke          65,536 rows, batches of 256 x 20, 3 rounds of 5 steps, a few seconds
Memory: about 2.1x the table (FBGEMM's table, recemb's, their accumulators).
"""

import argparse
import pathlib
import statistics
import sys
import time

import fbgemm_gpu
import numpy as np
import torch
from fbgemm_gpu.split_embedding_configs import EmbOptimType, SparseType
from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
    ComputeDevice, SplitTableBatchedEmbeddingBagsCodegen)

import recemb

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from compare_torch import (CheckFailed, assert_agree, cpu_model, git_commit,  # noqa: E402
                           random_ids)

DIM = 64
TABLE_ROWS = (1 << 30) // (DIM * 4)  # 1 GiB of float32
BATCH_SIZE = 4096
BAG_SIZE = 20
LEARNING_RATE = 0.01
EPSILON = 1e-8
INITIAL_SCALE = 0.05  # the table starts uniform in [-scale, scale]
DISTRIBUTIONS = ("uniform", "zipf")
STEPS = ("lookup", "lookup + update")
SIDES = ("recemb", "fbgemm")


class Batches:
    """--batches batches of [batch, bag] ids in both sides' forms, and the fixed gradient."""

    def __init__(self, rows, batch_size, bag_size, distribution, count, rng):
        self.ids = [random_ids(rng, rows, batch_size * bag_size, distribution)
                    .reshape(batch_size, bag_size) for _ in range(count)]
        self.indices = [torch.from_numpy(ids.reshape(-1)) for ids in self.ids]
        self.offsets = torch.arange(0, batch_size * bag_size + 1, bag_size, dtype=torch.int64)
        self.gradient = rng.uniform(-1.0, 1.0, size=(batch_size, DIM)).astype(np.float32)
        self.torch_gradient = torch.from_numpy(self.gradient)

    @property
    def ids_per_batch(self):
        return self.ids[0].size


def fbgemm_table(rows, seed):
    """FBGEMM's TBE over one table of `rows` x DIM on the CPU, uniform initial values."""
    module = SplitTableBatchedEmbeddingBagsCodegen(
        embedding_specs=[(rows, DIM, EmbeddingLocation.HOST, ComputeDevice.CPU)],
        optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=LEARNING_RATE, eps=EPSILON,
        weight_decay=0.0, pooling_mode=PoolingMode.SUM, weights_precision=SparseType.FP32,
        output_dtype=SparseType.FP32, device=torch.device("cpu"))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        module.split_embedding_weights()[0].uniform_(-INITIAL_SCALE, INITIAL_SCALE,
                                                     generator=generator)
    return module


def recemb_layer(weights, threads):
    """recemb.Embedding over a copy of `weights` (one table, sum combiner), RowWiseAdagrad."""
    rows, dim = weights.shape
    table = recemb.TableConfig(rows, dim, initializer="zeros", combiner="sum", name="t")
    optimizer = recemb.optimizers.RowWiseAdagrad(learning_rate=LEARNING_RATE, epsilon=EPSILON,
                                                 initial_accumulator_value=0.0)
    layer = recemb.Embedding([recemb.FeatureConfig(table, name="f")], optimizer,
                             num_threads=threads)
    np.copyto(layer.embedding_tables["t"], weights)
    return layer


class Sides:
    """One thread count: FBGEMM's module (fresh accumulators) and recemb's layer with FBGEMM's
    table values, and each side's step functions on a batch index."""

    def __init__(self, fbgemm, threads):
        self.fbgemm = fbgemm
        self.threads = threads
        with torch.no_grad():
            for state in fbgemm.split_optimizer_states()[0]:
                state.zero_()
        self.layer = recemb_layer(fbgemm.split_embedding_weights()[0].numpy(), threads)

    def step(self, side, step, batches):
        """The step function of one side: f(batch index) -> pooled outputs."""
        lookup = step == "lookup"
        if side == "recemb":
            if lookup:
                return lambda i: self.layer.lookup([batches.ids[i]])[0]

            def recemb_update(i):
                pooled = self.layer([batches.ids[i]])[0]
                self.layer.apply_gradients([batches.gradient])
                return pooled
            return recemb_update
        if lookup:
            def fbgemm_lookup(i):
                with torch.no_grad():
                    return self.fbgemm(batches.indices[i], batches.offsets)
            return fbgemm_lookup

        def fbgemm_update(i):
            pooled = self.fbgemm(batches.indices[i], batches.offsets)
            pooled.backward(batches.torch_gradient)  # the fused optimizer updates the rows
            return pooled
        return fbgemm_update

    def check(self, batches):
        """Raises CheckFailed unless both sides pool the first batch alike and, after one update
        step of each on it, hold the same values in its touched rows, and those moved."""
        where = f"{self.threads} thread(s)"
        expected = self.step("fbgemm", "lookup", batches)(0).numpy()
        assert_agree(f"{where}: pooled outputs", self.step("recemb", "lookup", batches)(0),
                     expected)
        rows = np.unique(batches.ids[0])
        weights = self.fbgemm.split_embedding_weights()[0]
        before = weights[torch.from_numpy(rows)].numpy().copy()
        self.step("recemb", "lookup + update", batches)(0)
        self.step("fbgemm", "lookup + update", batches)(0)
        after = weights[torch.from_numpy(rows)].numpy()
        assert_agree(f"{where}: touched rows after one update", self.layer.embedding_tables["t"]
                     [rows], after)
        moved = float(np.abs(after - before).max())
        if not moved > 1e-3 * LEARNING_RATE:
            raise CheckFailed(f"{where}: one update moved the touched rows by only {moved:.3g}: "
                              "the check could not tell the tables apart")


def run_seconds(step_function, count, steps):
    start = time.perf_counter()
    for i in range(steps):
        step_function(i % count)
    return time.perf_counter() - start


def measure(sides, step, batches, rounds, steps):
    """{side: [Mrows/s per round]} over `rounds` rounds, the side order alternating."""
    functions = {side: sides.step(side, step, batches) for side in SIDES}
    count = len(batches.ids)
    for function in functions.values():  # warm-up: first calls, page faults
        run_seconds(function, count, 2)
    rates = {side: [] for side in SIDES}
    for k in range(rounds):
        for side in (SIDES if k % 2 == 0 else SIDES[::-1]):
            seconds = run_seconds(functions[side], count, steps)
            rates[side].append(steps * batches.ids_per_batch / seconds * 1e-6)
    return rates


def parse_arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=TABLE_ROWS,
                        help=f"table rows (default {TABLE_ROWS}: 1 GiB at dim {DIM})")
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE)
    parser.add_argument("--bag-size", type=int, default=BAG_SIZE)
    parser.add_argument("--batches", type=int, default=8, help="distinct batches (default 8)")
    parser.add_argument("--steps", type=int, default=20, help="steps per run (default 20)")
    parser.add_argument("--rounds", type=int, default=5, help="runs of each side (default 5)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                        help="thread counts (default 1 2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true",
                        help="a quick check: 65,536 rows, batches of 256, 3 rounds of 5 steps")
    arguments = parser.parse_args(argv)
    if arguments.smoke:
        arguments.rows, arguments.batch_size = 65536, 256
        arguments.batches, arguments.steps, arguments.rounds = 2, 5, 3
    for name in ("rows", "batch_size", "bag_size", "batches", "steps", "rounds"):
        if getattr(arguments, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if min(arguments.threads) < 1:
        parser.error("--threads must be >= 1")
    return arguments


def run(arguments):
    rng = np.random.default_rng(arguments.seed)
    data = {distribution: Batches(arguments.rows, arguments.batch_size, arguments.bag_size,
                                  distribution, arguments.batches, rng)
            for distribution in DISTRIBUTIONS}
    fbgemm = fbgemm_table(arguments.rows, arguments.seed)
    results = []
    for threads in arguments.threads:
        torch.set_num_threads(threads)
        sides = Sides(fbgemm, threads)
        sides.check(data["uniform"])
        print(f"{threads} thread(s): check passed (pooled outputs and rows after one update "
              f"agree to 1e-5)", flush=True)
        for distribution in DISTRIBUTIONS:
            for step in STEPS:
                rates = measure(sides, step, data[distribution], arguments.rounds,
                                arguments.steps)
                results.append((threads, distribution, step, rates))
                print(f"{threads} thread(s), {distribution}, {step}: recemb "
                      f"{statistics.median(rates['recemb']):.1f}, FBGEMM "
                      f"{statistics.median(rates['fbgemm']):.1f} Mrows/s", flush=True)
        sides.layer = None
    report(arguments, results)
    return 0


def report(arguments, results):
    print()
    print(f"CPU: {cpu_model()}; {time.strftime('%Y-%m-%d', time.gmtime())}; torch "
          f"{torch.__version__}, fbgemm_gpu {fbgemm_gpu.__version__}; recemb {git_commit()}")
    print(f"table {arguments.rows} rows x {DIM} float32 ({arguments.rows * DIM * 4 / 2**30:.3g} "
          f"GiB), batches of {arguments.batch_size} x {arguments.bag_size} ids, sum pooling; "
          f"row-wise Adagrad lr {LEARNING_RATE} eps {EPSILON}; {arguments.rounds} rounds of "
          f"{arguments.steps} steps")
    print()
    print("| threads | ids | step | recemb Mrows/s (median, min-max) | FBGEMM TBE Mrows/s "
          "(median, min-max) | recemb / FBGEMM |")
    print("|---|---|---|---|---|---|")
    for threads, distribution, step, rates in results:
        cells = [f"{statistics.median(rates[side]):.1f} ({min(rates[side]):.1f}-"
                 f"{max(rates[side]):.1f})" for side in SIDES]
        ratio = statistics.median(r / f for r, f in zip(rates["recemb"], rates["fbgemm"]))
        print(f"| {threads} | {distribution} | {step} | {cells[0]} | {cells[1]} | {ratio:.2f} |")


def main(argv=None):
    arguments = parse_arguments(argv)
    try:
        return run(arguments)
    except CheckFailed as error:
        print(f"compare_tbe.py: recemb and FBGEMM do not do the same work: {error}",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
