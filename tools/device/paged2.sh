#!/usr/bin/env bash
# A checkpoint record (tools/device/README.md): since issue9-paged3 the
# experiments build has only the candidates 32.4.3 and 16.7.3; the others
# named below fall back to the default tile. tools/device/paged3.sh is the
# newer script.
#
# Issue 9: paged K/V decode at parity with contiguous on cuda_sm80_tc
# (branch issue9-paged2), from the repository root on the H200 (logs under
# $OUT, else ./paged2-out). STAGE=build: configure and build only; STAGE=run:
# run what the build stage built; unset: both. Build with -j${JOBS:-16}; every
# run step is guarded by the elapsed time: the run stage ends within ~95 s.
#
#   build: fmha, test_gpu and bench_cuda (Release, sm_90 machine code;
#     cuda_sm80_tc and cuda_sm90_ws f16/bf16 D=128, what the decode test
#     groups use) with FMHA_SM80_DECODE_EXPERIMENTS=ON: the D=128 plain
#     kernels also hold the candidate decode tiles that FMHA_SM80_PAGED_TILE
#     / FMHA_SM80_STREAM_TILE pick at run time ("kBlockN.CTAs.stages":
#     64.3.2 = the decode tile before this branch, 32.4.3 = the default
#     since the checkpoint run (paged and contiguous), 32.3.4, 16.3.8,
#     16.6.4, 64.2.3; 32.6.2 and 16.7.3 not yet run)
#   run:
#   1. bench_cuda --suite serving --splits 0 (the decode cases, automatic
#      splits) for each candidate as both the paged and the contiguous tile,
#      then the whole serving suite once on the defaults (prefill rows too)
#   2. test_gpu's D=128 decode groups, one step each ("paged decode
#      pipeline": page sizes 8-256, fewer keys than the stages hold, 0-40
#      splits, softcap; "paged gather edges"; "decode"), every kernel forced
#      and automatic against the float64 reference; the pipeline group again
#      on 16.3.8 (paged) / 32.4.3 (contiguous)
#   3. while time lasts: a second bench round, the default tiles at forced
#      splits 3 and 8
#   summary.txt ends with the table of the candidates (median ms of the
#   rounds; paged / contiguous against the 64.3.2 contiguous row).
#
# What it should show: every step rc=0, "0 failed" in the doctest totals;
# the checkpoint run at 53008fe (docs/performance.md, "Paged decode with more
# tiles in flight") had, on 32.4.3, paged / contiguous 0.950 / 0.969 at B=1
# (page_size 16 / 64), 0.958 / 0.965 at B=16, 0.846 / 0.899 at B=64 mixed,
# contiguous 0.958 / 0.986 / 0.940 of copy; 64.3.2 0.82-0.88, 0.81-0.88,
# 0.68-0.74 and 0.941 / 0.978 / 0.936.
set -u -o pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out=${OUT:-$root/paged2-out}
mkdir -p "$out"
bdir=${PAGED2_BUILD_DIR:-$root/build}
stage=${STAGE:-all}
summary="$out/summary.txt"
[ "$stage" = run ] || : >"$summary"
status=0
command -v nvcc >/dev/null 2>&1 || export PATH="/usr/local/cuda/bin:$PATH"

# shellcheck source=tools/device/steps.sh
. "$root/tools/device/steps.sh"

note "paged2.sh STAGE=$stage $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')," \
  "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"

if [ "$stage" != run ]; then
  STEP_TIMEOUT=600
  STEP_PATTERN='error:|FAILED|CMake Error'
  step configure "$out/build.log" cmake -S "$root" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DFMHA_BUILD_TESTS=ON -DFMHA_BUILD_EXAMPLES=OFF -DFMHA_BUILD_BENCHMARKS=ON -DFMHA_BUILD_PYTHON=OFF \
    -DFMHA_BUILD_RUST=OFF -DCMAKE_CUDA_ARCHITECTURES=90-real -DFMHA_SM80_DECODE_EXPERIMENTS=ON \
    "-DFMHA_SM80_INSTANCES=f16:128;bf16:128" "-DFMHA_SM90_INSTANCES=f16:128;bf16:128" ||
    exit 1
  step build "$out/build2.log" cmake --build "$bdir" -j"${JOBS:-16}" --target fmha test_gpu bench_cuda || {
    tail -40 "$out/build2.log" >>"$summary"
    cat "$out/build2.log" >>"$out/build.log" && rm -f "$out/build2.log"
    exit 1
  }
  cat "$out/build2.log" >>"$out/build.log" && rm -f "$out/build2.log"
