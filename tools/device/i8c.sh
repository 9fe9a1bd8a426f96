#!/usr/bin/env bash
# Issue 8, second pass: cuda_sm90_ws's plain 16-bit kernel, the candidates of
# branch issue8-sm90c timed interleaved against main's kernel, on the GPU,
# from the repository root on the device machine (logs under $OUT, else
# ./i8c-out; 5 files):
#
#   build.log    one tree (Release, 90-real; sm90 instances f16:64, f16:128,
#                bf16:128, f16:256; sm80 f16:128; -Xptxas -v), built once per
#                variant of the sm90 knobs (a reconfigure rebuilds the sm90
#                units), each variant's libfmha.so kept under
#                build-i8c/var/<v>:
#                  m     main's kernel (every knob off, D=256 keys tiles of 64)
#                  r     FMHA_SM90_TURN_ACROSS_TILES=1 (the consumers' turn
#                        ring runs on across work tiles, FA3's way)
#                  rc    r and FMHA_SM90_EARLY_CLAIM=1 (the producer claims
#                        the next work tile as it starts loading this one)
#                  rc80  rc and FMHA_SM90_D256_BLOCK_N=80 (D=256: 128 x 80)
#                and the summary counts C7514 (serialized wgmma) and shows the
#                plain kernels' spills per variant
#   tests.log    test_sm90, then test_gpu's cases that run cuda_sm90_ws's
#                plain kernels (the case matrix, NaN in V, key tiles never
#                read, bitwise repeat, the persistent-CTA case of this branch,
#                serving) on rc80; failures that only say an instance is
#                missing from this build's reduced list are counted apart
#   bench.log    bench_cuda --kernels cuda_sm90_ws, 2 interleaved rounds:
#                per variant (band 16 MiB, the default) --suite seed,noncausal,
#                bf16,d64,d256,gqa --n 2048,8192; then the L2 band budget
#                sweep on rc80 (FMHA_SM90_L2_BAND_MIB 0, 8, 24, 32, 48; 16 is
#                the variant run) over causal 8k, non-causal 8k, D=256 8k and
#                the gqa suite
#   compare.log  compare_torch.py on rc80 (cuDNN in the same process)
#
# STAGE=build: configure and build only; STAGE=run: run what was built;
# unset: both. JOBS (default 16): build parallelism.
# What it should show: rc=0 for build, test_sm90 and compare; test_gpu's
# failures all "instance missing" (0 numeric); C7514 0; a table of TFLOP/s per
# shape and variant (rounds 1 / 2), best / m-b16 and cuDNN / fmha; a table
# of the band sweep per shape.
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

