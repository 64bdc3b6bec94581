#!/usr/bin/env bash
# recemb beside FBGEMM in one sitting: runs FBGEMM's kernels (bench/peer/fbgemm_harness), recemb's
# embedding_bench and serving_bench, and the plain loops of roofline_bench, alternately, for
# --rounds rounds, on the same workloads (bench/workload.h: dim 64, 4096 bags x 20 int64 ids, one
# table, uniform and Zipf ids, 1 and 2 threads), and prints per workload the medians and ranges of
# rows per second and the ratios recemb / FBGEMM, roofline / FBGEMM and, for the steps, summed
# roofline / FBGEMM (the plain loop with recemb's semantics: each distinct row updated once from
# its summed gradient) (median of the per-round ratios, with their range). bench/peer/README.md
# has the method and the figures.
#
#   bench/peer/compare.sh --fbgemm FBGEMM_BUILD --recemb RECEMB_BUILD [--rounds 5] [--no-serving]
#       [-- extra Google Benchmark flags, e.g. --benchmark_min_time=0.5]
#
# FBGEMM_BUILD is build_fbgemm.sh's BUILD_DIR (its harness/fbgemm_harness and fbgemm_commit.txt);
# RECEMB_BUILD a recemb build tree with the benchmarks (bench/embedding_bench, roofline_bench,
# serving_bench). To measure another instruction set (an AVX2 CPU on an AVX-512 one), set
# FBGEMM_ENABLE_INSTRUCTIONS=AVX2 and RECEMB_BENCH_SIMD_TARGET=AVX2 (bench/benchmark_main.h).
# Tables are 1 GiB; RECEMB_PEER_HUGE=1 measures 4 GiB tables instead (serving rows are 1 GiB
# only: serving_bench has no 4 GiB model). Each round runs the programs in turn,
# the order reversed every other round; every program is a fresh process. Run it with raised
# priority on a shared host (bench/peer/README.md).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

fbgemm="" recemb="" rounds=5 serving=1
while [ $# -gt 0 ]; do
  case "$1" in
    --fbgemm) fbgemm="$2"; shift 2 ;;
    --recemb) recemb="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --no-serving) serving=0; shift ;;
    --) shift; break ;;
    *) echo "bench/peer/compare.sh: unknown argument '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
if [ "${RECEMB_PEER_HUGE:-0}" != 0 ]; then
  table=4GiB
  export RECEMB_BENCH_HUGE=1
  serving=0  # serving_bench has no 4 GiB model
else
  table=1GiB
  export RECEMB_BENCH_LARGE=1
fi
harness="$fbgemm/harness/fbgemm_harness"
programs=("$harness" "$recemb/bench/embedding_bench" "$recemb/bench/roofline_bench")
[ "$serving" = 1 ] && programs+=("$recemb/bench/serving_bench")
for program in "${programs[@]}"; do
  if [ ! -x "$program" ]; then
    echo "bench/peer/compare.sh: $program is missing: pass --fbgemm (build_fbgemm.sh's BUILD_DIR)" \
      "and --recemb (a recemb build with its benchmarks)" >&2
    exit 2
  fi
done
if ! [[ $rounds =~ ^[1-9][0-9]*$ ]]; then
  echo "bench/peer/compare.sh: --rounds must be a positive integer, not '$rounds'" >&2
  exit 2
fi

workload="table:$table/dim:64/bag:20/ids:(uniform|zipf)/tables:1/threads:[12]/"
# The static serving model only: serving_bench's vocabulary:dynamic models add a key index.
serving_filter="^BM_(Fbgemm)?ServingLookup/dtype:(int8|float16)/table:1GiB/(vocabulary:static/|threads)"
fbgemm_filter="^BM_Fbgemm(Lookup|LookupAndUpdate/rowwise_adagrad)/$workload"
[ "$serving" = 1 ] && fbgemm_filter="$fbgemm_filter|$serving_filter"

# side: the label the table uses; the program and its filter.
run_side() {
  local side="$1" program filter
  shift
  case "$side" in
    fbgemm) program="$harness"; filter="$fbgemm_filter" ;;
    recemb) program="$recemb/bench/embedding_bench"
      filter="^BM_Lookup(AndUpdate/rowwise_adagrad)?/$workload" ;;
    roofline) program="$recemb/bench/roofline_bench"
      filter="^BM_Gather((Sum)?Update/rowwise_adagrad)?/$workload" ;;
    serving) program="$recemb/bench/serving_bench"; filter="$serving_filter" ;;
  esac
  "$program" --benchmark_filter="$filter" --benchmark_format=json "$@" 2>/dev/null |
    /usr/bin/env python3 -c '
