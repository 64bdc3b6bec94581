"""The model of `recemb train` as TorchRec builds it, trained three ways on the same batches:

  (T) TorchRec        torchrec.models.dlrm.DLRM whose EmbeddingBagCollection is sharded by
                      DistributedModelParallel on the CPU (a gloo process group of one process,
                      set up in this process): the tables run on FBGEMM's table-batched embedding
                      (SplitTableBatchedEmbeddingBagsCodegen, compute device CPU, tables in host
                      memory) with its fused EXACT_ROWWISE_ADAGRAD; the dense part is wrapped in
                      DistributedDataParallel as DMP does, trained by torch.optim.Adam;
  (R) TorchRec + recemb   the same DLRM, its EmbeddingBagCollection recemb.torchrec's (its backward
                      applies recemb's RowWiseAdagrad to the touched rows), on torch's threads;
  (C) recemb train    the binary (build/release/bin/recemb, or --recemb) on the same data, with
                      --set embedding.optimizer=rowwise_adagrad.

The row-wise Adagrad of the tables is attached the way TorchRec documents it for both (T) and
(R): torchrec.optim.apply_optimizer_in_backward(torchrec.optim.RowWiseAdagrad, ...) on the
collection's parameters before DMP, which DMP turns into the fused parameters of FBGEMM's kernel
(the script prints the TBE's optimizer as a check). If DistributedModelParallel fails on this
machine the script says why (the error) and runs (T) on TorchRec's unsharded
EmbeddingBagCollection with the same apply_optimizer_in_backward (torch's EmbeddingBag and a
RowWiseAdagrad step per table in the backward); --unsharded runs that one. The output names which
(T) ran.

The model and the data are those of bench/compare_torch_dlrm.py (imported from it): the 26
tables of `recemb train`'s small preset, dim 16; bottom MLP 13 -> 64 -> 16 (DLRM's dense_arch
[64, 16]), dot interaction (367 wide), top MLP 367 -> 64 -> 32 -> 1 (over_arch [64, 32, 1]); log
loss of the batch mean; batches of 2,048 synthetic Criteo examples, the ids the rows `recemb hash`
gives, one id per feature and example (a KeyedJaggedTensor of lengths 1). The tables: row-wise
Adagrad (a += mean_d(g_d^2); w -= lr * g / (sqrt(a) + eps)), lr 0.1 (`recemb train`'s rate
for it), eps 1e-8, accumulators starting at 0 (FBGEMM's TBE and `recemb train` have no other
start, so compare_torch_dlrm's Adagrad, lr 1.0 from an accumulator of 0.1, does not carry over:
its first step would be lr per element); initialised uniform in +-sqrt(3) / 4 (stddev 1/4,
recemb's default scale at dim 16; DMP hands the configs' weight_init_min / max to FBGEMM,
recemb.torchrec applies init_fn). The dense layers: initialised as `recemb train`'s (Glorot
weights, seed --seed), Adam lr 0.003.

Timing: --rounds rounds, each training every contender on all --steps batches in turn, the
order rotating (T, R, C, then R, C, T, ...). (T) and (R) keep training across rounds (after a
warm-up of two steps); (C) is a new run per round, its rate that of its training steps from its
summary.json (as compare_torch_dlrm's (c)). Figures are medians over the rounds; the ratios
R/T and C/T are medians of the per-round ratios. The first round's mean loss of each is printed
as a check that the three train the same model on the same data (they start from different
random weights: they agree to a few per cent, not exactly).

Threads: --threads (default: one per core) for torch's intra-op threads (torch.set_num_threads),
on which FBGEMM's CPU kernels and (R)'s recemb (num_threads="torch") run, and for `recemb train
--threads`.

Run (after building the Python package and the recemb binary, see docs/python.md), in an
environment with torchrec and fbgemm-gpu-cpu (scripts/python-env):
    PYTHONPATH=build/python/python python bench/compare_torchrec_dlrm.py
    ... --smoke          3 steps of each (batch 256, one round), about 15 s
"""

import argparse
import math
import os
import pathlib
import socket
import statistics
import sys
import tempfile
import time

import fbgemm_gpu
import torch
import torch.distributed
import torchrec
import torchrec.optim
from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
    SplitTableBatchedEmbeddingBagsCodegen)
