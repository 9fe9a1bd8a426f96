#!/usr/bin/env bash
# fmha.torch on the GPU machine, run from the repository root:
#
#   1. builds libfmha (Release, sm_90; the Python extension is not built:
#      there is no SWIG there, and none is needed);
#   2. assembles the Python package from bindings/python/fmha/*.py alone: its
#      fmha.capi is then the ctypes stand-in (fmha/_capi_ctypes.py) over
#      FMHA_LIBRARY=<build>/src/libfmha.so.0;
#   3. runs bindings/python/tests/test_torch.py (the fmha::forward custom op
#      and fmha.torch.sdpa against torch's SDPA, torch.compile(fullgraph=True)
#      with aot_eager and inductor, opcheck, torch's current stream) on CPU
#      and CUDA: under pytest when the machine has it, else as a plain script
#      (tests/minipytest.py);
#   4. with pytest, also the package's CUDA tests (test_forward_cuda.py),
#      through the same ctypes path.
#
# Logs go to $OUT (or ./torch-op-out): env.txt, build.log, torch.log,
# forward_cuda.log, summary.txt. Exit status 0 when every step passed.
#
# Environment: TORCH_OP_BUILD_DIR (default build; an existing one keeps its
# configuration, else it is configured for the library alone), TORCH_OP_ARCH
# (default 90-real), TORCH_OP_JOBS (default 16), TORCH_OP_BUILD=0 skips the
# build, TORCH_OP_TIMEOUT (seconds per test step, default 400).
set -u -o pipefail

out=${OUT:-$PWD/torch-op-out}
bdir=${TORCH_OP_BUILD_DIR:-build}
mkdir -p "$out"
summary="$out/summary.txt"
: > "$summary"
status=0
note() { echo "$*" | tee -a "$summary"; }

{
  date -u '+%Y-%m-%d %H:%M:%S UTC'
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1
  python3 -c 'import sys, numpy, torch; print("python", sys.version.split()[0], "numpy", numpy.__version__,
"torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1
  python3 -c 'import pytest; print("pytest", pytest.__version__)' 2>/dev/null ||
    echo "no pytest: the torch tests run as a plain script"
} > "$out/env.txt"
cat "$out/env.txt" | tee -a "$summary"

# ---- 1. libfmha -----------------------------------------------------------------
if [ "${TORCH_OP_BUILD:-1}" = 1 ]; then
  t0=$SECONDS
  # An existing build directory (gpu_check.sh's) keeps its configuration:
  # only the library target is brought up to date.
  { if [ ! -f "$bdir/CMakeCache.txt" ]; then
      cmake -S . -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_CUDA_ARCHITECTURES="${TORCH_OP_ARCH:-90-real}" -DFMHA_BUILD_PYTHON=OFF \
        -DFMHA_BUILD_EXAMPLES=OFF -DFMHA_BUILD_TESTS=OFF -DFMHA_BUILD_BENCHMARKS=OFF
    fi &&
    cmake --build "$bdir" -j"${TORCH_OP_JOBS:-16}" --target fmha; } > "$out/build.log" 2>&1
  rc=$?
  note "build      rc=$rc $((SECONDS - t0))s"
  if [ $rc -ne 0 ]; then
    grep -E "error|FAILED" "$out/build.log" | head -20 | tee -a "$summary"
    exit 1
  fi
fi
lib=$(readlink -f "$bdir/src/libfmha.so.0" 2>/dev/null || true)
[ -f "$lib" ] || { note "no $bdir/src/libfmha.so.0 (FMHA_BUILD_SHARED=OFF?)"; exit 1; }

# ---- 2. the package, without SWIG ------------------------------------------------
pkg=$(mktemp -d)
trap 'rm -rf "$pkg"' EXIT
mkdir "$pkg/fmha"
cp bindings/python/fmha/*.py bindings/python/fmha/py.typed "$pkg/fmha/"
export FMHA_LIBRARY="$lib" PYTHONPATH="$pkg" PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
python3 -c 'import fmha; print("fmha", fmha.__version__, "capi:", fmha.capi.__name__, "kernels:", fmha.kernels())' \
  2>&1 | tee -a "$summary"

# ---- 3, 4. tests -------------------------------------------------------------------
tests=bindings/python/tests
t0=$SECONDS
if python3 -c 'import pytest' 2>/dev/null; then
  timeout "${TORCH_OP_TIMEOUT:-400}" python3 -m pytest -v -rs -p no:cacheprovider "$tests/test_torch.py" > "$out/torch.log" 2>&1
else
  timeout "${TORCH_OP_TIMEOUT:-400}" python3 "$tests/test_torch.py" > "$out/torch.log" 2>&1
fi
rc=$?
[ $rc -eq 0 ] || status=1
note "test_torch rc=$rc $((SECONDS - t0))s  torch.log"
grep -E "^(FAILED|SKIPPED \[[0-9]+\])|passed|failed|no tests ran" "$out/torch.log" | tail -25 | sed 's/^/  /' | tee -a "$summary"

# On the GPU machine a skipped CUDA case is a failure of this script's purpose.
if grep -qE "torch sees no CUDA GPU|fmha's CUDA backend is not available" "$out/torch.log"; then
  status=1
  note "the CUDA cases were skipped: $(grep -oE "(torch sees no CUDA GPU|fmha's CUDA backend is not available[^\"]*)" "$out/torch.log" | head -1)"
fi

if python3 -c 'import pytest' 2>/dev/null; then
  t0=$SECONDS
  timeout "${TORCH_OP_TIMEOUT:-400}" python3 -m pytest -q -rs -p no:cacheprovider "$tests/test_forward_cuda.py" \
    > "$out/forward_cuda.log" 2>&1
  rc=$?
  [ $rc -eq 0 ] || status=1
  note "forward_cuda rc=$rc $((SECONDS - t0))s  forward_cuda.log"
  tail -5 "$out/forward_cuda.log" | sed 's/^/  /' | tee -a "$summary"
else
  note "forward_cuda: skipped (test_forward_cuda.py needs pytest)"
fi

note "torch_op: $([ $status = 0 ] && echo PASS || echo FAIL)"
exit $status
