#!/usr/bin/env bash
# Issue 8, second pass (branch issue8-sm90c): cuda_sm90_ws's plain kernels as
# the branch leaves them (the producer's work tile published to the
# consumers; the dense D=256 kernel on 128 x 80 tiles), checked and timed on
# the GPU from the repository root on the device machine (logs under $OUT,
# else ./i8c-out; 5 files). The two checkpoint runs that chose these timed
# knobs that are gone now (docs/performance.md, "Issue 8, second pass").
#
#   build.log    one tree (Release, 90-real; sm90 instances f16:64, f16:128,
#                bf16:128, f16:256, bf16:256; sm80 f16:128; -Xptxas -v); the
#                summary counts C7514 (serialized wgmma) and shows the plain
#                kernels' spills
#   tests.log    test_sm90, then test_gpu's case matrix (every kernel), the
#                persistent-CTA case (144-216 work tiles, partial key tiles of
#                64, 80 and 128 keys), NaN in V, key tiles never read, bitwise
#                repeat and the serving groups (the published tile carries a
#                sequence's extents; the paged group runs D=256 too); failures
#                that only say an instance is missing from this build's
#                reduced lists are counted apart
#   bench.log    bench_cuda --kernels cuda_sm90_ws --suite seed,noncausal,bf16,
#                d64,d256,gqa --n 2048,8192, 2 rounds
#   compare.log  compare_torch.py --groups causal,noncausal,gqa,d64,d256
#                --max-n 8192 (cuDNN in the same process)
#
# STAGE=build: configure and build only; STAGE=run: run what was built;
# unset: both. JOBS (default 16): build parallelism.
# What it should show: rc=0 for build, test_sm90, bench and compare; test_gpu's
# failures all "instance missing"; C7514 0; compare's "vs cudnn" column.
set -u -o pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out=${OUT:-$root/i8c-out}
mkdir -p "$out"
bdir=${I8C_BUILD_DIR:-$root/build-i8c}
summary="$out/summary.txt"
stage=${STAGE:-all}
status=0
self="$root/tools/device/i8c.sh"
command -v nvcc >/dev/null 2>&1 || export PATH="/usr/local/cuda/bin:$PATH"

# shellcheck source=tools/device/steps.sh
. "$root/tools/device/steps.sh"
STEP_TIMEOUT=300
STEP_PATTERN='ERROR:|\[doctest\] (test cases|assertions)|^== '
STEP_LINES=24

build() {
  cmake -S "$root" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFMHA_BUILD_TESTS=ON -DFMHA_BUILD_EXAMPLES=OFF \
    -DFMHA_BUILD_BENCHMARKS=ON -DFMHA_BUILD_PYTHON=OFF -DFMHA_BUILD_RUST=OFF -DCMAKE_CUDA_ARCHITECTURES=90-real \
    "-DFMHA_SM90_INSTANCES=f16:64;f16:128;bf16:128;f16:256;bf16:256" "-DFMHA_SM80_INSTANCES=f16:128" \
    "-DCMAKE_CUDA_FLAGS=-Xptxas=-v" >/dev/null &&
    cmake --build "$bdir" -j"${JOBS:-16}" --target fmha bench_cuda test_sm90 test_gpu
}
spills() {  # the plain kernels' spills (ScoreOps 0 = kNone)
  python3 - "$1" <<'PY'
import re, sys
name = None
for line in open(sys.argv[1]):
    m = re.search(r"Compiling entry function '_ZN4fmha4cuda4sm9010fwd_kernelI(\w+?)NS1_10TileConfigILi(\d+)ELi(\d+)E.*ScoreOpsE0ELb(\d)E", line)
    if m:
        name = f"{'f16' if 'half' in m.group(1) else 'bf16'} D{m.group(2)} N{m.group(3)} serving={m.group(4)}"
        continue
    if name and "spill" in line:
        print(f"  {name}: {line.strip()}")
        name = None
PY
}
bench_bin=$bdir/tests/perf/bench_cuda
[ -x "$bench_bin" ] || bench_bin=$(find "$bdir" -name bench_cuda -type f -perm -u+x 2>/dev/null | head -1)
tests() {
  local rc=0
  echo "== test_sm90"
  "$bdir/tests/test_sm90" || rc=1
  echo "== test_gpu"
  "$bdir/tests/test_gpu" \
    -tc="every CUDA kernel over the case matrix,cuda_sm90_ws: persistent*,a NaN in V*,key tiles outside*,two runs are bitwise equal,serving: ragged*,serving: seqused_k*,serving: paged K/V*" ||
    rc=1
  return $rc
}
benches() {
  local rc=0 round chk
  for round in 1 2; do
    chk=--no-check
    [ "$round" = 1 ] && chk=""
    echo "== round $round"
    "$bench_bin" --suite seed,noncausal,bf16,d64,d256,gqa --kernels cuda_sm90_ws --n 2048,8192 $chk |
      grep -E '^\| [a-z0-9]+ \| cuda_sm90_ws|FAIL' || rc=1
  done
  return $rc
}
compare() {
  python3 "$root/tests/perf/compare_torch.py" --lib "$bdir/src/libfmha.so" --kernels cuda_sm90_ws \
    --groups causal,noncausal,gqa,d64,d256 --max-n 8192 --quiet
}
# The steps run under timeout (steps.sh), which runs programs, not shell
# functions: each step runs this script again with the function's name.
case ${1:-} in
  __build | __tests | __benches | __compare)
    "${1#__}"
    exit
    ;;
esac

[ "$stage" = run ] || : >"$summary"
note "i8c.sh $(date -u '+%Y-%m-%d %H:%M UTC') stage $stage, commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
if [ "$stage" != run ]; then
  t0=$SECONDS
  STEP_PATTERN='error:|^== ' step build "$out/build.log" bash "$self" __build || {
    grep -E "error" "$out/build.log" | head -20 | tee -a "$summary"
    exit 1
  }
  note "build: $((SECONDS - t0)) s; C7514 (serialized wgmma) lines: $(grep -c C7514 "$out/build.log")"
  spills "$out/build.log" | sort -u | tee -a "$summary"
  [ "$stage" = build ] && exit 0
fi

step tests "$out/tests.log" bash "$self" __tests || status=1
note "instance-list failures (this build's reduced lists): $(grep -cE "does not run|not instantiated" "$out/tests.log") report lines; ERROR lines: $(grep -c "ERROR:" "$out/tests.log")"

STEP_PATTERN='^\| [a-z0-9]+ \| cuda_sm90_ws|FAIL|^== ' STEP_LINES=40 step bench "$out/bench.log" bash "$self" __benches ||
  status=1

STEP_PATTERN='^B[0-9]+ H|MISMATCH|Error' STEP_LINES=16 step compare "$out/compare.log" bash "$self" __compare || status=1
note "status $status"
exit $status
