#!/usr/bin/env bash
# Issue 8: cuda_sm90_ws's 16-bit plain kernel, the candidates of branch
# issue8-sm90 timed interleaved against the current kernel, on the GPU, from
# the repository root on the device machine (logs under $OUT, else
# ./i8-out; 4 files):
#
#   build.log  two trees (Release, 90-real; sm90 instances f16:128,
#              bf16:128, f16:64; sm80 f16:128): build-i8/r0 with
#              FMHA_SM90_ROWSUM_MMA=0 (row sums in FADDs, as main) and
#              build-i8/r1 with =1 (row sums on the P V MMA); -Xptxas -v,
#              so the summary counts C7514 (serialized wgmma) and shows the
#              plain kernels' spills
#   tests.log  on r1 with FMHA_SM90_L2_BAND_MIB=32 (the variant to make
#              default): test_sm90 (the ones-tile row sum primitive among
#              them), then test_gpu's cases that run cuda_sm90_ws's plain
#              kernels (case matrix, NaN in V, key tiles never read,
#              serving, bitwise repeat, B x H past a grid dimension)
#   bench.log  bench_cuda --suite seed,noncausal,bf16,d64,gqa --kernels
#              cuda_sm90_ws --n 4096,8192,16384 for each variant: r0 / r1 x
#              band 0 / 32 MiB (FMHA_SM90_L2_BAND_MIB: the work order in
#              bands of units whose K/V fit the budget), 2 interleaved rounds
#              (errors checked in round 1 for r0b0 and r1b32 only)
#
# STAGE=build: configure and build only; STAGE=run: run what was built;
# unset: both. JOBS (default 16): build parallelism.
# What it should show: rc=0 everywhere, "0 failed", C7514 0; then one table,
# TFLOP/s per shape and variant (r1 / r2) and the best variant's cuDNN ratio.
set -u -o pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out=${OUT:-$root/i8-out}
mkdir -p "$out"
bdir=${I8_BUILD_DIR:-$root/build-i8}
summary="$out/summary.txt"
stage=${STAGE:-all}
[ "$stage" = run ] || : >"$summary"
status=0
command -v nvcc >/dev/null 2>&1 || export PATH="/usr/local/cuda/bin:$PATH"

# shellcheck source=tools/device/steps.sh
. "$root/tools/device/steps.sh"
STEP_TIMEOUT=300
STEP_PATTERN='ERROR:|\[doctest\] (test cases|assertions)|^== '
STEP_LINES=40

note "i8.sh $(date -u '+%Y-%m-%d %H:%M UTC') stage $stage, commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"

configure() {  # configure TREE ROWSUM
  cmake -S "$root" -B "$bdir/$1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFMHA_BUILD_TESTS=ON -DFMHA_BUILD_EXAMPLES=OFF \
    -DFMHA_BUILD_BENCHMARKS=ON -DFMHA_BUILD_PYTHON=OFF -DFMHA_BUILD_RUST=OFF -DCMAKE_CUDA_ARCHITECTURES=90-real \
    "-DFMHA_SM90_INSTANCES=f16:128;bf16:128;f16:64" "-DFMHA_SM80_INSTANCES=f16:128" \
    "-DFMHA_SM90_ROWSUM_MMA=$2" "-DCMAKE_CUDA_FLAGS=-Xptxas=-v"
}
build() {
  echo "== configure r0, r1"
  configure r0 0 && configure r1 1 || return 1
  echo "== build r1 (tests too), then r0"
  cmake --build "$bdir/r1" -j"${JOBS:-16}" --target fmha bench_cuda test_sm90 test_gpu &&
    cmake --build "$bdir/r0" -j"${JOBS:-16}" --target fmha bench_cuda
}
if [ "$stage" != run ]; then
  t0=$SECONDS
  STEP_PATTERN='error:|^== ' step build "$out/build.log" build || {
    grep -E "error" "$out/build.log" | head -20 | tee -a "$summary"
    exit 1
  }
  note "build: $((SECONDS - t0)) s; C7514 (serialized wgmma) lines: $(grep -c C7514 "$out/build.log")"
  # The plain kernels' spills (ScoreOps 0 = kNone: dtype, head dim, serving), r1's then r0's.
  python3 - "$out/build.log" <<'EOF' | tee -a "$summary"