from torchrec.distributed.embedding_types import EmbeddingComputeKernel
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from torchrec.distributed.model_parallel import DistributedModelParallel
from torchrec.distributed.planner import EmbeddingShardingPlanner, Topology
from torchrec.distributed.planner.types import ParameterConstraints
from torchrec.distributed.types import ShardingType
from torchrec.models.dlrm import DLRM
from torchrec.optim.optimizers import in_backward_optimizer_filter

import recemb.torchrec

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import compare_torch_dlrm as dlrm_bench  # noqa: E402  (the model, the data, recemb train)
from bench_common import cpu_model, git_commit  # noqa: E402

# Row-wise Adagrad of the tables: `recemb train`'s rate for rowwise_adagrad (docs/training.md,
# "Learning rates"), FBGEMM's and recemb's default eps.
ROWWISE_ADAGRAD = {"lr": 0.1, "eps": 1e-8}
INITIAL_WEIGHT_BOUND = math.sqrt(3.0 / dlrm_bench.EMBEDDING_DIM)  # uniform, stddev 1/sqrt(dim)
FEATURES = [f"C{f + 1}" for f in range(dlrm_bench.NUM_TABLES)]
CONTENDERS = ("torchrec", "torchrec + recemb", "recemb train")


def table_configs(sizes):
    return [torchrec.EmbeddingBagConfig(
        name=f"t_{feature}", embedding_dim=dlrm_bench.EMBEDDING_DIM, num_embeddings=size,
        feature_names=[feature], pooling=torchrec.PoolingType.SUM,
        weight_init_min=-INITIAL_WEIGHT_BOUND, weight_init_max=INITIAL_WEIGHT_BOUND)
        for feature, size in zip(FEATURES, sizes)]


def keyed_batches(data):
    """One KeyedJaggedTensor per batch: keys C1..C26, one id per feature and example."""
    lengths = torch.ones(dlrm_bench.NUM_TABLES * data.batch_size, dtype=torch.int32)
    return [torchrec.KeyedJaggedTensor.from_lengths_sync(
        keys=FEATURES, values=torch.from_numpy(data.ids[index].reshape(-1)), lengths=lengths)
        for index in range(data.steps)]


def dlrm(collection, seed):
    """DLRM over `collection` with the dense layers of compare_torch_dlrm's model, initialised as
    `recemb train` initialises them (docs/training.md, "Initialisation"): Glorot-uniform weights,
    U(+-sqrt(3 / out)) biases."""
    model = DLRM(embedding_bag_collection=collection, dense_in_features=dlrm_bench.NUM_DENSE,
                 dense_arch_layer_sizes=list(dlrm_bench.BOTTOM_MLP),
                 over_arch_layer_sizes=list(dlrm_bench.TOP_MLP) + [1],
                 dense_device=torch.device("cpu"))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in (*model.dense_arch.modules(), *model.over_arch.modules()):
            if isinstance(layer, torch.nn.Linear):
                fan_out, fan_in = layer.weight.shape
                bound = math.sqrt(6.0 / (fan_in + fan_out))
                layer.weight.uniform_(-bound, bound, generator=generator)
                layer.bias.uniform_(-math.sqrt(3.0 / fan_out), math.sqrt(3.0 / fan_out),
                                    generator=generator)
    return model


class TorchRecTrainer:
    """(T) or (R): a DLRM whose tables train in its backward, and Adam for the rest."""

    def __init__(self, model, batches, description):
        self.model = model
        self.batches = batches
        self.description = description
        dense = [parameter for _, parameter in
                 in_backward_optimizer_filter(model.named_parameters())]
        self.dense_optimizer = torch.optim.Adam(dense, lr=dlrm_bench.DENSE_LEARNING_RATE)

    def step(self, data, index):
        logits = self.model(torch.from_numpy(data.dense[index]), self.batches[index]).squeeze(1)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(
            logits, torch.from_numpy(data.labels[index]))
        self.dense_optimizer.zero_grad(set_to_none=True)
        loss.backward()  # also updates the touched rows of the tables
        self.dense_optimizer.step()
        return loss.item()

    def round(self, data):
        """Trains on every batch: (examples/s, mean loss)."""
        start = time.perf_counter()
        losses = [self.step(data, index) for index in range(data.steps)]
        seconds = time.perf_counter() - start
        return data.steps * data.batch_size / seconds, statistics.fmean(losses)


