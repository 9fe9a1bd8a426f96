#!/usr/bin/env bash
# Build time and library size (branch build-size): checks on the GPU that
# the cuts cost no speed and measures what the compressed kernels cost a
# process when it loads them. From the repository root on the device
# machine (logs under $OUT, else ./build-size-out; at most 5 files):
#
#   1. four builds at once (-j16 between them), the same sources:
#        before  main's packing and kernels: -DFMHA_CUDA_COMPRESS_ALL=OFF
#                -DFMHA_SM80_DENSE_KERNELS=all
#        after   this branch's defaults (SASS compressed, dense kernels for
#                the wide sm80 tile only)
#        size    after, with -DFMHA_CUDA_COMPRESS_MODE=size
#      each at CMake's default architectures (80-real;90-real;90-virtual,
#      as users get them) with reduced instance lists (sm80 f16:128,
#      bf16:128; sm90 f16:128); and
#        tests   after, 90-real, every instantiation: test_gpu
#   2. test_gpu (tests build): every CUDA kernel against the float64
#      reference, dense decode now through the narrow contiguous kernel
#   3. bench_load (tests/perf/bench_load.c) in fresh processes, the three
#      libraries interleaved, 5 rounds, then once each with
#      CUDA_MODULE_LOADING=EAGER: fmha_create and the first forward of
#      kernels from three fat binaries against the same forward again
#   4. bench_cuda --suite decode,gqa --kernels cuda_sm80_tc, before and
#      after interleaved (3 rounds): dense decode now runs the narrow
#      contiguous kernel; the gqa rows (wide tile, kernels unchanged) are
#      the noise reference
#
# What it should show: every step rc=0; test_gpu "0 failed"; libfmha.so of
# after about 3.5x smaller than before (size: ~5x); the decode rows of
# before and after within noise of each other, as the gqa rows are (the
# summary lists them side by side); the load table says what compression
# costs once per process.
set -u -o pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out=${OUT:-$root/build-size-out}
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
status=0
command -v nvcc >/dev/null 2>&1 || export PATH="/usr/local/cuda/bin:$PATH"

# shellcheck source=tools/device/steps.sh
. "$root/tools/device/steps.sh"
STEP_TIMEOUT=240
STEP_PATTERN='ERROR:|\[doctest\] (test cases|assertions)|FAILED|error:'

note "build_size.sh $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
small=(-DFMHA_SM80_INSTANCES="f16:128;bf16:128" -DFMHA_SM90_INSTANCES="f16:128")
common=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DFMHA_BUILD_EXAMPLES=OFF -DFMHA_BUILD_PYTHON=OFF -DFMHA_BUILD_RUST=OFF)
declare -A flags=(
  [before]="-DFMHA_CUDA_COMPRESS_ALL=OFF -DFMHA_SM80_DENSE_KERNELS=all"
  [after]=""
  [size]="-DFMHA_CUDA_COMPRESS_MODE=size"
)
build_one() {  # NAME JOBS TARGETS...
  local name=$1 jobs=$2
  shift 2
  local dir="$root/build-bs-$name" t0=$SECONDS
  {
    if [ "$name" = tests ]; then
      cmake -S "$root" -B "$dir" "${common[@]}" -DFMHA_BUILD_TESTS=ON -DFMHA_BUILD_BENCHMARKS=OFF \
        -DCMAKE_CUDA_ARCHITECTURES=90-real
    else
      # shellcheck disable=SC2086
      cmake -S "$root" -B "$dir" "${common[@]}" -DFMHA_BUILD_TESTS=ON -DFMHA_BUILD_BENCHMARKS=ON "${small[@]}" \
        ${flags[$name]}
    fi && cmake --build "$dir" -j"$jobs" --target "$@"
  } >"$out/build-$name.part" 2>&1
  local rc=$?
  echo "$name rc=$rc $((SECONDS - t0)) s" >>"$out/build-$name.part"
  return $rc
}
t0=$SECONDS
build_one tests 7 test_gpu &
build_one before 3 fmha bench_cuda bench_load &
build_one after 3 fmha bench_cuda bench_load &
build_one size 3 fmha bench_load &
wait
for n in tests before after size; do
  cat "$out/build-$n.part" >>"$out/build.log"
  rm -f "$out/build-$n.part"
done
note "builds (at once): $((SECONDS - t0)) s"
grep -E "^(tests|before|after|size) rc=" "$out/build.log" | sed 's/^/    /' | tee -a "$summary"
grep -qE "^(before|after|size) rc=[^0]" "$out/build.log" && { note "a build failed: see build.log"; exit 1; }
for n in before after size tests; do
  [ -f "$root/build-bs-$n/src/libfmha.so" ] &&
    note "$(printf '    libfmha.so %-6s %10d bytes' "$n" "$(stat -L -c %s "$root/build-bs-$n/src/libfmha.so")")"
