"""The model of `recemb train`, trained three ways on the same batches, side by side:

  (a) torch            plain PyTorch: 26 nn.EmbeddingBag(mode="sum", sparse=True),
                       torch.optim.Adagrad (sparse gradients) for the tables, torch.optim.Adam
                       for the dense layers;
  (b) torch + recemb   the same torch dense layers and Adam, the tables a recemb.torch.Embedding
                       (its backward applies recemb's fused Adagrad to the touched rows), on
                       torch's threads (its default, num_threads="torch");
  (b') the same, own threads   the module on recemb's own --threads worker threads instead (its
                       behaviour before "torch" was the default), for the comparison;
  (c) recemb train     the binary itself (build/release/bin/recemb, or --recemb) on the same data,
                       written as a Criteo TSV file.

The model is `recemb train`'s default (docs/training.md, "The model"): the 26 tables of the small
preset (the Kaggle profile fitted to 64 MiB at dim 16: 1,048,576 rows), initialised normal
with stddev 1/sqrt(16) (recemb's default, truncated at 2 sigma); bottom MLP 13 -> 64 -> 16, dot
interaction (the 351 pairs i > j of [z, e_1..e_26] after z: 367 wide), top MLP 367 -> 64 -> 32 -> 1,
ReLU after every layer but the logit, log loss of the batch mean; dense layers Glorot-uniform
weights and U(+-sqrt(3 / out)) biases; Adagrad lr 1.0 with initial accumulator 0.1 for the
tables (embedding.optimizer's default; torch's eps 1e-10 changes nothing next to sqrt(0.1) in
float32), Adam lr 0.003 (dense.learning_rate's default; betas 0.9, 0.999, eps 1e-8) for the dense
parameters; batches of 2,048 examples.

The data: --steps batches of synthetic Criteo lines (seed --seed): 13 integer features, geometric
counts; 26 categorical features, 8-hex-digit values drawn from a Zipf law (exponent 1.05), 5 %
missing; labels from a planted logistic model of I1 and the values of C1, C3, ..., C25, so the
loss falls. The script writes them as train.tsv (and a held-out eval.tsv of one batch, which `recemb
train` needs) and gives (a) and (b) the examples as `recemb train` reads them: the dense features
log(1 + max(x, 0)), the ids the rows `recemb hash` gives for the values (the trainer's own
hashing, docs/training.md "Criteo files: the exact rules").

Timing: --rounds rounds, each training every contender on all --steps batches in turn (a, b, c,
then b, c, a, ...). (a) and (b) keep training across rounds (after a warm-up of two steps); (c)
is a new run per round, and its rate is that of its training steps from its summary.json:
examples / (seconds - eval_seconds - checkpoint_seconds), the start-up, the evaluations and the
final checkpoint left out. Figures are medians over the rounds. The first round's mean training
loss of each contender is printed as a check that the three train the same model on the same
data (they start from different random weights, so they agree to a few per cent, not exactly).

Threads: --threads (default: one per core) for torch's intra-op threads (torch.set_num_threads),
the own threads of (b') and `recemb train --threads`. The environment is the user's, as it is
(docs/python.md, "One set of threads"). With --tuned-environment the script sets
OPENBLAS_NUM_THREADS=1 and OMP_WAIT_POLICY=PASSIVE before torch loads (a value in the environment
wins): the OpenBLAS of Debian's libopenblas0-pthread starts threads of its own beside torch's
OpenMP threads, and OpenMP threads spin at their barriers; on 2 cores shared with other work each
can cut torch's rate by 3x to 10x. The settings in effect are printed.

Dense GFLOP/s, measured after each round (medians reported): torch's forward + backward of the
dense part alone (the MLPs and the interaction, nominal work as bench/dlrm_dense_bench.cc counts
it: 2 flops per multiply-add forward, twice that backward), and each forward GEMM of the MLPs
alone (torch.addmm at the batch size). Debian's torch calls the BLAS behind libblas.so.3
(BLAS_INFO=generic): Debian's reference BLAS (libblas3) unless OpenBLAS is installed; the script
prints the library loaded. LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/blas runs it with the
reference BLAS when OpenBLAS is installed.

Run (after building the Python package and the recemb binary, see docs/python.md):
    PYTHONPATH=build/python/python /usr/bin/python3 bench/compare_torch_dlrm.py
    ... --smoke          4 steps of each (batch 256, one round), about 5 s
"""

