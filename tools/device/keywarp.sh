#!/usr/bin/env bash
# Issue 9: 16-bit decode tiles of several key warps (sm80 KeyWarpTileConfig)
# against the one-warp NarrowStream tile, from the repository root on the
# H200 (logs under $OUT, else ./keywarp-out; more than 8 files: point OUT
# elsewhere and tar it into the device tool's $OUT). Builds Release, sm_90,
# cuda_sm80_tc and cuda_sm90_ws f16/bf16 D=128, FMHA_SM80_DECODE_EXPERIMENTS=ON
# (FMHA_SM80_STREAM_TILE picks the contiguous decode tile: 128.1.3.4 = 4 key
# warps of 32 keys, one CTA per SM; 64.2.3.2 = 2 key warps, two CTAs per SM).
#   1. test_gpu's decode, NaN-in-V, band, back-to-back, repeat and case-matrix
#      groups with each candidate forced
#   2. two interleaved rounds: timeline.py and compare_torch.py --groups decode,
#      the automatic tile against each candidate
# What it should show: 0 failed; prediction (docs/performance.md, "Where a
# decode call's time goes"): 128.1.3.4 runs B=16 unsplit, span -3 to -5 us
# (no combine) if its 4 warps per SM stream as fast as 4 one-warp CTAs;
# B=1 16 splits, span within +-2 us.
set -u -o pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out=${OUT:-$root/keywarp-out}
mkdir -p "$out"
bdir=${KEYWARP_BUILD_DIR:-$root/build}
stage=${STAGE:-all}
summary="$out/summary.txt"
[ "$stage" = run ] || : >"$summary"
status=0
command -v nvcc >/dev/null 2>&1 || export PATH="/usr/local/cuda/bin:$PATH"
# shellcheck source=tools/device/steps.sh
. "$root/tools/device/steps.sh"
note "keywarp.sh STAGE=$stage $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
if [ "$stage" != run ]; then
  STEP_TIMEOUT=600
  STEP_PATTERN='error:|FAILED|CMake Error'
  step configure "$out/build.log" cmake -S "$root" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DFMHA_BUILD_TESTS=ON -DFMHA_BUILD_EXAMPLES=OFF -DFMHA_BUILD_BENCHMARKS=OFF -DFMHA_BUILD_PYTHON=OFF \
    -DFMHA_BUILD_RUST=OFF -DCMAKE_CUDA_ARCHITECTURES=90-real -DFMHA_SM80_DECODE_EXPERIMENTS=ON \
    "-DFMHA_SM80_INSTANCES=f16:128;bf16:128" "-DFMHA_SM90_INSTANCES=f16:128;bf16:128" || exit 1
  step build "$out/build2.log" cmake --build "$bdir" -j"${JOBS:-16}" --target fmha test_gpu || {
    tail -40 "$out/build2.log" >>"$summary"; exit 1; }
fi
[ "$stage" = build ] && exit 0
lib=$(find "$bdir" -name 'libfmha.so' | head -1)
tests="$bdir/tests/test_gpu"
STEP_TIMEOUT=90
STEP_PATTERN='ERROR:|\[doctest\] (test cases|assertions)|FAIL'
STEP_LINES=12
cases="serving: decode*,a NaN in V reaches*,key tiles outside*,back-to-back*,two runs are bitwise equal"
cases="$cases,every CUDA kernel over the case matrix,serving: seqused_k*,serving: softcap decode*"
for tile in 128.1.3.4 64.2.3.2; do
  FMHA_SM80_STREAM_TILE=$tile step "tests-$tile" "$out/tests_$tile.log" "$tests" -tc="$cases" || status=1
done
STEP_TIMEOUT=120
for r in 1 2; do
  for tile in auto 128.1.3.4 64.2.3.2; do
    env_tile=()
    [ "$tile" = auto ] || env_tile=(env "FMHA_SM80_STREAM_TILE=$tile")
    STEP_PATTERN='call span|splits=0: plan|gap'
    STEP_LINES=20
    step "tl-$tile-$r" "$out/tl_${tile}_$r.log" "${env_tile[@]}" python3 "$root/tests/perf/timeline.py" --lib "$lib" \
      --groups decode --peers 0 || status=1
    STEP_PATTERN='^B[0-9]|K\+V TB/s|MISMATCH'
    step "ct-$tile-$r" "$out/ct_${tile}_$r.log" "${env_tile[@]}" python3 "$root/tests/perf/compare_torch.py" \
      --lib "$lib" --groups decode --kernels cuda_sm80_tc --quiet || status=1
  done
done
note "status $status"
exit $status
