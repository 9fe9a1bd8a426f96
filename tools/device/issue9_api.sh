#!/usr/bin/env bash
# Issue 9, the API side on the GPU: empty work and the serving fields on
# CUDA handles, from the repository root on the device machine (logs under
# $OUT, else ./issue9-api-out):
#
#   1. configure and build libfmha, test_gpu, test_api and fuzz_replay_cuda
#      (Release, sm_90 machine code)
#   2. test_gpu's "CUDA handle:" cases (tests/gpu/test_gpu_serving_api.cpp:
#      host metadata on a CUDA handle and device metadata on a CPU handle are
#      refused naming the field, nothing written; empty work with NULL
#      pointers succeeds for every forced kernel), then its case matrix: every CUDA kernel forced by name (and the
#      automatic choice) over every group, including "empty work" (Nk = 0
#      with both causal alignments, B = 0, Nq = 0): the Nk = 0 cases run
#      the kernels with no key tile and must give O = 0, lse = -inf; B = 0
#      and Nq = 0 run no kernel. The summary shows the per-kernel tally of
#      that group.
#   3. the same group under compute-sanitizer memcheck
#   4. the fuzz corpus on a CUDA handle (fuzz_replay_cuda: serving fields
#      included; on this branch the CUDA kernels do not declare the serving
#      features, so those inputs stop at UNSUPPORTED), plain and under
#      memcheck
#
# What it should show: every step rc=0, "failed 0" on every kernel of the
# "empty work" line, ERROR SUMMARY: 0 errors.
set -u -o pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out=${OUT:-$root/issue9-api-out}
mkdir -p "$out"
bdir=${ISSUE9_BUILD_DIR:-$root/build}
summary="$out/summary.txt"
: >"$summary"
status=0
command -v nvcc >/dev/null 2>&1 || export PATH="/usr/local/cuda/bin:$PATH"

# shellcheck source=tools/device/steps.sh
. "$root/tools/device/steps.sh"
STEP_TIMEOUT=900
STEP_PATTERN='ERROR SUMMARY|fuzz_replay[_a-z]*:|empty work|\[doctest\] (test cases|assertions)'

note "issue9_api.sh $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
step configure "$out/configure.log" cmake -S "$root" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DFMHA_BUILD_TESTS=ON -DFMHA_BUILD_EXAMPLES=OFF -DFMHA_BUILD_PYTHON=OFF -DFMHA_BUILD_RUST=OFF \
  -DCMAKE_CUDA_ARCHITECTURES=90-real || exit 1
step build "$out/build.log" cmake --build "$bdir" -j16 --target fmha test_gpu test_api fuzz_replay_cuda || exit 1

step test_api "$out/test_api.log" "$bdir/tests/test_api" || status=1
step serving-api "$out/serving_api.log" "$bdir/tests/test_gpu" -tc="CUDA handle:*" || status=1
step matrix "$out/matrix.log" "$bdir/tests/test_gpu" -tc="every CUDA kernel over the case matrix" || status=1
cs=(compute-sanitizer --error-exitcode 99 --print-limit 30 --tool memcheck)
step matrix-memcheck "$out/matrix_memcheck.log" env FMHA_TEST_QUICK=2 "${cs[@]}" \
  "$bdir/tests/test_gpu" -tc="every CUDA kernel over the case matrix" || status=1
step fuzz "$out/fuzz.log" "$bdir/tests/fuzz/fuzz_replay_cuda" "$root/tests/fuzz/corpus" || status=1
step fuzz-memcheck "$out/fuzz_memcheck.log" "${cs[@]}" "$bdir/tests/fuzz/fuzz_replay_cuda" --max 300 \
  "$root/tests/fuzz/corpus" || status=1
note "status $status"
exit $status
