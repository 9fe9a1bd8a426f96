#!/usr/bin/env bash
# Issue 9 on the CUDA kernels, run from the repository root on a machine
# with a CUDA GPU (the lent H200: OUT is set there; elsewhere logs go to
# ./issue9-cuda-out). About 5 minutes on the H200, the build included:
#
#   1. configure and build fmha, test_gpu, fuzz_metadata_cuda and bench_cuda
#      (Release, Ninja, sm_90 machine code, -j16)
#   2. test_gpu's serving cases (ragged, seqused_k, paged, decode with
#      splits, explain; every CUDA kernel forced by name and automatic,
#      against the float64 reference), then the whole test_gpu
#   3. fuzz_metadata_cuda (garbage cu_seqlens / seqused_k / block_table),
#      plain, then under compute-sanitizer memcheck
#   4. bench_cuda --suite serving (decode TB/s against the copy bandwidth,
#      paged / contiguous, ragged prefill / dense TFLOP/s)
#
# One log per step and summary.txt under $OUT; the summary is printed last.
# Environment: ISSUE9_BUILD_DIR (default build), ISSUE9_JOBS (16),
# ISSUE9_ARCH (90-real), ISSUE9_BUILD=0 reuses a build, ISSUE9_FUZZ_ITERS
# (300 plain; ISSUE9_MEMCHECK_ITERS, 30, under memcheck).
set -u -o pipefail

bdir=${ISSUE9_BUILD_DIR:-build}
out=${OUT:-$PWD/issue9-cuda-out}
jobs=${ISSUE9_JOBS:-16}
arch=${ISSUE9_ARCH:-90-real}
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
status=0
command -v nvcc >/dev/null 2>&1 || export PATH="/usr/local/cuda/bin:$PATH"

note() { echo "$*" | tee -a "$summary"; }
# step NAME LOG TIMEOUT CMD...: runs CMD with its output in LOG, notes the exit code and time.
step() {
  local name=$1 log=$2 tmo=$3
  shift 3
  local t0=$SECONDS
  echo "== $(date -u +%H:%M:%S) $name: $*" >"$log"
  timeout "$tmo" "$@" >>"$log" 2>&1
  local rc=$?
  note "$(printf '%-16s rc=%-3s %4ss  %s' "$name" "$rc" "$((SECONDS - t0))" "$(basename "$log")")"
  return $rc
}

note "issue9_cuda $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')," \
  "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"

# ---- 1. build ---------------------------------------------------------------------
if [ "${ISSUE9_BUILD:-1}" = 1 ]; then
  step configure "$out/build.log" 300 cmake -S . -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DFMHA_BUILD_EXAMPLES=OFF -DCMAKE_CUDA_ARCHITECTURES="$arch" || { cat "$summary"; exit 1; }
  t0=$SECONDS
  cmake --build "$bdir" -j"$jobs" --target fmha test_gpu fuzz_metadata_cuda bench_cuda >>"$out/build.log" 2>&1
  rc=$?
  note "$(printf '%-16s rc=%-3s %4ss  %s' build "$rc" "$((SECONDS - t0))" build.log)"
  if [ $rc -ne 0 ]; then
    grep -E "error|FAILED" "$out/build.log" | head -20 | tee -a "$summary"
    cat "$summary"
    exit 1
  fi
fi
gpu="$bdir/tests/test_gpu"
fuzz="$bdir/tests/fuzz/fuzz_metadata_cuda"
bench="$bdir/tests/perf/bench_cuda"

# ---- 2. tests ---------------------------------------------------------------------
tally() { grep -E "\[doctest\] (test cases|assertions)|: [0-9]+ cases;" "$1" | sed 's/^/  /' | tee -a "$summary"; }
step serving-tests "$out/test_serving.log" 240 "$gpu" -tc="serving*" || status=1
tally "$out/test_serving.log"
grep -B2 -A14 "ERROR: CHECK" "$out/test_serving.log" | head -60 >>"$summary"
step all-gpu-tests "$out/test_gpu.log" 300 "$gpu" || status=1
tally "$out/test_gpu.log"

# ---- 3. metadata fuzz ---------------------------------------------------------------
step fuzz "$out/fuzz.log" 120 "$fuzz" --iters "${ISSUE9_FUZZ_ITERS:-300}" || status=1
grep -E "^fuzz_metadata_cuda: [0-9]+ problems|too many" "$out/fuzz.log" | sed 's/^/  /' | tee -a "$summary"
step fuzz-memcheck "$out/fuzz_memcheck.log" 240 compute-sanitizer --error-exitcode 99 --print-limit 30 \
  --tool memcheck "$fuzz" --iters "${ISSUE9_MEMCHECK_ITERS:-30}" --seed 0x5eed || status=1
grep -E "ERROR SUMMARY|^fuzz_metadata_cuda: [0-9]+ problems" "$out/fuzz_memcheck.log" | sed 's/^/  /' | tee -a "$summary"

# ---- 4. serving benchmark -------------------------------------------------------------
step bench-serving "$out/bench_serving.log" 240 "$bench" --suite serving || status=1
sed -n '/^| serving case/,$p' "$out/bench_serving.log" | sed 's/^/  /' | tee -a "$summary"

note "issue9_cuda $(date -u +%H:%M:%S): $([ $status = 0 ] && echo PASS || echo FAIL)"
echo
echo "==================== summary ($out) ===================="
cat "$summary"
exit $status
