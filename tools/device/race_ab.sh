#!/usr/bin/env bash
# racecheck A/B of cuda_sm90_ws: this tree against it with $BASE_PATCHES
# reversed (one call, from the repository root on the H200; logs under
# $OUT, else ./race_ab-out: summary.txt, logs.tgz). Both trees build the
# instances the sm90 persistent-tile and FP8 tests run (reduced, in
# parallel), then run those tests under compute-sanitizer racecheck
# (FMHA_TEST_QUICK=$QUICK, default 3); the summary lists each tree's
# hazards by kernel and shared-memory byte range.
set -u -o pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=tools/device/steps.sh
. "$root/tools/device/steps.sh"
logs_under race_ab
base_src=/tmp/race-base
note "race_ab.sh $(date -u '+%Y-%m-%d %H:%M UTC'), GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
rm -rf "$base_src" && mkdir -p "$base_src"
tar -C "$root" --exclude=./race_ab-out -cf - . | tar -C "$base_src" -xf -
for p in ${BASE_PATCHES:-}; do (cd "$base_src" && git apply -R "$p") || { note "cannot reverse $p"; exit 1; }; done
cfg=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DFMHA_BUILD_EXAMPLES=OFF -DFMHA_BUILD_BENCHMARKS=OFF -DFMHA_BUILD_PYTHON=OFF
  -DFMHA_BUILD_RUST=OFF -DFMHA_BUILD_TESTS=ON -DCMAKE_CUDA_ARCHITECTURES=90-real
  "-DFMHA_SM90_INSTANCES=f16:64;f16:128;bf16:128;f16:256;e4m3:128" "-DFMHA_SM80_INSTANCES=f16:128")
STEP_PATTERN='error:|FAILED|CMake Error'
step configure-new "$logs/cfg-new.log" cmake -S "$root" -B /tmp/race-new "${cfg[@]}" || exit 1
step configure-base "$logs/cfg-base.log" cmake -S "$base_src" -B "$base_src/build" "${cfg[@]}" || exit 1
t0=$SECONDS
cmake --build /tmp/race-new -j8 --target test_gpu >"$logs/build-new.log" 2>&1 &
cmake --build "$base_src/build" -j8 --target test_gpu >"$logs/build-base.log" 2>&1
wait
note "builds $((SECONDS - t0)) s"
STEP_PATTERN='RACECHECK SUMMARY|\[doctest\] (test cases|assertions)'
for which in new base; do
  d=/tmp/race-new; [ $which = base ] && d=$base_src/build
  FMHA_TEST_QUICK=${QUICK:-3} STEP_TIMEOUT=120 step "racecheck-$which" "$logs/racecheck-$which.log" \
    compute-sanitizer --tool racecheck --racecheck-report all "$d/tests/test_gpu" \
    -tc="cuda_sm90_ws: persistent*,sm90 FP8: e4m3*"
  # hazards by kernel (short name) and access offsets
  grep -E 'Race reported|and (Read|Write) access' "$logs/racecheck-$which.log" |
    sed -E 's/void fmha::cuda::sm90::([a-z0-9_]+)<([^,]+),[^>]*<([^>]*)>[^+]*\+/\1<\2,\3>+/g' | sort | uniq -c |
    sort -rn | head -40 | sed 's/^/    /' >>"$summary"
  note "  shared addresses of the hazards ($which):"
  grep -oE 'hazard detected at __shared__ 0x[0-9a-f]+' "$logs/racecheck-$which.log" | awk '{print $NF}' | sort | uniq -c |
    sort -k2 | head -40 | sed 's/^/    /' >>"$summary"
done
