#!/usr/bin/env bash
# Issue 9: the 16-bit key-warp decode tile as cuda_sm80_tc's default (contiguous
# and paged, own keys: each key warp copies its own share of every tile), branch
# issue9-keywarp, from the repository root on the H200. Logs under $OUT (else
# ./keywarp2-out), at most 6 files: summary.txt, build.log, tests.log, bench.log,
# perf.log, sweep.log. STAGE=build: configure and build only; STAGE=run: run
# what the build stage built; unset: both. Build dir $KEYWARP2_BUILD_DIR (default
# /tmp/fmha-keywarp2-build, outside the repository), -j${JOBS:-16}.
#
#   build: fmha, test_gpu, test_internal, bench_cuda (Release, sm_90 machine
#     code; cuda_sm80_tc f16/bf16 D=128 and bf16 D=64 / D=256, whose decode
#     tiles are key-warp tiles now too; cuda_sm90_ws f16/bf16 D=128) with
#     FMHA_SM80_DECODE_EXPERIMENTS=ON, so that FMHA_SM80_STREAM_TILE (contiguous)
#     and FMHA_SM80_PAGED_TILE (paged) force a D=128 decode tile by name (both
#     set alike here): 128.1.3.4c = the default's tile with the CTA's shared
#     copies (the 2026-12-02 run's), 128.1.3.8 = 8 key warps of 16 keys,
#     64.2.3.4 / 64.2.3.2 = 64 keys over 4 / 2 key warps, 2 CTAs per SM; 32.4.3
#     = the one-warp tile before (NarrowCompact), 16.7.3 = NarrowPagedMany before,
#     narrow = the head dim's one-warp Narrow tile (D=64 / D=256's decode tile before)
#   run (every step guarded by the elapsed time; the run stage ends within ~230 s):
#   1. test_gpu's decode, serving, paged, NaN-in-V, band, back-to-back, repeat
#      and case-matrix groups on the default tiles; test_internal's choose_splits
#   2. bench_cuda --suite serving --splits 0 (decode: B=1 Nk=131072, B=16
#      Nk=8192, the mixed B=64 batch; contiguous, paged ps16 / ps64 shuffled,
#      ps16 in order) on the default and on each key-warp candidate; the
#      candidate with the least total time of those rows is "best"
#   3. test_gpu's decode groups with each candidate forced (FMHA_TEST_QUICK=2)
#   4. two interleaved rounds, default and best: timeline.py --groups decode
#      --peers 0 (CUPTI call spans), compare_torch.py --groups decode
#      --kernels cuda_sm80_tc (fmha against cuDNN / FA2 in one process), and
#      (round 2) bench_cuda's serving decode again
#   5. B=1 Nk=131072 split sweep on the default tile: timeline.py --splits
#      0,16,24,33,66 --min-n 131072; bench_cuda --splits 24, 33 (paged / contiguous)
#   6. while time lasts: BF16 K/V decode at D=64 and D=256 (bench_cuda --suite
#      fp8kv --d D --case 'bf16 K/V', B=1 Nk=131072 / B=16 Nk=8192), default
#      against narrow; bench_cuda on 32.4.3 and 16.7.3 forced
#   summary.txt ends with a table: per tile, the bench rows (median ms;
#   contiguous [share of copy], paged [speed / contiguous]), then the call spans
#   and the fmha / cuDNN rows of compare_torch.
#
# What it should show: rc=0 everywhere, "0 failed"; the prediction is in
# docs/performance.md, "Key-warp decode tiles by default" (B=16 contiguous
# unsplit ~121-123 us span, paged within 0.95-0.99 of it; B=1 16 splits).
set -u -o pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out=${OUT:-$root/keywarp2-out}
mkdir -p "$out"
bdir=${KEYWARP2_BUILD_DIR:-/tmp/fmha-keywarp2-build}
stage=${STAGE:-all}
summary="$out/summary.txt"
tmp_dir=$(mktemp -d)  # a step's own log before it joins one of the six
trap 'rm -rf "$tmp_dir"' EXIT
[ "$stage" = run ] || : >"$summary"
status=0
command -v nvcc >/dev/null 2>&1 || export PATH="/usr/local/cuda/bin:$PATH"
# shellcheck source=tools/device/steps.sh
. "$root/tools/device/steps.sh"
note "keywarp2.sh STAGE=$stage $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')," \
  "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"

