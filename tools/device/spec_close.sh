#!/usr/bin/env bash
# Issue 8: the speculative softmax on cuda_sm90_ws, the closing run (one
# call, from the repository root on the H200; logs under $OUT, else
# ./spec_close-out: summary.txt, logs.tgz, the plot and the JSON rows).
#
#   1. the default build (90-real): fmha, test_gpu, bench_cuda
#   2. test_gpu's inference-numerics matrix (the all-FP8 rising-logits case
#      on the sm90 FP8 kernel) and the sm90 cases
#   3. compute-sanitizer racecheck, synccheck and memcheck on the sm90
#      persistent-tile and FP8 cases (each warp now releases its K stage)
#   4. compare_torch.py, every prefill group up to N = 32768, the automatic
#      choice with cuda_sm90_ws and cuda_sm80_tc forced, twice; the plot
#      from the first round
set -u -o pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=tools/device/steps.sh
. "$root/tools/device/steps.sh"
logs_under spec_close
b=$root/build-close
note "spec_close.sh $(date -u '+%Y-%m-%d %H:%M UTC'), GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
STEP_PATTERN='error:|FAILED|CMake Error'
t0=$SECONDS
step configure "$logs/configure.log" cmake -S "$root" -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DFMHA_BUILD_EXAMPLES=OFF -DFMHA_BUILD_BENCHMARKS=ON -DFMHA_BUILD_PYTHON=OFF -DFMHA_BUILD_RUST=OFF \
  -DFMHA_BUILD_TESTS=ON -DCMAKE_CUDA_ARCHITECTURES=90-real || exit 1
step build "$logs/build.log" cmake --build "$b" -j16 --target fmha test_gpu bench_cuda || exit 1
note "build $((SECONDS - t0)) s"
unset STEP_PATTERN
sm90='cuda_sm90_ws: persistent*,sm90 FP8: e4m3*'
STEP_TIMEOUT=120 step numerics "$logs/numerics.log" "$b/tests/test_gpu" --duration=true \
  -tc="inference numerics*,$sm90"
grep -E 'MESSAGE: .*(rising|all-FP8|numerics)' "$logs/numerics.log" | head -8 | sed 's/^/    /' >>"$summary"
STEP_PATTERN='ERROR SUMMARY|RACECHECK SUMMARY|\[doctest\] (test cases|assertions)'
for tool in racecheck synccheck memcheck; do
  FMHA_TEST_QUICK=${QUICK:-3} STEP_TIMEOUT=${SAN_TIMEOUT:-100} step "$tool" "$logs/$tool.log" \
    compute-sanitizer --tool "$tool" --error-exitcode 9 "$b/tests/test_gpu" -tc="$sm90"
done
for r in 1 2; do
  plot=()
  [ $r = 1 ] && plot=(--plot "$out/sm90_vs_peers_h200.png")
  STEP_TIMEOUT=200 STEP_PATTERN='^B[0-9]+ H|MISMATCH|Error' STEP_LINES=60 step "compare-$r" "$logs/compare-$r.log" \
    python3 "$root/tests/perf/compare_torch.py" --lib "$b/src/libfmha.so" --kernels cuda_sm90_ws,cuda_sm80_tc \
    --groups causal,bf16,noncausal,d64,d256,gqa,prefill --quiet --json "$out/compare-$r.jsonl" "${plot[@]}"
done
