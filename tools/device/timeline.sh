#!/usr/bin/env bash
# Where a decode call's GPU time goes (issues 9 and 14): CUPTI timelines of
# fmha, cuDNN and FA2 (tests/perf/timeline.py) on the decode shapes, from the
# repository root on the H200 (logs under $OUT, else ./timeline-out; more
# than 8 files: run it with OUT pointing elsewhere and tar the folder into
# the device tool's $OUT). Builds Release, sm_90 machine code, cuda_sm80_tc
# f16/bf16 D=128 and bf16 q over FP8 K/V, cuda_sm90_ws f16/bf16 D=128.
# STAGE=build|run as the other scripts; PART picks the run (each is the
# record of one run in docs/performance.md, "Where a decode call's time
# goes"):
#   PART=1  the split sweep, with and without the combine's dependent launch
#           (FMHA_COMBINE_PDL=0) and wide combine rows (FMHA_COMBINE_WIDE=0);
#           causal / non-causal N=8192 on cuda_sm90_ws beside cuDNN
#   PART=2  16-bit and FP8 K/V decode with and without the dependent launch,
#           the FP8 split sweep, ncu of the B=1 forward and combine
#   PART=3  (default) the FP8 K/V tile's trigger after its key loop against
#           no dependent launch, timelines and bench_cuda --suite fp8kv in
#           two interleaved rounds; test_gpu's split and FP8 cases
#
# What it should show: per call, the forward kernel, the split combine and
# the gaps between them (a negative gap: a dependent launch that began
# before the forward ended), beside cuDNN's kernels of the same shape.
set -u -o pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out=${OUT:-$root/timeline-out}
mkdir -p "$out"
bdir=${TIMELINE_BUILD_DIR:-$root/build}
stage=${STAGE:-all}
summary="$out/summary.txt"
[ "$stage" = run ] || : >"$summary"
status=0
command -v nvcc >/dev/null 2>&1 || export PATH="/usr/local/cuda/bin:$PATH"
# shellcheck source=tools/device/steps.sh
. "$root/tools/device/steps.sh"
note "timeline.sh STAGE=$stage $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
if [ "$stage" != run ]; then
  STEP_TIMEOUT=600
  STEP_PATTERN='error:|FAILED|CMake Error'
  step configure "$out/build.log" cmake -S "$root" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DFMHA_BUILD_TESTS=ON -DFMHA_BUILD_EXAMPLES=OFF -DFMHA_BUILD_BENCHMARKS=ON -DFMHA_BUILD_PYTHON=OFF \
    -DFMHA_BUILD_RUST=OFF -DCMAKE_CUDA_ARCHITECTURES=90-real \
    "-DFMHA_SM80_INSTANCES=${SM80_INSTANCES:-f16:128;bf16:128;bf16_f8kv:128}" \
    "-DFMHA_SM90_INSTANCES=${SM90_INSTANCES:-f16:128;bf16:128}" || exit 1
  step build "$out/build2.log" cmake --build "$bdir" -j"${JOBS:-16}" --target ${TARGETS:-fmha test_gpu bench_cuda} || {
    tail -40 "$out/build2.log" >>"$summary"; exit 1; }
fi
[ "$stage" = build ] && exit 0
lib=$(find "$bdir" -name 'libfmha.so' | head -1)
STEP_TIMEOUT=120
STEP_PATTERN='kernel|gap|Error|splits='
STEP_LINES=200
tl=(python3 "$root/tests/perf/timeline.py" --lib "$lib")
part=${PART:-3}
if [ "$part" = 1 ]; then
  # Run 1 (18:15 UTC, main 8ecd327 + the FMHA_COMBINE_PDL switch): the split
  # sweep, with and without the dependent launch and the wide rows.
  sweep=0,1,2,3,4,8,16,33,66
  step timeline-decode "$out/timeline_decode.log" "${tl[@]}" --groups decode --splits "$sweep" || status=1
  FMHA_COMBINE_PDL=0 step timeline-decode-nopdl "$out/timeline_nopdl.log" "${tl[@]}" --groups decode \
    --splits "$sweep" --peers 0 || status=1
  FMHA_COMBINE_WIDE=0 step timeline-decode-narrow "$out/timeline_narrowcombine.log" "${tl[@]}" --groups decode \
    --splits 0 --peers 0 || status=1
  FMHA_COMBINE_PDL=0 FMHA_COMBINE_WIDE=0 step timeline-decode-nopdl-narrow "$out/timeline_nopdl_narrow.log" \
    "${tl[@]}" --groups decode --splits 0 --peers 0 || status=1
  step timeline-causal8k "$out/timeline_causal.log" "${tl[@]}" --groups causal,noncausal --min-n 8192 --max-n 8192 \
    --iters 8 || status=1