import argparse
import dataclasses
import json
import math
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

# Read when the libraries load, so set before numpy and torch are imported (by the script with
# --tuned-environment, not when imported as a module); a value in the environment wins. See
# "Threads" above.
TORCH_ENVIRONMENT = {"OPENBLAS_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}
if __name__ == "__main__" and "--tuned-environment" in sys.argv[1:]:
    for _name, _value in TORCH_ENVIRONMENT.items():
        os.environ.setdefault(_name, _value)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import recemb  # noqa: E402
import recemb.torch  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bench_common import CRITEO_KAGGLE, cpu_model, fit_to_budget  # noqa: E402

REPOSITORY = pathlib.Path(__file__).resolve().parents[1]
NUM_DENSE = 13
NUM_TABLES = 26
# recemb train's defaults (recemb train --print-default-config).
EMBEDDING_DIM = 16
SMALL_PRESET_BYTES = 64 << 20
BOTTOM_MLP = (64, 16)
TOP_MLP = (64, 32)
EMBEDDING_LEARNING_RATE = 1.0
INITIAL_ACCUMULATOR = 0.1
DENSE_LEARNING_RATE = 0.003
BATCH_SIZE = 2048
# The synthetic data: mean counts of I1..I13, of the order of Criteo's.
DENSE_MEANS = (3.5, 100, 25, 7, 20000, 100, 15, 12, 100, 0.6, 2.5, 1, 8)
ZIPF_EXPONENT = 1.05
MISSING_SHARE = 0.05
CONTENDERS = ("torch", "torch + recemb", "torch + recemb, own threads", "recemb train")


@dataclasses.dataclass
class Data:
    dense: np.ndarray  # [steps, B, 13] float32, transformed as the trainer reads them
    labels: np.ndarray  # [steps, B] float32
    ids: np.ndarray  # [steps, 26, B] int64, the trainer's rows
    train_path: pathlib.Path
    eval_path: pathlib.Path

    @property
    def steps(self):
        return self.labels.shape[0]

    @property
    def batch_size(self):
        return self.labels.shape[1]


def table_sizes():
    """The small preset's sizes (dlrm/criteo_profile.cc, preset_vocabulary_sizes)."""
    return fit_to_budget(CRITEO_KAGGLE, EMBEDDING_DIM, SMALL_PRESET_BYTES)


def synthetic_lines(rng, examples, sizes):
    """(labels [n], integer features [n, 13], categorical values as hex strings or "" [26][n])."""
    counts = np.stack([rng.geometric(1.0 / (1.0 + mean), examples) - 1 for mean in DENSE_MEANS],
                      axis=1)
    values, logit = [], -1.1 + 0.6 * (np.log1p(counts[:, 0]) - 1.2)
    for f, size in enumerate(sizes):
        ranks = (rng.zipf(ZIPF_EXPONENT, examples) - 1) % (2 * size)
        value = (ranks * 2654435761 + 40503 * (f + 1)) % (1 << 32)
        if f % 2 == 0:
            logit = logit + 1.1 * ((value * 40503 % 65536) / 65536.0 - 0.5)
        hexes = np.char.mod("%08x", value)
        hexes[rng.random(examples) < MISSING_SHARE] = ""
        values.append(hexes)
    labels = (rng.random(examples) < 1.0 / (1.0 + np.exp(-logit))).astype(np.int64)
    return labels, counts, values


def write_tsv(path, labels, counts, values):
    columns = [labels.astype(str)] + [counts[:, j].astype(str) for j in range(NUM_DENSE)] + values
    with open(path, "w") as out:
        for fields in zip(*columns):
            out.write("\t".join(fields))
            out.write("\n")


def recemb_rows(recemb_binary, feature, values):
    """The rows recemb train uses for one feature's values (`recemb hash`, the small preset)."""
    result = subprocess.run([str(recemb_binary), "hash", "--feature", feature],
                            input="\n".join(values) + "\n", capture_output=True, text=True,
                            check=True, timeout=120)
    rows = np.array(result.stdout.split(), dtype=np.int64)
    if rows.shape != (len(values),):
        raise RuntimeError(f"recemb hash --feature {feature}: {rows.size} rows for "
                           f"{len(values)} values")
    return rows


def make_data(directory, recemb_binary, steps, batch_size, seed):
    rng = np.random.default_rng(seed)
    sizes = table_sizes()
    eval_labels, eval_counts, eval_values = synthetic_lines(rng, batch_size, sizes)
    eval_path = directory / "eval.tsv"
    write_tsv(eval_path, eval_labels, eval_counts, eval_values)
    examples = steps * batch_size
    labels, counts, values = synthetic_lines(rng, examples, sizes)
    train_path = directory / "train.tsv"
    write_tsv(train_path, labels, counts, values)
    ids = np.stack([recemb_rows(recemb_binary, f"C{f + 1}", list(values[f]))
                    for f in range(NUM_TABLES)])
    if not all((ids[f] >= 0).all() and (ids[f] < size).all() for f, size in enumerate(sizes)):
        raise RuntimeError("recemb hash gave rows outside the small preset's tables: the table "
                           "sizes here are not recemb train's")
    dense = np.log1p(np.maximum(counts, 0)).astype(np.float32)
    return Data(dense=dense.reshape(steps, batch_size, NUM_DENSE),
                labels=labels.astype(np.float32).reshape(steps, batch_size),
                ids=np.ascontiguousarray(ids.reshape(NUM_TABLES, steps, batch_size)
                                         .transpose(1, 0, 2)),
                train_path=train_path, eval_path=eval_path)


def layer_shapes(widths_in, widths):
    shapes = []
    for width in widths:
        shapes.append((widths_in, width))
        widths_in = width
    return shapes


def mlp_shapes():
    """(in, out) of every MLP layer: the bottom MLP's, then the top MLP's with its logit layer."""
    interaction_width = EMBEDDING_DIM + (NUM_TABLES + 1) * NUM_TABLES // 2
    return (layer_shapes(NUM_DENSE, BOTTOM_MLP),
            layer_shapes(interaction_width, TOP_MLP + (1,)))


def forward_multiply_adds():
    """Per example, as bench/dlrm_dense_bench.cc counts them: the MLPs and the 351 dot products."""
    bottom, top = mlp_shapes()
    pairs = (NUM_TABLES + 1) * NUM_TABLES // 2
    return sum(i * o for i, o in bottom + top) + pairs * EMBEDDING_DIM


def mlp(shapes, generator, relu_last):
    layers = []
    for k, (fan_in, fan_out) in enumerate(shapes):
        linear = torch.nn.Linear(fan_in, fan_out)
        with torch.no_grad():  # docs/training.md, "Initialisation"
            bound = math.sqrt(6.0 / (fan_in + fan_out))
            linear.weight.uniform_(-bound, bound, generator=generator)
            linear.bias.uniform_(-math.sqrt(3.0 / fan_out), math.sqrt(3.0 / fan_out),
                                 generator=generator)
        layers.append(linear)
        if relu_last or k + 1 < len(shapes):
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


class DenseModel(torch.nn.Module):
    """The bottom MLP, the dot interaction and the top MLP: embeddings [26][B, d] -> logits [B]."""

    def __init__(self, seed):
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        bottom, top = mlp_shapes()
        self.bottom = mlp(bottom, generator, relu_last=True)
        self.top = mlp(top, generator, relu_last=False)
        rows, columns = torch.tril_indices(NUM_TABLES + 1, NUM_TABLES + 1, offset=-1)
        self.register_buffer("pair_rows", rows)  # (1,0), (2,0), (2,1), ...: DLRM's order
        self.register_buffer("pair_columns", columns)

    def forward(self, dense, embeddings):
        z = self.bottom(dense)
        vectors = torch.stack([z] + list(embeddings), dim=1)  # [B, 27, d]
        gram = torch.bmm(vectors, vectors.transpose(1, 2))
        interaction = torch.cat([z, gram[:, self.pair_rows, self.pair_columns]], dim=1)
        return self.top(interaction).squeeze(1)


class TorchTables(torch.nn.Module):
    """(a): one nn.EmbeddingBag per feature, a bag of one id per example."""

    def __init__(self, sizes, seed):
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.bags = torch.nn.ModuleList()
        stddev = 1.0 / math.sqrt(EMBEDDING_DIM)
        for size in sizes:
            bag = torch.nn.EmbeddingBag(size, EMBEDDING_DIM, mode="sum", sparse=True)
            # recemb's default scale: normal with stddev 1/sqrt(dim), here clamped to 2 sigma
            # (recemb's TruncatedNormal redraws beyond 2 sigma).
            with torch.no_grad():
                bag.weight.normal_(0.0, stddev, generator=generator)
                bag.weight.clamp_(-2 * stddev, 2 * stddev)
            self.bags.append(bag)

    def forward(self, ids):
        return [bag(ids[f].unsqueeze(1)) for f, bag in enumerate(self.bags)]


class RecembTables(torch.nn.Module):
    """(b): recemb.torch.Embedding, tables C1..C26 with recemb's default initializer."""

    def __init__(self, sizes, seed, threads):
        super().__init__()
        features = {}
        for f, size in enumerate(sizes):
            name = f"C{f + 1}"
            table = recemb.TableConfig(vocabulary_size=size, dim=EMBEDDING_DIM, name=name)
            features[name] = recemb.FeatureConfig(table=table, name=name)
        optimizer = recemb.optimizers.Adagrad(learning_rate=EMBEDDING_LEARNING_RATE,
                                              initial_accumulator_value=INITIAL_ACCUMULATOR)
        self.embedding = recemb.torch.Embedding(features, optimizer, num_threads=threads,
                                                seed=seed)

    def forward(self, ids):
        outputs = self.embedding({f"C{f + 1}": ids[f] for f in range(NUM_TABLES)})
        return [outputs[f"C{f + 1}"] for f in range(NUM_TABLES)]


class TorchTrainer:
    """(a) or (b): a model and its optimizers, trained one step per batch."""

    def __init__(self, tables, seed, sparse_optimizer):
        self.tables = tables
        self.dense_model = DenseModel(seed)
        self.dense_optimizer = torch.optim.Adam(self.dense_model.parameters(),
                                                lr=DENSE_LEARNING_RATE)
        self.sparse_optimizer = sparse_optimizer

    def step(self, data, index):
        ids = torch.from_numpy(data.ids[index])
        logits = self.dense_model(torch.from_numpy(data.dense[index]), self.tables(ids))
        loss = torch.nn.functional.binary_cross_entropy_with_logits(
            logits, torch.from_numpy(data.labels[index]))
        self.dense_optimizer.zero_grad(set_to_none=True)
        if self.sparse_optimizer is not None:
            self.sparse_optimizer.zero_grad(set_to_none=True)
        loss.backward()  # (b): also applies recemb's Adagrad to the touched rows
        if self.sparse_optimizer is not None:
            self.sparse_optimizer.step()
        self.dense_optimizer.step()
        return float(loss)

    def round(self, data):
        """Trains on every batch: (examples/s, mean loss)."""
        start = time.perf_counter()
        losses = [self.step(data, index) for index in range(data.steps)]
        seconds = time.perf_counter() - start
        return data.steps * data.batch_size / seconds, statistics.fmean(losses)


def plain_torch(sizes, seed):
    tables = TorchTables(sizes, seed)
    adagrad = torch.optim.Adagrad(tables.parameters(), lr=EMBEDDING_LEARNING_RATE,
                                  initial_accumulator_value=INITIAL_ACCUMULATOR, eps=1e-10)
    return TorchTrainer(tables, seed, adagrad)


def torch_with_recemb(sizes, seed, threads="torch"):
    return TorchTrainer(RecembTables(sizes, seed, threads), seed, None)


class RecembTrain:
    """(c): one `recemb train` run per round on the data's files; `settings` are more
    section.key=value settings for its --set (after the script's own)."""

    def __init__(self, binary, directory, threads, seed, settings=()):
        self.binary = binary
        self.directory = directory
        self.threads = threads
        self.seed = seed
        self.settings = list(settings)

    def round(self, data):
        output = self.directory / "recemb-run"
        shutil.rmtree(output, ignore_errors=True)
        command = [str(self.binary), "train", "--data", str(data.train_path), "--eval-data",
                   str(data.eval_path), "--steps", str(data.steps), "--batch-size",
                   str(data.batch_size), "--threads", str(self.threads), "--output", str(output),
                   "--set", f"data.eval_examples={data.batch_size}", "--set",
                   "train.eval_every=0", "--set", "train.log_every=1", "--set",
                   "checkpoint.every=0", "--set", "checkpoint.keep=1", "--set",
                   f"model.seed={self.seed}"]
        for setting in self.settings:
            command += ["--set", setting]
        result = subprocess.run(command, capture_output=True, text=True, timeout=3600)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} exited with {result.returncode}:\n"
                               f"{result.stderr[-2000:]}")
        summary = json.loads((output / "summary.json").read_text())
        if summary["steps"] != data.steps:
            raise RuntimeError(f"recemb train trained {summary['steps']} steps of {data.steps}")
        seconds = summary["seconds"] - summary["eval_seconds"] - summary["checkpoint_seconds"]
        records = map(json.loads, (output / "metrics.jsonl").read_text().splitlines())
        losses = [record["train_loss"] for record in records if "train_loss" in record]
        shutil.rmtree(output, ignore_errors=True)
        return summary["examples"] / seconds, statistics.fmean(losses)


