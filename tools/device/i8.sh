#!/usr/bin/env bash
# Issue 8: cuda_sm90_ws's 16-bit plain kernel, the candidates of branch
# issue8-sm90 timed interleaved against main's kernel, on the GPU, from the
# repository root on the device machine (logs under $OUT, else ./i8-out;
# 4 files):
#
#   build.log  one tree (Release, 90-real; sm90 instances f16:128, bf16:128,
#              f16:64; sm80 f16:128; -Xptxas -v), built once per variant of
#              the sm90 knobs (a reconfigure rebuilds only what reads them),
#              each variant's libfmha.so kept under build-i8/var/<v>:
#                rd  FMHA_SM90_ROWSUM_MMA=1 FMHA_SM90_DESC_ADD32=1 (row sums
#                    on the P V MMA; wgmma descriptors advanced by 32-bit adds,
#                    2-consumer configs only: D=128, not D=64)
#                d   ROWSUM_MMA=0 DESC_ADD32=1
#                m   ROWSUM_MMA=0 DESC_ADD32=0 (main's kernel, but for the
#                    branch's int key-tile test, 8 instructions per tile)
#              and the summary counts C7514 (serialized wgmma) and shows the
#              plain kernels' spills per variant
#   tests.log  test_sm90 (the ones-tile row sum among them), then on rd with
#              FMHA_SM90_L2_BAND_MIB=32 (the candidate default) test_gpu's
#              cases that run cuda_sm90_ws's plain kernels (case matrix, NaN
#              in V, key tiles never read, serving, bitwise repeat, B x H
#              past a grid dimension)
#   bench.log  bench_cuda --suite seed,noncausal,bf16,d64,gqa --kernels
#              cuda_sm90_ws --n 8192,16384 (gqa: B1 Nq512 Nk16384, and B8
#              H32/8 N2048) per variant and L2 band budget
#              (FMHA_SM90_L2_BAND_MIB: the work order in bands of units whose
#              K/V fit it; 0 = main's order): m-b0 d-b0 rd-b0 rd-b32 rd-b16,
#              2 interleaved rounds (errors checked in round 1 for m-b0 and
#              rd-b32 only). D=64 takes neither the 32-bit advance nor
#              anything else of d, so its m-b0 / d-b0 pair is a noise check.
#
# STAGE=build: configure and build only; STAGE=run: run what was built;
# unset: both. JOBS (default 16): build parallelism.
# What it should show: rc=0 everywhere, "0 failed", C7514 0; then one table,
# TFLOP/s per shape and variant (rounds 1 / 2), the best variant over
# m-b0, and cuDNN / fmha of the best (and of m-b0).
set -u -o pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out=${OUT:-$root/i8-out}
mkdir -p "$out"
bdir=${I8_BUILD_DIR:-$root/build-i8}
summary="$out/summary.txt"
stage=${STAGE:-all}
status=0
self="$root/tools/device/i8.sh"
command -v nvcc >/dev/null 2>&1 || export PATH="/usr/local/cuda/bin:$PATH"

# shellcheck source=tools/device/steps.sh
. "$root/tools/device/steps.sh"
STEP_TIMEOUT=300
STEP_PATTERN='ERROR:|\[doctest\] (test cases|assertions)|^== '
STEP_LINES=40

configure() {  # configure ROWSUM DESC32
  cmake -S "$root" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFMHA_BUILD_TESTS=ON -DFMHA_BUILD_EXAMPLES=OFF \
    -DFMHA_BUILD_BENCHMARKS=ON -DFMHA_BUILD_PYTHON=OFF -DFMHA_BUILD_RUST=OFF -DCMAKE_CUDA_ARCHITECTURES=90-real \
    "-DFMHA_SM90_INSTANCES=f16:128;bf16:128;f16:64" "-DFMHA_SM80_INSTANCES=f16:128" \
    "-DFMHA_SM90_ROWSUM_MMA=$1" "-DFMHA_SM90_DESC_ADD32=$2" "-DCMAKE_CUDA_FLAGS=-Xptxas=-v"
}
variant() {  # variant NAME ROWSUM DESC32 TARGETS...
  local name=$1 rowsum=$2 desc=$3
  shift 3
  echo "== variant $name: FMHA_SM90_ROWSUM_MMA=$rowsum FMHA_SM90_DESC_ADD32=$desc"
  configure "$rowsum" "$desc" >/dev/null && cmake --build "$bdir" -j"${JOBS:-16}" --target "$@" || return 1
  rm -rf "$bdir/var/$name" && mkdir -p "$bdir/var/$name" && cp -a "$bdir"/src/libfmha.so* "$bdir/var/$name/"
}
build() {
  variant rd 1 1 fmha bench_cuda test_sm90 test_gpu && variant d 0 1 fmha && variant m 0 0 fmha
}
spills() {  # the plain kernels' spills (ScoreOps 0 = kNone: dtype, head dim, serving) per variant
  python3 - "$1" <<'PY'
import re, sys
name, var = None, "?"
for line in open(sys.argv[1]):
    v = re.match(r"== variant (\w+)", line)
    if v:
        var = v.group(1)
        continue
    m = re.search(r"Compiling entry function '_ZN4fmha4cuda4sm9010fwd_kernelI(\w+?)NS1_10TileConfigILi(\d+)E.*ScoreOpsE0ELb(\d)E", line)
    if m:
        name = f"{var}: {'f16' if 'half' in m.group(1) else 'bf16'} D{m.group(2)} serving={m.group(3)}"
        continue
    if name and "spill" in line:
        print(f"  {name}: {line.strip()}")
        name = None
PY
}
bench_bin=$bdir/tests/perf/bench_cuda
[ -x "$bench_bin" ] || bench_bin=$(find "$bdir" -name bench_cuda -type f -perm -u+x | head -1)
tests() {
  local rc=0
  echo "== test_sm90"
  "$bdir/tests/test_sm90" || rc=1
  echo "== test_gpu sm90 plain-kernel cases (rd, band 32 MiB)"
  LD_LIBRARY_PATH="$bdir/var/rd" FMHA_SM90_L2_BAND_MIB=32 "$bdir/tests/test_gpu" \
    -tc="every CUDA kernel over the case matrix,a NaN in V*,key tiles outside*,serving: ragged*,serving: seqused_k*,serving: paged K/V*,two runs are bitwise equal,more batch x heads*" ||
    rc=1
  return $rc
}
benches() {
  local rc=0 round v lib band chk
  for round in 1 2; do
    for v in m:0 d:0 rd:0 rd:32 rd:16; do
      lib=${v%%:*} band=${v##*:} chk=--no-check
      [ "$round" = 1 ] && { [ "$v" = m:0 ] || [ "$v" = rd:32 ]; } && chk=""
      echo "== round $round variant $lib-b$band"
      LD_LIBRARY_PATH="$bdir/var/$lib" FMHA_SM90_L2_BAND_MIB=$band "$bench_bin" --suite seed,noncausal,bf16,d64,gqa \
        --kernels cuda_sm90_ws --n 8192,16384 $chk | grep -E '^\| [a-z0-9]+ \| cuda_sm90_ws|FAIL' || rc=1
    done
  done
  return $rc
}
# The steps run under timeout (steps.sh), which runs programs, not shell
# functions: each step runs this script again with the function's name.
case ${1:-} in
  __build | __tests | __benches)
    "${1#__}"
    exit
    ;;
