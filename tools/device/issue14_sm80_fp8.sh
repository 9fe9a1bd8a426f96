#!/usr/bin/env bash
# Issue 14 on cuda_sm80_tc: an FP8 KV cache (q F16/BF16, K/V F8E4M3 or
# F8E5M2, o in q's dtype) read as FP8 and converted in shared memory, plus
# q/k/v descales; from the repository root on the device machine (logs under
# $OUT, else ./issue14-sm80-fp8-out):
#
#   1. configure and build libfmha, test_gpu and bench_cuda (Release,
#      sm_90 machine code, the default instance list: 10 16-bit sm80 units
#      plus 6 FP8 K/V ones, f16/bf16 x D 64/128/256)
#   2. build cost: each sm80 unit's compile time (.ninja_log) and object
#      size, FP8 K/V units against the 16-bit ones, and libfmha's size
#      (build_cost.txt)
#   3. test_gpu -tc="sm80*": tests/gpu/test_gpu_fp8_kv.cpp (FP8 K/V decode
#      and prefill on cuda_sm80_tc forced, num_splits 1/auto/3/16, dense,
#      seqused_k, ragged, paged; negative k descales; the refusals and their
#      explain lines)
#   4. test_gpu, whole (tests/gpu/numerics_support.h now says cuda_sm80_tc
#      runs FP8 K/V under an F16/BF16 q and descales with FP8 K/V: the
#      contract test and the numerics case matrix force it on those cases)
#   5. bench_cuda --suite fp8kv: BF16-q decode, Hq 32 / Hk 8, D 128, Nq 1,
#      B=1 Nk=131072 and B=16 Nk=8192, BF16 / e4m3 / e5m2 / e4m3+descales /
#      e4m3 paged K/V: K+V TB/s, share of the copy bandwidth measured in the
#      same run, speedup over BF16 K/V
#
# What it should show: every step rc=0, "[doctest] ... 0 failed"; in
# bench.log's table the e4m3 rows' "of copy" (bar >= 0.90) and "speedup vs
# BF16 K/V" (bar ~1.9).
set -u -o pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out=${OUT:-$root/issue14-sm80-fp8-out}
mkdir -p "$out"
bdir=${ISSUE14_BUILD_DIR:-$root/build}
summary="$out/summary.txt"
: >"$summary"
status=0
command -v nvcc >/dev/null 2>&1 || export PATH="/usr/local/cuda/bin:$PATH"

note() { echo "$*" | tee -a "$summary"; }
step() {
  local name=$1 log=$2
  shift 2
  local t0=$SECONDS
  echo "== $(date -u +%H:%M:%S) $name: $*" >"$log"
  timeout 900 "$@" >>"$log" 2>&1
  local rc=$?
  note "$(printf '%-18s rc=%-3s %5ss  %s' "$name" "$rc" "$((SECONDS - t0))" "$(basename "$log")")"
  grep -E "ERROR:|\[doctest\] (test cases|assertions)|MESSAGE|: [0-9]+ cases" "$log" | head -30 | sed 's/^/    /' | tee -a "$summary"
  return $rc
}

note "issue14_sm80_fp8.sh $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
step configure "$out/configure.log" cmake -S "$root" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DFMHA_BUILD_TESTS=ON -DFMHA_BUILD_EXAMPLES=OFF -DFMHA_BUILD_PYTHON=OFF -DFMHA_BUILD_RUST=OFF \
  -DCMAKE_CUDA_ARCHITECTURES=90-real || exit 1
step build "$out/build.log" cmake --build "$bdir" -j16 --target fmha test_gpu bench_cuda || exit 1

# Build cost of the sm80 units: compile seconds (.ninja_log: start and end
# ms of each output) and object bytes, FP8 K/V units apart.
{
  echo "sm80 units: compile s, object bytes"
  awk -F'\t' '$4 ~ /sm80\/fwd_.*\.cu\.o$/ {t[$4] = ($2 - $1) / 1000.0} END {for (o in t) print o, t[o]}' \
    "$bdir/.ninja_log" | sort |
    while read -r obj secs; do
      echo "$(basename "$obj") $secs $(stat -c %s "$bdir/$obj" 2>/dev/null || echo '?')"
    done | tee "$out/units.txt"
  awk '{k = ($1 ~ /f8kv/) ? "fp8kv" : "16bit"; n[k]++; s[k] += $2; b[k] += $3}
       END {for (k in n) printf "%s units: %d, compile %.0f s in all, objects %.1f MB\n", k, n[k], s[k], b[k] / 1e6}' \
    "$out/units.txt"
  echo "libfmha: $(find "$bdir" -name 'libfmha.so*' -type f -exec stat -c '%n %s bytes' {} \; | head -1)"
} >"$out/build_cost.txt" 2>&1
tail -4 "$out/build_cost.txt" | sed 's/^/    /' | tee -a "$summary"

step fp8_tests "$out/fp8_tests.log" "$bdir/tests/test_gpu" -tc="sm80*" -d || status=1
step test_gpu "$out/test_gpu.log" "$bdir/tests/test_gpu" || status=1
step bench "$out/bench.log" "$bdir/tests/perf/bench_cuda" --suite fp8kv --no-check || status=1
grep -E "^\| B=|copy bandwidth" "$out/bench.log" | tee -a "$summary"
note "status $status"
exit $status
