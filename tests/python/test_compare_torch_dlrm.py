"""bench/compare_torch_dlrm.py: its model is `recemb train`'s, its two torch contenders train the
same thing, and its smoke run (about 5 s) runs all three contenders."""

import importlib.util
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import recemb  # noqa: E402
import recemb.torch  # noqa: E402
from binaries import REPOSITORY, recemb_binary  # noqa: E402

SCRIPT = REPOSITORY / "bench" / "compare_torch_dlrm.py"


@pytest.fixture(scope="module")
def compare():
    spec = importlib.util.spec_from_file_location("compare_torch_dlrm", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_model_is_the_trainers_default(compare):
    # The figures `recemb train` prints for its default model (docs/training.md).
    sizes = compare.table_sizes()
    assert sum(sizes) == 1048576 and max(sizes) == 129719
    model = compare.DenseModel(seed=0)
    assert sum(p.numel() for p in model.parameters()) == 27601


def test_interaction_is_dlrms_dot_interaction(compare):
    generator = torch.Generator().manual_seed(5)
    model = compare.DenseModel(seed=1)
    dense = torch.rand(3, compare.NUM_DENSE, generator=generator)
    embeddings = [torch.randn(3, compare.EMBEDDING_DIM, generator=generator)
                  for _ in range(compare.NUM_TABLES)]
    z = model.bottom(dense)
    expected = []
    for b in range(3):  # pair (i, j), i > j, in row-major order after z (docs/training.md)
        vectors = [z[b]] + [e[b] for e in embeddings]
        pairs = [float(vectors[i] @ vectors[j]) for i in range(len(vectors)) for j in range(i)]
        expected.append(z[b].tolist() + pairs)
    expected_logits = model.top(torch.tensor(expected)).squeeze(1)
    torch.testing.assert_close(model(dense, embeddings), expected_logits, rtol=1e-5, atol=1e-5)


def test_torch_contenders_train_the_same_model(compare, tmp_path):
    # With the same initial tables, plain torch (EmbeddingBag + sparse Adagrad) and torch with
    # recemb.torch.Embedding (recemb's Adagrad) give the same losses and tables step by step.
    data = compare.make_data(tmp_path, recemb_binary(), steps=3, batch_size=64, seed=2)
    sizes = compare.table_sizes()
    plain = compare.plain_torch(sizes, seed=4)
    with_recemb = compare.torch_with_recemb(sizes, seed=4, threads=1)
    for f, bag in enumerate(plain.tables.bags):
        with_recemb.tables.embedding.assign_table(f"C{f + 1}", bag.weight.detach().numpy())
    for index in range(data.steps):
        np.testing.assert_allclose(plain.step(data, index), with_recemb.step(data, index),
                                   rtol=1e-5)
    for f, bag in enumerate(plain.tables.bags):
        np.testing.assert_allclose(
            with_recemb.tables.embedding.embedding_tables[f"C{f + 1}"].numpy(),
            bag.weight.detach().numpy(), rtol=1e-4, atol=1e-5)


def test_data_file_is_what_the_contenders_train_on(compare, tmp_path):
    data = compare.make_data(tmp_path, recemb_binary(), steps=2, batch_size=32, seed=3)
    lines = data.train_path.read_text().splitlines()
    assert len(lines) == 64
    fields = [line.split("\t") for line in lines]
    assert all(len(f) == 40 for f in fields)
    labels = np.array([float(f[0]) for f in fields], np.float32).reshape(2, 32)
    np.testing.assert_array_equal(data.labels, labels)
    counts = np.array([[float(x) for x in f[1:14]] for f in fields])
    np.testing.assert_allclose(data.dense.reshape(64, 13), np.log1p(counts), rtol=1e-6)
    missing = np.array([[x == "" for x in f[14:]] for f in fields]).T.reshape(26, 2, 32)
    assert missing.any()
    np.testing.assert_array_equal(data.ids.transpose(1, 0, 2) == 0, missing)
    assert 0.05 < data.labels.mean() < 0.6


@pytest.mark.parametrize("tuned", [False, True], ids=["as_is", "tuned_environment"])
def test_smoke_run_reports_every_contender(compare, tmp_path, tuned):
    environment = {name: value for name, value in os.environ.items()
                   if name not in compare.TORCH_ENVIRONMENT}
    # The package this test imports, wherever pytest was started from.
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(pathlib.Path(recemb.__file__).parents[1])] +
        [path for path in [os.environ.get("PYTHONPATH")] if path])
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke", "--recemb", str(recemb_binary()),
         "--directory", str(tmp_path)] + (["--tuned-environment"] if tuned else []),
        capture_output=True, text=True, timeout=120, env=environment)
    assert result.returncode == 0, result.stderr
    for row in ("| (a) torch: EmbeddingBag", "| (b) torch + recemb.torch.Embedding on torch's",
                "| (b') the same on recemb's own threads |", "| (c) recemb train |",
                "| [256, 367] x [367, 64] |"):
        assert row in result.stdout
    assert "GFLOP/s" in result.stdout
    settings = ("(OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE)" if tuned else
                "(OPENBLAS_NUM_THREADS= OMP_WAIT_POLICY=)")  # the environment as it is
    assert settings in result.stdout
    assert f"(b) runs on num_threads={recemb.torch.torch_threads()!r}" in result.stdout
