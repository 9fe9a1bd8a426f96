#!/usr/bin/env bash
# The AArch64 stage of CI (issue 10): the CPU backend cross-built with
# Debian's g++-aarch64-linux-gnu (cmake/toolchains/aarch64-linux-gnu.cmake)
# and its tests run under qemu-user. Correctness only: qemu's timings say
# nothing about an ARM CPU.
#
#   1. build-arm64/: libfmha (CPU only) and the API, internal and CPU test
#      programs
#   2. under qemu's "max" core (asimdhp + asimdfhm): the internal tests
#      (hwcap detection must find neonfp16; the NEON F16 conversions against
#      the software ones, all 65536 halves), the API tests on the automatic
#      path (neonfp16), with neon forced and with baseline forced, and the
#      CPU numerics suite once per path (neonfp16, neon, baseline): same
#      cases, same tolerances against the float64 reference, thread counts
#      bitwise identical
#   3. under a Cortex-A72 (no FP16 arithmetic): the detection falls back to
#      neon and a forced neonfp16 is refused
#
#   tools/ci_aarch64.sh
set -euo pipefail
source "$(dirname "$0")/common.sh"
stage_start=$(date +%s)

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
need=()
command -v aarch64-linux-gnu-g++ >/dev/null 2>&1 || need+=(g++-aarch64-linux-gnu libc6-dev-arm64-cross)
command -v qemu-aarch64 >/dev/null 2>&1 || need+=(qemu-user)
command -v ninja >/dev/null 2>&1 || need+=(ninja-build)
[ -f /usr/include/doctest/doctest.h ] || need+=(doctest-dev)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# doctest is header-only: the cross build takes the host's header from a
# folder of its own, never -I/usr/include (x86-64 system headers).
build="$root/build-arm64"
mkdir -p "$build/doctest-include/doctest"
ln -sf /usr/include/doctest/doctest.h "$build/doctest-include/doctest/doctest.h"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE="$root/cmake/toolchains/aarch64-linux-gnu.cmake" \
  -DFMHA_ENABLE_CUDA=OFF -DFMHA_BUILD_TESTS=ON -DFMHA_BUILD_EXAMPLES=OFF -DFMHA_BUILD_BENCHMARKS=OFF \
  -DFMHA_BUILD_PYTHON=OFF -DFMHA_BUILD_RUST=OFF -DFMHA_DOCTEST_INCLUDE_DIR="$build/doctest-include" >/dev/null
cmake --build "$build" -j"$jobs" --target test_api test_internal test_cpu
echo "aarch64 build: $(( $(date +%s) - stage_start )) s"

run() { ctest --test-dir "$build" --output-on-failure "$@"; }
status=0
# 2. qemu's "max" core. The suites are mostly single-threaded under qemu and
# most of their time is the test data and the float64 reference (libm under
# emulation): all at once, one more job than cores, keeps both cores busy to
# the end.
export QEMU_CPU=max
FMHA_TEST_EXPECT_ISA=neonfp16 run -j$((jobs + 1)) \
  -R '^(test_internal|test_api|test_api_isa_(neon|baseline)|test_cpu_isa_(neonfp16|neon|baseline))$' || status=1
# 3. A core without FP16 arithmetic.
export QEMU_CPU=cortex-a72
FMHA_TEST_EXPECT_ISA=neon run -R '^test_internal$' || status=1
echo "aarch64 stage: $(( $(date +%s) - stage_start )) s"
exit $status
