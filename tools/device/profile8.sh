#!/usr/bin/env bash
# Issue 8 (and the session's slimmed test groups): where cuda_sm90_ws's causal
# D=128 time goes, from Nsight Compute, against cuDNN's kernel on the same
# shape; from the repository root on the H200. Logs under $OUT (else
# ./profile8-out), tarred into logs.tgz beside summary.txt. Build dir
# $PROFILE8_BUILD_DIR (default /tmp/fmha-profile8-build), -j${JOBS:-16}.
#
#   1. a reduced build (90-real; cuda_sm80_tc bf16/f16 D=128 and bf16_f8kv
#      D=128, cuda_sm90_ws f16/bf16 D=128): fmha, test_gpu, bench_cuda
#   2. test_gpu's groups this session changed (paged tiles per grid, FP8 K/V
#      decode and its explain check, the decode explain check)
#   3. ncu of one cuda_sm90_ws forward, causal FP16 B=1 H=32 N=8192 D=128
#      (bench_cuda --suite seed --n 8192, its 6th launch): the speed-of-light,
#      compute, scheduler, warp-state, instruction and memory sections, as
#      text (ncu --print-details all)
#   4. ncu of cuDNN's kernel on the same shape (torch SDPA, cuDNN backend,
#      its 6th launch), the same sections
#   summary.txt: the step lines, the SOL / tensor-pipe / issue-slot / stall
#   lines of both profiles side by side.
set -u -o pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bdir=${PROFILE8_BUILD_DIR:-/tmp/fmha-profile8-build}
# shellcheck source=tools/device/steps.sh
. "$root/tools/device/steps.sh"
logs_under profile8
note "profile8.sh $(date -u '+%Y-%m-%d %H:%M UTC'), GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"

STEP_PATTERN='error:|FAILED|CMake Error'
step configure "$logs/build.log" cmake -S "$root" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DFMHA_BUILD_TESTS=ON -DFMHA_BUILD_EXAMPLES=OFF -DFMHA_BUILD_BENCHMARKS=ON -DFMHA_BUILD_PYTHON=OFF \
  -DFMHA_BUILD_RUST=OFF -DCMAKE_CUDA_ARCHITECTURES=90-real \
  "-DFMHA_SM80_INSTANCES=f16:128;bf16:128;bf16_f8kv:128" "-DFMHA_SM90_INSTANCES=f16:128;bf16:128" || exit 1
step build "$logs/build2.log" cmake --build "$bdir" -j"${JOBS:-16}" --target fmha test_gpu bench_cuda || exit 1
lib=$(find "$bdir" -name 'libfmha.so' | head -1)
bench=$(find "$bdir" -name bench_cuda -type f -perm -u+x | head -1)

STEP_TIMEOUT=150 STEP_PATTERN='ERROR:|\[doctest\] (test cases|assertions)|per grid|fp8 kv decode' step tests "$logs/tests.log" \
  "$bdir/tests/test_gpu" --duration=true \
  -tc="serving: paged decode tiles per grid*,sm80 FP8 K/V: decode*,sm80 FP8 K/V: explain*,serving: explain names cuda_sm80_tc*"
grep -E '^[0-9.]+ s: ' "$logs/tests.log" | sort -rn | head -6 | sed 's/^/    /' >>"$summary"

sections=(--section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats --section WarpStateStats
          --section InstructionStats --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy)
STEP_TIMEOUT=180 STEP_PATTERN='==PROF==|Error' step ncu-fmha "$logs/ncu-fmha.txt" \
  ncu --kernel-name regex:fwd_kernel --launch-skip 5 --launch-count 1 "${sections[@]}" --print-details all \
  "$bench" --suite seed --n 8192 --kernels cuda_sm90_ws --no-check --group-ms 2
cat >"$logs/cudnn_one.py" <<'EOF'
import torch
from torch.nn.attention import sdpa_kernel, SDPBackend
q, k, v = (torch.randn(1, 32, 8192, 128, device="cuda", dtype=torch.float16) for _ in range(3))
with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
    for _ in range(8):
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
torch.cuda.synchronize()
EOF
STEP_TIMEOUT=180 STEP_PATTERN='==PROF==|Error' step ncu-cudnn "$logs/ncu-cudnn.txt" \
  ncu --launch-skip 5 --launch-count 1 --kernel-name 'regex:cudnn|sdpa|fmha|flash|attn' "${sections[@]}" \
  --print-details all python3 "$logs/cudnn_one.py"
for f in ncu-fmha ncu-cudnn; do
  note "== $f"
  grep -E '^  [a-zA-Z_]+.*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|Executed Ipc|Issue Slots Busy|Issued Warp|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued|Registers Per Thread|Shared Memory Configuration Size|Achieved Occupancy|L1/TEX Hit|L2 Hit|DRAM Throughput|Stall' \
    "$logs/$f.txt" | head -40 | sed 's/^/    /' >>"$summary"
done
