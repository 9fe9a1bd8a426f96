#!/usr/bin/env bash
# Issue 14, branch issue14-bias3, second (short) device run: the staged
# bias's L2 prefetch and the L2 band size against the bias's traffic, from
# the repository root on the H200 (logs under $OUT, else ./bias3b-out; 3
# files). STAGE=build configures and builds only, STAGE=run runs what it
# built, unset: both. Builds with -j${JOBS:-16}, 90-real.
#
#   build  "this": fmha, test_gpu, bench_cuda (sm90 f16:128, sm80 f16:128);
#          "main": a copy of this tree with tools/device/bias3_main.patch
#          reversed (main's src/backend/cuda), fmha and bench_cuda (the same
#          units). build.log ends with the C7514 count.
#   run    1. test_gpu -tc="bias staged*,descales*,cuda_sm90_ws score factor*"
#             (the staged and loaded bias, descales with and without a bias,
#             the score factor pre-scaled into Q or applied after Q K^T),
#             tests.log
#          2. bench_cuda --suite bias --n 8192 --kernels cuda_sm90_ws, one
#             round each: this (FMHA_SM90_BIAS_PREFETCH unset: 1 key tile
#             ahead), this with FMHA_SM90_BIAS_PREFETCH=0 (no prefetch, the
#             first run's kernel), this with FMHA_SM90_L2_BAND_MIB=64 (four
#             times the heads per band: each bias row read from HBM by 1/16
#             of the heads instead of 1/4), main; bench.log
#
# What it should show: tests rc=0, "0 failed"; C7514 0; bias / none of
# "this" below the prefetch=0 run's if the single-stage ring waited on the
# bias's HBM reads (the first run: 1.40-1.42 against 1.13-1.15 with nothing
# to do, ~0.1 more than the bias's instructions explain); the band run says
# whether the bias's HBM traffic costs (prediction in docs/performance.md,
# "Issue 14: the score-ops kernel's floor and its bias / ALiBi terms").
set -u -o pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out=${OUT:-$root/bias3b-out}
mkdir -p "$out"
bdir="$root/build-bias3b"
mroot="$root/build-bias3b-main"  # src/: the "main" tree, build/: its build
stage=${STAGE:-all}
jobs=${JOBS:-16}
summary="$out/summary.txt"
touch "$summary"
status=0
command -v nvcc >/dev/null 2>&1 || export PATH="/usr/local/cuda/bin:$PATH"

# shellcheck source=tools/device/steps.sh
. "$root/tools/device/steps.sh"
STEP_TIMEOUT=300
STEP_PATTERN='ERROR:|\[doctest\] (test cases|assertions)|cases;|error'

note "bias3b.sh STAGE=$stage $(date -u '+%Y-%m-%d %H:%M UTC'), commit" \
  "$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"

cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DFMHA_BUILD_TESTS=ON -DFMHA_BUILD_EXAMPLES=OFF
  -DFMHA_BUILD_BENCHMARKS=ON -DFMHA_BUILD_PYTHON=OFF -DFMHA_BUILD_RUST=OFF -DCMAKE_CUDA_ARCHITECTURES=90-real
  "-DFMHA_SM90_INSTANCES=f16:128" "-DFMHA_SM80_INSTANCES=f16:128")

if [ "$stage" != run ]; then
  rm -rf "$mroot/src" && mkdir -p "$mroot/src"
  tar -C "$root" --exclude='./build*' --exclude='./bias3*-out' -cf - . | tar -C "$mroot/src" -xf -
  main_ok=1
  (cd "$mroot/src" && patch -R -p1 <tools/device/bias3_main.patch) >"$out/build.log" 2>&1 || {
    note "patch failed: no main build (the bench runs this tree alone)"
    main_ok=0
    status=1
  }
  step configure "$out/build_a.log" cmake -S "$root" -B "$bdir" "${cmake_args[@]}" || exit 1
  [ "$main_ok" = 1 ] && { step configure-main "$out/build_b.log" cmake -S "$mroot/src" -B "$mroot/build" \
    "${cmake_args[@]}" || main_ok=0; }
  half=$(((jobs + 1) / 2))
  cmake --build "$bdir" -j"$half" --target fmha test_gpu bench_cuda >"$out/build_c.log" 2>&1 &
  pid_a=$!
  [ "$main_ok" = 1 ] && { step build-main "$out/build_d.log" cmake --build "$mroot/build" -j"$half" \
    --target fmha bench_cuda || status=1; }
  wait "$pid_a"
  rc_a=$?
  note "$(printf '%-22s rc=%-3s %5ss' build "$rc_a" "$SECONDS")"
  [ "$rc_a" = 0 ] || { tail -40 "$out/build_c.log" >>"$summary"; status=1; }
  for f in build_a build_b build_c build_d; do
    [ -f "$out/$f.log" ] && cat "$out/$f.log" >>"$out/build.log" && rm -f "$out/$f.log"
  done
  note "C7514 (wgmma serialized) in build.log: $(grep -c C7514 "$out/build.log")"
  [ "$stage" = build ] && { note "status $status"; exit $status; }
fi

STEP_TIMEOUT=60
step tests "$out/tests.log" "$bdir/tests/test_gpu" -tc="bias staged*,descales*,cuda_sm90_ws score factor*" ||
  status=1

bench=$(find "$bdir" -name bench_cuda -type f -perm -u+x 2>/dev/null | head -1)
bench_main=$(find "$mroot/build" -name bench_cuda -type f -perm -u+x 2>/dev/null | head -1)
STEP_TIMEOUT=40
STEP_PATTERN='^\| FP16'
STEP_LINES=2
: >"$out/bench.log"
for which in this prefetch0 band64 main; do
  b=$bench
  envs=()
  case $which in
    prefetch0) envs=(FMHA_SM90_BIAS_PREFETCH=0) ;;
    band64) envs=(FMHA_SM90_L2_BAND_MIB=64) ;;
    main) b=$bench_main ;;
  esac
  [ -n "$b" ] || { note "bench-$which: no bench_cuda"; status=1; continue; }
  note "bench $which:"
  step "bench-$which" "$out/bench_round.log" env ${envs[@]+"${envs[@]}"} "$b" --suite bias --n 8192 \
    --kernels cuda_sm90_ws || status=1
  cat "$out/bench_round.log" >>"$out/bench.log" && rm -f "$out/bench_round.log"
done
note "columns: none ms | bias ms | bias / none | ALiBi ms | ALiBi / none | softcap / none | descales=1 / none |" \
  "bias+ALiBi / none | bias loaded / none"
note "status $status"
exit $status
