#!/usr/bin/env bash
# Issue 8: where cuda_sm90_ws's warps stall, per SASS instruction (Nsight
# Compute's source counters: PC sampling), on the H200, from the repository
# root. Logs under $OUT (else ./srcview-out): summary.txt, the per-
# instruction tables (srcview_table.py) and logs.tgz (the raw source-page
# CSVs among them).
#
#   1. a reduced build with -lineinfo (90-real; cuda_sm90_ws f16/bf16 D=128,
#      cuda_sm80_tc f16/bf16 D=128 for the registry's fallbacks) in
#      $SRCVIEW_BUILD_DIR (default /tmp/fmha-srcview-build): fmha, bench_cuda
#   2. per shape of $SRCVIEW_SHAPES ("name|bench_cuda arguments;..."; default:
#      causal FP16 B=1 H=32 N=8192 D=128 "seed8k", non-causal "full8k"), ncu
#      of one cuda_sm90_ws
#      forward (its 6th launch) with the SourceCounters, WarpStateStats and
#      SpeedOfLight sections, clocks left alone (--clock-control none); the
#      report's source page as CSV (SASS, with the CUDA line of each
#      instruction where -lineinfo gives one)
#   3. srcview_table.py over each CSV: stall samples by opcode, by source
#      line, by address range of the key loop, and the top instructions
#
# About 3-4 minutes of device time (the build ~100 s, each ncu pass ~40 s).
set -u -o pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bdir=${SRCVIEW_BUILD_DIR:-/tmp/fmha-srcview-build}
# shellcheck source=tools/device/steps.sh
. "$root/tools/device/steps.sh"
logs_under srcview
note "srcview.sh $(date -u '+%Y-%m-%d %H:%M UTC') at $(git -C "$root" rev-parse --short HEAD 2>/dev/null)$(git -C "$root" diff --quiet 2>/dev/null || echo '+changes'), GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"

STEP_PATTERN='error:|FAILED|CMake Error'
step configure "$logs/build.log" cmake -S "$root" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DFMHA_BUILD_TESTS=ON -DFMHA_BUILD_EXAMPLES=OFF -DFMHA_BUILD_BENCHMARKS=ON -DFMHA_BUILD_PYTHON=OFF \
  -DFMHA_BUILD_RUST=OFF -DCMAKE_CUDA_ARCHITECTURES=90-real -DCMAKE_CUDA_FLAGS=-lineinfo \
  "-DFMHA_SM80_INSTANCES=f16:128;bf16:128" "-DFMHA_SM90_INSTANCES=f16:128;bf16:128" || exit 1
step build "$logs/build2.log" cmake --build "$bdir" -j"${JOBS:-16}" --target fmha bench_cuda || exit 1
bench=$(find "$bdir" -name bench_cuda -type f -perm -u+x | head -1)
ncu --help 2>&1 | grep -A4 -E 'print-source|--page' >"$logs/ncu-help.txt"

shapes=${SRCVIEW_SHAPES:-"seed8k|--suite seed --n 8192;full8k|--suite noncausal --n 8192"}
while IFS='|' read -r name args; do
  [ -n "$name" ] || continue
  rep="$logs/$name"
  # shellcheck disable=SC2086
  STEP_TIMEOUT=240 STEP_PATTERN='==PROF==|==ERROR==|Error' step "ncu-$name" "$logs/ncu-$name.txt" \
    ncu --clock-control none --kernel-name regex:fwd_kernel --launch-skip 5 --launch-count 1 \
    --section SourceCounters --section WarpStateStats --section SpeedOfLight --import-source yes \
    -f -o "$rep" "$bench" $args --kernels cuda_sm90_ws --no-check --group-ms 2
  [ -f "$rep.ncu-rep" ] || continue
  ncu --import "$rep.ncu-rep" --print-details all >"$logs/ncu-$name-details.txt" 2>&1
  if ! ncu --import "$rep.ncu-rep" --page source --csv --print-source sass >"$logs/$name-sass.csv" 2>"$logs/$name-csv.err"; then
    ncu --import "$rep.ncu-rep" --page source --csv >"$logs/$name-sass.csv" 2>>"$logs/$name-csv.err"
  fi
  python3 "$root/tools/device/srcview_table.py" "$logs/$name-sass.csv" >"$out/$name-table.txt" 2>&1
  note "== $name: $(head -3 "$out/$name-table.txt" | tr '\n' ' ')"
  grep -E 'Warp Cycles Per Issued|Issue Slots Busy|No Eligible|Stall' "$logs/ncu-$name-details.txt" | head -20 |
    sed 's/^/    /' >>"$summary"
  rm -f "$rep.ncu-rep"  # large; the CSV and the details carry what the tables read
done < <(echo "$shapes" | tr ';' '\n')
