# recemb's developer and CI entry points; CMake (CMakePresets.json) does the building.
#   make run     install dependencies, build, run `recemb train` (DLRM-style model, synthetic data)
#   make test    install dependencies, then what says the build works: Release tests, the install
#                check and the Python tests (about 15 minutes on a fresh 2-core machine)
#   make test-full  `make test`, then the build without optional libraries, the Python tests on torch
#                2.x, the Keras suite on TensorFlow (against the seed's own layer), clang-tidy, ASan+UBSan, TSan and benchmark smoke runs: every check CI runs
#                (.ci/run is `make test-full`)
#   make fuzz-smoke  the libFuzzer targets for FUZZ_SECONDS each (clang; the test builds replay
#                their inputs without libFuzzer)
#   make build   Release build of everything in build/release
#   make python  a wheel of the Python package in build/wheel, built offline (pip install it)
#   make format  apply clang-format to every C++ file
#   make clean   remove build/
# Single phases: check-format check-mirror test-release check-install test-python (make test);
# check-minimal test-torch2 test-keras check-tidy test-asan test-tsan bench-smoke (the rest of make
# test-full).

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.NOTPARALLEL:
.DEFAULT_GOAL := build
.PHONY: build run test test-full deps format clean help python release-build test-begin test-summary \
        check-format check-mirror test-release check-tidy test-asan test-tsan check-install \
        bench-smoke fuzz-smoke test-python check-minimal test-torch2 test-keras

JOBS ?= $(shell nproc)
# Ninja when it is installed (evaluated when a recipe runs, so after `deps`). A build tree keeps the
# generator it was configured with.
export CMAKE_GENERATOR ?= $(if $(shell command -v ninja 2>/dev/null),Ninja,Unix Makefiles)
# ccache (CMakeLists.txt uses it when installed) shares compiled files between the build trees of
# one checkout (build/release, build/minimal, build/python, pip's build/pip) and between checkouts
# at different paths: paths under the checkout are hashed relative to it.
export CCACHE_BASEDIR ?= $(CURDIR)
export CCACHE_NOHASHDIR ?= 1
# Sanitizer runtime options (CMakePresets.json sets the same for ctest).
export ASAN_OPTIONS ?= detect_leaks=1
export UBSAN_OPTIONS ?= print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS ?= halt_on_error=1 second_deadlock_stack=1

RECEMB := build/release/bin/recemb
TIMES := build/test-times.txt
COUNTS := build/test-counts.txt
# Each phase of `make test` prints its duration and adds it to $(TIMES).
PHASE_START = start=$$SECONDS; echo "==> $@"
PHASE_END = t=$$((SECONDS - start)); \
            echo "<== $@: $${t} s ($$(df -Ph . | awk 'NR == 2 { print $$4 }') free on this disk)"; \
            mkdir -p build; printf '%-14s %5d s\n' "$@" "$$t" >>$(TIMES)
# PRUNE=1 (.ci/run sets it): a deep phase removes the tree or environment it made once its checks
# have passed. Together they need more disk than a CI machine has (the ASan tree ~10 GB, the torch
# and Keras environments ~8 GB); without PRUNE they stay for the next incremental run.
# $(call PRUNE_AFTER,DIR)
PRUNE ?=
PRUNE_AFTER = if [ -n "$(PRUNE)" ]; then echo "PRUNE: removing $(1)"; rm -rf $(1); fi
# $(call CTEST,PRESET[,WRAPPER]): ctest for one preset; its "N tests failed out of M" is added to
# $(COUNTS) for the final line of `make test`.
CTEST = $(2) ctest --preset $(1) -j $(JOBS) 2>&1 | tee build/ctest-$(1).log; \
        sed -n 's/.* tests passed, \([0-9]*\) tests failed out of \([0-9]*\)$$/\1 \2/p' \
          build/ctest-$(1).log >>$(COUNTS)

help:
	@sed -n '2,16s/^# \{0,1\}//p' Makefile

deps:
	@$(PHASE_START); scripts/install-deps; $(PHASE_END)

build: release-build

release-build:
	cmake --preset release
	cmake --build --preset release -j $(JOBS)

# ARGS are passed to `recemb train`: make run ARGS="--steps 500 --preset criteo-kaggle". Each
# `make run` starts a new run in build/recemb-run (the previous one's files are removed first;
# `recemb train --resume --output build/recemb-run` continues one instead).
run: deps
	cmake --preset release
	cmake --build --preset release -j $(JOBS) --target recemb_cli
	rm -rf build/recemb-run
	$(RECEMB) train --output build/recemb-run $(ARGS)

