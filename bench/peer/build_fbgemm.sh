#!/usr/bin/env bash
# Builds FBGEMM's CPU library (the peer of bench/peer/README.md) from a source tree the user
# provides, then the harness bench/peer/fbgemm_harness.cc against it.
#
#   bench/peer/build_fbgemm.sh SRC_DIR [BUILD_DIR]
#
# SRC_DIR: an FBGEMM clone or release archive with its CPU submodules present
# (external/asmjit, external/cpuinfo; googletest is not needed). BUILD_DIR defaults to
# SRC_DIR/build-recemb-peer. The measured commit is `git rev-parse HEAD` of SRC_DIR, or
# $FBGEMM_COMMIT for a tree without .git (an archive); it is printed and written to
# BUILD_DIR/fbgemm_commit.txt, which compare.sh prints beside its table.
# Nothing here is built by recemb's CMake or by CI.
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: $0 SRC_DIR [BUILD_DIR]" >&2
  exit 2
fi
src=$(cd "$1" && pwd)
build=${2:-$src/build-recemb-peer}
jobs=${JOBS:-2}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

for required in CMakeLists.txt include/fbgemm/FbgemmEmbedding.h external/asmjit/CMakeLists.txt \
  external/cpuinfo/CMakeLists.txt; do
  if [[ ! -e $src/$required ]]; then
    echo "$0: $src/$required is missing: point SRC_DIR at an FBGEMM tree with its asmjit and" \
      "cpuinfo submodules checked out (git submodule update --init external/asmjit external/cpuinfo)" >&2
    exit 1
  fi
done

if [[ -n ${FBGEMM_COMMIT:-} ]]; then
  commit=$FBGEMM_COMMIT
elif [[ $(git -C "$src" rev-parse --show-toplevel 2>/dev/null) == "$src" ]]; then  # its own clone
  commit=$(git -C "$src" rev-parse HEAD)
else
  echo "$0: $src is not a git clone: set FBGEMM_COMMIT to the commit the archive was made from" >&2
  exit 1
fi
mkdir -p "$build"
echo "$commit" >"$build/fbgemm_commit.txt"
echo "FBGEMM commit measured: $commit"

# FBGEMM compiles with -Werror; GCC 12's AVX-512 intrinsic headers trip -Wuninitialized in
# src/UtilsAvx512.cc (their `__m512 __Y = __Y;` idiom), so that one warning stays a warning.
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DFBGEMM_LIBRARY_TYPE=static \
  -DFBGEMM_BUILD_TESTS=OFF -DFBGEMM_BUILD_BENCHMARKS=OFF -DFBGEMM_BUILD_DOCS=OFF \
  -DCMAKE_CXX_FLAGS="-Wno-error=uninitialized"
cmake --build "$build" -j "$jobs" --target fbgemm

# The harness: ours, compiled against FBGEMM's public headers and recemb's bench/workload.h
# (the same id batches as bench/embedding_bench).
cmake -S "$here" -B "$build/harness" -DCMAKE_BUILD_TYPE=Release -DFBGEMM_SOURCE_DIR="$src" \
  -DFBGEMM_BINARY_DIR="$build"
cmake --build "$build/harness" -j "$jobs"
echo "harness: $build/harness/fbgemm_harness"
