#!/usr/bin/env bash
# tests/fuzz/replay_corpus.sh SEEDS_PROGRAM REPLAY_PROGRAM [DIRECTORY...]: the ctest of a fuzz
# target (tests/CMakeLists.txt): the seeds program writes its inputs into a fresh directory, then
# the replay program runs the target on them and on the files of the directories given.
set -euo pipefail
corpus="$(mktemp -d)"
trap 'rm -rf "$corpus"' EXIT
"$1" "$corpus"
"$2" "$corpus" "${@:3}"