TEST_PHASES := deps check-format check-mirror test-release check-install test-python
DEEP_PHASES := check-minimal test-torch2 test-keras check-tidy test-asan test-tsan bench-smoke

test: test-begin $(TEST_PHASES) test-summary

test-full: test-begin $(TEST_PHASES) $(DEEP_PHASES) test-summary

test-summary:
	@echo "==> passed; time per phase:"; cat $(TIMES); \
	 awk '{ total += $$2 } END { printf "%-14s %5d s\n", "total", total }' $(TIMES); \
	 awk '{ failed += $$1; total += $$2 } END { printf "tests: %d passed, %d failed\n", \
	      total - failed, failed }' $(COUNTS)

test-begin:
	@mkdir -p build; rm -f $(TIMES) $(COUNTS)

check-format:
	@$(PHASE_START); scripts/check-format; $(PHASE_END)

check-mirror:
	@$(PHASE_START); scripts/check-test-mirror; $(PHASE_END)

test-release:
	@$(PHASE_START); \
	 cmake --preset release; \
	 cmake --build --preset release -j $(JOBS); \
	 $(call CTEST,release); \
	 $(PHASE_END)

# Everything built as on a machine without the optional libraries (the `minimal` preset: no MPI,
# no peer libraries in the benchmarks), so code compiled only when one is found cannot hide an
# error from `make test` on a fresh machine. Same flags as release: ccache makes it mostly links;
# the tests (no optional code) are not built.
check-minimal:
	@$(PHASE_START); \
	 cmake --preset minimal; \
	 cmake --build --preset minimal -j $(JOBS); \
	 $(PHASE_END)

# clang-tidy (.clang-tidy) over src/, support/ and dlrm/, with the compile commands test-release
# configured.
check-tidy:
	@$(PHASE_START); JOBS=$(JOBS) scripts/check-tidy build/release; $(PHASE_END)

# Library and tests only (the preset turns benchmarks and examples off), Debug (-O0 -g1).
# TSan below: the same, RelWithDebInfo at -O1 -g1, without the test programs that start no thread
# (tests/CMakeLists.txt, RECEMB_SINGLE_THREADED_TESTS).
test-asan:
	@$(PHASE_START); \
	 cmake --preset asan-ubsan; \
	 cmake --build --preset asan-ubsan -j $(JOBS); \
	 $(call CTEST,asan-ubsan); \
	 $(call PRUNE_AFTER,build/asan); \
	 $(PHASE_END)

# Some kernels randomize mmap addresses beyond what ThreadSanitizer's memory layout allows ("FATAL:
# ThreadSanitizer: unexpected memory mapping"). A probe program detects that, and the build (whose
# test discovery runs the test programs) and ctest then run with ASLR off (setarch -R).
test-tsan:
	@$(PHASE_START); \
	 cmake --preset tsan; \
	 compiler="$$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' build/tsan/CMakeCache.txt)"; \
	 printf '#include <thread>\nint main() { std::thread([] {}).join(); }\n' \
	   | "$${compiler:-c++}" -x c++ -std=c++20 -fsanitize=thread -pthread - -o build/tsan/tsan_probe; \
	 wrap=(); \
	 if ! build/tsan/tsan_probe >build/tsan/tsan_probe.log 2>&1; then \
	   if setarch "$$(uname -m)" -R build/tsan/tsan_probe >/dev/null 2>&1; then \
	     wrap=(setarch "$$(uname -m)" -R); \
	     echo "ThreadSanitizer fails with this kernel's ASLR; running under: $${wrap[*]}"; \
	   else \
	     echo "ThreadSanitizer does not work on this machine:"; cat build/tsan/tsan_probe.log; exit 1; \
	   fi; \
	 fi; \
	 "$${wrap[@]}" cmake --build --preset tsan -j $(JOBS); \
	 $(call CTEST,tsan,"$${wrap[@]}"); \
	 $(call PRUNE_AFTER,build/tsan); \
	 $(PHASE_END)

check-install: release-build
	@$(PHASE_START); scripts/check-install build/release; $(PHASE_END)