done
note "    (tests: 90-real, every instantiation, this branch's packing)"

if [ -x "$root/build-bs-tests/tests/test_gpu" ]; then
  step test_gpu "$out/test_gpu.log" "$root/build-bs-tests/tests/test_gpu" || status=1
else
  note "test_gpu: not built (see build.log)"
  status=1
fi

# 3. Load cost, fresh processes, interleaved.
{
  for round in 1 2 3 4 5; do
    for n in before after size; do
      echo "== round $round $n"
      timeout 30 "$root/build-bs-$n/tests/perf/bench_load"
    done
  done
  for n in before after size; do
    echo "== eager $n"
    CUDA_MODULE_LOADING=EAGER timeout 30 "$root/build-bs-$n/tests/perf/bench_load"
  done
} >"$out/load.log" 2>&1 || status=1
note "bench_load (median of 5 fresh processes; ms; first forward - the same forward again):"
python3 - "$out/load.log" <<'EOF' | tee -a "$summary"
import re, sys, statistics as st
rows, lib, mode = {}, None, None
for line in open(sys.argv[1]):
    m = re.match(r'== (round \d+|eager) (\w+)', line)
    if m: mode, lib = ('lazy' if m.group(1) != 'eager' else 'eager'), m.group(2); continue
    m = re.match(r'bench_load: CUDA_MODULE_LOADING=.*fmha_create ([\d.]+) ms', line)
    if m: rows.setdefault((mode, lib, 'fmha_create'), []).append(float(m.group(1))); continue
    m = re.match(r'\| ([^|]+) \| ([^|]+) \| ([\d.]+) \| ([\d.]+) \| ([-\d.]+) \|', line)
    if m: rows.setdefault((mode, lib, m.group(1).strip() + ' (' + m.group(2).strip() + ')'), []).append(float(m.group(5))); continue
    m = re.match(r'bench_load: create \+ first forwards ([\d.]+) ms', line)
    if m: rows.setdefault((mode, lib, 'create + first forwards'), []).append(float(m.group(1)))
keys = sorted({k[2] for k in rows})
for mode in ('lazy', 'eager'):
    print('    %-5s %-44s %10s %10s %10s' % (mode, 'what', 'before', 'after', 'size'))
    for k in keys:
        vals = [rows.get((mode, lib, k)) for lib in ('before', 'after', 'size')]
        print('    %-5s %-44s %10s %10s %10s' % (mode, k, *[('%.2f' % st.median(v)) if v else '-' for v in vals]))
EOF

# 4. Speed, before/after interleaved.
{
  for round in 1 2 3; do
    for n in before after; do
      echo "== round $round $n"
      timeout 60 "$root/build-bs-$n/tests/perf/bench_cuda" --suite decode,gqa --kernels cuda_sm80_tc --no-check
    done
  done
} >"$out/bench.log" 2>&1 || status=1
note "bench_cuda on cuda_sm80_tc (medians of 3 interleaved rounds, ms: before, after):"
python3 - "$out/bench.log" <<'EOF' | tee -a "$summary"
import re, sys, statistics as st
rows, lib, seen = {}, None, set()
num = re.compile(r'^[\d.]+g?$')
for line in open(sys.argv[1]):
    m = re.match(r'== round \d+ (\w+)', line)
    if m: lib, seen = m.group(1), set(); continue
    c = [x.strip() for x in line.strip().strip('|').split('|')]
    if len(c) >= 10 and c[0] in ('decode', 'gqa') and num.match(c[9]):
        key = '%s %s B%s Hq/Hk %s Nq %s Nk %s D %s %s' % (c[0], c[2], c[3], c[4], c[5], c[6], c[7], c[8])
        rows.setdefault(key, {}).setdefault(lib, []).append(float(c[9].rstrip('g')))
    elif len(c) >= 8 and c[0].startswith('FP16 B1') and all(num.match(x) for x in c[2:]) and line not in seen:
        seen.add(line)  # the suite prints each row twice
        none = float(c[2])
        for what, ms in (('none', none), ('bias', float(c[3])), ('ALiBi', float(c[5])), ('softcap', float(c[7]) * none)):
            rows.setdefault('bias suite %s %s' % (c[0], what), {}).setdefault(lib, []).append(ms)
for k, v in rows.items():
    b, a = v.get('before'), v.get('after')
    if b and a:
        print('    %-60s %9.4f %9.4f  after/before %.3f' % (k, st.median(b), st.median(a), st.median(a) / st.median(b)))
EOF
grep -E "failures$" "$out/bench.log" | sort | uniq -c | sed 's/^/    /' | tee -a "$summary"
note "status $status"
exit $status
