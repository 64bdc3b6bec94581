#!/usr/bin/python3
"""Runs roofline_bench and embedding_bench over the workload matrix and prints a markdown table.

    bench/matrix.py [--build DIR] [--large] [--huge] [--no-small] [--dims 64] [--tables 1,26]
                    [--threads 1,2] [--steps lookup,sgd,...] [--bags 1,20] [--ids uniform,zipf]
                    [--reps 5] [--min-time 0.2] [--json FILE]
    bench/matrix.py --rows [--rows-list 1e5,1e6,1e7] [--rows-dims 64,16] [--rows-max 1e8]
    bench/matrix.py --memory [--memory-mib 1536] [--memory-steps 50]
    bench/matrix.py --smoke          # seconds: one small group of each mode

Every (program, table shape, thread count, step) is one invocation of a benchmark program with a
--benchmark_filter; each repetition runs every invocation once, in a new random order (so drift of
the machine hits the engine and its roofline alike), and the table shows medians over the
repetitions. Rows: workload | roofline Mrows/s | recemb Mrows/s | GB/s | fraction of roofline.
The roofline of a lookup is BM_Gather, of a training step BM_GatherUpdate of the same optimizer.

--rows: ns per looked-up row of lookup and lookup + Adagrad for one table of 1e5 ... 1e8 rows
(bag 20, uniform ids) at each dim of --rows-dims; row counts above --rows-max-dim64 rows at dim
64 are skipped (1e8 x 64 floats and their Adagrad slots do not fit in 24 GiB; dim 16 does).
--memory: peak resident memory of training (embedding_bench --peak_memory) vs table + slots.
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

OPTIMIZERS = ["sgd", "adagrad", "rowwise_adagrad", "adam"]
KEYS = ["table", "dim", "bag", "ids", "tables", "threads"]


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default="build/release", help="build tree with bench/")
    parser.add_argument("--large", action="store_true", help="add the 1 GiB tables")
    parser.add_argument("--huge", action="store_true", help="add the 4 GiB tables")
    parser.add_argument("--no-small", action="store_true", help="leave out the 8 MiB tables")
    parser.add_argument("--dims", default="16,64,128")
    parser.add_argument("--tables", default="1,26")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--steps", default="lookup," + ",".join(OPTIMIZERS))
    parser.add_argument("--bags", default="1,20")
    parser.add_argument("--ids", default="uniform,zipf")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--min-time", type=float, default=0.2)
    parser.add_argument("--json", help="also write every measurement to this file")
    parser.add_argument("--rows", action="store_true", help="the cost-per-row series")
    parser.add_argument("--rows-list", default="1e5,1e6,1e7,1e8")
    parser.add_argument("--rows-dims", default="64,16")
    parser.add_argument("--rows-max-dim64", type=float, default=1e7)
    parser.add_argument("--memory", action="store_true", help="peak memory while training")
    parser.add_argument("--memory-mib", type=int, default=1536)
    parser.add_argument("--memory-steps", type=int, default=50)
    parser.add_argument("--smoke", action="store_true", help="a few seconds of each mode")
    parser.add_argument("--seed", type=int, default=1)
    return parser.parse_args()


def split(text):
    return [item for item in text.split(",") if item]


def workload_key(name):
    """The (table, dim, bag, ids, tables, threads) of a benchmark name."""
    fields = dict(part.split(":", 1) for part in name.split("/") if ":" in part)
    return tuple(fields[key] for key in KEYS)


def step_of(name):
    parts = name.split("/")
    if parts[0] in ("BM_Gather", "BM_Lookup"):
        return "lookup"
    return parts[1]


def run(program, env_extra, bench_filter, min_time):
    env = dict(os.environ, **env_extra)
    command = [program, "--benchmark_filter=" + bench_filter, "--benchmark_format=json",
               f"--benchmark_min_time={min_time}"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        sys.stderr.write(result.stderr)
        raise SystemExit(f"matrix.py: {' '.join(command)} failed ({result.returncode})")
    return json.loads(result.stdout)["benchmarks"]


def alternation(regex_items):
    return "(" + "|".join(regex_items) + ")"


def invocations(args, programs):
    """(label, program, env, filter) per table shape x threads x step and program."""
    env = {"RECEMB_BENCH_FULL": "1"}
    sizes = [] if args.no_small else ["8MiB"]
    if args.large:
        sizes.append("1GiB")
        env["RECEMB_BENCH_LARGE"] = "1"
    if args.huge:
        sizes.append("4GiB")
        env["RECEMB_BENCH_HUGE"] = "1"
    bags = alternation(split(args.bags))
    ids = alternation(split(args.ids))
    result = []
    for size in sizes:
        for dim in split(args.dims):
            for tables in split(args.tables):
                for threads in split(args.threads):
                    tail = (f"table:{size}/dim:{dim}/bag:{bags}/ids:{ids}/tables:{tables}/"
                            f"threads:{threads}/")
                    for step in split(args.steps):
                        if step == "lookup":
                            pairs = [("roofline", "BM_Gather/"), ("recemb", "BM_Lookup/")]
                        else:
                            pairs = [("roofline", f"BM_GatherUpdate/{step}/"),
                                     ("recemb", f"BM_LookupAndUpdate/{step}/")]
                        for kind, prefix in pairs:
                            result.append((kind, programs[kind], env, "^" + prefix + tail))
    return result


def measure(args, programs, items, reps, min_time):
    """Runs every invocation `reps` times in shuffled order: {(kind, name): [result, ...]}."""
    shuffler = random.Random(args.seed)
    results = {}
    started = time.time()
    for rep in range(reps):
        order = list(items)
        shuffler.shuffle(order)
        for index, (kind, program, env, bench_filter) in enumerate(order):
            sys.stderr.write(f"\r[rep {rep + 1}/{reps}, {index + 1}/{len(order)}, "
                             f"{time.time() - started:.0f} s] {bench_filter[:70]:70}")
            sys.stderr.flush()
            for bench in run(program, env, bench_filter, min_time):
                results.setdefault((kind, bench["name"]), []).append(bench)
    sys.stderr.write("\n")
    return results


def median(results, field):
    return statistics.median(bench[field] for bench in results)


def matrix_table(results):
    rows = {}
    for (kind, name), benches in results.items():
        key = (step_of(name),) + workload_key(name)
        rows.setdefault(key, {})[kind] = benches
    lines = ["| workload | roofline Mrows/s | recemb Mrows/s | GB/s | fraction of roofline |"
             " uniq | runs |",
             "|---|---|---|---|---|---|---|"]

    def order(key):
        step, table, dim, bag, ids, tables, threads = key
        size = {"8MiB": 0, "1GiB": 1, "4GiB": 2}.get(table, 3)
        return (size, int(dim), int(tables), int(threads), step != "lookup",
                OPTIMIZERS.index(step) if step in OPTIMIZERS else -1, ids, int(bag))

    for key in sorted(rows, key=order):
        step, table, dim, bag, ids, tables, threads = key
        entry = rows[key]
        label = f"{step} {table} dim:{dim} bag:{bag} {ids} tables:{tables} threads:{threads}"
        roof = median(entry["roofline"], "Mrows/s") if "roofline" in entry else None
        ours = median(entry["recemb"], "Mrows/s") if "recemb" in entry else None
        gbs = median(entry["recemb"], "GB/s") if "recemb" in entry else None
        uniq = (entry.get("recemb") or entry.get("roofline"))[0].get("uniq", float("nan"))
        runs = len(entry.get("recemb", entry.get("roofline", [])))
        fraction = f"{ours / roof:.2f}" if roof and ours else "–"
        roof_cell = f"{roof:.1f}" if roof else "–"
        ours_cells = f"{ours:.1f} | {gbs:.1f}" if ours else "– | –"
        lines.append(f"| {label} | {roof_cell} | {ours_cells} | {fraction} | {uniq:.2f} | {runs} |")
    return "\n".join(lines)


def sequential_read(args, programs, reps):
    env = {"RECEMB_BENCH_LARGE": "1"} if (args.large or args.huge) else {}
    values = {}
    for _ in range(reps):
        for bench in run(programs["roofline"], env, "^BM_SequentialRead/", args.min_time):
            values.setdefault(bench["name"], []).append(bench["GB/s"])
    return "\n".join(f"sequential read {name.split('/', 1)[1].split('/process')[0]}: "
                     f"{statistics.median(v):.1f} GB/s (median of {len(v)})"
                     for name, v in sorted(values.items()))


def rows_series(args, programs, reps, min_time):
    items = []
    for dim in split(args.rows_dims):
        counts = [count for count in split(args.rows_list)
                  if int(dim) != 64 or float(count) <= args.rows_max_dim64]
        for count in counts:
            env = {"RECEMB_BENCH_ROWS": count, "RECEMB_BENCH_ROWS_DIM": dim}
            for threads in split(args.threads):
                for kind, prefix in [("recemb", "BM_Lookup/"),
                                     ("recemb", "BM_LookupAndUpdate/adagrad/"),
                                     ("roofline", "BM_Gather/"),
                                     ("roofline", "BM_GatherUpdate/adagrad/")]:
                    items.append((kind, programs[kind], env,
                                  f"^{prefix}table:[^/]*/dim:{dim}/.*/threads:{threads}/"))
    results = measure(args, programs, items, reps, min_time)
    table = {}
    for (kind, name), benches in results.items():
        table_label, dim, _, _, _, threads = workload_key(name)
        ns = 1e3 / median(benches, "Mrows/s")
        table.setdefault((int(dim), int(threads), float(table_label[:-4])), {})[
            (kind, step_of(name))] = ns
    lines = ["| dim | threads | rows | lookup ns/row | lookup+Adagrad ns/row | "
             "roofline gather ns/row | roofline gather+Adagrad ns/row |",
             "|---|---|---|---|---|---|---|"]
    for (dim, threads, count) in sorted(table):
        entry = table[(dim, threads, count)]
        cells = [entry.get(key) for key in [("recemb", "lookup"), ("recemb", "adagrad"),
                                            ("roofline", "lookup"), ("roofline", "adagrad")]]
        lines.append(f"| {dim} | {threads} | {count:.0e} | " +
                     " | ".join(f"{c:.1f}" if c else "–" for c in cells) + " |")
    return "\n".join(lines), results


def memory(args, programs, mib, steps):
    lines = ["| optimizer | table MiB | variables MiB | peak RSS MiB | RSS before MiB | "
             "peak / variables | target 1.1x + 64 MiB | met |",
             "|---|---|---|---|---|---|---|---|"]
    for optimizer in ["adagrad", "rowwise_adagrad"]:
        command = [programs["recemb"], f"--peak_memory={optimizer}", f"--peak_memory_mib={mib}",
                   f"--peak_memory_steps={steps}"]
        output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        r = json.loads(output.strip().splitlines()[-1])
        mi = 1 << 20
        lines.append(f"| {optimizer} | {r['table_mib']} | {r['variable_bytes'] / mi:.1f} | "
                     f"{r['max_rss_bytes'] / mi:.1f} | {r['rss_before_bytes'] / mi:.1f} | "
                     f"{r['ratio']:.3f} | {r['limit_bytes'] / mi:.1f} | "
                     f"{'yes' if r['within_limit'] else 'no'} |")
    return "\n".join(lines)


def main():
    args = parse_args()
    bench_dir = os.path.join(args.build, "bench")
    programs = {"roofline": os.path.join(bench_dir, "roofline_bench"),
                "recemb": os.path.join(bench_dir, "embedding_bench")}
    for program in programs.values():
        if not os.access(program, os.X_OK):
            raise SystemExit(f"matrix.py: {program} not found (build with benchmarks on)")
    reps, min_time = args.reps, args.min_time
    if args.smoke:
        reps, min_time = 1, 0.01
        args.dims, args.tables, args.bags, args.ids = "64", "1,26", "20", "uniform"
        args.steps, args.rows_list, args.rows_dims = "lookup,rowwise_adagrad", "1e4,1e5", "16"
    outputs = []
    all_results = {}
    load_before = os.getloadavg()
    if args.rows or args.smoke:
        table, results = rows_series(args, programs, reps, min_time)
        outputs.append("### Cost per looked-up row\n\n" + table)
        all_results.update(results)
    if args.memory or args.smoke:
        mib, steps = (64, 3) if args.smoke else (args.memory_mib, args.memory_steps)
        outputs.append("### Peak memory while training\n\n" + memory(args, programs, mib, steps))
    if not (args.rows or args.memory) or args.smoke:
        results = measure(args, programs, invocations(args, programs), reps, min_time)
        all_results.update(results)
        outputs.append(f"### Workload matrix (medians of {reps})\n\n" + matrix_table(results))
        outputs.append(sequential_read(args, programs, reps))
    load_after = os.getloadavg()
    outputs.append(f"load average (1, 5, 15 min) before: {load_before[0]:.2f} {load_before[1]:.2f} "
                   f"{load_before[2]:.2f}, after: {load_after[0]:.2f} {load_after[1]:.2f} "
                   f"{load_after[2]:.2f} (2 cores: above ~2 means other processes competed)")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({f"{kind} {name}": benches for (kind, name), benches in
                       all_results.items()}, out, indent=1)
    print("\n\n".join(outputs))


if __name__ == "__main__":
    main()
