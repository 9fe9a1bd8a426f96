#!/usr/bin/env bash
# Issue 14, FP8 KV decode on cuda_sm80_tc, fourth pass (branch
# issue14-fp8dec4; docs/performance.md, "FP8 KV decode, fourth pass", has
# the predictions). What the branch changed, every FP8 K/V kernel:
#   - a whole tile of packed rows (row stride == D bytes: a [.., N, D]
#     cache) is copied from one address with constant offsets
#     (Fp8KvTile::load_tile);
#   - paged K/V: a key warp's share of a tile counts as one page when
#     page_size is a multiple of the share (not of the whole tile), and its
#     block-table entry is read a tile ahead (fwd_kernel: fp8_issue);
#   - FP8 tiles of more than 4 key warps merge them in rounds
#     (merge_key_warps_tree).
# Candidate D=128 decode tiles in the same build (FMHA_SM80_FP8KV_EXPERIMENTS
# =ON; FMHA_SM80_FP8KV_TILE = kBlockN.kMinBlocksPerSm.kRawStages.kKeyWarps,
# every layout): 64.3.4.4 and 128.3.2.4 (fp8dec3's best two), 256.1.3.8,
# 192.1.4.12 and 256.1.3.16 (one CTA per SM: B=16 GQA 32/8 runs unsplit, B=1
# in 16 splits), 128.2.3.4 (two CTAs per SM); "default" = NarrowFp8Kv
# (64.4.3.2). From the repository root on the device machine:
#
#   STAGE=build  configure + build $FP8DEC4_BUILD_DIR (default
#                /tmp/fp8dec4-build; Release, 90-real, cuda_sm80_tc bf16:128
#                and the six FP8 K/V units f16/bf16 x D=64/128/256,
#                cuda_sm90_ws bf16:128; libfmha, test_gpu, bench_cuda),
#                -j${JOBS:-16}; each sm80 unit's compile time and size
#   STAGE=run    1. test_gpu: every "sm80 FP8*" case on the default tiles,
#                   and the decode / serving / split groups once (16-bit:
#                   FMHA_SM80_FP8KV_TILE does not reach them; they check the
#                   shared kernel's 16-bit paths still pass); then each
#                   candidate forced on the FP8 decode, every-byte,
#                   non-finite-v, negative-descale and BF16-q cases (quick)
#                2. bench_cuda --suite fp8kv, the FP8 decode rows (B=1
#                   Nk=131072, B=16 Nk=8192: BF16/F16 q x e4m3/e5m2, k/v
#                   descales, paged ps=64), default and each candidate
#                   interleaved, two rounds; round 1 also the default's
#                   whole suite (BF16 K/V rows, FP8 prefill) and the
#                   one-CTA candidates' B=16 paged row unsplit (the plan's
#                   uneven-keys rule splits it 5 ways)
#                3. timeline.py --groups decode --peers 0 --kv-dtype e4m3:
#                   the default and round 1's best candidate (CUPTI spans:
#                   forward, combine, gaps; the plan's tile and splits)
#                Under 4 minutes (later steps skip on time).
#   (unset)      both
#
# Logs in $OUT (else ./fp8dec4-out), six files at most: summary.txt,
# build.log, tests.log, bench.log, timeline.log. summary.txt ends with a
# table: tile x row, of copy, rounds 1 / 2.
#
# What it should show: every step rc=0 and "0 failed"; the bar is 0.90 of
# copy for BF16 q e4m3 and e5m2 at B=1 and B=16, paged ps64 not below the
# default's.
set -u -o pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out=${OUT:-$root/fp8dec4-out}
mkdir -p "$out"
bdir=${FP8DEC4_BUILD_DIR:-/tmp/fp8dec4-build}
summary="$out/summary.txt"
touch "$summary"
status=0
stage=${STAGE:-all}
command -v nvcc >/dev/null 2>&1 || export PATH="/usr/local/cuda/bin:$PATH"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# shellcheck source=tools/device/steps.sh
. "$root/tools/device/steps.sh"
STEP_TIMEOUT=120
STEP_PATTERN='ERROR:|error:|\[doctest\] (test cases|assertions)|MESSAGE|cases,|FAIL'
STEP_LINES=16

