#!/usr/bin/env bash
# Issue 14, FP8 KV decode on cuda_sm80_tc, third pass (branch
# issue14-fp8dec3): the two-key-warp tile (64 keys x 3 raw stages x 4 CTAs
# per SM, kKeyWarps = 2) is the default at D=128, and at D=64 / D=256;
# each key warp copies, checks and reads only its own keys of a tile, so
# its per-tile waits are its own (__syncwarp, a warp vote: no CTA barrier
# in the key loop); a whole K/V tile's copies skip the per-row test
# (Fp8KvTile::load_tile);
# candidate decode tiles compiled into the same build
# (FMHA_SM80_FP8KV_EXPERIMENTS=ON, picked at run time by
# FMHA_SM80_FP8KV_TILE: "kw1" = the head dim's tile with one key warp,
# "cta" = its two key warps sharing each tile's copies and the CTA's
# barriers (the tile before this branch), and the D=128 tiles 64.3.4.4,
# 64.4.3.4, 128.3.2.4, 32.7.3.2, 128.2.3.2 =
# kBlockN.kMinBlocksPerSm.kRawStages.kKeyWarps). From the repository root
# on the device machine, logs under $OUT (else ./fp8dec3-out):
#
#   STAGE=build  configure + build build/ (Release, 90-real; cuda_sm80_tc's
#                six FP8 K/V units and bf16:128, cuda_sm90_ws bf16:128;
#                libfmha, test_gpu, bench_cuda), -j${JOBS:-16}; each sm80
#                unit's compile time, object size and kernel count; the
#                SASS of the default D=128 BF16 FP8 decode kernel (sass.txt)
#   STAGE=run    test_gpu -tc="sm80 FP8*" on the default tiles; the fp8kv
#                bench's FP8 rows for the default and each candidate (one
#                round, interleaved); D=64 and D=256 default vs kw1 and cta;
#                forced split counts; ncu of one B=1 decode call and its
#                combine (if ncu is there); memcheck of a quick FP8 subset;
#                the candidates' quick FP8 decode tests; a second round of
#                the bar rows. Under ~90 s (later steps skip on time)
#   (unset)      both
#
# What it should show: every step rc=0 and "0 failed"; fp8kv of copy for
# the default (BF16 q e4m3, B=1 Nk=131072 / B=16 Nk=8192) at or above this
# session's first run of the same tile (0.760 / 0.798; main's one-key-warp
# tile 0.667 / 0.723), kw1 below it; the candidates' lines in summary.txt
# say which tile is faster (predictions: docs/performance.md, "FP8 KV
# decode, third pass").
set -u -o pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out=${OUT:-$root/fp8dec3-out}
mkdir -p "$out"
bdir=${FP8DEC3_BUILD_DIR:-$root/build}
summary="$out/summary.txt"
touch "$summary"
status=0
stage=${STAGE:-all}
command -v nvcc >/dev/null 2>&1 || export PATH="/usr/local/cuda/bin:$PATH"

# shellcheck source=tools/device/steps.sh
. "$root/tools/device/steps.sh"
STEP_TIMEOUT=120
STEP_PATTERN='ERROR:|error:|\[doctest\] (test cases|assertions)|MESSAGE|runs|cases,|========= (ERROR|Invalid)'

