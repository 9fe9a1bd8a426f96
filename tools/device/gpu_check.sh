#!/usr/bin/env bash
# The GPU check, run from the repository root on a machine with a CUDA GPU
# (the lent device machine: OUT is set there; elsewhere logs go to
# ./gpu-check-out):
#
#   1. configure and build (Release, Ninja, sm_90 machine code)
#   2. ctest -L gpu (test_gpu: every CUDA kernel against the float64
#      reference, large problems, the API contract on CUDA)
#   3. compute-sanitizer memcheck and racecheck over test_gpu in quick mode
#   4. optionally the CUDA benchmark and tests/perf/compare_torch.py
#
# and writes one log per step plus summary.txt, flat, under $OUT (at most 8
# files). The summary is printed last.
#
# Options (or the environment variable in brackets):
#   --bench            also run build/tests/perf/bench_cuda [GPU_CHECK_BENCH=1]
#   --torch            also run compare_torch.py [GPU_CHECK_TORCH=1];
#                      its arguments from GPU_CHECK_TORCH_ARGS
#                      (default: --groups causal,decode --max-n 8192)
#   --no-sanitizer     skip step 3 [GPU_CHECK_SANITIZER=0; GPU_CHECK_RACECHECK=0 skips
#                      racecheck alone]
#   --no-build         reuse an existing build directory [GPU_CHECK_BUILD=0]
#   --arch LIST        CMAKE_CUDA_ARCHITECTURES [GPU_CHECK_ARCH, default 90-real]
#   --jobs N           build parallelism [GPU_CHECK_JOBS, default 16]
# More environment:
#   GPU_CHECK_BUILD_DIR       build directory (default build)
#   GPU_CHECK_MEMCHECK_QUICK  FMHA_TEST_QUICK for memcheck (default 3: a third of the matrix)
#   GPU_CHECK_RACECHECK_QUICK FMHA_TEST_QUICK for racecheck (default 12)
#   GPU_CHECK_TIMEOUT         seconds allowed to each test, sanitizer, bench or torch step
#                             (default 300); GPU_CHECK_TIMEOUT_CTEST, _MEMCHECK,
#                             _RACECHECK, _BENCH, _TORCH override it per step
set -u -o pipefail

bench=${GPU_CHECK_BENCH:-0}
torch=${GPU_CHECK_TORCH:-0}
sanitizer=${GPU_CHECK_SANITIZER:-1}
build=${GPU_CHECK_BUILD:-1}
arch=${GPU_CHECK_ARCH:-90-real}
jobs=${GPU_CHECK_JOBS:-16}
while [ $# -gt 0 ]; do
  case "$1" in
    --bench) bench=1 ;;
    --torch) torch=1 ;;
    --no-sanitizer) sanitizer=0 ;;
    --no-build) build=0 ;;
    --arch) arch=$2; shift ;;
    --jobs) jobs=$2; shift ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "gpu_check.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

bdir=${GPU_CHECK_BUILD_DIR:-build}
out=${OUT:-$PWD/gpu-check-out}
tmo=${GPU_CHECK_TIMEOUT:-300}
mkdir -p "$out"
summary="$out/summary.txt"
: > "$summary"
status=0

note() { echo "$*" | tee -a "$summary"; }
stamp() { date -u +%H:%M:%S; }
# step NAME LOG CMD...: runs CMD with its output in LOG, notes the time and exit code.
step() {
  local name=$1 log=$2
  shift 2
  local t0=$SECONDS
  echo "== $(stamp) $name: $*" | tee "$log"
  "$@" >>"$log" 2>&1
  local rc=$?
  note "$(printf '%-10s rc=%-3s %4ss  %s' "$name" "$rc" "$((SECONDS - t0))" "$(basename "$log")")"
  return $rc
}

# ---- the machine ------------------------------------------------------------
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo ' + uncommitted changes')"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1
  nvcc --version 2>&1 | tail -2
  compute-sanitizer --version 2>&1 | head -2
  cmake --version | head -1
  python3 -c 'import torch; print("torch", torch.__version__, "cuDNN", torch.backends.cudnn.version())' 2>&1 | tail -1
} > "$out/gpu.txt" 2>&1
note "gpu_check $(date -u '+%Y-%m-%d %H:%M UTC'), $(sed -n 2p "$out/gpu.txt"), GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"