def attach_rowwise_adagrad(collection):
    torchrec.optim.apply_optimizer_in_backward(torchrec.optim.RowWiseAdagrad,
                                               collection.parameters(), dict(ROWWISE_ADAGRAD))


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_process_group():
    """A gloo process group of this one process, as DistributedModelParallel needs."""
    if not torch.distributed.is_initialized():
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(free_port())
        torch.distributed.init_process_group("gloo", rank=0, world_size=1)


def tbe_optimizers(model):
    """The names of the fused optimizers of the FBGEMM TBE modules in a DMP model (an empty set
    when there are none). A ShardedEmbeddingBagCollection keeps its kernels out of modules(), in
    its lookups (_lookups)."""
    return {kernel.optimizer.name for module in model.modules()
            for lookup in getattr(module, "_lookups", []) for kernel in lookup.modules()
            if isinstance(kernel, SplitTableBatchedEmbeddingBagsCodegen)}


def torchrec_sharded(sizes, batches, seed):
    """(T) as DistributedModelParallel shards it on the CPU."""
    start_process_group()
    collection = torchrec.EmbeddingBagCollection(tables=table_configs(sizes),
                                                 device=torch.device("meta"))
    attach_rowwise_adagrad(collection)
    model = dlrm(collection, seed)
    # Each table whole on the one process, on FBGEMM's fused kernel: the planner's default for
    # one process would replicate small tables (data_parallel: torch's EmbeddingBag and DDP).
    constraints = {config.name: ParameterConstraints(
        sharding_types=[ShardingType.TABLE_WISE.value],
        compute_kernels=[EmbeddingComputeKernel.FUSED.value])
        for config in collection.embedding_bag_configs()}
    planner = EmbeddingShardingPlanner(
        topology=Topology(world_size=1, compute_device="cpu"), constraints=constraints)
    plan = planner.collective_plan(model, [EmbeddingBagCollectionSharder()],
                                   torch.distributed.GroupMember.WORLD)
    model = DistributedModelParallel(model, device=torch.device("cpu"), plan=plan)
    fused = tbe_optimizers(model)
    if fused != {"EXACT_ROWWISE_ADAGRAD"}:
        raise RuntimeError(f"DMP's tables run FBGEMM's TBE with the fused optimizers {fused}, "
                           "not EXACT_ROWWISE_ADAGRAD alone")
    return TorchRecTrainer(model, batches, "DistributedModelParallel (gloo, world size 1): "
                           "FBGEMM TBE on the CPU, fused EXACT_ROWWISE_ADAGRAD")


def torchrec_unsharded(sizes, batches, seed):
    """(T) without DMP: TorchRec's EmbeddingBagCollection, a RowWiseAdagrad step per table in
    the backward."""
    collection = torchrec.EmbeddingBagCollection(tables=table_configs(sizes),
                                                 device=torch.device("cpu"))
    attach_rowwise_adagrad(collection)
    return TorchRecTrainer(dlrm(collection, seed), batches,
                           "unsharded EmbeddingBagCollection, RowWiseAdagrad applied in backward")


def torchrec_with_recemb(sizes, batches, seed):
    """(R): recemb.torchrec.EmbeddingBagCollection on torch's threads."""
    collection = recemb.torchrec.EmbeddingBagCollection(tables=table_configs(sizes),
                                                        num_threads="torch", seed=seed)
    attach_rowwise_adagrad(collection)
    return TorchRecTrainer(dlrm(collection, seed), batches,
                           "recemb.torchrec.EmbeddingBagCollection, recemb's RowWiseAdagrad")


def torchrec_contender(arguments, sizes, batches):
    """(T): DMP unless --unsharded; the unsharded collection, with the error printed, if DMP
    fails."""
    if not arguments.unsharded:
        try:
            return torchrec_sharded(sizes, batches, arguments.seed)
        except Exception as error:  # noqa: BLE001  (reported, then the documented fallback)
            print(f"DistributedModelParallel on the CPU failed, (T) falls back to the unsharded "
                  f"EmbeddingBagCollection: {type(error).__name__}: {error}", flush=True)
    return torchrec_unsharded(sizes, batches, arguments.seed)


