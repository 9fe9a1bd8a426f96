#!/usr/bin/env bash
# Quick start, command 2: builds everything (the CUDA backend too when nvcc
# is found) and runs the whole test suite with ctest, then builds the CPU
# tests with AddressSanitizer + UndefinedBehaviorSanitizer and runs them.
# GPU tests skip themselves (and say so) when no GPU is present.
#   tools/test.sh [--no-sanitize]
set -euo pipefail
source "$(dirname "$0")/common.sh"
sanitize=1
[ "${1:-}" = "--no-sanitize" ] && sanitize=0
"$root/tools/deps.sh"

start=$(date +%s)
cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFMHA_BUILD_TESTS=ON
cmake --build "$root/build" -j"$jobs"
echo "build: $(( $(date +%s) - start )) s"
ctest --test-dir "$root/build" --output-on-failure -j"$jobs"

if ((sanitize)); then
  start=$(date +%s)
  cmake -S "$root" -B "$root/build-asan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DFMHA_ENABLE_CUDA=OFF -DFMHA_SANITIZE=ON -DFMHA_BUILD_TESTS=ON -DFMHA_BUILD_EXAMPLES=OFF \
    -DFMHA_BUILD_BENCHMARKS=OFF -DFMHA_BUILD_PYTHON=OFF -DFMHA_BUILD_RUST=OFF
  cmake --build "$root/build-asan" -j"$jobs"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir "$root/build-asan" --output-on-failure -j"$jobs" -L cpu
  echo "sanitizer build and tests: $(( $(date +%s) - start )) s"
fi
