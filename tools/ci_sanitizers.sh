#!/usr/bin/env bash
# The sanitizer and fuzzing stage of CI (issue 7), CPU only, with Debian's
# clang (installed when missing):
#
#   1. build-san/: library, CPU tests and the libFuzzer target under clang
#      ASan + UBSan, with float-cast-overflow and the integer checks on; runs
#      the CPU tests (the fuzz corpus replay among them; the CPU suite once
#      per path this CPU has, not again on the automatic one)
#   2. a bounded libFuzzer run of tests/fuzz/fuzz_api from the committed
#      corpus (FUZZ_SECONDS, default 120); new inputs go to a scratch folder,
#      a crash fails the stage and leaves its reproducer in build-san/fuzz-out
#   3. build-tsan/: the API tests (the concurrency test among them) under
#      ThreadSanitizer
#
#   tools/ci_sanitizers.sh [--fuzz-seconds N] [--no-tsan]
#
# Sanitizer choice: -fsanitize=integer also reports two things that are
# defined behaviour: unsigned wrap-around, which fmha relies on on purpose
# (the binary16 rounding in core/numeric.h adds a bias mod 2^32; the tests'
# and the fuzz target's linear congruential generators wrap), and unsigned
# left shifts that drop bits, which libstdc++'s mt19937_64 and doctest's
# string hash do. Both are switched off (-fno-sanitize=unsigned-integer-
# overflow,unsigned-shift-base); every other integer check (signed overflow,
# signed shifts, division by zero, implicit truncation and sign change)
# stays on.
set -euo pipefail
source "$(dirname "$0")/common.sh"
fuzz_seconds=${FUZZ_SECONDS:-120}
tsan=1
while [ $# -gt 0 ]; do
  case "$1" in
    --fuzz-seconds) fuzz_seconds=$2; shift ;;
    --no-tsan) tsan=0 ;;
    *) echo "ci_sanitizers.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

# ---- clang and its runtimes (Debian 12: clang-14, libclang-rt-14-dev) ----------
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
apt_install() {
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}
command -v clang++ >/dev/null 2>&1 || { echo "installing clang"; apt_install clang; }
clang_major=$(clang++ --version | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -1)
if [ ! -f "$(clang++ -print-resource-dir)/lib/linux/libclang_rt.fuzzer-$(uname -m).a" ]; then
  echo "installing libclang-rt-$clang_major-dev (libFuzzer and the sanitizer runtimes)"
  apt_install "libclang-rt-$clang_major-dev"
fi
command -v ninja >/dev/null 2>&1 || "$root/tools/deps.sh"

cpu_only=(-G Ninja -DFMHA_ENABLE_CUDA=OFF -DFMHA_BUILD_TESTS=ON -DFMHA_BUILD_EXAMPLES=OFF
          -DFMHA_BUILD_BENCHMARKS=OFF -DFMHA_BUILD_PYTHON=OFF -DFMHA_BUILD_RUST=OFF)
san="-fsanitize=address,undefined,float-cast-overflow,integer"
san="$san -fno-sanitize=unsigned-integer-overflow,unsigned-shift-base"
san="$san -fno-sanitize-recover=all -fno-omit-frame-pointer"
status=0

# ---- 1. ASan + UBSan ---------------------------------------------------------------
start=$(date +%s)
CC=clang CXX=clang++ cmake -S "$root" -B "$root/build-san" "${cpu_only[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DFMHA_BUILD_SHARED=OFF -DFMHA_FUZZ=ON \
  -DCMAKE_C_FLAGS="$san -fsanitize=fuzzer-no-link" -DCMAKE_CXX_FLAGS="$san -fsanitize=fuzzer-no-link" \
  -DCMAKE_EXE_LINKER_FLAGS="$san" >/dev/null
cmake --build "$root/build-san" -j"$jobs"
echo "clang ASan+UBSan build: $(( $(date +%s) - start )) s"
start=$(date +%s)
# test_cpu itself is left out: it runs the automatic path, which is one of
# the forced-path variants test_cpu_isa_* (every path of the architecture)
# that run here anyway.
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir "$root/build-san" --output-on-failure -j"$jobs" -L cpu -E '^test_cpu$' || status=1
echo "clang ASan+UBSan tests: $(( $(date +%s) - start )) s"

# ---- 2. libFuzzer, bounded ----------------------------------------------------------
out="$root/build-san/fuzz-out"
rm -rf "$out"
mkdir -p "$out/new"
start=$(date +%s)
if ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
   "$root/build-san/tests/fuzz/fuzz_api" -max_total_time="$fuzz_seconds" -max_len=512 -timeout=25 \
     -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$out/" \
     "$out/new" "$root/tests/fuzz/corpus" >"$out/fuzz.log" 2>&1; then
  grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb|^Done" "$out/fuzz.log" | sed 's/^/  /'
  echo "libFuzzer: no finding in ${fuzz_seconds} s; $(ls "$out/new" | wc -l) new inputs in $out/new" \
       "(add them to tests/fuzz/corpus with fuzz_api -merge=1 when they add coverage)"
else
  status=1
  tail -40 "$out/fuzz.log"
  echo "libFuzzer: FINDING, reproducer(s): $(ls "$out" | grep -E '^(crash|leak|timeout|oom)-' | tr '\n' ' ')"
  echo "  replay: build-san/tests/fuzz/fuzz_api <file>  (or build/tests/fuzz/fuzz_replay <file>)"
fi
echo "libFuzzer stage: $(( $(date +%s) - start )) s"

# ---- 3. ThreadSanitizer ----------------------------------------------------------------
if ((tsan)); then
  start=$(date +%s)
  CC=clang CXX=clang++ cmake -S "$root" -B "$root/build-tsan" "${cpu_only[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS="-fsanitize=thread" -DCMAKE_CXX_FLAGS="-fsanitize=thread" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" >/dev/null
  cmake --build "$root/build-tsan" -j"$jobs" --target test_api
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 "$root/build-tsan/tests/test_api" || status=1
  echo "ThreadSanitizer build and API tests: $(( $(date +%s) - start )) s"
fi

exit $status
