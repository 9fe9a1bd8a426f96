#!/usr/bin/env bash
# Quick start, command 2: builds everything (the CUDA backend too when nvcc
# is found) and runs the whole test suite with ctest, then builds the CPU
# tests with AddressSanitizer + UndefinedBehaviorSanitizer and runs them.
# GPU tests skip themselves (and say so) when no GPU is present; so do the
# binding tests whose tools (SWIG, numpy, pytest, cargo, bindgen) are missing.
#   tools/test.sh [--no-sanitize]
set -euo pipefail
source "$(dirname "$0")/common.sh"
sanitize=1
[ "${1:-}" = "--no-sanitize" ] && sanitize=0
"$root/tools/deps.sh" test

# run_ctest DIR [ARGS...]: ctest; it ends by listing each skipped test with
# its reason (cmake/print_skipped.cmake, run as ctest's post-test command).
run_ctest() {
  local dir=$1
  shift
  ctest --test-dir "$dir" --output-on-failure -j"$jobs" "$@"
}

start=$(date +%s)
cmake_generator "$root/build"
# FMHA_TEST_CMAKE_ARGS: more options for this build (.ci/run: a faster CUDA
# build on a machine that runs no kernel).
# shellcheck disable=SC2086
cmake -S "$root" -B "$root/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DFMHA_BUILD_TESTS=ON \
  ${FMHA_TEST_CMAKE_ARGS:-}
cmake --build "$root/build" -j"$jobs"
echo "build: $(( $(date +%s) - start )) s"
run_ctest "$root/build"

if ((sanitize)); then
  start=$(date +%s)
  cmake_generator "$root/build-asan"
  cmake -S "$root" -B "$root/build-asan" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DFMHA_ENABLE_CUDA=OFF -DFMHA_SANITIZE=ON -DFMHA_BUILD_TESTS=ON -DFMHA_BUILD_EXAMPLES=OFF \
    -DFMHA_BUILD_BENCHMARKS=OFF -DFMHA_BUILD_PYTHON=OFF -DFMHA_BUILD_RUST=OFF
  cmake --build "$root/build-asan" -j"$jobs"
  # The CPU suite once per path this CPU has (test_cpu_isa_*), not again on
  # the automatic one (test_cpu), which is one of them.
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 run_ctest "$root/build-asan" -L cpu -E '^test_cpu$'
  echo "sanitizer build and tests: $(( $(date +%s) - start )) s"
fi
