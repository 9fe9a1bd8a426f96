#!/usr/bin/env bash
# Issue 10: CPU decode against the memory bandwidth, and fmha beside ggml's
# ggml_flash_attn_ext (llama.cpp's CPU flash attention), on the GPU
# machine's host CPU (16-core Sapphire Rapids), from the repository root.
# Needs ggml's sources at .devbin/ggml (GGML_SRC; see tools/bench_vs_ggml.sh),
# built here with -march=native. Logs under $OUT (else ./ggml-out),
# summary.txt first; about 3 minutes (4 on the 2-core development machine):
#
#   1. fmha CPU-only (Release, -j16): libfmha, bench_cpu, test_cpu, fuzz_replay
#   2. ggml's CPU backend and tests/perf/bench_ggml.cpp (tools/bench_vs_ggml.sh)
#   3. bench_ggml at 1 and all threads: prefill H8 N2048 D128 causal and not,
#      decode Hq32/Hk8 Nq1 D128 Nk 4096/16384/65536; F16 and BF16 K/V
#   4. bench_cpu --decode (F16 and BF16, 1 and all threads) with the
#      bandwidth columns: K+V GB/s beside memcpy and a read-only pass in the
#      same run; at Nk=16384 for the library and, interleaved, two variants
#      built beside it: "staged" (packed decode blocks as before decode16),
#      "noprefetch" (decode16 without software prefetch) and "prefetch2"
#      (two tiles ahead instead of one); at Nk=65536 for the library; Nq=4
#      at Nk=16384 for the library and "staged". Runs that would start past
#      225 s (GGML_BUDGET_S) are left out and say so.
#   (After 1: test_cpu on the automatic path, amx on this host, whose packed
#   decode blocks run the decode16 kernels, and the fuzz corpus replay.)
#
# What it should show: every step rc=0; in bench_ggml.log, speed (ggml ms /
# fmha ms) and both rel-L2 columns (fmha ~1e-6 or below with its F32 output,
# ggml ~1e-2 for F16 K/V, whose V products it accumulates in F16); in
# the summary's bench_cpu rows the KV/memcpy column (the issue's bar: >= 70%
# for Nk >= 16k) and decode16 against staged and noprefetch;
# "0 failed" for test_cpu and "100% tests passed" for the replay.
set -u -o pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out=${OUT:-$root/ggml-out}
mkdir -p "$out"
bdir=${GGML_BUILD_DIR:-$root/build-ggml}
summary="$out/summary.txt"
: >"$summary"
status=0
t_start=$SECONDS
STEP_PATTERN='^(shape|prefill|decode| +[0-9]+ )|ERROR|error:|bench_ggml:|not found'
STEP_LINES=60
source "$root/tools/device/steps.sh"
all=$(nproc)
jobs=${GGML_JOBS:-16}

note "ggml.sh $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
note "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $all cpus; ggml: $(cat "${GGML_SRC:-$root/.devbin/ggml}/SOURCE.txt" 2>/dev/null || echo "no .devbin/ggml")"

# The library, the tools and the tests; beside them two library variants
# for an A/B in this run (src/backend/cpu/cpu_attention.cpp): "staged"
# (FMHA_CPU_DECODE16=0, packed decode blocks as before decode16) and
# "noprefetch" (FMHA_CPU_DECODE16_PREFETCH=0). A variant that fails to build
# is only left out of the A/B.
variant() {  # name define
  cmake -S "$root" -B "$bdir/$1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFMHA_ENABLE_CUDA=OFF -DCMAKE_CXX_FLAGS="-D$2" \
    -DFMHA_BUILD_TESTS=OFF -DFMHA_BUILD_EXAMPLES=OFF -DFMHA_BUILD_BENCHMARKS=OFF &&
    cmake --build "$bdir/$1" -j"$jobs" --target fmha
}
variant staged FMHA_CPU_DECODE16=0 >"$bdir-staged.log" 2>&1 &
staged_pid=$!
variant noprefetch FMHA_CPU_DECODE16_PREFETCH=0 >"$bdir-noprefetch.log" 2>&1 &
noprefetch_pid=$!
variant prefetch2 FMHA_CPU_DECODE16_PREFETCH=2 >"$bdir-prefetch2.log" 2>&1 &
prefetch2_pid=$!
STEP_TIMEOUT=150 step build "$out/build.log" bash -c "
  cmake -S '$root' -B '$bdir/fmha' -G Ninja -DCMAKE_BUILD_TYPE=Release -DFMHA_ENABLE_CUDA=OFF \
    -DFMHA_BUILD_TESTS=ON -DFMHA_BUILD_EXAMPLES=OFF -DFMHA_BUILD_BENCHMARKS=ON &&
  cmake --build '$bdir/fmha' -j$jobs --target fmha bench_cpu test_cpu fuzz_replay" || exit 1
