"""bench/compare_torchrec_dlrm.py and bench/compare_tbe.py: their smoke runs (about 15 s and 5 s)
report every contender, DMP shards TorchRec's tables onto FBGEMM's TBE, and compare_tbe's
agreement check holds on equal tables and fails when recemb's and FBGEMM's do not agree."""

import importlib.util
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchrec")
pytest.importorskip("fbgemm_gpu")

import recemb  # noqa: E402
from binaries import REPOSITORY, recemb_binary  # noqa: E402

BENCH = REPOSITORY / "bench"


def load(name):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def compare_tbe():
    return load("compare_tbe")


@pytest.fixture(scope="module")
def compare_torchrec_dlrm():
    return load("compare_torchrec_dlrm")


def run_script(name, *arguments):
    environment = dict(os.environ)
    # The package this test imports, wherever pytest was started from.
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(pathlib.Path(recemb.__file__).parents[1])] +
        [path for path in [os.environ.get("PYTHONPATH")] if path])
    result = subprocess.run([sys.executable, str(BENCH / f"{name}.py"), "--smoke", *arguments],
                            capture_output=True, text=True, timeout=120, env=environment)
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


def test_torchrec_dlrm_smoke_run_reports_every_contender(tmp_path):
    output = run_script("compare_torchrec_dlrm", "--recemb", str(recemb_binary()),
                        "--directory", str(tmp_path))
    assert ("(T) runs DistributedModelParallel (gloo, world size 1): FBGEMM TBE on the CPU, "
            "fused EXACT_ROWWISE_ADAGRAD") in output
    for row in ("| (T) TorchRec DLRM, FBGEMM TBE | ",
                "| (R) TorchRec DLRM, recemb.torchrec.EmbeddingBagCollection | ",
                "| (C) recemb train, rowwise_adagrad | "):
        assert row in output
    assert "torchrec 1." in output and "fbgemm_gpu " in output


def test_tbe_smoke_run_checks_then_reports_every_workload():
    output = run_script("compare_tbe", "--threads", "1")
    assert "1 thread(s): check passed" in output
    for distribution in ("uniform", "zipf"):
        for step in ("lookup", "lookup + update"):
            assert f"| 1 | {distribution} | {step} | " in output


def test_torchrec_dlrm_is_the_trainers_model(compare_torchrec_dlrm):
    # The dense parameters `recemb train` prints for its default model (docs/training.md).
    module = compare_torchrec_dlrm
    configs = module.table_configs(module.dlrm_bench.table_sizes())
    collection = module.torchrec.EmbeddingBagCollection(tables=configs,
                                                        device=torch.device("meta"))
    model = module.dlrm(collection, seed=0)
    dense = [p for name, p in model.named_parameters() if not name.startswith("sparse_arch")]
    assert sum(p.numel() for p in dense) == 27601
    assert sum(config.num_embeddings for config in configs) == 1048576


@pytest.fixture
def small_tables(compare_tbe):
    rng = np.random.default_rng(1)
    batches = compare_tbe.Batches(rows=512, batch_size=32, bag_size=4, distribution="zipf",
                                  count=1, rng=rng)
    return compare_tbe.fbgemm_table(512, seed=2), batches


def test_tbe_check_passes_on_equal_work(compare_tbe, small_tables):
    fbgemm, batches = small_tables
    compare_tbe.Sides(fbgemm, threads=1).check(batches)


def test_tbe_check_fails_when_the_tables_differ(compare_tbe, small_tables):
    fbgemm, batches = small_tables
    sides = compare_tbe.Sides(fbgemm, threads=1)
    sides.layer.embedding_tables["t"][batches.ids[0][0, 0]] += 1e-3
    with pytest.raises(compare_tbe.CheckFailed, match="pooled outputs"):
        sides.check(batches)


def test_tbe_check_fails_when_the_updates_differ(compare_tbe, small_tables, monkeypatch):
    fbgemm, batches = small_tables
    monkeypatch.setattr(compare_tbe, "LEARNING_RATE", 2 * compare_tbe.LEARNING_RATE)
    sides = compare_tbe.Sides(fbgemm, threads=1)  # recemb's rate twice FBGEMM's
    with pytest.raises(compare_tbe.CheckFailed, match="touched rows after one update"):
        sides.check(batches)
