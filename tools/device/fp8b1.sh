#!/usr/bin/env bash
# Issue 14: FP8 K/V decode tiles compared in one run (the per-grid plan's
# NarrowFp8KvOneCta against NarrowFp8Kv and the other candidates), from the
# repository root on the H200. Logs under $OUT (else ./fp8b1-out): summary.txt
# and logs.tgz. Reduced experiments build (90-real; cuda_sm80_tc bf16 and
# bf16_f8kv D=128, FMHA_SM80_FP8KV_EXPERIMENTS=ON), then two interleaved
# rounds of bench_cuda --suite fp8kv per tile named by FMHA_SM80_FP8KV_TILE
# ("" = the plan's per-grid choice; "default" = NarrowFp8Kv on every grid),
# after test_gpu's FP8 K/V and paged groups.
set -u -o pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bdir=${FP8B1_BUILD_DIR:-/tmp/fmha-fp8b1-build}
# shellcheck source=tools/device/steps.sh
. "$root/tools/device/steps.sh"
logs_under fp8b1
STEP_PATTERN='error:|FAILED|CMake Error'
step configure "$logs/build.log" cmake -S "$root" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DFMHA_BUILD_TESTS=ON -DFMHA_BUILD_EXAMPLES=OFF -DFMHA_BUILD_BENCHMARKS=ON -DFMHA_BUILD_PYTHON=OFF \
  -DFMHA_BUILD_RUST=OFF -DCMAKE_CUDA_ARCHITECTURES=90-real -DFMHA_SM80_FP8KV_EXPERIMENTS=ON \
  "-DFMHA_SM80_INSTANCES=bf16:128;bf16_f8kv:128" "-DFMHA_SM90_INSTANCES=bf16:128" || exit 1
step build "$logs/build2.log" cmake --build "$bdir" -j"${JOBS:-16}" --target fmha bench_cuda test_gpu || exit 1
bench=$(find "$bdir" -name bench_cuda -type f -perm -u+x | head -1)
# The FP8 K/V groups first (the plan's tiles, including NarrowFp8KvPagedSplit on paged split runs).
STEP_TIMEOUT=120 STEP_PATTERN='ERROR:|\[doctest\] (test cases|assertions)' step tests "$logs/tests.log" \
  "$bdir/tests/test_gpu" -tc="sm80 FP8 K/V*,serving: paged*"

for r in 1 2; do
  for tile in plan default 256.1.3.8 128.3.2.4 64.3.4.4; do
    t=$tile
    [ "$tile" = plan ] && t=""
    STEP_TIMEOUT=60 STEP_PATTERN='^\| B=' STEP_LINES=20 step "fp8kv-$tile-r$r" "$logs/fp8kv-$tile-r$r.log" \
      env FMHA_SM80_FP8KV_TILE="$t" "$bench" --suite fp8kv --case 'e4m3 K/V|e5m2 K/V'
  done
done
