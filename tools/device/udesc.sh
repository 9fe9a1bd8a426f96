#!/usr/bin/env bash
# Issue 8 (cuda_sm90_ws's wgmma descriptors in uniform registers) and issue
# 14 (the paged FP8 split tile), A/B against the base tree in one call, from
# the repository root on the H200. Logs under $OUT (else ./udesc-out):
# summary.txt and logs.tgz.
#
#   1. this tree: the default build (every instance, 90-real is enough
#      here), fmha, test_sm90, test_gpu, bench_cuda, in $root/build-udesc
#   2. the base: this tree with $BASE_PATCHES reversed (git apply -R) in
#      /tmp/udesc-base, a reduced build (the sm90 16-bit instances, sm80
#      f16:128, f16:64, f16:256, bf16:128, bf16_f8kv:128): fmha, bench_cuda
#   3. test_sm90 (new)
#   4. compare_torch.py --kernels cuda_sm90_ws, new / base / new / base
#      (groups $CMP_GROUPS, --max-n 16384)
#   5. bench_cuda --suite fp8kv (FP8 K/V decode rows), new / base / new / base
#   6. ("fp8pre") bench_cuda --suite fp8 --n 8192 (cuda_sm90_ws FP8 prefill
#      against its BF16), new / base / new / base
# STEPS (default "build,sm90,compare,fp8") picks steps; "gpu" runs test_sm90
# and the whole test_gpu (~130 s) instead of step 3's groups.
set -u -o pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=tools/device/steps.sh
. "$root/tools/device/steps.sh"
logs_under udesc "${KEEP:-0}"
new=$root/build-udesc
base_src=/tmp/udesc-base
base=$base_src/build
steps=${STEPS:-build,sm90,compare,fp8}
groups=${CMP_GROUPS:-causal,bf16,noncausal,d64,d256,gqa,prefill}
patches=${BASE_PATCHES:-}
has() { [[ ",$steps," == *",$1,"* ]]; }
note "udesc.sh $(date -u '+%Y-%m-%d %H:%M UTC') steps $steps, GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"

common=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DFMHA_BUILD_EXAMPLES=OFF -DFMHA_BUILD_BENCHMARKS=ON
  -DFMHA_BUILD_PYTHON=OFF -DFMHA_BUILD_RUST=OFF -DCMAKE_CUDA_ARCHITECTURES=90-real)
if has build; then
  STEP_PATTERN='error:|FAILED|CMake Error'
  t0=$SECONDS
  step configure-new "$logs/build-new.log" cmake -S "$root" -B "$new" "${common[@]}" -DFMHA_BUILD_TESTS=ON || exit 1
  step build-new "$logs/build-new2.log" cmake --build "$new" -j16 --target fmha test_sm90 test_gpu bench_cuda || exit 1
  note "new build $((SECONDS - t0)) s"
  rm -rf "$base_src" && mkdir -p "$base_src"
  tar -C "$root" --exclude=./build-udesc --exclude=./udesc-out -cf - . | tar -C "$base_src" -xf -
  for p in $patches; do
    (cd "$base_src" && git apply -R "$p") || { note "cannot reverse $p"; exit 1; }
  done
  step configure-base "$logs/build-base.log" cmake -S "$base_src" -B "$base" "${common[@]}" -DFMHA_BUILD_TESTS=ON \
    "-DFMHA_SM90_INSTANCES=f16:64;f16:128;bf16:128;f16:256;e4m3:128" \
    "-DFMHA_SM80_INSTANCES=f16:64;f16:128;f16:256;bf16:128;bf16_f8kv:128" || exit 1
  step build-base "$logs/build-base2.log" cmake --build "$base" -j16 --target fmha bench_cuda || exit 1
fi
benchof() { find "$1" -name bench_cuda -type f -perm -u+x | head -1; }
build_of() { if [ "$1" = base ]; then echo "$base"; else echo "$new"; fi; }

if has sm90; then
  STEP_TIMEOUT=120 step test_sm90 "$logs/test_sm90.log" "$new/tests/test_sm90"
  STEP_TIMEOUT=200 step test_gpu-sm90 "$logs/test_gpu-sm90.log" "$new/tests/test_gpu" --duration=true \
    -tc="cuda_sm90_ws*,sm90 FP8*,descales on cuda_sm90_ws*,a NaN in V reaches exactly the rows that see its key (fmha.h*,key tiles outside*,two runs are bitwise equal,sm80 FP8 K/V*,serving: paged*"
fi
if has gpu; then
  STEP_TIMEOUT=120 step test_sm90 "$logs/test_sm90.log" "$new/tests/test_sm90"
  STEP_TIMEOUT=330 step test_gpu "$logs/test_gpu.log" "$new/tests/test_gpu" --duration=true
  grep -E '^[0-9.]+ s: ' "$logs/test_gpu.log" | sort -rn | head -6 | sed 's/^/    /' >>"$summary"
fi
if has compare; then
  for r in 1 2; do
    for which in new base; do
      d=$(build_of $which)
      STEP_TIMEOUT=150 STEP_PATTERN='^B[0-9]+ H|MISMATCH|Error' STEP_LINES=20 step "compare-$which-$r" \
        "$logs/compare-$which-$r.log" python3 "$root/tests/perf/compare_torch.py" --lib "$d/src/libfmha.so" \
        --kernels cuda_sm90_ws --groups "$groups" --max-n 16384 --quiet --json "$logs/compare-$which-$r.jsonl"
    done
  done
fi
if has fp8; then
  for r in 1 2; do
    for which in new base; do
      d=$(build_of $which)
      STEP_TIMEOUT=60 STEP_PATTERN='^\| B=' STEP_LINES=20 step "fp8kv-$which-$r" "$logs/fp8kv-$which-$r.log" \
        "$(benchof "$d")" --suite fp8kv --case 'e4m3 K/V|e5m2 K/V'
    done
  done
fi
if has fp8pre; then
  for r in 1 2; do
    for which in new base; do
      d=$(build_of $which)
      STEP_TIMEOUT=90 STEP_PATTERN='^\| (fp8|FP8|e4m3|bf16|BF16)' STEP_LINES=12 step "fp8pre-$which-$r" \
        "$logs/fp8pre-$which-$r.log" "$(benchof "$d")" --suite fp8 --n 8192
    done
  done
fi
