#!/usr/bin/env bash
# Issue 8, second pass, second checkpoint, on the GPU, from the repository
# root on the device machine (logs under $OUT, else ./i8c-out; 5 files): two
# candidates of cuda_sm90_ws's plain kernels against main's kernel,
#   - D=256 on 128 x 80 tiles (FMHA_SM90_D256_BLOCK_N=80; the first
#     checkpoint measured it only on top of the early tile claim, which lost
#     5-7% at D=256 itself: rc80 / rc +4.3% at N=8192, +0.6% at 2048),
#   - the work tile published by the producer (FMHA_SM90_PUBLISH_TILE=1):
#     the consumers stop re-deriving it (four 64-bit division calls, ~400
#     instructions between Q's arrival and the first Q K^T of every tile).
#
#   build.log    one tree (Release, 90-real; sm90 instances f16:128,
#                bf16:128, f16:256, bf16:256; sm80 f16:128; -Xptxas -v),
#                built once per variant (the reconfigure rebuilds the sm90
#                units), each variant's libfmha.so kept under
#                build-i8c/var/<v>:
#                  m    main's kernel (D=256 tiles of 64 keys, no publishing)
#                  m80  FMHA_SM90_D256_BLOCK_N=80
#                  p80  m80 and FMHA_SM90_PUBLISH_TILE=1 (the candidate default)
#                and the summary counts C7514 (serialized wgmma) and shows
#                the plain kernels' spills per variant
#   tests.log    test_sm90, then on p80 test_gpu's case matrix (every kernel),
#                the persistent-CTA case (144-216 work tiles, partial key
#                tiles), NaN in V, key tiles never read, bitwise repeat and
#                the serving cases (ragged, seqused_k, paged: the published
#                tile carries the sequence extents); failures that only say
#                an instance is missing from this build's reduced lists are
#                counted apart
#   bench.log    bench_cuda --kernels cuda_sm90_ws --suite seed,noncausal,bf16,
#                d256,gqa --n 2048,8192, m / m80 / p80 in 3 interleaved rounds
#                (errors checked in round 1)
#   compare.log  compare_torch.py on p80 (groups causal, noncausal, gqa,
#                d256), then --groups d256 on m (cuDNN in the same process)
#
# STAGE=build: configure and build only; STAGE=run: run what was built;
# unset: both. JOBS (default 16): build parallelism.
# What it should show: rc=0 for build, test_sm90 and compare; test_gpu's
# failures all "instance missing"; C7514 0; a table of TFLOP/s per shape
# (rounds 1 / 2 / 3), m80 / m, p80 / m80 and cuDNN / fmha.
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
STEP_PATTERN='ERROR:|\[doctest\] (test cases|assertions)|^== |^instance-list'
STEP_LINES=24