def parse_arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    dlrm_bench.add_run_arguments(parser)
    parser.add_argument("--unsharded", action="store_true",
                        help="(T) on TorchRec's unsharded EmbeddingBagCollection, without DMP")
    return dlrm_bench.parse_run_arguments(parser, argv, smoke_steps=3)


def run(arguments, directory):
    torch.set_num_threads(arguments.threads)
    sizes = dlrm_bench.table_sizes()
    start = time.perf_counter()
    data = dlrm_bench.make_data(directory, arguments.recemb, arguments.steps,
                                arguments.batch_size, arguments.seed)
    batches = keyed_batches(data)
    print(f"data: {data.steps} batches of {data.batch_size} examples (seed {arguments.seed}) "
          f"in {data.train_path}, written and hashed in {time.perf_counter() - start:.1f} s",
          flush=True)
    contenders = {
        "torchrec": torchrec_contender(arguments, sizes, batches),
        "torchrec + recemb": torchrec_with_recemb(sizes, batches, arguments.seed),
        "recemb train": dlrm_bench.RecembTrain(
            arguments.recemb, directory, arguments.threads, arguments.seed,
            settings=["embedding.optimizer=rowwise_adagrad",
                      f"embedding.learning_rate={ROWWISE_ADAGRAD['lr']}"]),
    }
    print(f"(T) runs {contenders['torchrec'].description}", flush=True)
    for name in CONTENDERS[:2]:  # the warm-up: first calls, allocations
        for index in range(min(2, data.steps)):
            contenders[name].step(data, index)
    rates = {name: [] for name in CONTENDERS}
    first_losses = {}
    for k in range(arguments.rounds):
        dlrm_bench.train_round(k, contenders, data, rates, first_losses)
    report(arguments, sizes, rates, first_losses, contenders["torchrec"].description)
    return 0


def report(arguments, sizes, rates, first_losses, torchrec_description):
    print()
    print(f"CPU: {cpu_model()}; {arguments.threads} threads; "
          f"{time.strftime('%Y-%m-%d', time.gmtime())}; torch {torch.__version__}, torchrec "
          f"{torchrec.__version__}, fbgemm_gpu {fbgemm_gpu.__version__}; recemb {git_commit()}")
    print(f"model: DLRM, {dlrm_bench.NUM_TABLES} tables of {sum(sizes)} rows x "
          f"{dlrm_bench.EMBEDDING_DIM}, dense_arch {list(dlrm_bench.BOTTOM_MLP)}, over_arch "
          f"{list(dlrm_bench.TOP_MLP) + [1]}; tables row-wise Adagrad lr {ROWWISE_ADAGRAD['lr']} "
          f"eps {ROWWISE_ADAGRAD['eps']}, dense Adam lr {dlrm_bench.DENSE_LEARNING_RATE}; "
          f"{arguments.steps} steps of {arguments.batch_size} examples per round, "
          f"{arguments.rounds} rounds")
    print(f"(T): {torchrec_description}")
    print()
    print("| contender | examples/s (median) | min | max | vs (T) | mean loss, first timed pass |")
    print("|---|---|---|---|---|---|")
    labels = {"torchrec": "(T) TorchRec DLRM, FBGEMM TBE",
              "torchrec + recemb": "(R) TorchRec DLRM, recemb.torchrec.EmbeddingBagCollection",
              "recemb train": "(C) recemb train, rowwise_adagrad"}
    if "unsharded" in torchrec_description:
        labels["torchrec"] = "(T) TorchRec DLRM, unsharded EmbeddingBagCollection"
    for name in CONTENDERS:
        ratio = statistics.median(r / t for r, t in zip(rates[name], rates["torchrec"]))
        print(f"| {labels[name]} | {statistics.median(rates[name]):.0f} | "
              f"{min(rates[name]):.0f} | {max(rates[name]):.0f} | {ratio:.2f} | "
              f"{first_losses[name]:.4f} |")


def main(argv=None):
    arguments = parse_arguments(argv)
    try:
        if arguments.directory is not None:
            arguments.directory.mkdir(parents=True, exist_ok=True)
            return run(arguments, arguments.directory)
        with tempfile.TemporaryDirectory(prefix="compare_torchrec_dlrm-") as directory:
            return run(arguments, pathlib.Path(directory))
    finally:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