tiles=(default 64.3.4.4 128.3.2.4 256.1.3.8 192.1.4.12 256.1.3.16 128.2.3.4)
one_cta=(256.1.3.8 192.1.4.12 256.1.3.16)

note "fp8dec4.sh stage=$stage $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'), build dir $bdir"
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
    echo "sm80 units: compile s, object bytes"
    awk -F'\t' '$4 ~ /sm80\/fwd_.*\.cu\.o$/ {t[$4] = ($2 - $1) / 1000.0} END {for (o in t) print o, t[o]}' \
      "$bdir/.ninja_log" | sort |
      while read -r obj secs; do echo "$(basename "$obj") $secs $(stat -c %s "$bdir/$obj" 2>/dev/null || echo '?')"; done
  } 2>&1 | sed 's/^/    /' | tee -a "$summary"
fi
[[ $stage == build ]] && exit 0

t_run=$SECONDS
left() { echo $((230 - (SECONDS - t_run))); }
cap() { local l; l=$(left); ((l < 10)) && l=10; ((l > $1)) && l=$1; echo "$l"; }  # a step's timeout, at most $1
tg="$bdir/tests/test_gpu"
bench=$(find "$bdir" -name bench_cuda -type f -perm -u+x | head -1)
lib=$(find "$bdir" -name 'libfmha.so' | head -1)
if [[ ! -x $tg || -z $bench ]]; then
  note "no test_gpu / bench_cuda under $bdir: run STAGE=build first"
  exit 1
fi
: >"$out/tests.log"
: >"$out/bench.log"
: >"$out/timeline.log"

# 1. Tests. The default tiles: every FP8 case; the 16-bit decode / serving /
# split groups once.
run_tests() {  # name, env..., -- test_gpu arguments
  local name=$1
  shift
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  STEP_TIMEOUT=$(cap 90) step "$name" "$scratch/one" env "${envs[@]}" "$tg" "$@" || status=1
  cat "$scratch/one" >>"$out/tests.log"
}
run_tests fp8_default FMHA_SM80_FP8KV_TILE= -- -tc="sm80 FP8*"
run_tests decode16 FMHA_TEST_QUICK=2 -- \
  -tc="serving: decode*,serving: paged decode pipeline*,serving: softcap decode*,back-to-back split decode*,serving: decode of one long*"
fp8_cases="sm80 FP8 K/V: decode*,sm80 FP8 K/V: every*,sm80 FP8 K/V: a non-finite*,sm80 FP8 K/V: negative*,sm80 FP8 K/V: a BF16 q*"
for t in "${tiles[@]:1}"; do
  if (($(left) < 150)); then
    note "candidate tests from $t on: skipped (time)"
    break
  fi
  run_tests "tests_$t" FMHA_SM80_FP8KV_TILE="$t" FMHA_TEST_QUICK=4 -- -tc="$fp8_cases"
done
note "tests done at $((SECONDS - t_run)) s"

