#!/usr/bin/env bash
# Issue 10, CPU prefill at one thread (branch issue10-cpu1t) on the GPU
# machine's host CPU (Sapphire Rapids: real AMX tiles), from the repository
# root; logs under $OUT (else ./cpu1t-out), summary.txt first:
#
#   1. CPU-only build (-DFMHA_ENABLE_CUDA=OFF, Release, -j16): libfmha,
#      test_cpu, fuzz_replay, bench_cpu; and the same bench_cpu built from
#      main ("before"): from the source tree CPU1T_BEFORE_SRC when set (e.g.
#      a copy of main at 4212aab), else exported by git (CPU1T_BEFORE,
#      default 4212aab) when the copy has its history; else no before column
#   2. test_cpu with amx forced, the fuzz corpus replayed on amx (and on
#      avx512fp16, the path F32 runs on)
#   3. tests/perf/compare_torch_cpu.py, prefill B1 H8 N2048 D128 causal,
#      bf16/f16/f32 at 1 and 16 threads, 3 interleaved rounds (CPU1T_ROUNDS), with the
#      "before" bench_cpu timed beside it in each round
#
# What it should show: test_cpu "32 | 32 passed", "corpus amx: every
# invariant held"; in the medians table, speed (torch / fmha) >= 1.0 for
# every dtype at 1 and 16 threads, after/before > 1 for bf16 and f16 (the
# amx path: K/V packed once per kv head, the vectorized softmax).
set -u -o pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out=${OUT:-$root/cpu1t-out}
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
# shellcheck source=tools/device/steps.sh
. "$root/tools/device/steps.sh"
bdir=${CPU1T_BUILD_DIR:-$root/build-cpu1t}
before_ref=${CPU1T_BEFORE:-4212aab}
before_src=$root/build-cpu1t-before-src
bbdir=$root/build-cpu1t-before
status=0

note "cpu1t.sh $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
note "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) flags: $(grep -o -w -E 'avx512_bf16|avx512_fp16|amx_tile|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
cfg=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DFMHA_ENABLE_CUDA=OFF -DFMHA_BUILD_EXAMPLES=OFF -DFMHA_BUILD_BENCHMARKS=ON)
STEP_PATTERN='error:|FAILED'
STEP_LINES=5
step configure "$out/build.log" cmake -S "$root" -B "$bdir" "${cfg[@]}" || { note "configure FAILED"; exit 1; }
step build "$out/build.log.2" cmake --build "$bdir" -j16 --target fmha test_cpu fuzz_replay bench_cpu ||
  { note "build FAILED"; exit 1; }
cat "$out/build.log.2" >>"$out/build.log"
rm -f "$out/build.log.2"

before=""
if [ -n "${CPU1T_BEFORE_SRC:-}" ]; then
  before_src=$CPU1T_BEFORE_SRC
  before_ref="$before_src"
fi
if { [ -n "${CPU1T_BEFORE_SRC:-}" ] ||
  { rm -rf "$before_src" && mkdir -p "$before_src" &&
    git -C "$root" archive "$before_ref" 2>/dev/null | tar -x -C "$before_src" 2>/dev/null; }; } &&
  cmake -S "$before_src" -B "$bbdir" "${cfg[@]}" >>"$out/build.log" 2>&1 &&
  cmake --build "$bbdir" -j16 --target bench_cpu >>"$out/build.log" 2>&1; then
  before=$bbdir/tests/perf/bench_cpu
  note "before: bench_cpu of $before_ref built"
else
  note "before: could not build $before_ref (no git history here?); no before column"
fi

STEP_PATTERN='ERROR:|\[doctest\] (test cases|assertions)|not available'
STEP_LINES=10
step test_cpu_amx "$out/test_cpu_amx.log" env FMHA_CPU_ISA=amx "$bdir/tests/test_cpu" || status=1
STEP_PATTERN='FAIL|ok$'
step containment "$out/test_cpu_amx.log.c" sh "$root/tools/check_cpu_isa.sh" "$bdir/src/libfmha.so" || status=1
cat "$out/test_cpu_amx.log.c" >>"$out/test_cpu_amx.log" && rm -f "$out/test_cpu_amx.log.c"
STEP_PATTERN='invariant|FAIL|not available'
for isa in amx avx512fp16; do
  step "corpus_$isa" "$out/corpus.log.$isa" env FMHA_CPU_ISA=$isa "$bdir/tests/fuzz/fuzz_replay" \
    "$root/tests/fuzz/corpus" || status=1
done
cat "$out/corpus.log.avx512fp16" >>"$out/corpus.log.amx" && rm -f "$out/corpus.log.avx512fp16"

STEP_PATTERN='.'
STEP_LINES=40
STEP_TIMEOUT=200
step compare "$out/compare.log" python3 "$root/tests/perf/compare_torch_cpu.py" "$bdir/tests/perf/bench_cpu" \
  --shapes prefill --dtypes bf16,f16,f32 --threads 1,16 --rounds "${CPU1T_ROUNDS:-3}" ${before:+--before "$before"} || status=1
note "cpu1t: $([ $status = 0 ] && echo PASS || echo FAIL)"
exit $status
