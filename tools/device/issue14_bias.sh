#!/usr/bin/env bash
# Issue 14: additive bias and ALiBi on cuda_sm80_tc and cuda_sm90_ws (and
# q/k/v descales on cuda_sm90_ws), on the GPU, from the repository root on
# the device machine (logs under $OUT, else ./issue14-bias-out):
#
#   1. configure and build libfmha, test_gpu and bench_cuda (Release, sm_90
#      machine code, every instantiation)
#   2. test_gpu -ts/-tc of tests/gpu/test_gpu_bias.cpp: both families forced
#      and the automatic choice against the float64 reference (bias patterns
#      F16 / F32 / BF16 with -inf rows, ALiBi [H] and [B, H], masks, softcap,
#      GQA, D 64/128/256, key splits, decode, ragged and paged, descales)
#   3. test_gpu's "CUDA handle:" cases (test_gpu_numerics_api.cpp: bias and
#      ALiBi now run, descales run on sm_90; FP8 and mixed dtypes are still
#      UNSUPPORTED)
#   4. the whole test_gpu (the fast path of every family unchanged)
#   5. bench_cuda --suite bias: none / bias [1,1,N,N] F16 / ALiBi at N=8192,
#      FP16 B=1 H=32 D=128, causal and not, interleaved rounds; then the
#      seed suite at N=8192 for the plain path against docs/performance.md
#
# What it should show: every step rc=0, "[doctest] ... 0 failed" for each
# test step; the bias table's "bias / none" and "ALiBi / none" columns at or
# under 1.10 is the issue's bar (the summary repeats the table).
set -u -o pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out=${OUT:-$root/issue14-bias-out}
mkdir -p "$out"
bdir=${ISSUE14_BUILD_DIR:-$root/build}
summary="$out/summary.txt"
: >"$summary"
status=0
command -v nvcc >/dev/null 2>&1 || export PATH="/usr/local/cuda/bin:$PATH"

# shellcheck source=tools/device/steps.sh
. "$root/tools/device/steps.sh"
STEP_TIMEOUT=1200
STEP_PATTERN='ERROR:|\[doctest\] (test cases|assertions)|cases;'

note "issue14_bias.sh $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
step configure "$out/configure.log" cmake -S "$root" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DFMHA_BUILD_TESTS=ON -DFMHA_BUILD_EXAMPLES=OFF -DFMHA_BUILD_BENCHMARKS=ON -DFMHA_BUILD_PYTHON=OFF \
  -DFMHA_BUILD_RUST=OFF -DCMAKE_CUDA_ARCHITECTURES=90-real || exit 1
step build "$out/build.log" cmake --build "$bdir" -j16 --target fmha test_gpu bench_cuda || exit 1

step bias "$out/bias.log" "$bdir/tests/test_gpu" -tc="*bias*,*ALiBi*,*descales on cuda_sm90_ws*" || status=1
step cuda-handle "$out/cuda_handle.log" "$bdir/tests/test_gpu" -tc="CUDA handle:*" || status=1
step test_gpu "$out/test_gpu.log" "$bdir/tests/test_gpu" || status=1
bench=$(find "$bdir" -name bench_cuda -type f -perm -u+x | head -1)
step bench-bias "$out/bench_bias.log" "$bench" --suite bias --n 8192 || status=1
sed -n '/(bias suite/,$p' "$out/bench_bias.log" | tee -a "$summary"
step bench-seed "$out/bench_seed.log" "$bench" --suite seed,noncausal --n 8192 --kernels cuda_sm80_tc,cuda_sm90_ws \
  --no-check || status=1
grep -E "^\| (seed|noncausal) " "$out/bench_seed.log" | tee -a "$summary"
note "status $status"
exit $status