if [ "$stage" != run ]; then
  STEP_TIMEOUT=900
  STEP_PATTERN='error:|FAILED|CMake Error'
  step configure "$out/build.log" cmake -S "$root" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DFMHA_BUILD_TESTS=ON -DFMHA_BUILD_EXAMPLES=OFF -DFMHA_BUILD_BENCHMARKS=ON -DFMHA_BUILD_PYTHON=OFF \
    -DFMHA_BUILD_RUST=OFF -DCMAKE_CUDA_ARCHITECTURES=90-real -DFMHA_SM80_DECODE_EXPERIMENTS=ON \
    "-DFMHA_SM80_INSTANCES=f16:128;bf16:128;bf16:64;bf16:256" "-DFMHA_SM90_INSTANCES=f16:128;bf16:128" || exit 1
  step build "$tmp_dir/build.log" cmake --build "$bdir" -j"${JOBS:-16}" --target fmha test_gpu test_internal bench_cuda
  rc=$?
  cat "$tmp_dir/build.log" >>"$out/build.log"
  if [ $rc -ne 0 ]; then
    grep -E 'error' "$out/build.log" | head -20 >>"$summary"
    exit 1
  fi
fi
[ "$stage" = build ] && exit 0

tests="$bdir/tests/test_gpu"
internal="$bdir/tests/test_internal"
bench=$(find "$bdir" -name bench_cuda -type f -perm -u+x | head -1)
lib=$(find "$bdir" -name 'libfmha.so' | head -1)
if [ ! -x "$tests" ] || [ -z "$bench" ] || [ -z "$lib" ]; then
  note "missing test_gpu, bench_cuda or libfmha.so under $bdir: run STAGE=build first"
  exit 1
fi
t0=$SECONDS
budget=${RUN_BUDGET:-230}
left() { [ $((SECONDS - t0)) -lt $((budget - $1)) ]; }  # at least $1 s of the budget left
candidates=${CANDIDATES:-128.1.3.4c 128.1.3.8 64.2.3.4 64.2.3.2}
: >"$out/tests.log"
: >"$out/bench.log"
: >"$out/perf.log"
: >"$out/sweep.log"

# tile_env TILE: the env(1) arguments that force both decode tiles to TILE ("default": neither).
tile_env() {
  if [ "$1" = default ]; then echo "env"; else echo "env FMHA_SM80_STREAM_TILE=$1 FMHA_SM80_PAGED_TILE=$1"; fi
}
# run_into LOG NAME TIMEOUT PATTERN LINES TILE CMD...: a guarded step whose log is appended to LOG.
run_into() {
  local log=$1 name=$2 secs=$3 pattern=$4 lines=$5 tile=$6
  shift 6
  left "$secs" || { note "stopped before $name (time)"; return 0; }
  echo "## tiles paged=$tile step=$name" >>"$log"
  local prefix
  read -r -a prefix <<<"$(tile_env "$tile")"
  local tmp_log
  tmp_log="$tmp_dir/$(basename "$log")"
  STEP_TIMEOUT=$secs STEP_PATTERN=$pattern STEP_LINES=$lines step "$name" "$tmp_log" "${prefix[@]}" "$@" || status=1
  cat "$tmp_log" >>"$log" && rm -f "$tmp_log"
}
test_pat='ERROR:|\[doctest\] (test cases|assertions)|cases;|FAIL'
bench_pat='copy bandwidth [0-9]'
tl_pat='call span'
ct_pat='^B[0-9]|K\+V TB/s|MISMATCH|_error'

# 1. Tests on the default tiles.
groups="serving:*,a NaN in V reaches*,key tiles outside*,back-to-back*,two runs are bitwise equal"
groups="$groups,every CUDA kernel over the case matrix"
run_into "$out/tests.log" tests-default 75 "$test_pat" 20 default "$tests" -tc="$groups"
run_into "$out/tests.log" tests-splits 10 "$test_pat" 4 default "$internal" -tc="choose_splits*"

