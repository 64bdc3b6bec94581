"""Where an Embedding's loops run: its own threads (num_threads=N), the process's OpenMP threads
(num_threads="openmp", the ParallelExecutor of recemb/executor.h), or torch's intra-op threads
(recemb.torch.Embedding's default "torch"): the same results bitwise, on batches large enough to
run on several threads."""

import pickle

import numpy as np
import pytest

import recemb
from recemb import _recemb

BATCH, BAG, VOCABULARY, DIM = 2048, 8, 5000, 8


def features():
    a = recemb.TableConfig(vocabulary_size=VOCABULARY, dim=DIM, name="a", combiner="sqrtn")
    b = recemb.TableConfig(vocabulary_size=3000, dim=DIM, name="b",
                           optimizer=recemb.optimizers.Adam(learning_rate=0.01))
    return {"x": recemb.FeatureConfig(a, name="x"), "y": recemb.FeatureConfig(b, name="y")}


def batches(seed, steps):
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        ids = {"x": rng.integers(0, VOCABULARY, size=(BATCH, BAG)),
               "y": rng.integers(0, 3000, size=(BATCH, BAG))}
        weights = {"x": rng.uniform(-1, 1, size=(BATCH, BAG)).astype(np.float32), "y": None}
        gradients = {name: rng.uniform(-1, 1, size=(BATCH, DIM)).astype(np.float32)
                     for name in ("x", "y")}
        yield ids, weights, gradients


def train(num_threads, seed=11, steps=3):
    """Activations of every step and the final variables of a layer trained on random batches."""
    layer = recemb.Embedding(features(), recemb.optimizers.Adagrad(learning_rate=0.1),
                             num_threads=num_threads, seed=5)
    results = []
    for ids, weights, gradients in batches(seed, steps):
        out = layer(ids, weights)
        results += [np.array(out["x"]), np.array(out["y"])]
        layer.apply_gradients(gradients)
    for table in ("a", "b"):
        results.append(np.array(layer.embedding_tables[table]))
        results += [np.array(slot) for slot in layer.slot_variables[table].values()]
    return layer, results


def assert_bitwise_equal(first, second):
    assert len(first) == len(second)
    for x, y in zip(first, second):
        np.testing.assert_array_equal(x.view(np.uint32), y.view(np.uint32))


def test_openmp_threads_give_the_results_of_own_threads_bitwise():
    _, own = train(2)
    _, one = train(1)
    layer, openmp = train("openmp")
    assert_bitwise_equal(own, one)
    assert_bitwise_equal(openmp, own)
    copy = pickle.loads(pickle.dumps(layer))  # keeps "openmp", builds a new executor
    assert copy._options["num_threads"] == "openmp"


def test_openmp_executor_checks_its_bound_and_names_its_runtime():
    assert _recemb.openmp_max_threads() >= 1
    executor = _recemb.openmp_executor(3)
    assert executor.max_threads() == 3
    for bad in (0, -1, 1025):
        with pytest.raises(ValueError, match=r"max_threads must be in \[1, 1024\]"):
            _recemb.openmp_executor(bad)
    assert _recemb.openmp_runtime_path().endswith(".so.1") or "gomp" in \
        _recemb.openmp_runtime_path()


def test_bad_num_threads_are_refused_by_name():
    for bad, message in (("torch", 'must be an int or "openmp"'),
                         ("OpenMP", 'must be an int or "openmp"'),
                         (1.5, "must be an int"), (-1, ">= 0")):
        with pytest.raises(ValueError, match=message):
            recemb.Embedding(features(), "sgd", num_threads=bad)
    options = _recemb.EmbeddingOptions(num_threads=2, executor=_recemb.openmp_executor(2))
    table = recemb.TableConfig(vocabulary_size=4, dim=2, name="t")
    resolved = recemb.embedding.Resolved({"f": recemb.FeatureConfig(table, name="f")})
    with pytest.raises(ValueError, match="num_threads must be 0 when an executor is set"):
        _recemb.Embedding(resolved.cpp_tables(False), resolved.cpp_features(), options)


# ---------------------------------------------------------------------------------------------
# torch's threads.

@pytest.fixture(name="torch")
def torch_module():
    torch = pytest.importorskip("torch")
    import recemb.torch  # noqa: F401
    return torch


def test_torch_and_recemb_share_one_openmp_runtime(torch):
    """recemb.torch runs on torch's threads: one OpenMP runtime in the process, whose thread count
    torch.set_num_threads sets for both."""
    if "parallel backend: OpenMP" not in torch.__config__.parallel_info():
        pytest.skip("this torch does not use OpenMP")
    assert recemb.torch.torch_threads() == "openmp"
    assert len(recemb.torch._openmp_runtimes()) == 1
    before = torch.get_num_threads()
    try:
        for threads in (1, 3, 2):
            torch.set_num_threads(threads)
            assert _recemb.openmp_max_threads() == threads
    finally:
        torch.set_num_threads(before)


def test_the_module_on_torchs_threads_trains_as_on_its_own_bitwise(torch):
    def run(num_threads):
        module = recemb.torch.Embedding(features(), recemb.optimizers.Adagrad(learning_rate=0.1),
                                        num_threads=num_threads, seed=5)
        outputs = []
        for ids, weights, gradients in batches(3, 3):
            out = module({name: torch.from_numpy(v) for name, v in ids.items()},
                          {"x": torch.from_numpy(weights["x"]), "y": None})
            loss = sum((out[name] * torch.from_numpy(gradients[name])).sum() for name in out)
            loss.backward()
            outputs += [out["x"].detach().numpy().copy(), out["y"].detach().numpy().copy()]
        tables = [t.numpy().copy() for t in module.embedding_tables.values()]
        return module, outputs + tables

    module, on_torch = run("torch")
    assert module.layer._options["num_threads"] == recemb.torch.torch_threads()
    _, own = run(2)
    assert_bitwise_equal(on_torch, own)