fi
[ "$stage" = build ] && exit 0

tests="$bdir/tests/test_gpu"
bench=$(find "$bdir" -name bench_cuda -type f -perm -u+x | head -1)
if [ ! -x "$tests" ] || [ -z "$bench" ]; then
  note "missing test_gpu or bench_cuda under $bdir: run STAGE=build first"
  exit 1
fi
t0=$SECONDS
left() { [ $((SECONDS - t0)) -lt "$1" ]; }  # elapsed run time under $1 s

# 1. The bench first: every run appends to bench.log.
STEP_TIMEOUT=20
STEP_PATTERN='copy bandwidth [0-9]'
STEP_LINES=1
: >"$out/bench.log"
bench_step() {  # name paged_tile stream_tile args...
  local name=$1 pt=$2 st=$3
  shift 3
  echo "## tiles paged=$pt stream=$st args=$*" >>"$out/bench.log"
  FMHA_SM80_PAGED_TILE=$pt FMHA_SM80_STREAM_TILE=$st step "$name" "$out/bench_run.log" "$bench" --suite serving "$@" ||
    status=1
  cat "$out/bench_run.log" >>"$out/bench.log" && rm -f "$out/bench_run.log"
}
tiles="64.3.2 32.3.4 16.3.8 32.4.3 16.6.4 64.2.3 32.6.2 16.7.3"
for x in $tiles; do
  left 55 || { note "stopped before the bench of $x"; break; }
  bench_step "bench-$x" "$x" "$x" --splits 0
done
left 60 && bench_step bench-default-full default default

# 2. The decode tiles' test groups (D=128: the decode cases, the paged
#    gather edges, the paged decode pipeline), default tiles, one step each
#    so that a slow or stuck group is named.
STEP_PATTERN='ERROR:|\[doctest\] (test cases|assertions)|cases;|FAIL'
STEP_LINES=12
: >"$out/tests.log"
test_step() {  # name seconds filter [paged stream]
  local name=$1 secs=$2 filter=$3 pt=${4:-default} st=${5:-default}
  left $((95 - secs)) || { note "stopped before $name"; return 0; }
  STEP_TIMEOUT=$secs
  FMHA_SM80_PAGED_TILE=$pt FMHA_SM80_STREAM_TILE=$st step "$name" "$out/tests_run.log" "$tests" -d -tc="$filter" ||
    status=1
  cat "$out/tests_run.log" >>"$out/tests.log" && rm -f "$out/tests_run.log"
}
test_step tests-pipeline 20 "serving: paged decode pipeline*"
test_step tests-edges 15 "serving: paged gather edges*"
test_step tests-decode 15 "serving: decode*"
test_step tests-pipeline-16.3.8 15 "serving: paged decode pipeline*" 16.3.8 32.4.3

# 3. While time lasts: a second bench round, the mixed batch at forced
#    splits on the default tiles.
STEP_TIMEOUT=20
STEP_PATTERN='copy bandwidth [0-9]'
STEP_LINES=1
for x in $tiles; do
  left 88 || { note "stopped before the second bench of $x"; break; }
  bench_step "bench-$x-r2" "$x" "$x" --splits 0
done
for s in 3 8; do
  left 92 || { note "stopped before --splits $s"; break; }
  bench_step "bench-default-splits$s" default default --splits "$s"
done

# The candidates side by side: median ms of the rounds per (case, tiles,
# splits); paged / contiguous against 64.3.2's contiguous row of the same
# batch; contiguous against the copy bandwidth.
python3 "$root/tools/device/paged2_table.py" "$out/bench.log" >>"$summary"
note "status $status ($((SECONDS - t0)) s of runs)"
exit $status
