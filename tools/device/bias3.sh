#!/usr/bin/env bash
# Issue 14: cuda_sm90_ws's score-ops kernel (bias, ALiBi, descales, softcap)
# toward bias / none <= 1.10, branch issue14-bias3, from the repository root
# on the H200 (logs under $OUT, else ./bias3-out; at most 4 files).
# STAGE=build configures and builds only, STAGE=run runs what it built,
# unset: both. Builds with -j${JOBS:-16}, 90-real, reduced instance lists.
#
#   build  "this": fmha, test_gpu, bench_cuda (sm90 f16:64, f16:128,
#          bf16:64, bf16:128; sm80 f16:64, f16:128, bf16:64, bf16:128: the
#          bias tests' "sm80 must have run" checks and the D=64 softcap
#          serving case, which every kernel of the layout must run);
#          "smemq": this tree with -DFMHA_SM90_OPS_QREGS=0 (the score-ops
#          kernel's Q in shared memory, as on main), fmha and bench_cuda
#          (sm90 f16:128, sm80 f16:128);
#          "main": a copy of this tree with tools/device/bias3_main.patch
#          reversed (main's src/backend/cuda), fmha and bench_cuda (sm90
#          f16:128, sm80 f16:128). build.log ends with the C7514 count.
#   run    1. test_gpu -tc="*bias*,*alibi*,*ALiBi*,*descale*,*softcap*"
#             (minus the sm80 FP8 K/V cases: no FP8 K/V unit is built),
#             tests.log
#          2. bench_cuda --suite bias --n 8192 --kernels cuda_sm90_ws, this /
#             smemq / main interleaved, 2 rounds at D=128, bench.log
#
# What it should show: the test step rc=0 with "0 failed" (its groups
# include "score factor", the pre-scaled Q and the terms added after Q K^T
# on cuda_sm90_ws); C7514 0; in the bench table ("descales=1 / none" is the
# score-ops kernel with nothing to do), predicted in docs/performance.md
# ("Issue 14: the score-ops kernel's floor and its bias / ALiBi terms"):
# this tree descales=1 1.10-1.13, bias 1.26-1.30, ALiBi 1.20-1.24; smemq
# 1.17-1.19 / 1.40-1.44 / 1.27-1.31; main 1.18-1.21 / 1.51-1.55 / 1.40-1.45.
set -u -o pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out=${OUT:-$root/bias3-out}
mkdir -p "$out"
bdir="$root/build-bias3"
qdir="$root/build-bias3-smemq"
mroot="$root/build-bias3-main"  # src/: the "main" tree, build/: its build
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

note "bias3.sh STAGE=$stage $(date -u '+%Y-%m-%d %H:%M UTC'), commit" \
  "$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"

cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DFMHA_BUILD_TESTS=ON -DFMHA_BUILD_EXAMPLES=OFF
  -DFMHA_BUILD_BENCHMARKS=ON -DFMHA_BUILD_PYTHON=OFF -DFMHA_BUILD_RUST=OFF -DCMAKE_CUDA_ARCHITECTURES=90-real)

if [ "$stage" != run ]; then
  rm -rf "$mroot/src" && mkdir -p "$mroot/src"
  tar -C "$root" --exclude='./build*' --exclude='./bias3-out' -cf - . | tar -C "$mroot/src" -xf -
  main_ok=1
  (cd "$mroot/src" && patch -R -p1 <tools/device/bias3_main.patch) >"$out/build.log" 2>&1 || {
    note "patch failed: no main build (the bench runs this tree alone)"
    main_ok=0
    status=1
  }
  step configure "$out/build_a.log" cmake -S "$root" -B "$bdir" "${cmake_args[@]}" \
    "-DFMHA_SM90_INSTANCES=f16:64;f16:128;bf16:64;bf16:128" "-DFMHA_SM80_INSTANCES=f16:64;f16:128;bf16:64;bf16:128" || exit 1
  step configure-smemq "$out/build_e.log" cmake -S "$root" -B "$qdir" "${cmake_args[@]}" \
    "-DFMHA_SM90_INSTANCES=f16:128" "-DFMHA_SM80_INSTANCES=f16:128" "-DCMAKE_CUDA_FLAGS=-DFMHA_SM90_OPS_QREGS=0" ||
    status=1
  [ "$main_ok" = 1 ] && { step configure-main "$out/build_f.log" cmake -S "$mroot/src" -B "$mroot/build" \
    "${cmake_args[@]}" "-DFMHA_SM90_INSTANCES=f16:128" "-DFMHA_SM80_INSTANCES=f16:128" || main_ok=0; }
  # The three builds at once: half the jobs to this tree, a quarter to each small one.
  half=$(((jobs + 1) / 2))
  quarter=$(((jobs + 3) / 4))
  cmake --build "$bdir" -j"$half" --target fmha test_gpu bench_cuda >"$out/build_b.log" 2>&1 &
  pid_a=$!
  cmake --build "$qdir" -j"$quarter" --target fmha bench_cuda >"$out/build_c.log" 2>&1 &
  pid_q=$!
  [ "$main_ok" = 1 ] && { step build-main "$out/build_d.log" cmake --build "$mroot/build" -j"$quarter" \
    --target fmha bench_cuda || status=1; }
  wait "$pid_a"
  rc_a=$?
  wait "$pid_q"
  rc_q=$?
  note "$(printf '%-22s rc=%-3s rc(smemq)=%-3s %5ss' build "$rc_a" "$rc_q" "$SECONDS")"
  [ "$rc_a" = 0 ] || { tail -40 "$out/build_b.log" >>"$summary"; status=1; }
  [ "$rc_q" = 0 ] || { tail -20 "$out/build_c.log" >>"$summary"; status=1; }
  for f in build_a build_e build_f build_b build_c build_d; do
    [ -f "$out/$f.log" ] && cat "$out/$f.log" >>"$out/build.log" && rm -f "$out/$f.log"
  done
  note "C7514 (wgmma serialized) in build.log: $(grep -c C7514 "$out/build.log")"
  [ "$stage" = build ] && { note "status $status"; exit $status; }
fi

filter='*bias*,*alibi*,*ALiBi*,*descale*,*softcap*'
STEP_TIMEOUT=150
step tests "$out/tests.log" "$bdir/tests/test_gpu" -tc="$filter" -tce="sm80 FP8*" || status=1

bench=$(find "$bdir" -name bench_cuda -type f -perm -u+x 2>/dev/null | head -1)
bench_q=$(find "$qdir" -name bench_cuda -type f -perm -u+x 2>/dev/null | head -1)
bench_main=$(find "$mroot/build" -name bench_cuda -type f -perm -u+x 2>/dev/null | head -1)
STEP_TIMEOUT=90
STEP_PATTERN='^\| FP16'
STEP_LINES=2
: >"$out/bench.log"
for round in 1 2; do
  for which in this smemq main; do
    case $which in this) b=$bench ;; smemq) b=$bench_q ;; main) b=$bench_main ;; esac
    [ -n "$b" ] || { note "bench-$which: no bench_cuda"; status=1; continue; }
    note "bench round $round, $which:"
    step "bench-$which-$round" "$out/bench_round.log" "$b" --suite bias --n 8192 --kernels cuda_sm90_ws ||
      status=1
    cat "$out/bench_round.log" >>"$out/bench.log" && rm -f "$out/bench_round.log"
  done
done
note "columns: none ms | bias ms | bias / none | ALiBi ms | ALiBi / none | softcap / none | descales=1 / none |" \
  "bias+ALiBi / none | bias loaded / none"
note "status $status"
exit $status