wait "$staged_pid" || note "variant staged did not build (see the end of build.log)"
wait "$noprefetch_pid" || note "variant noprefetch did not build (see the end of build.log)"
wait "$prefetch2_pid" || note "variant prefetch2 did not build (see the end of build.log)"
tail -n 3 "$bdir-staged.log" "$bdir-noprefetch.log" "$bdir-prefetch2.log" >>"$out/build.log" 2>/dev/null

# Exactness on this host's automatic path first (amx here: its packed decode
# blocks run the decode16 kernels).
STEP_PATTERN='\[doctest\] (test cases|assertions)|ERROR:' STEP_TIMEOUT=60 step test_cpu "$out/tests.log" \
  "$bdir/fmha/tests/test_cpu" || status=1
STEP_PATTERN='tests passed|tests failed|Failed' STEP_TIMEOUT=30 step fuzz_replay "$out/replay.log" \
  ctest --test-dir "$bdir/fmha" -R fuzz_corpus_replay --output-on-failure || status=1

# bench_vs_ggml builds ggml and bench_ggml, then runs it (its build lines
# go to $bdir/*.log).
STEP_TIMEOUT=120 step bench_ggml_decode "$out/bench_ggml.log" env BUILD_DIR="$bdir" FMHA_BUILD="$bdir/fmha" JOBS=$jobs \
  "$root/tools/bench_vs_ggml.sh" -- --shapes decode --threads "1,$all" --reps 7 --warmup 1 || status=1
tail -n 5 "$bdir/ggml-build.log" >>"$out/build.log" 2>/dev/null
# Prefill: ggml's BF16 K/V take its per-row path, seconds per call at one
# thread, hence fewer rounds and no warm-up (the inputs are written, so
# touched, before the first call).
STEP_TIMEOUT=100 step bench_ggml_prefill "$out/bench_ggml.part" "$bdir/bench_ggml" --shapes prefill \
  --threads "1,$all" --reps 3 --warmup 0 || status=1
cat "$out/bench_ggml.part" >>"$out/bench_ggml.log"
rm -f "$out/bench_ggml.part"

# bench_cpu --decode per library variant, interleaved (two rounds, the
# second in reverse order), each with its own memcpy / read-only columns.
bench=$bdir/fmha/tests/perf/bench_cpu
: >"$out/bench_cpu.log"
ab() {  # variant library-dir dtype nk [nq]
  local nq=${5:-1}
  if [ $((SECONDS - t_start)) -gt "${GGML_BUDGET_S:-225}" ]; then
    note "  $1 $3 Nk=$4 Nq=$nq: not run, past the time budget"
    return
  fi
  if [ ! -f "$2/libfmha.so.0" ]; then
    note "  $1: no library"
    return
  fi
  echo "== $1 $3 Nk=$4 Nq=$nq" >>"$out/bench_cpu.log"
  LD_LIBRARY_PATH="$2" timeout 60 "$bench" --decode --nk "$4" --nq "$nq" --dtype "$3" --threads "1,$all" --reps 9 \
    >>"$out/bench_cpu.log" 2>&1 || status=1
  tail -n 2 "$out/bench_cpu.log" | grep -E '^ +[0-9]+ ' |
    sed "s/^/$(printf '%-10s %-4s %6s %s' "$1" "$3" "$4" "nq$nq")/" | tee -a "$summary"
}
t0=$SECONDS
note "bench_cpu --decode (Hq32/Hk8 Nq1 D128): variant dtype Nk | threads median-ms min-ms GFLOP/s workspace rel-L2 KV-GB/s memcpy read KV/memcpy"
# Nk=16384 (64 MiB of K+V) for the A/B; Nk=65536 (256 MiB, seconds of
# input generation per run) for the library only.
for dt in f16 bf16; do
  ab decode16 "$bdir/fmha/src" "$dt" 16384
  ab staged "$bdir/staged/src" "$dt" 16384
  ab noprefetch "$bdir/noprefetch/src" "$dt" 16384
  ab prefetch2 "$bdir/prefetch2/src" "$dt" 16384
  ab prefetch2 "$bdir/prefetch2/src" "$dt" 16384
  ab noprefetch "$bdir/noprefetch/src" "$dt" 16384
  ab staged "$bdir/staged/src" "$dt" 16384
  ab decode16 "$bdir/fmha/src" "$dt" 16384
done
for dt in f16 bf16; do
  ab decode16 "$bdir/fmha/src" "$dt" 65536
done
# Nq=4 (16 rows per block: 4x the FLOP per byte of Nq=1).
for dt in f16 bf16; do
  ab decode16 "$bdir/fmha/src" "$dt" 16384 4
  ab staged "$bdir/staged/src" "$dt" 16384 4
done
note "bench_cpu A/B: $((SECONDS - t0))s"
note "status $status, $((SECONDS - t_start))s"
exit $status