note "fp8dec3.sh stage=$stage $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
if [[ $stage != run ]]; then
  t0=$SECONDS
  cmake -S "$root" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFMHA_BUILD_TESTS=ON -DFMHA_BUILD_EXAMPLES=OFF \
    -DFMHA_BUILD_BENCHMARKS=ON -DFMHA_BUILD_PYTHON=OFF -DFMHA_BUILD_RUST=OFF -DCMAKE_CUDA_ARCHITECTURES=90-real \
    "-DFMHA_SM80_INSTANCES=bf16:128;f16_f8kv:64;f16_f8kv:128;f16_f8kv:256;bf16_f8kv:64;bf16_f8kv:128;bf16_f8kv:256" \
    "-DFMHA_SM90_INSTANCES=bf16:128" -DFMHA_SM80_FP8KV_EXPERIMENTS=ON >"$out/build.log" 2>&1 || {
    note "configure failed (build.log)"
    exit 1
  }
  cmake --build "$bdir" -j"${JOBS:-16}" --target fmha test_gpu bench_cuda >>"$out/build.log" 2>&1 || {
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
  # The default D=128 BF16 FP8 decode kernel (plain, dense) as SASS: where
  # a tile's instructions go.
  obj=$(find "$bdir" -name 'fwd_bf16_f8kv_d128.cu.o' | head -1)
  if command -v cuobjdump >/dev/null 2>&1 && [[ -n $obj ]]; then
    fn=$(cuobjdump -sass "$obj" | grep -o 'Function : _ZN4fmha4cuda4sm8010fwd_kernelI13__nv_bfloat16Lb1ENS1_15Fp8KvTileConfigILi128ELi16ELi64ELi1ELi4ELi3ELi2EEELNS0_8ScoreOpsE0ELNS0_7SeqModeE0EEEvNS0_9FwdParamsE' | head -1)
    cuobjdump -sass "$obj" | awk -v f="${fn#Function : }" '/Function : /{p = index($0, f) > 0} p' >"$out/sass.txt"
    note "sass.txt: $(grep -c '/\*[0-9a-f]*\*/' "$out/sass.txt") instructions of ${fn#Function : }"
  fi
fi
[[ $stage == build ]] && exit 0

t_run=$SECONDS
left() { echo $((88 - (SECONDS - t_run))); }
tg="$bdir/tests/test_gpu"
bench=$(find "$bdir" -name bench_cuda -type f -perm -u+x | head -1)
step fp8_tests "$out/tests.log" "$tg" -tc="sm80 FP8*" || status=1

# The candidates' FP8 rows (--case), interleaved with the default; then a
# second round of the bar rows. summary: "tile | row | of copy".
fp8_rows='bf16 q, e4m3|bf16 q, e5m2|f16 q, e4m3|f16 q, e5m2'
tiles=(default kw1 cta 64.3.4.4 64.4.3.4 128.3.2.4 32.7.3.2 128.2.3.2)
bench_tile() {  # tile, round, extra bench arguments...
  local tile=$1 round=$2
  shift 2
  echo "== tile $tile round $round: $*" >>"$out/bench.log"
  if [[ $tile == default ]]; then
    timeout 60 "$bench" --suite fp8kv --kernels cuda_sm80_tc --no-check "$@" >"$out/.one" 2>&1
  else
    FMHA_SM80_FP8KV_TILE=$tile timeout 60 "$bench" --suite fp8kv --kernels cuda_sm80_tc --no-check "$@" \
      >"$out/.one" 2>&1
  fi || status=1
  cat "$out/.one" >>"$out/bench.log"
  awk -F'|' -v t="$tile" -v r="$round" -v a="$*" '/^\| B=/ {gsub(/^ +| +$/, "", $2); printf "    %-10s r%s %-58s %s %s\n", t, r, $2, $6, a}' \
    "$out/.one" | tee -a "$summary"
}
note "fp8kv decode, of copy (tile, round, row, of copy, arguments):"
for t in "${tiles[@]}"; do bench_tile "$t" 1 --case "$fp8_rows"; done
bench_tile default 1 --case 'bf16 q, bf16 K/V'  # the BF16 K/V reference rows
for d in 64 256; do
  for t in default kw1 cta; do bench_tile "$t" 1 --d "$d" --case 'bf16 q, e4m3 K/V|f16 q, e5m2'; done
done
for s in 16 32 64; do bench_tile default 1 --splits "$s" --case 'bf16 q, e4m3 K/V'; done
note "fp8kv run 1 done at $((SECONDS - t_run)) s"

# One B=1 decode call and its split combine under ncu: where the time goes.
ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
if [[ -n $ncu_bin ]] && (($(left) > 25)); then
  STEP_TIMEOUT=30 STEP_PATTERN='fwd_kernel|combine|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Achieved Occupancy|Registers Per|ERR' \
    STEP_LINES=40 step ncu "$out/ncu.txt" "$ncu_bin" --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section SchedulerStats --section WarpStateStats --section ComputeWorkloadAnalysis -k 'regex:fwd_kernel|combine' \
    --launch-skip 6 --launch-count 2 "$bench" --suite fp8kv --kernels cuda_sm80_tc --no-check --group-ms 2 \
    --case 'B=1 Nk=131072 bf16 q, e4m3 K/V' || note "ncu: rc != 0 (ncu.txt)"
else
  note "ncu: not there or no time left"
fi

# compute-sanitizer on a quick FP8 subset (the default tiles).
if (($(left) > 8)); then
  STEP_TIMEOUT=$(( $(left) < 20 ? $(left) : 20 )) step memcheck "$out/.one" env FMHA_TEST_QUICK=8 compute-sanitizer --tool memcheck \
    --error-exitcode 9 "$tg" -tc="sm80 FP8 K/V: decode*,sm80 FP8 K/V: every*,sm80 FP8 K/V: a non-finite*" || status=1
  cat "$out/.one" >>"$out/tests.log"
else
  note "memcheck: skipped (time)"
fi
# The candidates' correctness (plain kernels): the decode cases, every
# byte, the non-finite v rows; quick.
for t in "${tiles[@]:1}"; do
  if (($(left) < 12)); then
    note "candidate tests from $t on: skipped (time)"
    break
  fi
  STEP_TIMEOUT=$(left) step "tests_$t" "$out/.one" env FMHA_SM80_FP8KV_TILE="$t" FMHA_TEST_QUICK=4 "$tg" \
    -tc="sm80 FP8 K/V: decode*,sm80 FP8 K/V: every*,sm80 FP8 K/V: a non-finite*" || status=1
  cat "$out/.one" >>"$out/tests.log"
done
# Second round of the bar rows.
if (($(left) > 20)); then
  for t in "${tiles[@]}"; do bench_tile "$t" 2 --case 'bf16 q, e4m3 K/V'; done
fi
rm -f "$out/.one"
note "run $((SECONDS - t_run)) s, status $status"
exit $status