# ---- 1. build ----------------------------------------------------------------
if [ "$build" = 1 ]; then
  step configure "$out/build.log" cmake -S . -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES="$arch" || { note "configure failed: see build.log"; cat "$summary"; exit 1; }
  t0=$SECONDS
  cmake --build "$bdir" -j"$jobs" >>"$out/build.log" 2>&1
  rc=$?
  note "$(printf '%-10s rc=%-3s %4ss  %s' build "$rc" "$((SECONDS - t0))" build.log)"
  if [ $rc -ne 0 ]; then
    grep -E "error|FAILED" "$out/build.log" | head -20 | tee -a "$summary"
    cat "$summary"
    exit 1
  fi
fi
test_gpu="$bdir/tests/test_gpu"
[ -x "$test_gpu" ] || { note "no $test_gpu: was the build configured with CUDA and doctest?"; cat "$summary"; exit 1; }

# ---- 2. tests ------------------------------------------------------------------
# -V keeps test_gpu's messages (timings, per-group tallies) in the log.
step ctest "$out/ctest.log" timeout "${GPU_CHECK_TIMEOUT_CTEST:-$tmo}" ctest --test-dir "$bdir" -L gpu --output-on-failure -V || status=1
grep -E "tests passed|tests failed|\[doctest\] (test cases|assertions)|Passed|Failed|Skipped|\*\*\*" \
  "$out/ctest.log" | grep -vE "^ *[0-9]+: " | tail -12 | sed 's/^/  /' | tee -a "$summary"

# ---- 3. compute-sanitizer -----------------------------------------------------
if [ "$sanitizer" = 1 ]; then
  cs="compute-sanitizer --error-exitcode 99 --print-limit 30"
  FMHA_TEST_QUICK=${GPU_CHECK_MEMCHECK_QUICK:-3} \
    step memcheck "$out/memcheck.log" timeout "${GPU_CHECK_TIMEOUT_MEMCHECK:-$tmo}" $cs --tool memcheck "$test_gpu" || status=1
  grep -E "ERROR SUMMARY|\[doctest\] test cases" "$out/memcheck.log" | sed 's/^/  /' | tee -a "$summary"
  if [ "${GPU_CHECK_RACECHECK:-1}" = 1 ]; then
    FMHA_TEST_QUICK=${GPU_CHECK_RACECHECK_QUICK:-12} \
      step racecheck "$out/racecheck.log" timeout "${GPU_CHECK_TIMEOUT_RACECHECK:-$tmo}" $cs --tool racecheck --racecheck-report hazard "$test_gpu" || status=1
    grep -E "RACECHECK SUMMARY|ERROR SUMMARY|\[doctest\] test cases" "$out/racecheck.log" | sed 's/^/  /' | tee -a "$summary"
  fi
fi

# ---- 4. optional: benchmark, torch --------------------------------------------
if [ "$bench" = 1 ]; then
  if [ -x "$bdir/tests/perf/bench_cuda" ]; then
    step bench "$out/bench.log" timeout "${GPU_CHECK_TIMEOUT_BENCH:-$tmo}" "$bdir/tests/perf/bench_cuda" || status=1
    tail -25 "$out/bench.log" | sed 's/^/  /' | tee -a "$summary"
  else
    note "bench: $bdir/tests/perf/bench_cuda not built (FMHA_BUILD_BENCHMARKS, tests/perf/CMakeLists.txt)"
  fi
fi
if [ "$torch" = 1 ]; then
  lib=$(ls "$bdir"/src/libfmha.so 2>/dev/null || true)
  if [ -n "$lib" ]; then
    # shellcheck disable=SC2086
    PYTHONUNBUFFERED=1 step torch "$out/torch.log" timeout "${GPU_CHECK_TIMEOUT_TORCH:-$tmo}" python3 tests/perf/compare_torch.py \
      --lib "$lib" ${GPU_CHECK_TORCH_ARGS:---groups causal,decode --max-n 8192} || status=1
    sed -n '/^times in ms/,$p' "$out/torch.log" | sed 's/^/  /' | tee -a "$summary"
  else
    note "torch: no $bdir/src/libfmha.so (FMHA_BUILD_SHARED=OFF?)"
  fi
fi

note "gpu_check $(stamp): $([ $status = 0 ] && echo PASS || echo FAIL)"
echo
echo "==================== summary ($out) ===================="
cat "$summary"
exit $status