import json, sys
output = json.load(sys.stdin)
if "fbgemm_isa" in output["context"]:
    print("isa", output["context"]["fbgemm_isa"])
if "simd_target" in output["context"] and sys.argv[1] != "roofline":
    print("simd", output["context"]["simd_target"])
for run in output["benchmarks"]:
    if run.get("run_type", "iteration") == "iteration" and "error_message" not in run:
        print(sys.argv[1], sys.argv[2], run["name"], run["items_per_second"])
' "$side" "$round"
}

started=$(date -u '+%Y-%m-%d %H:%M UTC')
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
sides=(fbgemm recemb roofline)
[ "$serving" = 1 ] && sides+=(serving)
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for round in $(seq 1 "$rounds"); do
  order=("${sides[@]}")
  if [ $((round % 2)) -eq 0 ]; then
    order=()
    for ((i = ${#sides[@]} - 1; i >= 0; i--)); do order+=("${sides[i]}"); done
  fi
  for side in "${order[@]}"; do
    echo "round $round/$rounds: $side" >&2
    run_side "$side" "$@" >>"$results"
  done
done

echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs;" \
  "FBGEMM ISA: $(sed -n 's/^isa //p' "$results" | sort -u | tr '\n' ' ');" \
  "recemb SIMD target: $(sed -n 's/^simd //p' "$results" | sort -u | tr '\n' ' ')"
echo "FBGEMM commit: $(cat "$fbgemm/fbgemm_commit.txt" 2>/dev/null || echo unknown)"
recemb_source=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$recemb/CMakeCache.txt" 2>/dev/null || true)
echo "recemb commit: $(git -C "${recemb_source:-$here}" rev-parse --short HEAD 2>/dev/null || echo unknown)" \
  "(the HEAD of $recemb's source tree now)"
echo "table: $table, $rounds rounds, started $started, ended $(date -u '+%H:%M UTC');" \
  "load average at the start $load_before, at the end $(cut -d' ' -f1-3 /proc/loadavg)"
echo
/usr/bin/env python3 - "$results" <<'PY'
import collections, re, statistics, sys

WORKLOAD = re.compile(r"/ids:(\w+)/tables:\d+/threads:(\d)")
SERVING = re.compile(r"ServingLookup/dtype:(\w+)/.*threads:(\d)")

def threads_name(threads):
    return "1 thread" if threads == "1" else f"{threads} threads"

def row_of(name):
    """The table row of a benchmark name: the same workload of every program gets the same row."""
    serving = SERVING.search(name)
    if serving:
        dtype, threads = serving.groups()
        return f"serving {dtype} lookup, uniform, {threads_name(threads)}"
    ids, threads = WORKLOAD.search(name).groups()
    step = "lookup + row-wise Adagrad" if "rowwise_adagrad" in name else "lookup"
    return f"{step}, {ids}, {threads_name(threads)}"

rates = collections.defaultdict(dict)  # (row, side) -> {round: Mrows/s}
for line in open(sys.argv[1]):
    if line.startswith(("isa ", "simd ")):
        continue
    side, round_, name, items = line.split()
    row = row_of(name)
    if side == "serving":
        side = "recemb"
    if "GatherSumUpdate" in name:
        side = "summed"  # the plain loop with recemb's semantics (roofline_bench.cc)
    rates[(row, side)][int(round_)] = float(items) / 1e6

def cell(values):
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"

def ratio(row, side):
    mine, peer = rates.get((row, side), {}), rates.get((row, "fbgemm"), {})
    per_round = [mine[r] / peer[r] for r in sorted(mine) if r in peer]
    if not per_round:
        return "-"
    return f"{statistics.median(per_round):.2f} ({min(per_round):.2f}-{max(per_round):.2f})"

rows = sorted({row for row, _ in rates}, key=lambda r: (r.startswith("serving"), "Adagrad" in r, r))
print("| workload (Mrows/s: median (min-max)) | FBGEMM | recemb | roofline | summed roofline "
      "| recemb / FBGEMM | roofline / FBGEMM | summed roofline / FBGEMM |")
print("|---|---|---|---|---|---|---|---|")
for row in rows:
    cells = [cell(list(rates[(row, side)].values())) if (row, side) in rates else "-"
             for side in ("fbgemm", "recemb", "roofline", "summed")]
    ratios = [ratio(row, side) for side in ("recemb", "roofline", "summed")]
    print(f"| {row} | {' | '.join(cells)} | {' | '.join(ratios)} |")
PY