# 2. The serving decode rows on the default and each candidate; the best candidate.
bench_run() {  # name tile args...
  local name=$1 tile=$2
  shift 2
  run_into "$out/bench.log" "$name" 25 "$bench_pat" 1 "$tile" "$bench" --suite serving "$@"
}
bench_run bench-default default --splits 0
for c in $candidates; do bench_run "bench-$c" "$c" --splits 0; done
best=$(python3 - "$out/bench.log" "$candidates" <<'EOF'
import re, sys
tot, tile = {}, None
for line in open(sys.argv[1]):
    m = re.match(r"## tiles paged=(\S+)", line)
    if m:
        tile = m.group(1)
    m = re.match(r"serving\s+cuda_sm80_tc\s+decode .*?\s+ms\s+([0-9.]+)", line)
    if m and tile in sys.argv[2].split():
        tot.setdefault(tile, []).append(float(m.group(1)))
full = {t: sum(v) for t, v in tot.items() if len(v) == max(len(x) for x in tot.values())}
print(min(full, key=full.get) if full else sys.argv[2].split()[0])
EOF
)
note "best candidate by bench round 1: $best"

# 3. The decode groups with each candidate forced (every third case).
cgroups="serving: decode*,serving: paged decode pipeline*,serving: key-warp decode tile*,a NaN in V reaches exactly the rows that see its key: decode*"
for c in $candidates; do
  run_into "$out/tests.log" "tests-$c" 25 "$test_pat" 8 "$c" env FMHA_TEST_QUICK=2 "$tests" -tc="$cgroups"
done

# 4. Two interleaved rounds, default and best.
for r in 1 2; do
  for tile in default "$best"; do
    run_into "$out/perf.log" "tl-$tile-$r" 30 "$tl_pat" 8 "$tile" python3 "$root/tests/perf/timeline.py" --lib "$lib" \
      --groups decode --peers 0
    run_into "$out/perf.log" "ct-$tile-$r" 40 "$ct_pat" 8 "$tile" python3 "$root/tests/perf/compare_torch.py" \
      --lib "$lib" --groups decode --kernels cuda_sm80_tc --quiet
    [ $r = 2 ] && bench_run "bench-$tile-r2" "$tile" --splits 0
  done
done

# 5. B=1's split count on the one-CTA tile (automatic: 16).
run_into "$out/sweep.log" sweep-tl-b1 30 "$tl_pat" 8 default python3 "$root/tests/perf/timeline.py" --lib "$lib" \
  --groups decode --peers 0 --splits 0,16,24,33,66 --min-n 131072
for s in 24 33; do
  run_into "$out/bench.log" "bench-default-s$s" 25 "$bench_pat" 1 default "$bench" --suite serving --splits "$s"
done

# 6. D=64 / D=256 BF16 K/V decode, key-warp default against the one-warp Narrow; the
#    D=128 one-warp tiles, for the record.
for d in 64 256; do
  for tile in default narrow; do
    run_into "$out/sweep.log" "d$d-$tile" 20 '\| B=' 4 "$tile" "$bench" --suite fp8kv --d "$d" --case 'bf16 K/V'
  done
done
for c in 32.4.3 16.7.3; do bench_run "bench-$c" "$c" --splits 0; done

{
  python3 "$root/tools/device/paged3_table.py" "$out/bench.log"
  echo
  echo "timeline call spans (us; tile per '## tiles' line):"
  grep -E '^## tiles|call span' "$out/perf.log" "$out/sweep.log" | sed -E 's/^[^:]*://; s/kernel\(s\) per call, //'
  echo
  echo "BF16 K/V decode at D=64 / D=256 (bench_cuda fp8kv rows: ms, K+V TB/s, of copy):"
  grep -E '^## tiles paged=\S+ step=d|^\| B=' "$out/sweep.log"
  echo
  echo "compare_torch (ms; speed = peer time / fmha time):"
  grep -E '^## tiles|^B[0-9]|K\+V TB/s|MISMATCH' "$out/perf.log" | head -60
} >>"$summary"
note "status $status ($((SECONDS - t0)) s of runs)"
exit $status