def median_seconds(function, repeats):
    """The median over `repeats` calls of function(), after one warm-up call."""
    function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


class DenseFlops:
    """torch's GFLOP/s: the dense forward + backward, and each MLP layer's forward GEMM alone."""

    def __init__(self, batch_size, repeats):
        self.batch_size = batch_size
        self.repeats = repeats
        generator = torch.Generator().manual_seed(7)
        self.model = DenseModel(seed=7)
        self.dense = torch.rand(batch_size, NUM_DENSE, generator=generator)
        self.embeddings = [torch.randn(batch_size, EMBEDDING_DIM, generator=generator,
                                       requires_grad=True) for _ in range(NUM_TABLES)]
        self.labels = (torch.rand(batch_size, generator=generator) < 0.25).float()
        bottom, top = mlp_shapes()
        self.gemms = [(torch.rand(fan_out, generator=generator),
                       torch.rand(batch_size, fan_in, generator=generator),
                       torch.rand(fan_in, fan_out, generator=generator))
                      for fan_in, fan_out in bottom + top]

    def train_step(self):
        self.model.zero_grad(set_to_none=True)
        logits = self.model(self.dense, self.embeddings)
        torch.nn.functional.binary_cross_entropy_with_logits(logits, self.labels).backward()

    def round(self):
        """(seconds of one forward + backward, its GFLOP/s, [GFLOP/s of each GEMM])."""
        seconds = median_seconds(self.train_step, self.repeats)
        step = 2.0 * 3.0 * forward_multiply_adds() * self.batch_size / seconds * 1e-9
        gemms = []
        for bias, x, weights in self.gemms:
            gemm_seconds = median_seconds(lambda: torch.addmm(bias, x, weights), self.repeats * 4)
            gemms.append(2.0 * x.numel() * weights.shape[1] / gemm_seconds * 1e-9)
        return seconds, step, gemms


