"""bench/compare_keras.py: its smoke run trains the three contenders and the bound on both
workloads, and they start from the same model (the same first-step loss)."""

import pathlib
import re
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[3] / "bench" / "compare_keras.py"


def test_smoke_run_compares_the_same_model():
    result = subprocess.run([sys.executable, str(SCRIPT), "--smoke"], capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout
    for workload in ("dlrm", "10m"):
        block = output.split(f"\n{workload}:")[1].split("\n\n")[0]
        losses = dict(re.findall(r"^  (\S+)\s+first-step loss (\S+)$", block, re.M))
        assert set(losses) == {"seed", "keras-rs", "recemb", "dense"}, block
        assert losses["seed"] == losses["keras-rs"] == losses["recemb"], losses
        assert re.search(r"recemb / seed: [0-9.]+x", block), block
        assert re.search(r"engine +[0-9.]+ ms a step", block), block
