#!/usr/bin/env bash
# Issue 10, the amx and avx512fp16 paths of the CPU backend, on the GPU
# machine's host CPU (Sapphire Rapids: AVX512-FP16, AMX-BF16), from the
# repository root (logs under $OUT, else ./issue10-isa-out; summary.txt
# first):
#
#   1. configure and build CPU-only (-DFMHA_ENABLE_CUDA=OFF, Release, -j16):
#      libfmha, test_internal, test_cpu, test_api, bench_cpu
#   2. what the CPU offers (lscpu flags) and which path each FMHA_CPU_ISA
#      value gets (bench_cpu's stderr says when one falls back)
#   3. test_internal (the ISA choice, the AMX tile model and the same
#      products on the hardware tiles against float64, conversions) and
#      cpu_isa_containment (no AVX/AMX instruction outside a dispatched
#      function)
#   4. test_cpu_isa_amx and test_cpu_isa_avx512fp16: the whole CPU numerics
#      suite with each path forced (same cases and tolerances as every path)
#   5. fmha against torch's CPU SDPA in one run (tests/perf/
#      compare_torch_cpu.py): B=1 H=8 N=2048 D=128 causal, F16/BF16/F32, 1
#      and 16 threads, one fmha column per forced path (amx, avx512fp16,
#      avx512bf16, avx512), speed = torch ms / fmha ms and bench_cpu's
#      rel-L2 against float64
#   6. the rest of the CPU suite (ctest -L cpu: test_cpu on the automatic
#      path and every other forced path, test_api, ...), last because it is
#      the longest; whatever it reaches within the time left is logged
#
# What it should show: every step rc=0; "[doctest] ... 0 failed" in the
# test logs; step 4's logs do NOT contain "not available" (else the path
# fell back and was not tested: ctest then reports it skipped); in step 5 the
# amx column runs BF16 and F16 faster than the avx512bf16 column, with
# rel-L2 of the same order (~1e-3 BF16, ~2e-4 F16, ~1e-7 F32).
set -u -o pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out=${OUT:-$root/issue10-isa-out}
mkdir -p "$out"
bdir=${ISSUE10_BUILD_DIR:-$root/build-cpu}
summary="$out/summary.txt"
: >"$summary"
status=0
t_start=$SECONDS
budget=${ISSUE10_BUDGET_S:-560}  # the device's 600 s per command, less a margin

note() { echo "$*" | tee -a "$summary"; }
left() { echo $((budget - (SECONDS - t_start))); }
# step NAME LOG LIMIT_S CMD...: runs CMD with a time limit, logs it, and
# puts its rc, time and the doctest/ctest totals in the summary.
step() {
  local name=$1 log=$2 limit=$3
  shift 3
  local t0=$SECONDS
  echo "== $(date -u +%H:%M:%S) $name: $*" >"$log"
  timeout "$limit" "$@" >>"$log" 2>&1
  local rc=$?
  note "$(printf '%-22s rc=%-3s %5ss  %s' "$name" "$rc" "$((SECONDS - t0))" "$(basename "$log")")"
  grep -E "ERROR:|not available|skipped:|\[doctest\] (test cases|assertions)|tests passed|tests failed|check_cpu_isa: (ok|FAIL)|\(Failed\)|Skipped|Not Run" \
    "$log" | head -25 | sed 's/^/    /' | tee -a "$summary"
  return $rc
}

note "issue10_isa.sh $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
note "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cpus"
note "flags: $(grep -o -w -E 'avx512f|avx512_bf16|avx512_fp16|amx_tile|amx_bf16|amx_int8|avx512_vnni' /proc/cpuinfo | sort -u | tr '\n' ' ')"

step configure "$out/configure.log" 300 cmake -S "$root" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DFMHA_ENABLE_CUDA=OFF -DFMHA_BUILD_TESTS=ON -DFMHA_BUILD_EXAMPLES=OFF -DFMHA_BUILD_BENCHMARKS=ON || exit 1
step build "$out/build.log" 400 cmake --build "$bdir" -j"${ISSUE10_JOBS:-16}" || exit 1
bench=$bdir/tests/perf/bench_cpu

for isa in amx avx512fp16 avx512bf16 avx512 avx2 baseline; do
  line=$(FMHA_CPU_ISA=$isa "$bench" --h 1 --n 64 --threads 1 --reps 1 2>&1 | grep -o -E "^fmha:.*|chosen: [a-z0-9_]+" |
    tr '\n' ' ')
  note "  FMHA_CPU_ISA=$isa: ${line:-ok}"
done

step test_internal "$out/test_internal.log" 120 "$bdir/tests/test_internal" || status=1
step containment "$out/containment.log" 60 ctest --test-dir "$bdir" -R cpu_isa_containment -V || status=1
for isa in amx avx512fp16; do
  step "test_cpu_isa_$isa" "$out/test_cpu_isa_$isa.log" 240 env FMHA_CPU_ISA=$isa "$bdir/tests/test_cpu" || status=1
done

if python3 -c "import torch" 2>/dev/null; then
  step compare_torch "$out/compare_torch_cpu.log" 240 python3 "$root/tests/perf/compare_torch_cpu.py" "$bench" \
    --shapes prefill --threads 1,16 --isa amx,avx512fp16,avx512bf16,avx512 || status=1
  sed 's/^/    /' "$out/compare_torch_cpu.log" | grep -v "^    ==" >>"$summary"
else
  note "compare_torch: skipped, no torch"
fi

rest=$(left)
if [ "$rest" -gt 30 ]; then
  step cpu_suite "$out/ctest_cpu.log" "$rest" ctest --test-dir "$bdir" -L cpu -j4 --output-on-failure \
    -E "test_cpu_isa_(amx|avx512fp16)$" || status=1
else
  note "cpu_suite: not run, ${rest}s left of the ${budget}s budget"
fi
note "status $status, $((SECONDS - t_start))s"
exit $status
