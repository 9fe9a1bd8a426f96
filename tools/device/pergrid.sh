#!/usr/bin/env bash
# Issues 9 and 14 (2026-12-02, second session): cuda_sm80_tc's decode tiles
# chosen per grid (16-bit paged: NarrowPagedSplit / NarrowPagedBatch; FP8
# K/V: NarrowFp8KvOneCta), and cuda_sm90_ws's warpgroup barrier before an
# empty work tile's early Q release; from the repository root on the H200.
# Logs under $OUT (else ./pergrid-out), tarred into logs.tgz beside
# summary.txt. STAGE=build / run / unset (both). Build dir
# $PERGRID_BUILD_DIR (default /tmp/fmha-pergrid-build), -j${JOBS:-16}.
#
#   build: the default build (Release, every default instance, 90-real),
#     timed: fmha, test_gpu, test_internal, test_sm90, bench_cuda
#   run (each step guarded by the elapsed time, RUN_BUDGET s, default 420):
#   1. test_gpu whole, test_sm90, test_internal
#   2. two rounds: bench_cuda --suite serving --splits 0 (decode B=1
#      Nk=131072, B=16 Nk=8192, mixed B=64; contiguous, paged ps16 / ps64),
#      bench_cuda --suite fp8kv
#   3. compare_torch.py --groups decode --kernels cuda_sm80_tc (two rounds),
#      then --groups causal,noncausal,d64,prefill --kernels cuda_sm90_ws
#      --max-n 8192 (the sm90 change touches D=64's empty-tile path only)
#   4. racecheck of test_gpu's ragged serving group (FMHA_TEST_QUICK=12:
#      every kernel, D=64 and D=128, empty sequences), hazards counted
#   5. cuobjdump --dump-resource-usage of libfmha.so (registers, stack of
#      the new tiles' kernels)
#   STEPS (default tests,bench,torch,race,res) picks which of 1-5 run.
#
# What it should show (prediction: docs/performance.md, "Decode tiles per
# grid"): rc=0 and "0 failed" everywhere; paged / contiguous >= 0.95 at
# B=1 and on the mixed batch; FP8 B=16 e4m3 >= 0.90 of copy.
set -u -o pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bdir=${PERGRID_BUILD_DIR:-/tmp/fmha-pergrid-build}
stage=${STAGE:-all}
# shellcheck source=tools/device/steps.sh
. "$root/tools/device/steps.sh"
logs_under pergrid "$([ "$stage" = run ] && echo 1)"
note "pergrid.sh STAGE=$stage $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')," \
  "GPU: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader 2>&1 | head -1), $(nproc) cores"

if [ "$stage" != run ]; then
  STEP_TIMEOUT=900
  STEP_PATTERN='error:|FAILED|CMake Error'
  step configure "$logs/build.log" cmake -S "$root" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DFMHA_BUILD_TESTS=ON -DFMHA_BUILD_EXAMPLES=OFF -DFMHA_BUILD_BENCHMARKS=ON -DFMHA_BUILD_PYTHON=OFF \
    -DFMHA_BUILD_RUST=OFF -DCMAKE_CUDA_ARCHITECTURES=90-real || exit 1
  step build "$logs/build2.log" cmake --build "$bdir" -j"${JOBS:-16}" --target fmha test_gpu test_internal test_sm90 bench_cuda
  rc=$?
  if [ $rc -ne 0 ]; then
    grep -E 'error' "$logs/build2.log" | head -20 >>"$summary"
    exit 1
  fi
  # the slowest units (ninja's log: start, end ms)
  awk 'NR > 1 { printf "%.1f s %s\n", ($2 - $1) / 1000, $4 }' "$bdir/.ninja_log" | sort -rn | head -8 | sed 's/^/    /' >>"$summary"
  ls -l "$bdir"/src/libfmha.so* 2>/dev/null | tail -1 | sed 's/^/    /' >>"$summary"
fi
[ "$stage" = build ] && exit 0

