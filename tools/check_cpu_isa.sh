#!/bin/sh
# Checks that a built libfmha (shared or static, x86-64) keeps every AVX,
# AVX2 or AVX-512 instruction (VEX/EVEX-encoded: mnemonics v*, and the
# AVX-512 opmask k* instructions) inside the functions the CPU backend's
# run-time dispatch chooses among (src/backend/cpu/cpu_isa.h): the run_block
# variants and the intrinsic helpers that carry their own target attributes.
# Anything else would be executed on any x86-64 CPU and crash one without
# the extension. Usage: check_cpu_isa.sh <libfmha.so|libfmha.a>
set -eu
lib=$1
command -v objdump >/dev/null || { echo "check_cpu_isa: skipped: no objdump"; exit 77; }
allowed='run_block_avx2|run_block_avx512|run_block_avx512bf16|run_block_avx512fp16|run_block_amx|fmha::cpu::amx::gemm|release_amx|f16_to_f32_f16c|f16_to_f32_avx512|f32_to_f16_f16c|f32_to_f16_avx512|bf16_score_tile|bf16_score_strip|bf16_dot_tile|bf16_dot_strip|fold_zmm|amx_softmax_tile|pack_kv_amx|transpose_q16|split_row_amx|decode16_'
report=$(objdump -d --no-show-raw-insn -C "$lib" | awk '
  /^[0-9a-f]+ <.*>:$/ { fn = $0; next }
  /^ +[0-9a-f]+:\t(v[a-z0-9]+|k[a-z]+[bwdq]|tileload[a-z0-9]*|tilestored|tilezero|tilerelease|ldtilecfg|sttilecfg|tdp[a-z0-9]+) / { n[fn]++ }
  END { for (f in n) print n[f] "\t" f }')
bad=$(printf '%s\n' "$report" | grep -v -E "$allowed" | grep . || true)
printf '%s\n' "$report" | grep . | sort -rn | sed 's/^/check_cpu_isa: /'
if [ -n "$bad" ]; then
  echo "check_cpu_isa: FAIL: vector-extension instructions outside the dispatched functions:"
  printf '%s\n' "$bad"
  exit 1
fi
echo "check_cpu_isa: ok"
