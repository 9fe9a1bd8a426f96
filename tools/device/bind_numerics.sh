#!/usr/bin/env bash
# The Python bindings' 0.3 inference numerics on the GPU machine (issue 14),
# run from the repository root:
#
#   1. tools/device/torch_op.sh: builds libfmha (sm_90) and runs
#      bindings/python/tests/test_torch.py through the ctypes stand-in, CPU
#      and CUDA: among them test_sdpa_attn_mask (float and bool masks against
#      torch's SDPA), test_op_fp8_descales_alibi (FP8 K/V and FP8 q with
#      descales and ALiBi against a float64 reference), test_fake_tensors_out_dtype
#      and test_opcheck_numerics. A CUDA case whose feature no CUDA kernel
#      runs yet skips with "no CUDA kernel runs this 0.3 feature in this
#      build" (the CUDA rows declare the 0.3 feature bits as they gain them);
#   2. bindings/python/tests/test_numerics_cpu.py (numpy on the CPU backend;
#      its FP8 cases skip without ml_dtypes).
#
# Logs in $OUT: torch_op's (env.txt, build.log, torch.log, forward_cuda.log,
# summary.txt) and numerics_cpu.log. Exit 0 when both passed.
set -u -o pipefail
out=${OUT:-$PWD/bind-numerics-out}
mkdir -p "$out"
OUT=$out bash tools/device/torch_op.sh
status=$?
lib=$(readlink -f "${TORCH_OP_BUILD_DIR:-build}/src/libfmha.so.0" 2>/dev/null || true)
pkg=$(mktemp -d)
trap 'rm -rf "$pkg"' EXIT
mkdir "$pkg/fmha"
cp bindings/python/fmha/*.py bindings/python/fmha/py.typed "$pkg/fmha/"
cd bindings/python/tests
FMHA_LIBRARY="$lib" PYTHONPATH="$pkg" PYTHONDONTWRITEBYTECODE=1 timeout 300 python3 test_numerics_cpu.py \
  > "$out/numerics_cpu.log" 2>&1
rc=$?
[ $rc -eq 0 ] || status=1
echo "numerics_cpu rc=$rc  numerics_cpu.log" | tee -a "$out/summary.txt"
grep -E "^FAILED|passed|failed" "$out/numerics_cpu.log" | tail -10 | sed 's/^/  /' | tee -a "$out/summary.txt"
echo "bind_numerics: $([ $status = 0 ] && echo PASS || echo FAIL)" | tee -a "$out/summary.txt"
exit $status
