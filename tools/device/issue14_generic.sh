#!/usr/bin/env bash
# Issue 14 on cuda_generic: the 0.3 inference numerics (FP8 q and K/V,
# mixed dtypes, o of any dtype, descales, bias, ALiBi) run on the GPU, from
# the repository root on the device machine (logs under $OUT, else
# ./issue14-generic-out, and a summary.txt):
#
#   1. configure and build libfmha and test_gpu (Release, sm_90 machine code)
#   2. test_gpu's "inference numerics:*" cases (tests/gpu/test_gpu_numerics.cpp):
#      the CPU numerics matrix and CUDA tile shapes on every CUDA kernel
#      forced and on the automatic choice, splits 0/1/forced, against the
#      float64 reference; every FP8 byte decoded bit for bit
#   3. test_gpu's "CUDA handle:*" cases (test_gpu_numerics_api.cpp among
#      them: cuda_generic runs each feature, cuda_sm80_tc / cuda_sm90_ws
#      answer UNSUPPORTED and explain names the feature)
#   4. the fuzz corpus on a CUDA handle (tests/fuzz/corpus through
#      fuzz_replay_cuda: its 0.3 inputs, FP8/mixed dtypes, descales, bias,
#      ALiBi, now run on cuda_generic and are checked against the float64
#      reference; "numerics" and "fp8" forwards are counted in its last line)
#   4b. the whole test_gpu
#   5. compute-sanitizer memcheck on the numerics cases (FMHA_TEST_QUICK=1)
#   6. the generic kernels' registers / spills / local memory (cuobjdump)
#   7. bench_cuda's seed suite on cuda_generic at N=4096 (F16 causal D128:
#      docs/performance.md has 10.7 ms at B1 H32 before the run-time dtype
#      switches; the same or less is the expectation)
#
# Steps may be named to run a part (the build directory persists between
# runs on the device machine), e.g. within a 10-minute limit per command:
#   tools/device/issue14_generic.sh build numerics handle fuzz
#   tools/device/issue14_generic.sh test_gpu memcheck resources bench
# (no argument: all of them, in the order above).
#
# What it should show: every step rc=0, "[doctest] ... 0 failed" each time,
# memcheck "ERROR SUMMARY: 0 errors", and in numerics.log the MESSAGE lines
# "numerics matrix: N cases, M fully masked rows on cuda_generic; ...
# cuda_generic ran X, unsupported 0, failed 0".
set -u -o pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out=${OUT:-$root/issue14-generic-out}
mkdir -p "$out"
bdir=${ISSUE14_BUILD_DIR:-$root/build}
summary="$out/summary.txt"
: >"$summary"
status=0
command -v nvcc >/dev/null 2>&1 || export PATH="/usr/local/cuda/bin:$PATH"

# shellcheck source=tools/device/steps.sh
. "$root/tools/device/steps.sh"
STEP_TIMEOUT=1200
STEP_PATTERN='ERROR:|ERROR SUMMARY|\[doctest\] (test cases|assertions)|numerics (matrix|tiles):'

steps=" ${*:-build numerics handle fuzz test_gpu memcheck resources bench} "
want() { [[ "$steps" == *" $1 "* ]]; }

note "issue14_generic.sh $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'), steps:$steps"
if want build; then
  step configure "$out/configure.log" cmake -S "$root" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DFMHA_BUILD_TESTS=ON -DFMHA_BUILD_EXAMPLES=OFF -DFMHA_BUILD_BENCHMARKS=ON -DFMHA_BUILD_PYTHON=OFF -DFMHA_BUILD_RUST=OFF \
    -DCMAKE_CUDA_ARCHITECTURES=90-real || exit 1
  step build "$out/build.log" cmake --build "$bdir" -j16 --target fmha test_gpu bench_cuda fuzz_replay_cuda || exit 1
fi

want numerics && { step numerics "$out/numerics.log" "$bdir/tests/test_gpu" -tc="inference numerics:*" || status=1; }
want handle && { step cuda-handle "$out/cuda_handle.log" "$bdir/tests/test_gpu" -tc="CUDA handle:*" || status=1; }
if want fuzz; then
  step fuzz "$out/fuzz.log" "$bdir/tests/fuzz/fuzz_replay_cuda" "$root/tests/fuzz/corpus" || status=1
  tail -3 "$out/fuzz.log" | sed 's/^/    /' | tee -a "$summary"
fi
want test_gpu && { step test_gpu "$out/test_gpu.log" "$bdir/tests/test_gpu" || status=1; }
if ! want memcheck; then
  :
elif command -v compute-sanitizer >/dev/null 2>&1; then
  step memcheck "$out/memcheck.log" env FMHA_TEST_QUICK=1 compute-sanitizer --tool memcheck --error-exitcode 1 \
    "$bdir/tests/test_gpu" -tc="inference numerics:*,CUDA handle: each inference-numerics*" || status=1
else
  note "memcheck: compute-sanitizer not found"
  status=1
fi
# Registers, spills and local memory of the generic kernels (F16, BF16, F32
# instances): the run-time dtype switches must not push them into spills.
lib=$(find "$bdir" -name 'libfmha.so*' -type f | head -1)
if want resources && [ -n "$lib" ]; then
  cuobjdump --dump-resource-usage "$lib" 2>/dev/null | grep -A1 generic_attention_kernel >"$out/generic_resources.log"
  note "generic kernels: $(grep -c 'REG:' "$out/generic_resources.log") instances; $(grep -o 'REG:[0-9]*' "$out/generic_resources.log" | sort | uniq -c | tr '\n' ' ')"
  grep -o 'STACK:[0-9]* SHARED:[0-9]* LOCAL:[0-9]*' "$out/generic_resources.log" | sort | uniq -c | sed 's/^/    /' | tee -a "$summary"
fi
if want bench; then
  step bench "$out/bench.log" "$bdir/tests/perf/bench_cuda" --suite seed --kernels cuda_generic --n 4096 --no-check ||
    status=1
  grep -E "cuda_generic" "$out/bench.log" | tail -4 | sed 's/^/    /' | tee -a "$summary"
fi
note "status $status"
exit $status