# Every benchmark program, briefly: they must keep compiling and running; so must bench/matrix.py
# (bench/compare_torch.py --smoke runs in test-python, which has torch). The sharding benchmarks
# (built with MPI) take --benchmark_min_time as --smoke; bench/sharded.sh --smoke also runs them
# under mpirun (2 and 4 ranks).
bench-smoke: release-build
	@$(PHASE_START); \
	 mapfile -t benches < <(find build/release/bench -maxdepth 1 -type f -name '*_bench' \
	                          -perm -u+x 2>/dev/null | sort); \
	 if [ $${#benches[@]} -eq 0 ]; then echo "bench-smoke: no benchmark programs"; fi; \
	 for bench in "$${benches[@]}"; do \
	   echo "--- $$bench"; \
	   timeout 600 "$$bench" --benchmark_min_time=0.01; \
	 done; \
	 echo "--- bench/matrix.py --smoke"; \
	 timeout 600 bench/matrix.py --build build/release --smoke; \
	 if [ -x build/release/bench/sharded_bench ]; then \
	   echo "--- bench/sharded.sh --smoke"; \
	   timeout 600 bench/sharded.sh --build build/release --smoke; \
	 fi; \
	 $(PHASE_END)

# The libFuzzer targets of the file readers (checkpoint, serving model), built with clang, ASan
# and UBSan, each run for FUZZ_SECONDS from its seeds: a crash or sanitizer report fails. Not part
# of test-full (a third compiler's build of the library): the Release and ASan+UBSan test builds
# run the same targets on their seeds and checked-in inputs (tests/fuzz/replay_main.cc).
FUZZ_SECONDS ?= 20
fuzz-smoke:
	@$(PHASE_START); FUZZ_SECONDS=$(FUZZ_SECONDS) JOBS=$(JOBS) scripts/fuzz; $(PHASE_END)

format:
	scripts/check-format --fix

clean:
	rm -rf build

# A wheel of the Python package for /usr/bin/python3 (docs/python.md), built offline: no build
# isolation (setuptools, wheel, numpy and pybind11 come from scripts/install-deps), no
# dependencies downloaded. `/usr/bin/python3 -m pip install build/wheel/recemb-*.whl` installs it.
python:
	/usr/bin/python3 -m pip wheel --no-build-isolation --no-deps -w build/wheel .

# The Python suite on torch 2.x (docs/python.md, "torch 2.x and TorchRec from PyPI"): the
# environment of scripts/python-env (pinned PyPI packages, recemb built into it), where the
# TorchRec tests run too; its passed count joins the final line.
test-torch2:
	@$(PHASE_START); \
	 scripts/python-env build/venv-torch2; \
	 build/venv-torch2/bin/python -m pytest tests/python -q -p no:cacheprovider 2>&1 \
	   | tee build/pytest-torch2.log; \
	 sed -n 's/^\([0-9][0-9]*\) passed.*/0 \1/p' build/pytest-torch2.log | tail -n 1 >>$(COUNTS); \
	 $(call PRUNE_AFTER,build/venv-torch2); \
	 $(PHASE_END)

# The Keras suite (docs/keras.md): the environment of scripts/keras-env (pinned PyPI packages:
# TensorFlow, Keras 3, tf-keras, TensorFlow Recommenders; recemb built into it with its TensorFlow
# ops), where recemb.keras runs against the seed's TPUEmbedding layer; its passed count joins the
# final line.
test-keras:
	@$(PHASE_START); \
	 scripts/keras-env build/venv-keras; \
	 build/venv-keras/bin/python -m pytest tests/python/keras_suite -q -p no:cacheprovider 2>&1 \
	   | tee build/pytest-keras.log; \
	 sed -n 's/^\([0-9][0-9]*\) passed.*/0 \1/p' build/pytest-keras.log | tail -n 1 >>$(COUNTS); \
	 $(call PRUNE_AFTER,build/venv-keras); \
	 $(PHASE_END)

# The Python package (docs/python.md): the extension for Debian's /usr/bin/python3 (which has
# numpy, pytest and torch), then the pytest suite; its passed count joins the final line.
test-python:
	@$(PHASE_START); \
	 cmake -S . -B build/python -DCMAKE_BUILD_TYPE=Release -DRECEMB_BUILD_PYTHON=ON \
	   -DRECEMB_BUILD_TESTS=OFF -DRECEMB_BUILD_BENCHMARKS=OFF -DRECEMB_BUILD_EXAMPLES=OFF \
	   -DPython3_EXECUTABLE=/usr/bin/python3; \
	 cmake --build build/python -j $(JOBS); \
	 PYTHONPATH=build/python/python /usr/bin/python3 -m pytest tests/python -q \
	   -p no:cacheprovider 2>&1 | tee build/pytest.log; \
	 sed -n 's/^\([0-9][0-9]*\) passed.*/0 \1/p' build/pytest.log | tail -n 1 >>$(COUNTS); \
	 $(PHASE_END)