elif [ "$part" = 2 ]; then
  # Run 2: decode (16-bit and BF16 q over e4m3 K/V) with and without the
  # combine's dependent launch, the FP8 split sweep, ncu of the B=1 calls,
  # compare_torch's event-timed decode rows.
  step tl-bf16 "$out/tl_bf16.log" "${tl[@]}" --groups decode || status=1
  FMHA_COMBINE_PDL=0 step tl-bf16-nopdl "$out/tl_bf16_nopdl.log" "${tl[@]}" --groups decode --peers 0 || status=1
  step tl-fp8 "$out/tl_fp8.log" "${tl[@]}" --groups decode --kv-dtype e4m3 --splits 0,16,33,66,128 || status=1
  FMHA_COMBINE_PDL=0 step tl-fp8-nopdl "$out/tl_fp8_nopdl.log" "${tl[@]}" --groups decode --kv-dtype e4m3 || status=1
  STEP_PATTERN='^B[0-9]|K\+V TB/s|MISMATCH'
  STEP_LINES=20
  step compare-decode "$out/compare_decode.log" python3 "$root/tests/perf/compare_torch.py" --lib "$lib" \
    --groups decode --kernels cuda_sm80_tc --quiet || status=1
  STEP_PATTERN='Duration|Throughput|Registers|Achieved Occupancy|Issued Ipc|fwd_kernel|split_combine'
  STEP_LINES=80
  nc=(ncu --cache-control none --clock-control none -k "regex:fwd_kernel|split_combine" --launch-skip 4 --launch-count 2
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy
    --section LaunchStats --section SchedulerStats python3 "$root/tests/perf/timeline.py" --lib "$lib" --groups decode
    --min-n 131072 --max-n 131072 --plain 4)
  step ncu-b1 "$out/ncu_b1.log" "${nc[@]}" || status=1
  step ncu-b1-fp8 "$out/ncu_b1_fp8.log" "${nc[@]}" --kv-dtype e4m3 || status=1
else
  # Run 3: the FP8 K/V tile's trigger after its key loop (the default now)
  # against no dependent launch (FMHA_COMBINE_PDL=0), two interleaved rounds
  # of the timeline and of bench_cuda's fp8kv suite; the 16-bit rows once
  # (unchanged code); the split and FP8 cases of test_gpu.
  tests="$bdir/tests/test_gpu"
  STEP_PATTERN='ERROR:|\[doctest\] (test cases|assertions)|FAIL'
  STEP_LINES=20
  cases="serving: decode*,sm80 FP8 K/V*,bias and ALiBi with key splits*,bias and ALiBi on decode*"
  cases="$cases,two runs are bitwise equal,the handle's stream is used*,inference numerics: CUDA tile shapes*"
  step tests-splits "$out/tests_splits.log" "$tests" -tc="$cases" || status=1
  bench=$(find "$bdir" -name bench_cuda -type f -perm -u+x | head -1)
  for r in 1 2; do
    STEP_PATTERN='kernel|gap|Error'
    STEP_LINES=40
    step "tl-fp8-$r" "$out/tl_fp8_$r.log" "${tl[@]}" --groups decode --kv-dtype e4m3 || status=1
    FMHA_COMBINE_PDL=0 step "tl-fp8-nopdl-$r" "$out/tl_fp8_nopdl_$r.log" "${tl[@]}" --groups decode \
      --kv-dtype e4m3 || status=1
    STEP_PATTERN='e4m3 K/V \||copy bandwidth'
    STEP_TIMEOUT=90
    step "fp8kv-$r" "$out/fp8kv_$r.log" "$bench" --suite fp8kv || status=1
    FMHA_COMBINE_PDL=0 step "fp8kv-nopdl-$r" "$out/fp8kv_nopdl_$r.log" "$bench" --suite fp8kv || status=1
    STEP_TIMEOUT=120
  done
  STEP_PATTERN='kernel|gap|Error'
  STEP_LINES=40
  step tl-bf16 "$out/tl_bf16.log" "${tl[@]}" --groups decode --peers 0 || status=1
fi
note "status $status"
exit $status