configure() {  # configure TURN CLAIM D256
  cmake -S "$root" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFMHA_BUILD_TESTS=ON -DFMHA_BUILD_EXAMPLES=OFF \
    -DFMHA_BUILD_BENCHMARKS=ON -DFMHA_BUILD_PYTHON=OFF -DFMHA_BUILD_RUST=OFF -DCMAKE_CUDA_ARCHITECTURES=90-real \
    "-DFMHA_SM90_INSTANCES=f16:64;f16:128;bf16:128;f16:256" "-DFMHA_SM80_INSTANCES=f16:128" \
    "-DFMHA_SM90_TURN_ACROSS_TILES=$1" "-DFMHA_SM90_EARLY_CLAIM=$2" "-DFMHA_SM90_D256_BLOCK_N=$3" \
    "-DCMAKE_CUDA_FLAGS=-Xptxas=-v"
}
variant() {  # variant NAME TURN CLAIM D256 TARGETS...
  local name=$1 turn=$2 claim=$3 d256=$4
  shift 4
  echo "== variant $name: FMHA_SM90_TURN_ACROSS_TILES=$turn FMHA_SM90_EARLY_CLAIM=$claim FMHA_SM90_D256_BLOCK_N=$d256"
  configure "$turn" "$claim" "$d256" >/dev/null && cmake --build "$bdir" -j"${JOBS:-16}" --target "$@" || return 1
  rm -rf "$bdir/var/$name" && mkdir -p "$bdir/var/$name" && cp -a "$bdir"/src/libfmha.so* "$bdir/var/$name/"
}
build() {
  variant m 0 0 64 fmha && variant r 1 0 64 fmha && variant rc 1 1 64 fmha &&
    variant rc80 1 1 80 fmha bench_cuda test_sm90 test_gpu
}
spills() {  # the plain dense kernels' spills (ScoreOps 0 = kNone, serving 0) per variant
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
  echo "== test_gpu sm90 plain-kernel cases (rc80)"
  LD_LIBRARY_PATH="$bdir/var/rc80" "$bdir/tests/test_gpu" \
    -tc="every CUDA kernel over the case matrix,a NaN in V*,key tiles outside*,two runs are bitwise equal,cuda_sm90_ws: persistent*,serving: ragged*,serving: seqused_k*,serving: paged K/V*" ||
    rc=1
  return $rc
}
benches() {
  local rc=0 round v chk band
  for round in 1 2; do
    for v in m r rc rc80; do
      chk=--no-check
      [ "$round" = 1 ] && { [ "$v" = m ] || [ "$v" = rc80 ]; } && chk=""
      echo "== round $round variant $v-b16"
      LD_LIBRARY_PATH="$bdir/var/$v" FMHA_SM90_L2_BAND_MIB=16 "$bench_bin" --suite seed,noncausal,bf16,d64,d256,gqa \
        --kernels cuda_sm90_ws --n 2048,8192 $chk | grep -E '^\| [a-z0-9]+ \| cuda_sm90_ws|FAIL' || rc=1
    done
    for band in 0 8 24 32 48; do
      echo "== round $round variant rc80-b$band"
      LD_LIBRARY_PATH="$bdir/var/rc80" FMHA_SM90_L2_BAND_MIB=$band "$bench_bin" --suite seed,noncausal,d256,gqa \
        --kernels cuda_sm90_ws --n 8192 --no-check | grep -E '^\| [a-z0-9]+ \| cuda_sm90_ws|FAIL' || rc=1
    done
  done
  return $rc
}
compare() {
  python3 "$root/tests/perf/compare_torch.py" --lib "$bdir/var/rc80/libfmha.so" --kernels cuda_sm90_ws \
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
  spills "$out/build.log" | grep -E "serving=0" | tee -a "$summary"
  [ "$stage" = build ] && exit 0
fi

step tests "$out/tests.log" bash "$self" __tests || status=1
note "instance-list failures (this build's reduced lists): $(grep -cE "does not run|not instantiated" "$out/tests.log") report lines; ERROR lines: $(grep -c "ERROR:" "$out/tests.log")"

step bench "$out/bench.log" bash "$self" __benches || status=1

# Two tables: per shape, TFLOP/s of each variant in rounds 1 / 2 (band 16),
# best / m-b16 and cuDNN / fmha (the bench's stored cuDNN times) of the
# best and of m-b16; then the band sweep on rc80 (its mean TFLOP/s per budget).
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
def means(k, vs):
    out = {}
    for v in vs:
        r = rows[k].get(v, {})
        tfs = [r[i][0] for i in (1, 2) if i in r]
        if tfs: out[v] = (sum(tfs) / len(tfs), tfs)
    return out
def cud(k, v, mean):
    r = rows[k].get(v, {})
    vals = [r[i][1] * mean / r[i][0] for i in (1, 2) if i in r and r[i][1]]
    return f"{vals[0]:.3f}" if vals else "-"
main_vs = [v for v in variants if v.endswith("-b16")]
base_v = "m-b16"
print("| shape | " + " | ".join(main_vs) + " | best / m-b16 | cuDNN / fmha, best (m-b16) |")
print("|---" * (len(main_vs) + 3) + "|")
for k in order:
    ms = means(k, main_vs)
    if not ms: continue
    cells = [" / ".join(f"{t:.1f}" for t in ms[v][1]) if v in ms else "-" for v in main_vs]
    best = max(ms, key=lambda v: ms[v][0])
    ratio = f"{best} {ms[best][0] / ms[base_v][0]:.3f}" if base_v in ms else "-"
    print(f"| {k} | " + " | ".join(cells) + f" | {ratio} | {cud(k, best, ms[best][0])} ({cud(k, base_v, ms[base_v][0]) if base_v in ms else '-'}) |")
band_vs = ["rc80-b0", "rc80-b8", "rc80-b16", "rc80-b24", "rc80-b32", "rc80-b48"]
print("\nband sweep on rc80 (TFLOP/s, mean of 2 rounds; best / b16):")
print("| shape | " + " | ".join(v.split("-")[1] for v in band_vs) + " | best / b16 |")
print("|---" * (len(band_vs) + 2) + "|")
for k in order:
    ms = means(k, band_vs)
    if len(ms) < 2: continue
    best = max(ms, key=lambda v: ms[v][0])
    ratio = f"{best.split('-')[1]} {ms[best][0] / ms['rc80-b16'][0]:.3f}" if "rc80-b16" in ms else "-"
    print(f"| {k} | " + " | ".join(f"{ms[v][0]:.1f}" if v in ms else "-" for v in band_vs) + f" | {ratio} |")
print("(rel_l2 of round 1 where checked: " + "; ".join(
    f"{v}: " + ",".join(rows[k][v][1][2] for k in order if v in rows[k] and 1 in rows[k][v]) for v in variants
    if any(v in rows[k] and 1 in rows[k][v] and rows[k][v][1][2] != "-" for k in order)) + ")")
PY

STEP_PATTERN='^B[0-9]+ H|MISMATCH|Error' STEP_LINES=16 step compare "$out/compare.log" bash "$self" __compare || status=1
note "status $status"
exit $status
