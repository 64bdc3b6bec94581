"""What the Python benchmarks share and need no framework for: the Criteo cardinalities with
dlrm/criteo_profile.h's fit to a memory budget, and the names every figure carries (the CPU and
the commit)."""

import pathlib
import subprocess

# Distinct values of C1..C26 (dlrm/criteo_profile.h).
CRITEO_KAGGLE = (1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593,
                 3194, 27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572)
CRITEO_TERABYTE = (40000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 40000000, 3067956,
                   405282, 10, 2209, 11938, 155, 4, 976, 14, 40000000, 40000000, 40000000, 590152,
                   12973, 108, 36)


def fit_to_budget(cardinalities, dim, max_bytes):
    """dlrm/criteo_profile.h's fit_to_budget: vocabulary_f = min(card_f, cap), the largest cap
    with sum_f vocabulary_f * dim * 4 <= max_bytes."""
    max_rows = max_bytes // (dim * 4)
    if sum(cardinalities) <= max_rows:
        return tuple(cardinalities)
    low, high = 1, max(cardinalities)  # sum(min(c, low)) fits, sum(min(c, high)) does not
    while high - low > 1:
        middle = (low + high) // 2
        if sum(min(c, middle) for c in cardinalities) <= max_rows:
            low = middle
        else:
            high = middle
    return tuple(min(c, low) for c in cardinalities)


def cpu_model():
    """The CPU as every figure names it: lscpu's model name, family and model."""
    try:
        output = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except OSError:
        return "unknown (no lscpu)"
    fields = dict(line.split(":", 1) for line in output.splitlines() if ":" in line)
    return (f"{fields.get('Model name', 'unknown').strip()} (family "
            f"{fields.get('CPU family', '?').strip()}, model {fields.get('Model', '?').strip()})")


def git_commit():
    """The repository's commit, short, or "unknown"."""
    result = subprocess.run(["git", "-C", str(pathlib.Path(__file__).resolve().parents[1]),
                             "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True, timeout=10)
    return result.stdout.strip() or "unknown"
