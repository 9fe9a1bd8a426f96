#!/usr/bin/env bash
# Context parallelism (issue 12) on a machine with two GPUs (nvidia-h200-x2:
# torch with NCCL, Python 3, no SWIG, no network), run from the repository
# root; logs under $OUT (./cp-out elsewhere). About 5-8 minutes:
#
#   1. build libfmha (Release, Ninja, sm_90, the library target only)
#   2. examples/python/context_parallel.py --check through ctypes (no SWIG
#      there): N = 2 (and N = 1) against one fmha forward over the whole
#      sequence, BF16 and FP16, S = 8192 (divides by 2N) and 8199 (uneven
#      chunks), GQA 32/8 D=128 and MQA 8/1 D=64
#   3. --bench causal BF16 H=32/8 D=128, S = 131072 and 262144, on 1 and 2
#      GPUs: ring time, TFLOP/s per GPU, compute-only and comm-only times and
#      the share of the K/V transfer hidden under compute
#   4. examples/c/context_parallel.c (compiled here against the built
#      libfmha and the NCCL of torch's nvidia-nccl wheel): N = 2 and 1,
#      S = 4099, checked against one forward
#
# writing build.log, check.log, bench.log, example_c.log and summary.txt.
# Expect rc=0 everywhere, every check line PASS, and bench lines like
#   bench N=2 S=262144 ... ring X ms, Y TFLOP/s per GPU; compute only ...;
#   comm only ...; exposed comm ... ms, hidden Z%
# (Y on 2 GPUs close to the 1-GPU figure, Z near 100%).
set -u -o pipefail
bdir=${CP_BUILD_DIR:-build}
out=${OUT:-$PWD/cp-out}
py=${PYTHON:-python3}
mkdir -p "$out"
summary="$out/summary.txt"
: > "$summary"
status=0
note() { echo "$*" | tee -a "$summary"; }
step() {
  local name=$1 log=$2
  shift 2
  local t0=$SECONDS
  echo "== $name: $*" >> "$log"
  "$@" >>"$log" 2>&1
  local rc=$?
  note "$(printf '%-12s rc=%-3s %4ss  %s' "$name" "$rc" "$((SECONDS - t0))" "$(basename "$log")")"
  return $rc
}
note "context_parallel.sh $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader 2>&1 | sed 's/^/  /' | tee -a "$summary"
$py -c "import torch; print('  torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), 'gpus', torch.cuda.device_count())" 2>&1 | tee -a "$summary"

step configure "$out/build.log" cmake -S . -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DFMHA_BUILD_EXAMPLES=OFF -DFMHA_BUILD_TESTS=OFF -DFMHA_BUILD_BENCHMARKS=OFF -DFMHA_BUILD_PYTHON=OFF \
  -DCMAKE_CUDA_ARCHITECTURES="${CP_ARCH:-90-real}" || { cat "$summary"; exit 1; }
step build "$out/build.log" cmake --build "$bdir" -j"${CP_JOBS:-32}" --target fmha ||
  { grep -E "error|FAILED" "$out/build.log" | head -20 | tee -a "$summary"; exit 1; }

export FMHA_LIBRARY=$PWD/$bdir/src/libfmha.so.0 PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=4
cp_run() {  # cp_run N args...: torchrun of the Python example through ctypes
  local n=$1
  shift
  timeout 300 $py -m torch.distributed.run --standalone --nproc-per-node "$n" \
    examples/python/context_parallel.py --fmha ctypes "$@"
}
step check_n2 "$out/check.log" cp_run 2 --check --seq 8192,8199 --dtype bf16,fp16 || status=1
step check_n2_mqa "$out/check.log" cp_run 2 --check --seq 4096,4101 --dtype bf16,fp16 --heads 8 --kv-heads 1 --dim 64 ||
  status=1
step check_n1 "$out/check.log" cp_run 1 --check --seq 8199 --dtype bf16,fp16 || status=1
grep -E "^check|Error|error" "$out/check.log" | sed 's/^/  /' | tee -a "$summary"

for n in 1 2; do
  step bench_n$n "$out/bench.log" cp_run $n --bench --seq 131072,262144 --dtype bf16 --iters 3 || status=1
done
grep -E "^bench|Error|error" "$out/bench.log" | sed 's/^/  /' | tee -a "$summary"

# The C example against torch's NCCL wheel (nvidia/nccl/{include,lib}), else
# the CUDA toolkit's NCCL.
cuda_home=$(dirname "$(dirname "$(command -v nvcc)")")
nccl=$($py -c "import nvidia.nccl as m, os; print(list(m.__path__)[0])" 2>/dev/null)
if [ -z "$nccl" ] || [ ! -f "$nccl/include/nccl.h" ]; then
  nccl=$cuda_home
fi
nlib=$(ls "$nccl"/lib/libnccl.so* "$nccl"/lib64/libnccl.so* 2>/dev/null | head -1)
if [ -f "$nccl/include/nccl.h" ] && [ -n "$nlib" ]; then
  note "  NCCL for the C example: $nlib"
  step build_c "$out/example_c.log" cc -std=c11 -O2 -Wall -Iinclude -I"$nccl/include" -I"$cuda_home/include" \
    examples/c/context_parallel.c -o "$bdir/context_parallel_c" -L"$bdir/src" -lfmha -L"$cuda_home/lib64" \
    -lcudart "$nlib" -lm -Wl,-rpath,"$PWD/$bdir/src:$(dirname "$nlib"):$cuda_home/lib64" || status=1
  step example_c_n2 "$out/example_c.log" timeout 120 "$bdir/context_parallel_c" 4099 2 || status=1
  step example_c_n1 "$out/example_c.log" timeout 120 "$bdir/context_parallel_c" 4099 1 || status=1
  step example_c_64k "$out/example_c.log" timeout 120 "$bdir/context_parallel_c" 65536 2 || status=1
  grep -E "^context_parallel_c|error" "$out/example_c.log" | sed 's/^/  /' | tee -a "$summary"
else
  note "example_c    skipped: no NCCL (torch's nvidia/nccl wheel or $cuda_home/include/nccl.h)"
fi
note "status=$status"
exit $status
