#!/usr/bin/env bash
# Issue 10, the amx path's fixes (branch issue10-amxfix) on the GPU machine's
# host CPU (Sapphire Rapids: real AMX tiles), from the repository root (logs
# under $OUT, else ./issue10-amxfix-out; summary.txt first):
#
#   1. configure and build CPU-only (-DFMHA_ENABLE_CUDA=OFF, Release, -j16):
#      libfmha, test_cpu, test_internal, fuzz_replay
#   2. the fuzz corpus (tests/fuzz/corpus) replayed on every x86 path forced
#      through FMHA_CPU_ISA (amx, avx512fp16, avx512bf16, avx512, avx2,
#      baseline): failing inputs counted and their first message logged
#   3. test_cpu with amx forced (the new "an inf in Q or K" case among the
#      rest) and test_internal (the tile model and the hardware tiles)
#
# What it should show: "corpus amx: 0 of N inputs fail" (and 0 on every other
# path); no "not available" for amx or avx512fp16 (else the path fell back
# and was not tested); test_cpu and test_internal rc=0 with "0 failed". The
# amx rel-L2 lines of test_cpu_amx.log (BF16/.. ~1e-3, F16/F16->F32 ~4e-6)
# are the hardware's counterpart of the README's scalar-model numbers.
set -u -o pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out=${OUT:-$root/issue10-amxfix-out}
mkdir -p "$out"
bdir=${AMXFIX_BUILD_DIR:-$root/build-cpu}
summary="$out/summary.txt"
: >"$summary"
status=0
note() { echo "$*" | tee -a "$summary"; }

note "issue10_amxfix.sh $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
note "flags: $(grep -o -w -E 'avx512_bf16|avx512_fp16|amx_tile|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
cmake -S "$root" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFMHA_ENABLE_CUDA=OFF -DFMHA_BUILD_EXAMPLES=OFF \
  -DFMHA_BUILD_BENCHMARKS=OFF >"$out/configure.log" 2>&1 || { note "configure FAILED"; exit 1; }
cmake --build "$bdir" -j16 --target fmha test_cpu test_internal fuzz_replay >"$out/build.log" 2>&1 ||
  { note "build FAILED (build.log)"; exit 1; }
note "build ok"

replay=$bdir/tests/fuzz/fuzz_replay
for isa in amx avx512fp16 avx512bf16 avx512 avx2 baseline; do
  log="$out/corpus_$isa.log"
  : >"$log"
  n=0
  fails=0
  for f in "$root"/tests/fuzz/corpus/*; do
    n=$((n + 1))
    if ! FMHA_CPU_ISA=$isa timeout 60 "$replay" "$f" >"$out/one.log" 2>&1; then
      fails=$((fails + 1))
      echo "FAIL $(basename "$f"): $(grep -m1 -E 'invariant|Abort|error' "$out/one.log")" >>"$log"
    fi
    grep -q "not available" "$log" || grep -m1 "not available" "$out/one.log" >>"$log"
  done
  note "corpus $isa: $fails of $n inputs fail$(grep -q 'not available' "$log" && echo ' (path NOT available: fell back)')"
  head -5 "$log" | sed 's/^/    /' | tee -a "$summary"
  [ $fails -eq 0 ] || status=1
done
rm -f "$out/one.log"

FMHA_CPU_ISA=amx timeout 300 "$bdir/tests/test_cpu" >"$out/test_cpu_amx.log" 2>&1
rc=$?
note "test_cpu (amx forced) rc=$rc"
grep -E "not available|\[doctest\] (test cases|assertions)|ERROR:" "$out/test_cpu_amx.log" | head -10 | sed 's/^/    /' |
  tee -a "$summary"
grep -E "rel_l2" "$out/test_cpu_amx.log" | sed 's/^.*MESSAGE: /    /' | tee -a "$summary"
[ $rc -eq 0 ] || status=1
timeout 120 "$bdir/tests/test_internal" >"$out/test_internal.log" 2>&1
rc=$?
note "test_internal rc=$rc"
grep -E "\[doctest\] (test cases|assertions)|ERROR:|skipped" "$out/test_internal.log" | head -10 | sed 's/^/    /' |
  tee -a "$summary"
[ $rc -eq 0 ] || status=1
note "issue10_amxfix: $([ $status = 0 ] && echo PASS || echo FAIL)"
exit $status