tests="$bdir/tests/test_gpu"
bench=$(find "$bdir" -name bench_cuda -type f -perm -u+x | head -1)
lib=$(find "$bdir" -name 'libfmha.so' | head -1)
t0=$SECONDS
budget=${RUN_BUDGET:-420}
left() { [ $((SECONDS - t0)) -lt $((budget - $1)) ]; }
guarded() {  # guarded SECS NAME LOG PATTERN CMD...
  local secs=$1 name=$2 log=$3 pattern=$4
  shift 4
  left "$secs" || { note "stopped before $name (time)"; return 0; }
  STEP_TIMEOUT=$secs STEP_PATTERN=$pattern STEP_LINES=40 step "$name" "$log" "$@"
}
test_pat='ERROR:|\[doctest\] (test cases|assertions)|FAIL|per grid|fp8 kv decode'
bench_pat='^serving|^fp8kv|copy bandwidth'
ct_pat='cuDNN|speed|MISMATCH|_error|Traceback'

steps=${STEPS:-tests,bench,torch,race,res}  # which of the steps below run
has() { case ",$steps," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

# 1. Tests (test_gpu with each case's duration).
if has tests; then
guarded 330 test_gpu "$logs/test_gpu.log" "$test_pat" "$tests" --duration=true
grep -E '^[0-9.]+ s: ' "$logs/test_gpu.log" | sort -rn | head -12 | sed 's/^/    /' >>"$summary"
guarded 90 test_sm90 "$logs/test_sm90.log" "$test_pat" "$bdir/tests/test_sm90"
guarded 60 test_internal "$logs/test_internal.log" "$test_pat" "$bdir/tests/test_internal"
fi

# 2. Benchmarks, two rounds.
has bench && for r in 1 2; do
  guarded 60 "serving-r$r" "$logs/serving-r$r.log" "$bench_pat" "$bench" --suite serving --splits 0
  guarded 60 "fp8kv-r$r" "$logs/fp8kv-r$r.log" "$bench_pat" "$bench" --suite fp8kv
done

# 3. Against torch (cuDNN, FA2) in one process.
has torch && for r in 1 2; do
  guarded 60 "torch-decode-r$r" "$logs/torch-decode-r$r.log" "$ct_pat" \
    python3 "$root/tests/perf/compare_torch.py" --lib "$lib" --groups decode --kernels cuda_sm80_tc --quiet
done
has torch && guarded 120 torch-prefill "$logs/torch-prefill.log" "$ct_pat" \
  python3 "$root/tests/perf/compare_torch.py" --lib "$lib" --groups causal,noncausal,d64,prefill \
  --kernels cuda_sm90_ws --max-n 8192 --quiet

# 4. racecheck of the ragged serving group (every kernel, empty sequences).
has race && guarded 120 racecheck "$logs/racecheck.log" 'RACECHECK SUMMARY|hazard|ERROR SUMMARY|\[doctest\] (test cases|assertions)' \
  env FMHA_TEST_QUICK=12 compute-sanitizer --tool racecheck --racecheck-report all \
  "$tests" -tc="serving: ragged queries and keys*"
if [ -f "$logs/racecheck.log" ]; then
  note "racecheck hazard lines: $(grep -c 'hazard' "$logs/racecheck.log")"
  grep -E 'hazard' "$logs/racecheck.log" | sort | uniq -c | sort -rn | head -8 | sed 's/^/    /' >>"$summary"
fi

# 5. Registers and stack of the kernels.
if has res && command -v cuobjdump >/dev/null 2>&1; then
  cuobjdump --dump-resource-usage "$lib" >"$logs/resources.txt" 2>&1
  note "resource usage: $(grep -c 'REG:' "$logs/resources.txt") kernels; the key-warp / FP8 one-CTA ones:"
  grep -A1 -E 'KeyWarpTileConfigILi128ELi128ELi1ELi3ELi8E|KeyWarpTileConfigILi128ELi64ELi2ELi3ELi4E|Fp8KvTileConfigILi128ELi16ELi256ELi1ELi1ELi3ELi8E' \
    "$logs/resources.txt" | grep -oE 'REG:[0-9]+ STACK:[0-9]+' | sort | uniq -c | sed 's/^/    /' >>"$summary"
fi
note "run stage: $((SECONDS - t0)) s"
