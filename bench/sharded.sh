#!/usr/bin/env bash
# The sharding figures of docs/performance.md in one run: sharded_bench in one process with 1 (the
# unsharded engine), 2 and 4 row-wise shards, then the same workload over 2 MPI ranks (2 shards),
# each line with its speed relative to the in-process 1-shard run; then mpi_exchange_bench under 2
# and 4 ranks. The MPI runs go twice: through OpenMPI's default transport on one host (shared
# memory) and through TCP over the loopback interface (lines "mpi-tcp"), closer to a network.
#
#   bench/sharded.sh [--build DIR] [FLAGS...]
#
# DIR is the build tree (default build/release); FLAGS go to every sharded_bench run (--steps 20,
# --repetitions 7, --smoke, ...); with --smoke the exchange benchmark runs briefly as well.
# Each configuration builds its tables anew (2 GiB of weights and 2 GiB of Adagrad slots, 12-20 s
# on 2 idle-enough cores); the whole run takes about 4 minutes and 4 GiB of memory at a time.
set -euo pipefail

build=build/release
flags=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    *) flags+=("$1"); shift ;;
  esac
done
exchange_flags=()
for flag in "${flags[@]}"; do
  if [ "$flag" = --smoke ]; then exchange_flags+=(--smoke); fi
done

sharded="$build/bench/sharded_bench"
exchange="$build/bench/mpi_exchange_bench"
for program in "$sharded" "$exchange"; do
  if [ ! -x "$program" ]; then
    echo "sharded.sh: no $program (build with RECEMB_WITH_MPI=ON and benchmarks on)" >&2
    exit 1
  fi
done
# OpenMPI as root needs --allow-run-as-root; --oversubscribe allows more ranks than cores.
mpirun=(mpirun --allow-run-as-root --oversubscribe)
# TCP only, over the loopback interface (OpenMPI's TCP transport leaves it out by default).
tcp=(--mca pml ob1 --mca btl "self,tcp" --mca btl_tcp_if_include lo)

echo "== sharded_bench: in-process (1 process), then 2 MPI ranks"
in_process="$(mktemp)"
trap 'rm -f "$in_process"' EXIT
"$sharded" --shards 1,2,4 "${flags[@]}" | tee "$in_process"
# steps/s (column 7) of the 1-shard line, the reference of the MPI lines' ratio.
reference="$(awk '$1 == "in-process" && $2 == 1 { print $7 }' "$in_process")"
reference_flag=()
if [ -n "$reference" ]; then reference_flag=(--reference "$reference"); fi
"${mpirun[@]}" -np 2 "$sharded" --mpi "${reference_flag[@]}" "${flags[@]}" | grep -v '^#\|^mode'
"${mpirun[@]}" "${tcp[@]}" -np 2 "$sharded" --mpi "${reference_flag[@]}" "${flags[@]}" |
  grep -v '^#\|^mode' | sed 's/^mpi    /mpi-tcp/'

for transport in default tcp; do
  for ranks in 2 4; do
    echo
    if [ "$transport" = default ]; then
      echo "== mpi_exchange_bench: mpirun -np $ranks (shared memory)"
      "${mpirun[@]}" -np "$ranks" "$exchange" "${exchange_flags[@]}"
    else
      echo "== mpi_exchange_bench: mpirun ${tcp[*]} -np $ranks (TCP, loopback)"
      "${mpirun[@]}" "${tcp[@]}" -np "$ranks" "$exchange" "${exchange_flags[@]}"
    fi
  done
done
