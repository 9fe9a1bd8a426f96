#!/usr/bin/env bash
# Issue 14: FP8 KV-cache decode on cuda_sm80_tc with the K/V stages kept FP8
# in shared memory and converted in registers (fwd_kernel.cuh: Fp8KvTile,
# WarpQKFp8, WarpPVFp8), on the GPU, from the repository root on the device
# machine (logs under $OUT, else ./fp8dec-out). Under 4 minutes:
#
#   1. configure and build libfmha, test_gpu and bench_cuda (Release, sm_90
#      machine code, reduced instance lists: the six FP8 K/V units the tests
#      use, bf16:128 / f16:128 for the 16-bit baseline; cuda_sm90_ws bf16:128)
#   2. build cost: each sm80 unit's compile time and object size, the kernel
#      count per unit (cuobjdump), libfmha's size (in summary.txt)
#   3. test_gpu -tc="sm80 FP8*": decode / prefill / serving layouts / key
#      splits / descales against the float64 reference, every FP8 byte
#      decoded exactly, a NaN / inf v row under a causal mask
#   4. bench_cuda --suite fp8kv --kernels cuda_sm80_tc: BF16 / F16 q, e4m3 /
#      e5m2 K/V, descales, paged, B=1 Nk=131072 and B=16 Nk=8192, against
#      the copy bandwidth and BF16 K/V of the same run
#   5. while time lasts, the same suite with the D=128 FP8 decode tile of
#      F16 q (64 keys, 4 CTAs per SM) for BF16 q too (FMHA_SM80_FP8KV_TILE_D128;
#      the default gives BF16 q 32 keys, 7 CTAs), rebuilding only the FP8
#      d128 units
#   6. in what is left of the 4 minutes (the default tile again), the
#      decode, every-byte and prefill cases under compute-sanitizer memcheck
#      (FMHA_TEST_QUICK=8)
#
# What it should show: every step rc=0 with "0 failed"; the fp8kv table's
# "of copy" column for the e4m3 rows against the bar (>= 0.90), the first
# H200 run of this tile (a811c36: BF16 q e4m3 0.50 / 0.61, F16 q e5m2 0.70 /
# 0.84 at B=1 / B=16; with 32 keys x 7 CTAs BF16 q e4m3 0.50 / 0.73) and the
# shared-memory-conversion tile before it (0.41 / 0.46); the prefill rows:
# e4m3 on WideFp8Kv against BF16 K/V (0.30x on the decode tile at a811c36).
set -u -o pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out=${OUT:-$root/fp8dec-out}
mkdir -p "$out"
bdir=${FP8DEC_BUILD_DIR:-$root/build}
summary="$out/summary.txt"
: >"$summary"
status=0
command -v nvcc >/dev/null 2>&1 || export PATH="/usr/local/cuda/bin:$PATH"

# shellcheck source=tools/device/steps.sh
. "$root/tools/device/steps.sh"
STEP_TIMEOUT=200
STEP_PATTERN='ERROR:|error:|\[doctest\] (test cases|assertions)|MESSAGE|runs|cases,|========= (ERROR|Invalid)'

note "fp8dec.sh $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
step configure "$out/build.log" cmake -S "$root" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DFMHA_BUILD_TESTS=ON -DFMHA_BUILD_EXAMPLES=OFF -DFMHA_BUILD_BENCHMARKS=ON -DFMHA_BUILD_PYTHON=OFF \
  -DFMHA_BUILD_RUST=OFF -DCMAKE_CUDA_ARCHITECTURES=90-real \
  "-DFMHA_SM80_INSTANCES=bf16:128;f16:128;f16_f8kv:64;f16_f8kv:128;f16_f8kv:256;bf16_f8kv:64;bf16_f8kv:128;bf16_f8kv:256" \
  "-DFMHA_SM90_INSTANCES=bf16:128" -DFMHA_SM80_FP8KV_TILE_D128= || exit 1
