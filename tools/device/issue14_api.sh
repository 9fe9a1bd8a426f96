#!/usr/bin/env bash
# Issue 14 part A on the GPU: the 0.3 inference-numerics fields on CUDA
# handles before any CUDA kernel runs them, from the repository root on the
# device machine (logs under $OUT, else ./issue14-api-out):
#
#   1. configure and build libfmha, test_gpu and test_api (Release, sm_90
#      machine code)
#   2. test_api (the whole C contract, 0.3 validation included)
#   3. test_gpu's "CUDA handle:" cases, among them
#      tests/gpu/test_gpu_numerics_api.cpp: FP8 K/V, o in F32 under F16
#      inputs, descales, a bias and ALiBi are each FMHA_ERROR_UNSUPPORTED on
#      a CUDA handle (o untouched), explain passes over every CUDA kernel and
#      names the feature for cuda_generic ("does not run dtype F8E4M3",
#      "does not support mixed dtypes", "... descales", "... an additive
#      bias", "... ALiBi slopes"), and forcing cuda_generic says the same
#   4. test_gpu's case matrix and serving matrix (nothing there uses the new
#      fields: the registry rows must still run every 0.2 problem)
#
# What it should show: every step rc=0, "[doctest] ... 0 failed" each time.
set -u -o pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out=${OUT:-$root/issue14-api-out}
mkdir -p "$out"
bdir=${ISSUE14_BUILD_DIR:-$root/build}
summary="$out/summary.txt"
: >"$summary"
status=0
command -v nvcc >/dev/null 2>&1 || export PATH="/usr/local/cuda/bin:$PATH"

# shellcheck source=tools/device/steps.sh
. "$root/tools/device/steps.sh"
STEP_TIMEOUT=900
STEP_PATTERN='ERROR:|\[doctest\] (test cases|assertions)'

note "issue14_api.sh $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
step configure "$out/configure.log" cmake -S "$root" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DFMHA_BUILD_TESTS=ON -DFMHA_BUILD_EXAMPLES=OFF -DFMHA_BUILD_PYTHON=OFF -DFMHA_BUILD_RUST=OFF \
  -DCMAKE_CUDA_ARCHITECTURES=90-real || exit 1
step build "$out/build.log" cmake --build "$bdir" -j16 --target fmha test_gpu test_api || exit 1

step test_api "$out/test_api.log" "$bdir/tests/test_api" || status=1
step cuda-handle "$out/cuda_handle.log" "$bdir/tests/test_gpu" -tc="CUDA handle:*" || status=1
step matrix "$out/matrix.log" "$bdir/tests/test_gpu" -tc="every CUDA kernel over the case matrix" || status=1
step serving "$out/serving.log" "$bdir/tests/test_gpu" -tc="*serving*" || status=1
note "status $status"
exit $status