configure() {  # configure D256_BLOCK_N PUBLISH_TILE
  cmake -S "$root" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFMHA_BUILD_TESTS=ON -DFMHA_BUILD_EXAMPLES=OFF \
    -DFMHA_BUILD_BENCHMARKS=ON -DFMHA_BUILD_PYTHON=OFF -DFMHA_BUILD_RUST=OFF -DCMAKE_CUDA_ARCHITECTURES=90-real \
    "-DFMHA_SM90_INSTANCES=f16:128;bf16:128;f16:256;bf16:256" "-DFMHA_SM80_INSTANCES=f16:128" \
    "-DFMHA_SM90_D256_BLOCK_N=$1" "-DFMHA_SM90_PUBLISH_TILE=$2" "-DCMAKE_CUDA_FLAGS=-Xptxas=-v"
}
variant() {  # variant NAME D256_BLOCK_N PUBLISH_TILE TARGETS...
  local name=$1 n=$2 pub=$3
  shift 3
  echo "== variant $name: FMHA_SM90_D256_BLOCK_N=$n FMHA_SM90_PUBLISH_TILE=$pub"
  configure "$n" "$pub" >/dev/null && cmake --build "$bdir" -j"${JOBS:-16}" --target "$@" || return 1
  rm -rf "$bdir/var/$name" && mkdir -p "$bdir/var/$name" && cp -a "$bdir"/src/libfmha.so* "$bdir/var/$name/"
}
build() {
  variant m 64 0 fmha && variant m80 80 0 fmha && variant p80 80 1 fmha bench_cuda test_sm90 test_gpu
}
spills() {  # the plain kernels' spills (ScoreOps 0 = kNone) per variant
  python3 - "$1" <<'PY'
import re, sys
name, var = None, "?"
for line in open(sys.argv[1]):
    v = re.match(r"== variant (\w+)", line)
    if v:
        var = v.group(1)
        continue
    m = re.search(r"Compiling entry function '_ZN4fmha4cuda4sm9010fwd_kernelI(\w+?)NS1_10TileConfigILi(\d+)ELi(\d+)E.*ScoreOpsE0ELb(\d)E", line)
    if m:
        name = f"{var}: {'f16' if 'half' in m.group(1) else 'bf16'} D{m.group(2)} N{m.group(3)} serving={m.group(4)}"
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
  echo "== test_gpu (p80)"
  LD_LIBRARY_PATH="$bdir/var/p80" "$bdir/tests/test_gpu" \
    -tc="every CUDA kernel over the case matrix,cuda_sm90_ws: persistent*,a NaN in V*,key tiles outside*,two runs are bitwise equal,serving: ragged*,serving: seqused_k*,serving: paged K/V*" ||
    rc=1
  return $rc
}
benches() {
  local rc=0 round v chk
  for round in 1 2 3; do
    for v in m m80 p80; do
      chk=--no-check
      [ "$round" = 1 ] && chk=""
      echo "== round $round variant $v"
      LD_LIBRARY_PATH="$bdir/var/$v" "$bench_bin" --suite seed,noncausal,bf16,d256,gqa --kernels cuda_sm90_ws \
        --n 2048,8192 $chk |
        grep -E '^\| [a-z0-9]+ \| cuda_sm90_ws|FAIL' || rc=1
    done
  done
  return $rc
}
compare() {
  local rc=0 v
  echo "== compare_torch on p80"
  python3 "$root/tests/perf/compare_torch.py" --lib "$bdir/var/p80/libfmha.so" --kernels cuda_sm90_ws \
    --groups causal,noncausal,gqa,d256 --max-n 8192 --quiet || rc=1
  echo "== compare_torch on m"
  python3 "$root/tests/perf/compare_torch.py" --lib "$bdir/var/m/libfmha.so" --kernels cuda_sm90_ws \
    --groups d256 --quiet || rc=1
  return $rc
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

step bench "$out/bench.log" bash "$self" __benches || status=1

# Per shape: TFLOP/s of m, m80 and p80 in rounds 1 / 2 / 3, m80 / m and
# p80 / m80 by the means, and cuDNN / fmha (the bench's stored cuDNN times).
python3 - "$out/bench.log" <<'PY' | tee -a "$summary"
import re, sys
rows, order = {}, []
cur = None
for line in open(sys.argv[1]):
    m = re.match(r"== round (\d) variant (\S+)", line)
    if m:
        cur = (int(m.group(1)), m.group(2))
        continue
    if not line.startswith("| ") or cur is None: continue
    f = [x.strip() for x in line.strip().strip("|").split("|")]
    key = f"{f[0]} {f[2]} B{f[3]} H{f[4]} N{f[5]}/{f[6]} D{f[7]} {f[8]}"
    if key not in rows: rows[key] = {}; order.append(key)
    try: cud = float(f[16])
    except ValueError: cud = None
    rows[key].setdefault(cur[1], {})[cur[0]] = (float(f[10]), cud, f[13])
vs = ("m", "m80", "p80")
print("| shape | m | m80 | p80 | m80 / m | p80 / m80 | p80 / m | cuDNN / fmha m, p80 | rel_l2 m, p80 |")
print("|---|---|---|---|---|---|---|---|---|")
for k in order:
    r = rows[k]
    mean = {v: sum(x[0] for x in r[v].values()) / len(r[v]) for v in vs if r.get(v)}
    def cell(v): return " / ".join(f"{r[v][i][0]:.1f}" for i in sorted(r.get(v, {})))
    def cud(v):
        vals = [x[1] * mean[v] / x[0] for x in r.get(v, {}).values() if x[1]]
        return f"{vals[0]:.3f}" if vals else "-"
    ratio = lambda a, b: f"{mean[a] / mean[b]:.3f}" if a in mean and b in mean else "-"
    err = lambda v: r.get(v, {}).get(1, (0, 0, "-"))[2]
    print(f"| {k} | {cell('m')} | {cell('m80')} | {cell('p80')} | {ratio('m80', 'm')} | {ratio('p80', 'm80')} | "
          f"{ratio('p80', 'm')} | {cud('m')}, {cud('p80')} | {err('m')}, {err('p80')} |")
PY

STEP_PATTERN='^B[0-9]+ H|MISMATCH|Error|^== ' STEP_LINES=16 step compare "$out/compare.log" bash "$self" __compare || status=1
note "status $status"
exit $status