t0=$SECONDS
cmake --build "$bdir" -j16 --target fmha test_gpu bench_cuda >>"$out/build.log" 2>&1 || {
  note "build failed"
  grep -E "error|Error" "$out/build.log" | head -20 | tee -a "$summary"
  exit 1
}
note "build $((SECONDS - t0)) s"

{
  echo "sm80 units: compile s, object bytes, kernels (cuobjdump -sass function count)"
  awk -F'\t' '$4 ~ /sm80\/fwd_.*\.cu\.o$/ {t[$4] = ($2 - $1) / 1000.0} END {for (o in t) print o, t[o]}' \
    "$bdir/.ninja_log" | sort |
    while read -r obj secs; do
      k='?'
      command -v cuobjdump >/dev/null 2>&1 && k=$(cuobjdump -sass "$bdir/$obj" 2>/dev/null | grep -c "Function : .*fwd_kernel")
      echo "$(basename "$obj") $secs $(stat -c %s "$bdir/$obj" 2>/dev/null || echo '?') $k"
    done
  echo "libfmha: $(find "$bdir" -name 'libfmha.so*' -type f -exec stat -c '%n %s bytes' {} \; | head -1)"
} 2>&1 | sed 's/^/    /' | tee -a "$summary"

step fp8_tests "$out/tests.log" "$bdir/tests/test_gpu" -tc="sm80 FP8*" || status=1
bench=$(find "$bdir" -name bench_cuda -type f -perm -u+x | head -1)
STEP_PATTERN='^\| (B=|prefill)|copy bandwidth' STEP_TIMEOUT=120 step bench "$out/bench.log" "$bench" --suite fp8kv \
  --kernels cuda_sm80_tc --no-check || status=1
grep -E "^\| (B=|prefill)" "$out/bench.log" | sed 's/^/default tiles /' >"$out/variants.log"

# Other D=128 FP8 tiles (FMHA_SM80_FP8KV_TILE_D128 = kBlockN,kMinBlocksPerSm,
# kRawStages; only the FP8 d128 units and the host plan recompile), while
# the 4-minute budget lasts.
for tile in 64,4,3; do
  if ((SECONDS > 185)); then
    note "tile $tile: skipped (time)"
    continue
  fi
  t0=$SECONDS
  if cmake -S "$root" -B "$bdir" "-DFMHA_SM80_FP8KV_TILE_D128=$tile" >>"$out/build.log" 2>&1 &&
    cmake --build "$bdir" -j16 --target bench_cuda >>"$out/build.log" 2>&1; then
    timeout 60 "$bench" --suite fp8kv --kernels cuda_sm80_tc --no-check 2>&1 | grep -E "^\| (B=|prefill)" |
      sed "s/^/tile $tile /" >>"$out/variants.log"
    note "tile $tile: $((SECONDS - t0)) s (rebuild + bench), variants.log"
  else
    note "tile $tile: build failed (build.log)"
  fi
done
grep -E "e4m3 K/V \||e5m2 K/V \||prefill e4m3" "$out/variants.log" | grep -v descales | sed 's/^/    /' |
  tee -a "$summary"

# memcheck last, in what is left of the 4 minutes, on the default tile
if ((SECONDS <= 200)); then
  if cmake -S "$root" -B "$bdir" -DFMHA_SM80_FP8KV_TILE_D128= >>"$out/build.log" 2>&1 &&
    cmake --build "$bdir" -j16 --target test_gpu >>"$out/build.log" 2>&1; then
    STEP_TIMEOUT=$((230 - SECONDS)) step memcheck "$out/memcheck.log" env FMHA_TEST_QUICK=8 compute-sanitizer \
      --tool memcheck --error-exitcode 9 "$bdir/tests/test_gpu" -tc="sm80 FP8 K/V: decode*,sm80 FP8 K/V: every*,sm80 FP8 K/V: prefill*" ||
      status=1
  fi
else
  note "memcheck: skipped (time)"
fi
note "status $status"
exit $status
