"""bench/compare_torch.py: its smoke run works on every workload, and its equal-work check fails
when recemb and torch do not compute the same thing."""

import importlib.util
import pathlib

import numpy as np
import pytest

pytest.importorskip("torch")

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "bench" / "compare_torch.py"


@pytest.fixture(scope="module")
def compare():
    spec = importlib.util.spec_from_file_location("compare_torch", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def smoke_phase(compare, workload_name, step):
    """A one-thread phase of a smoke workload, its tables at their initial values."""
    compare.torch.set_num_threads(1)
    workload = compare.make_workloads(smoke=True, criteo="kaggle")[workload_name]
    data = compare.Data(workload, seed=3)
    tables = compare.TorchTables(workload, data, seed=3, huge_pages=False)
    return compare.Phase(workload, step, 1, tables.bags, data), tables


def test_smoke_run_prints_every_workload_and_step(compare, capsys):
    # One thread on every workload (dense [B, L], [B] and ragged inputs), both thread counts on one.
    assert compare.main(["--smoke", "--threads", "1", "--markdown"]) == 0
    assert compare.main(["--smoke", "--threads", "1,2", "--workloads", "d64-zipf",
                         "--steps", "forward,sgd", "--torch-huge-pages"]) == 0
    output = capsys.readouterr().out
    for name in compare.DEFAULT_WORKLOADS:
        for step in compare.STEPS:
            assert f"| {name} | 1 | {step} |" in output
    plain_rows = [line for line in output.splitlines() if line.startswith("d64-zipf ")]
    assert len(plain_rows) == 4  # 2 thread counts x 2 steps


def test_interleaved_runs_time_each_side_every_call(compare, monkeypatch):
    calls = []
    monkeypatch.setattr(compare.time, "perf_counter", lambda: len(calls) * 0.5)

    def side(name):
        return lambda batch: calls.append((name, batch))

    sides = {"recemb": side("recemb"), "torch": side("torch")}
    per_step = compare.run_interleaved(sides, ("torch", "recemb"), ["b0", "b1"], 3)
    assert calls == [("torch", "b0"), ("recemb", "b0"), ("torch", "b1"), ("recemb", "b1"),
                     ("torch", "b0"), ("recemb", "b0")]
    # Each call advances the fake clock by one tick of 0.5 s, inside its own timing.
    assert per_step == {"torch": 0.5, "recemb": 0.5}
    monkeypatch.undo()
    assert compare.main(["--smoke", "--threads", "2", "--workloads", "d64-zipf", "--steps",
                         "forward", "--interleave"]) == 0


@pytest.mark.parametrize("workload", ["d64-zipf", "dlrm", "dlrm-multihot"])
@pytest.mark.parametrize("step", ["forward", "sgd", "adagrad", "adam"])
def test_check_passes_when_both_sides_agree(compare, workload, step):
    phase, _ = smoke_phase(compare, workload, step)
    phase.check()


def test_check_fails_on_a_different_table(compare):
    phase, _ = smoke_phase(compare, "d64-uniform", "forward")
    table = phase.layer.embedding_tables["t0"]
    row = int(phase.data.batches[0].ids[0][0])
    table[row, 5] += 1e-3
    with pytest.raises(compare.CheckFailed, match="forward of feature f0"):
        phase.check()


def test_check_fails_on_a_different_update(compare, monkeypatch):
    monkeypatch.setitem(compare.HYPERPARAMETERS, "sgd", {"learning_rate": 0.011})
    phase, _ = smoke_phase(compare, "dlrm-multihot", "sgd")
    phase.optimizer.param_groups[0]["lr"] = 0.01  # torch keeps the original rate
    with pytest.raises(compare.CheckFailed, match="rows of table t0 after one step"):
        phase.check()


def test_tables_reset_to_their_initial_values(compare):
    phase, tables = smoke_phase(compare, "d64-zipf", "adam")
    initial = phase.bags[0].weight.detach().numpy().copy()
    for batch in phase.data.batches:
        phase.torch_step(batch)
    assert not np.array_equal(phase.bags[0].weight.detach().numpy(), initial)
    tables.reset()
    np.testing.assert_array_equal(phase.bags[0].weight.detach().numpy(), initial)


def test_fit_to_budget_caps_the_largest_tables(compare):
    sizes = compare.fit_to_budget(compare.CRITEO_KAGGLE, 64, 2 << 30)
    assert sum(sizes) * 64 * 4 <= 2 << 30
    cap = max(sizes)
    assert sum(min(c, cap + 1) for c in compare.CRITEO_KAGGLE) * 64 * 4 > 2 << 30
    assert [s for s, c in zip(sizes, compare.CRITEO_KAGGLE) if s != c] == [cap] * sum(
        c > cap for c in compare.CRITEO_KAGGLE)
    assert compare.fit_to_budget((3, 5), 64, 1 << 20) == (3, 5)


def test_run_fails_when_the_sides_differ(compare, monkeypatch, capsys):
    monkeypatch.setattr(compare, "recemb_optimizer",
                        lambda step: compare.recemb.optimizers.SGD(learning_rate=0.011))
    assert compare.main(["--smoke", "--threads", "1", "--workloads", "d64-uniform,dlrm",
                         "--steps", "forward,sgd"]) == 1
    captured = capsys.readouterr()
    assert "check failed: d64-uniform, sgd: rows of table t0 after one step" in captured.err
    assert "d64-uniform  1        forward" in captured.out  # the results before the failure
