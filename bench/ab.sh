#!/usr/bin/env bash
# A/B timing of two builds of one Google Benchmark program, in one sitting: their runs alternate
# (A B, then B A, ...) for --rounds rounds, and the medians of each benchmark's per-iteration real
# time, their ranges and the ratio B / A are printed as a markdown table (rows per second where the
# benchmark reports items_per_second). The method is docs/performance.md's.
#
#   bench/ab.sh --a OLD/bench/embedding_bench --b NEW/bench/embedding_bench --rounds 5 \
#       --filter '^BM_Lookup/table:4GiB/dim:64/bag:20/ids:uniform/tables:1/' -- --benchmark_min_time=0.5
#
# Environment variables (RECEMB_BENCH_HUGE=1, ...) pass through to both programs.
set -euo pipefail

a="" b="" rounds=5 filter="."
while [ $# -gt 0 ]; do
  case "$1" in
    --a) a="$2"; shift 2 ;;
    --b) b="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --filter) filter="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "bench/ab.sh: unknown argument '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
if [ -z "$a" ] || [ -z "$b" ] || [ ! -x "$a" ] || [ ! -x "$b" ]; then
  echo "bench/ab.sh: --a and --b must name two benchmark programs" >&2
  exit 2
fi

results=$(mktemp)
trap 'rm -f "$results"' EXIT
for round in $(seq 1 "$rounds"); do
  order="A B"
  [ $((round % 2)) -eq 0 ] && order="B A"
  for side in $order; do
    program="$a"
    [ "$side" = B ] && program="$b"
    echo "round $round/$rounds: $side" >&2
    "$program" --benchmark_filter="$filter" --benchmark_format=json "$@" 2>/dev/null |
      /usr/bin/env python3 -c '
import json, sys
for run in json.load(sys.stdin)["benchmarks"]:
    if run.get("run_type", "iteration") == "iteration":
        print(sys.argv[1], run["name"], run["real_time"], run.get("items_per_second", 0))
' "$side" >>"$results"
  done
done

/usr/bin/env python3 - "$results" <<'PY'
import collections, statistics, sys
times = collections.defaultdict(list)
rates = collections.defaultdict(list)
for line in open(sys.argv[1]):
    side, name, real_time, items = line.split()
    times[(name, side)].append(float(real_time))
    rates[(name, side)].append(float(items))
print("| benchmark | A | B | B / A |")
print("|---|---|---|---|")
for name in sorted({name for name, _ in times}):
    if not times[(name, "A")] or not times[(name, "B")]:
        continue
    use_rates = all(rate > 0 for rate in rates[(name, "A")] + rates[(name, "B")])
    cells = []
    for side in ("A", "B"):
        values = [r / 1e6 for r in rates[(name, side)]] if use_rates else times[(name, side)]
        cells.append((statistics.median(values), min(values), max(values)))
    unit = "Mrows/s" if use_rates else "time"
    ratio = cells[1][0] / cells[0][0]
    print(f"| {name} | {cells[0][0]:.3g} ({cells[0][1]:.3g}-{cells[0][2]:.3g}) {unit} | "
          f"{cells[1][0]:.3g} ({cells[1][1]:.3g}-{cells[1][2]:.3g}) {unit} | {ratio:.3f} |")
PY