def blas_libraries():
    """The BLAS libraries mapped into this process (after a GEMM has run)."""
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "blas" in line.lower() and "/" in line}
    return sorted(paths) or ["none found"]


def default_recemb_binary():
    return REPOSITORY / "build" / "release" / "bin" / "recemb"


def add_run_arguments(parser):
    """The options this script shares with compare_torchrec_dlrm.py: the binary, the data, the
    rounds and the threads."""
    parser.add_argument("--recemb", type=pathlib.Path, default=default_recemb_binary(),
                        help="the recemb binary (default: build/release/bin/recemb)")
    parser.add_argument("--steps", type=int, default=100, help="batches per round (default 100)")
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE)
    parser.add_argument("--rounds", type=int, default=5,
                        help="rounds of the contenders (default 5)")
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="torch's threads, recemb's (default: one per core)")
    parser.add_argument("--seed", type=int, default=0, help="data and initial weights")
    parser.add_argument("--directory", type=pathlib.Path, default=None,
                        help="where the data files go (default: a temporary directory)")


def parse_run_arguments(parser, argv, smoke_steps):
    """Parses argv; --smoke is smoke_steps steps of 256 examples, one round. Exits through
    parser.error on a count < 1 or a missing binary."""
    parser.add_argument("--smoke", action="store_true",
                        help=f"a quick check: {smoke_steps} steps of 256 examples, one round")
    arguments = parser.parse_args(argv)
    if arguments.smoke:
        arguments.steps, arguments.batch_size, arguments.rounds = smoke_steps, 256, 1
    for name in ("steps", "batch_size", "rounds", "threads"):
        if getattr(arguments, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if not arguments.recemb.is_file():
        parser.error(f"--recemb {arguments.recemb}: no such file (build it: cmake --preset "
                     "release && cmake --build --preset release --target recemb_cli)")
    return arguments


def parse_arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(parser)
    parser.add_argument("--tuned-environment", action="store_true",
                        help="OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE unless set (see "
                             "Threads above)")
    return parse_run_arguments(parser, argv, smoke_steps=4)


def train_round(k, contenders, data, rates, first_losses):
    """Round k (from 0): every contender of {name: contender} trains on all batches, in an order
    turned by k; appends its examples/s to rates[name], keeps its first mean loss in
    first_losses[name], and prints both."""
    names = list(contenders)
    turn = k % len(names)
    for name in names[turn:] + names[:turn]:
        rate, loss = contenders[name].round(data)
        rates[name].append(rate)
        first_losses.setdefault(name, loss)
        print(f"round {k + 1}: {name:28} {rate:10.0f} examples/s  mean loss {loss:.4f}",
              flush=True)


def run(arguments, directory):
    torch.set_num_threads(arguments.threads)
    sizes = table_sizes()
    start = time.perf_counter()
    data = make_data(directory, arguments.recemb, arguments.steps, arguments.batch_size,
                     arguments.seed)
    print(f"data: {data.steps} batches of {data.batch_size} examples (seed {arguments.seed}) "
          f"in {data.train_path}, written and hashed in {time.perf_counter() - start:.1f} s",
          flush=True)
    contenders = {
        "torch": plain_torch(sizes, arguments.seed),
        "torch + recemb": torch_with_recemb(sizes, arguments.seed),
        "torch + recemb, own threads": torch_with_recemb(sizes, arguments.seed,
                                                         arguments.threads),
        "recemb train": RecembTrain(arguments.recemb, directory, arguments.threads,
                                    arguments.seed),
    }
    for name in CONTENDERS[:3]:  # the warm-up: first calls, allocations
        for index in range(min(2, data.steps)):
            contenders[name].step(data, index)
    dense_flops = DenseFlops(arguments.batch_size, repeats=3 if arguments.smoke else 10)
    rates = {name: [] for name in CONTENDERS}
    first_losses = {}
    dense_rounds = []
    for k in range(arguments.rounds):
        train_round(k, contenders, data, rates, first_losses)
        dense_rounds.append(dense_flops.round())
        print(f"round {k + 1}: torch's dense forward + backward {dense_rounds[-1][1]:.1f} GFLOP/s",
              flush=True)
    step_seconds = statistics.median(seconds for seconds, _, _ in dense_rounds)
    step_gflops = statistics.median(gflops for _, gflops, _ in dense_rounds)
    gemms = [(fan_in, fan_out, statistics.median(r[2][k] for r in dense_rounds))
             for k, (fan_in, fan_out) in enumerate(sum(mlp_shapes(), []))]
    report(arguments, sizes, rates, first_losses, step_seconds, step_gflops, gemms)
    return 0


def report(arguments, sizes, rates, first_losses, step_seconds, step_gflops, gemms):
    print()
    environment = " ".join(f"{name}={os.environ.get(name, '')}" for name in TORCH_ENVIRONMENT)
    print(f"CPU: {cpu_model()}; {arguments.threads} threads; "
          f"{time.strftime('%Y-%m-%d', time.gmtime())}; torch {torch.__version__} ({environment}),"
          f" BLAS {', '.join(blas_libraries())}; (b) runs on num_threads="
          f"{recemb.torch.torch_threads()!r}")
    bottom, top = mlp_shapes()
    print(f"model: {NUM_TABLES} tables of {sum(sizes)} rows x {EMBEDDING_DIM}, bottom MLP "
          f"{' -> '.join(str(w) for w in (NUM_DENSE,) + BOTTOM_MLP)}, top MLP "
          f"{' -> '.join(str(w) for w in (top[0][0],) + TOP_MLP + (1,))}; tables Adagrad lr "
          f"{EMBEDDING_LEARNING_RATE} (accumulator {INITIAL_ACCUMULATOR}), dense Adam lr "
          f"{DENSE_LEARNING_RATE}; {arguments.steps} steps of {arguments.batch_size} examples per "
          f"round, {arguments.rounds} rounds")
    print()
    print("| contender | examples/s (median) | min | max | mean loss, first timed pass |")
    print("|---|---|---|---|---|")
    labels = {"torch": "(a) torch: EmbeddingBag(sparse=True) + Adagrad, Adam",
              "torch + recemb": "(b) torch + recemb.torch.Embedding on torch's threads, Adam",
              "torch + recemb, own threads": "(b') the same on recemb's own threads",
              "recemb train": "(c) recemb train"}
    for name in CONTENDERS:
        print(f"| {labels[name]} | {statistics.median(rates[name]):.0f} | "
              f"{min(rates[name]):.0f} | {max(rates[name]):.0f} | {first_losses[name]:.4f} |")
    print()
    dense_rate = arguments.batch_size / step_seconds
    print(f"torch's dense forward + backward (MLPs and interaction, no optimizer), batch "
          f"{arguments.batch_size}, medians over the rounds: {step_seconds * 1e3:.2f} ms "
          f"({dense_rate:.0f} examples/s), {step_gflops:.1f} GFLOP/s")
    print()
    print("| GEMM (torch.addmm) | GFLOP/s |")
    print("|---|---|")
    for fan_in, fan_out, gflops in gemms:
        print(f"| [{arguments.batch_size}, {fan_in}] x [{fan_in}, {fan_out}] | {gflops:.1f} |")


def main(argv=None):
    arguments = parse_arguments(argv)
    if arguments.directory is not None:
        arguments.directory.mkdir(parents=True, exist_ok=True)
        return run(arguments, arguments.directory)
    with tempfile.TemporaryDirectory(prefix="compare_torch_dlrm-") as directory:
        return run(arguments, pathlib.Path(directory))


if __name__ == "__main__":
    sys.exit(main())
