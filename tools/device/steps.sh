# The step runner the device scripts share (sourced, not run): note and
# step, appending to "$summary".
#
#   step NAME LOG CMD...   runs CMD under a timeout with its output in LOG,
#                          notes the exit code, the duration and the lines
#                          of LOG that count; returns CMD's exit code
#
# The sourcing script may set STEP_TIMEOUT (seconds, default 900),
# STEP_PATTERN (an extended regex of the lines that count; default the
# doctest totals and errors) and STEP_LINES (how many of them, default 30).
#
#   logs_under NAME [KEEP]  the output layout of the scripts that tar their
#                          logs: out = $OUT (else $root/NAME-out), logs =
#                          $out/logs (tarred into $out/logs.tgz at exit, then
#                          removed), summary = $out/summary.txt (emptied
#                          unless KEEP is 1); puts nvcc on PATH. The sourcing
#                          script sets root first.
logs_under() {
  out=${OUT:-$root/$1-out}
  logs="$out/logs"
  summary="$out/summary.txt"
  mkdir -p "$logs"
  [ "${2:-0}" = 1 ] || : >"$summary"
  command -v nvcc >/dev/null 2>&1 || export PATH="/usr/local/cuda/bin:$PATH"
  trap 'tar -C "$out" -czf "$out/logs.tgz" logs 2>/dev/null && rm -rf "$logs"' EXIT
}
note() { echo "$*" | tee -a "$summary"; }
step() {
  local name=$1 log=$2
  shift 2
  local t0=$SECONDS
  echo "== $(date -u +%H:%M:%S) $name: $*" >"$log"
  timeout "${STEP_TIMEOUT:-900}" "$@" >>"$log" 2>&1
  local rc=$?
  note "$(printf '%-22s rc=%-3s %5ss  %s' "$name" "$rc" "$((SECONDS - t0))" "$(basename "$log")")"
  grep -E "${STEP_PATTERN:-ERROR:|\[doctest\] (test cases|assertions)}" "$log" | head -n "${STEP_LINES:-30}" |
    sed 's/^/    /' | tee -a "$summary"
  return $rc
}