import re, sys
name = None
for line in open(sys.argv[1]):
    m = re.search(r"Compiling entry function '(_ZN4fmha4cuda4sm9010fwd_kernelI(\w+?)NS1_10TileConfigILi(\d+)E.*ScoreOpsE0ELb(\d)E\w*)'", line)
    if m:
        name = f"{'f16' if 'half' in m.group(2) else 'bf16'} D{m.group(3)} serving={m.group(4)}"
        continue
    if name and "spill" in line:
        print(f"  {name}: {line.strip()}")
        name = None
EOF
  [ "$stage" = build ] && exit 0
fi

r0=$bdir/r0
r1=$bdir/r1
tests() {
  local rc=0
  echo "== test_sm90 (r1)"
  FMHA_SM90_L2_BAND_MIB=32 "$r1/tests/test_sm90" || rc=1
  echo "== test_gpu sm90 plain-kernel cases (r1, band 32 MiB)"
  FMHA_SM90_L2_BAND_MIB=32 "$r1/tests/test_gpu" -tc="every CUDA kernel over the case matrix,a NaN in V*,key tiles outside*,serving: ragged*,serving: seqused_k*,serving: paged K/V*,two runs are bitwise equal,more batch x heads*" || rc=1
  return $rc
}
step tests "$out/tests.log" tests || status=1

benches() {
  local rc=0
  for round in 1 2; do
    for v in r0:0 r1:0 r0:32 r1:32; do
      local tree=${v%%:*} band=${v##*:} chk=--no-check
      [ "$round" = 1 ] && { [ "$v" = r0:0 ] || [ "$v" = r1:32 ]; } && chk=""
      echo "== round $round variant ${tree}b$band"
      FMHA_SM90_L2_BAND_MIB=$band "$bdir/$tree/tests/perf/bench_cuda" --suite seed,noncausal,bf16,d64,gqa \
        --kernels cuda_sm90_ws --n 4096,8192,16384 $chk | grep -E '^\| [a-z0-9]+ \| cuda_sm90_ws' || rc=1
    done
  done
  return $rc
}
bench_bin=$(find "$r0" -name bench_cuda -type f -perm -u+x | head -1)
[ -n "$bench_bin" ] && [ "$bench_bin" != "$r0/tests/perf/bench_cuda" ] && note "bench_cuda at $bench_bin (script expects tests/perf)"
step bench "$out/bench.log" benches || status=1

# One table: per shape, TFLOP/s of each variant in rounds 1 / 2, and the
# cuDNN ratio (cuDNN ms / fmha ms, stored peer times) of the best median.
python3 - "$out/bench.log" <<'EOF' | tee -a "$summary"
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
print("| shape | " + " | ".join(variants) + " | best / r0b0 | cuDNN ratio of best (r0b0) |")
print("|---" * (len(variants) + 3) + "|")
for k in order:
    cells, means = [], {}
    for v in variants:
        r = rows[k].get(v, {})
        tfs = [r[i][0] for i in (1, 2) if i in r]
        cells.append(" / ".join(f"{t:.1f}" for t in tfs) or "-")
        if tfs: means[v] = sum(tfs) / len(tfs)
    base = means.get("r0b0")
    best = max(means, key=means.get) if means else None
    ratio = f"{best} {means[best] / base:.3f}" if best and base else "-"
    def cud(v):
        r = rows[k].get(v, {})
        vals = [r[i][1] * means[v] / r[i][0] for i in (1, 2) if i in r and r[i][1]]
        return f"{vals[0]:.3f}" if vals else "-"
    print(f"| {k} | " + " | ".join(cells) + f" | {ratio} | {cud(best) if best else '-'} ({cud('r0b0') if base else '-'}) |")
print("(rel_l2 of round 1 per variant: " + "; ".join(
    f"{v}: " + ",".join(rows[k][v][1][2] for k in order if v in rows[k] and 1 in rows[k][v]) for v in variants) + ")")
EOF
note "status $status"
exit $status
