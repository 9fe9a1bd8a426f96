#!/usr/bin/env bash
# GPU reliability check (issue 7), on a machine with a CUDA GPU and a built
# tree (configured with CUDA and tests; tools/device/gpu_check.sh builds one):
#
#   1. the fuzz corpus (tests/fuzz/corpus: the fuzzer's inputs, accepted and
#      refused problems alike) on a CUDA handle, plain, then under
#      compute-sanitizer memcheck for the first SANITIZE_FUZZ_MAX inputs:
#      build/tests/fuzz/fuzz_replay_cuda checks the same invariants as the
#      CPU fuzz target (statuses and messages, nothing written on failure or
#      outside o/lse, exact overlap verdicts, float64 numerics and the NaN
#      rules), with the tensors in managed memory
#   2. test_gpu's case matrix (every CUDA kernel, forced by name, splits 0
#      and 4, against the float64 reference) under memcheck, racecheck,
#      synccheck and initcheck, each on a sample of the matrix
#      (FMHA_TEST_QUICK = every n-th case)
#   3. build/tests/fuzz/fuzz_metadata_cuda under memcheck: serving layouts
#      with garbage device metadata (cu_seqlens, seqused_k, block_table) on
#      every CUDA kernel; no access may leave the tensors' extents (issue 9)
#
# and writes one log per step and summary.txt (counts, durations, sanitizer
# error summaries) into the log folder given as the argument:
#
#   tools/device/sanitize.sh LOGDIR
#
# Environment:
#   SANITIZE_BUILD_DIR      build tree (default build); its fuzz_replay_cuda
#                           and test_gpu are built first when missing
#   SANITIZE_FUZZ_MAX       corpus inputs replayed under memcheck (default 400)
#   SANITIZE_QUICK_MEMCHECK, _RACECHECK, _SYNCCHECK, _INITCHECK
#                           FMHA_TEST_QUICK per tool (defaults 3, 12, 6, 6)
#   SANITIZE_METADATA_ITERS problems of the metadata fuzz (default 60)
#   SANITIZE_TIMEOUT        seconds per step (default 900)
set -u -o pipefail

[ $# -eq 1 ] || { sed -n '2,30p' "$0"; exit 2; }
out=$1
mkdir -p "$out"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bdir=${SANITIZE_BUILD_DIR:-$root/build}
fuzz_max=${SANITIZE_FUZZ_MAX:-400}
tmo=${SANITIZE_TIMEOUT:-900}
summary="$out/summary.txt"
: >"$summary"
status=0
command -v nvcc >/dev/null 2>&1 || export PATH="/usr/local/cuda/bin:$PATH"

# shellcheck source=tools/device/steps.sh
. "$root/tools/device/steps.sh"
STEP_TIMEOUT=$tmo
STEP_PATTERN='ERROR SUMMARY|RACECHECK SUMMARY|fuzz_replay[_a-z]*:|fuzz_metadata_cuda: [0-9]|\[doctest\] (test cases|assertions)'

note "sanitize.sh $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')," \
     "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
note "$(compute-sanitizer --version 2>&1 | tail -1)"

fuzz="$bdir/tests/fuzz/fuzz_replay_cuda"
gpu="$bdir/tests/test_gpu"
meta="$bdir/tests/fuzz/fuzz_metadata_cuda"
if [ ! -x "$fuzz" ] || [ ! -x "$gpu" ] || [ ! -x "$meta" ]; then
  step build "$out/build.log" cmake --build "$bdir" --target fuzz_replay_cuda test_gpu fuzz_metadata_cuda ||
    { note "build failed: is $bdir configured with CUDA and tests?"; exit 1; }
fi
corpus="$root/tests/fuzz/corpus"
note "corpus: $(ls "$corpus" | wc -l) inputs"

# ---- 1. fuzz corpus on a CUDA handle ----------------------------------------------
step fuzz-plain "$out/fuzz_plain.log" "$fuzz" "$corpus" || status=1
cs=(compute-sanitizer --error-exitcode 99 --print-limit 30)
step fuzz-memcheck "$out/fuzz_memcheck.log" "${cs[@]}" --tool memcheck \
  "$fuzz" --max "$fuzz_max" "$corpus" || status=1

# ---- 2. the case matrix under each tool ----------------------------------------------
matrix=(-tc="every CUDA kernel over the case matrix")
FMHA_TEST_QUICK=${SANITIZE_QUICK_MEMCHECK:-3} \
  step matrix-memcheck "$out/matrix_memcheck.log" "${cs[@]}" --tool memcheck "$gpu" "${matrix[@]}" || status=1
FMHA_TEST_QUICK=${SANITIZE_QUICK_RACECHECK:-12} \
  step matrix-racecheck "$out/matrix_racecheck.log" "${cs[@]}" --tool racecheck --racecheck-report hazard \
  "$gpu" "${matrix[@]}" || status=1
FMHA_TEST_QUICK=${SANITIZE_QUICK_SYNCCHECK:-6} \
  step matrix-synccheck "$out/matrix_synccheck.log" "${cs[@]}" --tool synccheck "$gpu" "${matrix[@]}" || status=1
FMHA_TEST_QUICK=${SANITIZE_QUICK_INITCHECK:-6} \
  step matrix-initcheck "$out/matrix_initcheck.log" "${cs[@]}" --tool initcheck "$gpu" "${matrix[@]}" || status=1

# ---- 3. garbage serving metadata under memcheck --------------------------------------
step metadata-memcheck "$out/metadata_memcheck.log" "${cs[@]}" --tool memcheck \
  "$meta" --iters "${SANITIZE_METADATA_ITERS:-60}" || status=1

note "sanitize.sh: $([ $status = 0 ] && echo PASS || echo FAIL)"
exit $status