esac

[ "$stage" = run ] || : >"$summary"
note "i8.sh $(date -u '+%Y-%m-%d %H:%M UTC') stage $stage, commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
if [ "$stage" != run ]; then
  t0=$SECONDS
  STEP_PATTERN='error:|^== ' step build "$out/build.log" bash "$self" __build || {
    grep -E "error" "$out/build.log" | head -20 | tee -a "$summary"
    exit 1
  }
  note "build: $((SECONDS - t0)) s; C7514 (serialized wgmma) lines: $(grep -c C7514 "$out/build.log")"
  spills "$out/build.log" | tee -a "$summary"
  [ "$stage" = build ] && exit 0
fi

step tests "$out/tests.log" bash "$self" __tests || status=1

step bench "$out/bench.log" bash "$self" __benches || status=1

# One table: per shape, TFLOP/s of each variant in rounds 1 / 2, the
# best variant's mean over m-b0's, and cuDNN / fmha (the bench's stored
# cuDNN times) at the best variant's mean (and at m-b0's).
python3 - "$out/bench.log" <<'PY' | tee -a "$summary"
import re, sys
rows, order, variants = {}, [], []
cur = None
for line in open(sys.argv[1]):
    m = re.match(r"== round (\d) variant (\S+)", line)
    if m:
        cur = (int(m.group(1)), m.group(2))
        if cur[1] not in variants: variants.append(cur[1])
        continue
    if not line.startswith("| ") or cur is None: continue
    f = [x.strip() for x in line.strip().strip("|").split("|")]
    key = f"{f[0]} {f[2]} B{f[3]} H{f[4]} N{f[5]}/{f[6]} D{f[7]} {f[8]}"
    if key not in rows: rows[key] = {}; order.append(key)
    tf = float(f[10])
    try: cud = float(f[16])
    except ValueError: cud = None
    rows[key].setdefault(cur[1], {})[cur[0]] = (tf, cud, f[13])
base_v = "m-b0"
print("| shape | " + " | ".join(variants) + " | best / m-b0 | cuDNN / fmha, best (m-b0) |")
print("|---" * (len(variants) + 3) + "|")
for k in order:
    cells, means = [], {}
    for v in variants:
        r = rows[k].get(v, {})
        tfs = [r[i][0] for i in (1, 2, 3) if i in r]
        cells.append(" / ".join(f"{t:.1f}" for t in tfs) or "-")
        if tfs: means[v] = sum(tfs) / len(tfs)
    base = means.get(base_v)
    best = max(means, key=means.get) if means else None
    ratio = f"{best} {means[best] / base:.3f}" if best and base else "-"
    def cud(v):
        r = rows[k].get(v, {})
        vals = [r[i][1] * means[v] / r[i][0] for i in (1, 2, 3) if i in r and r[i][1]]
        return f"{vals[0]:.2f}" if vals else "-"
    print(f"| {k} | " + " | ".join(cells) + f" | {ratio} | {cud(best) if best else '-'} ({cud(base_v) if base else '-'}) |")
print("(rel_l2 of round 1 where checked: " + "; ".join(
    f"{v}: " + ",".join(rows[k][v][1][2] for k in order if v in rows[k] and 1 in rows[k][v]) for v in variants
    if any(v in rows[k] and 1 in rows[k][v] and rows[k][v][1][2] != "-" for k in order)) + ")")
PY
note "status $status"
exit $status
