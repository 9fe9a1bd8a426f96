#!/usr/bin/env bash
# Issue 14: FP8 prefill on cuda_sm90_ws (e4m3 q, k, v on wgmma FP8, V stored
# transposed), on the GPU, from the repository root on the device machine
# (logs under $OUT, else ./sm90fp8-out):
#
#   1. configure and build libfmha, test_sm90, test_gpu and bench_cuda
#      (Release, 90-real; sm90 instances bf16:128 and e4m3:128, sm80 bf16:128:
#      what the tests and the bench below need)
#   2. test_sm90: the FP8 fragment layouts in isolation (Q K^T from shared
#      memory, P's A fragments from the accumulator via pack_p_fp8, P V
#      against V^T) against a float64 GEMM, and the 16-bit primitives
#   3. test_gpu -tc="sm90 FP8*": the kernel forced against the float64
#      reference (kToleranceFp8P), splits 1 / auto / 3, causal and not, GQA,
#      descales, softcap, windows, Nq > Nk, N=2048; what it declines, with
#      the reason; the automatic choice
#   4. with it, test_gpu -tc="CUDA handle:*": the numerics contract table
#      unchanged
#   5. bench_cuda --suite fp8 --n 8192: e4m3 against BF16 of the same
#      (decoded) values on cuda_sm90_ws, causal and not, B=1 H=32 D=128
#
# What it should show: every step rc=0 with "0 failed"; the sm90 FP8 lines
# print each case's o rel_l2 (expect ~1e-2, bound 3e-2); the bench table's
# "e4m3 speedup" column (the issue's bar: >= 1.6 causal at N=8192) and
# rel_l2 vs bf16 (< 3e-2).
set -u -o pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out=${OUT:-$root/sm90fp8-out}
mkdir -p "$out"
bdir=${SM90FP8_BUILD_DIR:-$root/build}
summary="$out/summary.txt"
: >"$summary"
status=0
command -v nvcc >/dev/null 2>&1 || export PATH="/usr/local/cuda/bin:$PATH"

# shellcheck source=tools/device/steps.sh
. "$root/tools/device/steps.sh"
STEP_TIMEOUT=300
STEP_PATTERN='ERROR:|\[doctest\] (test cases|assertions)|sm90 FP8:|rel-L2'

note "sm90fp8.sh $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
step configure "$out/configure.log" cmake -S "$root" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DFMHA_BUILD_TESTS=ON -DFMHA_BUILD_EXAMPLES=OFF -DFMHA_BUILD_BENCHMARKS=ON -DFMHA_BUILD_PYTHON=OFF \
  -DFMHA_BUILD_RUST=OFF -DCMAKE_CUDA_ARCHITECTURES=90-real "-DFMHA_SM90_INSTANCES=bf16:128;e4m3:128" \
  "-DFMHA_SM80_INSTANCES=bf16:128" || exit 1
t0=$SECONDS
step build "$out/build.log" cmake --build "$bdir" -j16 --target fmha test_sm90 test_gpu bench_cuda || {
  grep -E "error|Error" "$out/build.log" | head -20 | tee -a "$summary"
  exit 1
}
note "build: $((SECONDS - t0)) s; the FP8 unit's object: $(find "$bdir" -name 'fwd_e4m3_d128.cu.o' -printf '%s bytes' 2>/dev/null)"

step test_sm90 "$out/test_sm90.log" "$bdir/tests/test_sm90" -tc="*FP8*,*RS*" || status=1
STEP_LINES=60
step test_gpu "$out/test_gpu.log" "$bdir/tests/test_gpu" -tc="sm90 FP8*,CUDA handle:*" || status=1
grep -E "splits=" "$out/test_gpu.log" | head -40 | sed 's/^/    /' | tee -a "$summary"
bench=$(find "$bdir" -name bench_cuda -type f -perm -u+x | head -1)
step bench-fp8 "$out/bench.log" "$bench" --suite fp8 --n 8192 || status=1
grep -E "^\| fp8 prefill|^\| FP8 prefill|^  " "$out/bench.log" | tee -a "$summary"
note "status $status"
exit $status