# 2. fp8kv, interleaved. summary lines: "tile r<round> <row> <of copy> <args>".
fp8_rows='bf16 q, e4m3|bf16 q, e5m2|f16 q, e4m3|f16 q, e5m2'
bench_tile() {  # tile, round, extra bench arguments...
  local tile=$1 round=$2
  shift 2
  echo "== tile $tile round $round: $*" >>"$out/bench.log"
  local envs=(FMHA_SM80_FP8KV_TILE=)
  [[ $tile == default ]] || envs=(FMHA_SM80_FP8KV_TILE="$tile")
  env "${envs[@]}" timeout 60 "$bench" --suite fp8kv --kernels cuda_sm80_tc --no-check "$@" >"$scratch/b" 2>&1 ||
    status=1
  cat "$scratch/b" >>"$out/bench.log"
  # "$scratch/rows": tile, round, row, of copy, whether splits were forced (tab-separated).
  local forced=auto
  [[ $* == *--splits* ]] && forced=forced
  awk -F'|' -v t="$tile" -v r="$round" -v a="$forced" \
    '/^\| B=/ {gsub(/^ +| +$/, "", $2); gsub(/^ +| +$/, "", $6); printf "%s\t%s\t%s\t%s\t%s\n", t, r, $2, $6, a}' \
    "$scratch/b" >>"$scratch/rows"
}
: >"$scratch/rows"
note "fp8kv: the decode rows of copy are in the table at the end (bench.log has them all)"
bench_tile default 1  # the whole suite once: BF16 K/V rows, FP8 prefill
grep -E '^\| prefill' "$scratch/b" | sed 's/^/    default r1 /' | tee -a "$summary"
for t in "${tiles[@]:1}"; do bench_tile "$t" 1 --case "$fp8_rows"; done
for t in "${one_cta[@]}"; do bench_tile "$t" 1 --splits 1 --case 'B=16 Nk=8192 bf16 q, e4m3 K/V paged'; done
note "fp8kv round 1 done at $((SECONDS - t_run)) s"
if (($(left) > 60)); then
  for t in "${tiles[@]}"; do bench_tile "$t" 2 --case "$fp8_rows"; done
else
  note "fp8kv round 2: skipped (time)"
fi
# Round 1's best tile: the highest mean of its BF16 q e4m3 rows at B=1 and
# B=16 (contiguous, automatic splits).
best=$(awk -F'\t' '$2 == 1 && $3 ~ /bf16 q, e4m3 K\/V$/ && $5 == "auto" {s[$1] += $4; n[$1]++}
  END {b = ""; for (t in s) if (n[t] == 2 && (b == "" || s[t] > s[b])) b = t; print b}' "$scratch/rows")
note "round 1's best tile (BF16 q e4m3, mean of B=1 and B=16): ${best:-?}"

# 3. CUPTI timelines of the default and the best tile.
tl_tiles=(default)
[[ -n $best && $best != default ]] && tl_tiles+=("$best")
for t in "${tl_tiles[@]}"; do
  if (($(left) < 25)); then
    note "timeline $t: skipped (time)"
    continue
  fi
  envs=(FMHA_SM80_FP8KV_TILE=)
  [[ $t == default ]] || envs=(FMHA_SM80_FP8KV_TILE="$t")
  STEP_TIMEOUT=$(cap 60) STEP_PATTERN='call span|splits=0: plan|gap' STEP_LINES=20 \
    step "timeline_$t" "$scratch/one" env "${envs[@]}" python3 "$root/tests/perf/timeline.py" --lib "$lib" \
    --groups decode --peers 0 --kv-dtype e4m3 || status=1
  cat "$scratch/one" >>"$out/timeline.log"
done

# The table: a line per row, a column per tile, of copy "round 1 / round 2"
# (automatic splits; "unsplit" rows forced --splits 1).
python3 - "$scratch/rows" <<'EOF' | tee -a "$summary"
import sys
vals, rows, tiles = {}, [], []
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    if len(f) != 5:
        continue
    tile, rnd, row, val, splits = f
    row += " (unsplit)" if splits == "forced" else ""
    rows += [row] if row not in rows else []
    tiles += [tile] if tile not in tiles else []
    vals.setdefault((row, tile), {})[rnd] = val
print("\n| row | " + " | ".join(tiles) + " |")
print("|---|" + "---|" * len(tiles))
for row in rows:
    cells = [" / ".join(vals[(row, t)].get(r, "-") for r in "12") if (row, t) in vals else "" for t in tiles]
    print(f"| {row} | " + " | ".join(cells) + " |")
EOF
note "run $((SECONDS - t_run)) s, status $status"
exit $status
