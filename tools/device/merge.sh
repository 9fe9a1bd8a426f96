#!/usr/bin/env bash
# fmha_merge on the GPU (issue 9), run from the repository root on a machine
# with a CUDA GPU (OUT is set on the lent device machine; elsewhere logs go
# to ./merge-out):
#
#   1. configure and build test_gpu (Release, Ninja, no examples)
#   2. test_gpu's merge cases (-tc='cuda merge*'): random parts against a
#      float64 merge (1-8 parts, every dtype pair, strided o, -inf and NaN
#      rows), in place, the rounds beyond 64 parts (64, 65, 130), the CPU
#      handle's merge, key-slice forwards of every CUDA kernel merged vs one
#      float64 forward over all the keys, graph capture on the handle's
#      stream, and validation (host memory, rounds without lse)
#   3. the same cases under compute-sanitizer memcheck and racecheck
#   4. examples/c/paged_cascade.c on the CUDA handle (compiled here against
#      the built libfmha, the examples being off): a paged decode step and
#      its cascade merged with fmha_merge, against float64 (needs the CUDA
#      kernels' paged support from issue9-cuda; without it the decode step
#      reports FMHA_ERROR_UNSUPPORTED)
#
# writing build.log, merge.log, memcheck.log, racecheck.log, example.log and
# summary.txt under $OUT. Every step should end with rc=0, doctest "Status:
# SUCCESS!", the sanitizers with "ERROR SUMMARY: 0 errors" and the example
# with "PASS".
set -u -o pipefail
bdir=${MERGE_BUILD_DIR:-build}
out=${OUT:-$PWD/merge-out}
mkdir -p "$out"
summary="$out/summary.txt"
: > "$summary"
status=0
note() { echo "$*" | tee -a "$summary"; }
step() {
  local name=$1 log=$2
  shift 2
  local t0=$SECONDS
  echo "== $name: $*" > "$log"
  "$@" >>"$log" 2>&1
  local rc=$?
  note "$(printf '%-10s rc=%-3s %4ss  %s' "$name" "$rc" "$((SECONDS - t0))" "$(basename "$log")")"
  return $rc
}
note "merge.sh $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
step configure "$out/build.log" cmake -S . -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DFMHA_BUILD_EXAMPLES=OFF -DCMAKE_CUDA_ARCHITECTURES="${MERGE_ARCH:-90-real}" || { cat "$summary"; exit 1; }
step build "$out/build.log.2" cmake --build "$bdir" -j"${MERGE_JOBS:-16}" --target test_gpu ||
  { grep -E "error|FAILED" "$out/build.log.2" | head -20 | tee -a "$summary"; exit 1; }
cat "$out/build.log.2" >> "$out/build.log" && rm -f "$out/build.log.2"
tg="$bdir/tests/test_gpu"
step merge "$out/merge.log" timeout 600 "$tg" -tc='cuda merge*' || status=1
grep -E "\[doctest\] (test cases|assertions)|Status" "$out/merge.log" | sed 's/^/  /' | tee -a "$summary"
cs="compute-sanitizer --error-exitcode 99 --print-limit 30"
step memcheck "$out/memcheck.log" timeout 900 $cs --tool memcheck "$tg" -tc='cuda merge*' || status=1
grep -E "ERROR SUMMARY|\[doctest\] test cases" "$out/memcheck.log" | sed 's/^/  /' | tee -a "$summary"
step racecheck "$out/racecheck.log" timeout 900 $cs --tool racecheck "$tg" -tc='cuda merge: random*' || status=1
grep -E "RACECHECK SUMMARY|ERROR SUMMARY|\[doctest\] test cases" "$out/racecheck.log" | sed 's/^/  /' | tee -a "$summary"
cuda_home=$(dirname "$(dirname "$(command -v nvcc)")")
step example "$out/example.log" sh -c "cc -std=c11 -O2 -DFMHA_EXAMPLE_CUDA=1 -Iinclude -I$cuda_home/include \
  examples/c/paged_cascade.c -o $bdir/paged_cascade_cuda -L$bdir/src -lfmha -L$cuda_home/lib64 -lcudart -lm &&
  LD_LIBRARY_PATH=$bdir/src:$cuda_home/lib64 $bdir/paged_cascade_cuda cuda" || status=1
tail -5 "$out/example.log" | sed 's/^/  /' | tee -a "$summary"
note "merge.sh: $([ $status = 0 ] && echo PASS || echo FAIL)"
exit $status
