// The stage timer of core/host_profile.h; compiled only with
// FMHA_HOST_PROFILE=ON.
#include "core/host_profile.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define FMHA_PROFILE_TSC 1
#else
#define FMHA_PROFILE_TSC 0
#endif

#include "fmha/fmha.h"

namespace fmha::prof {
namespace {

constexpr const char* kStageNames[kStageCount] = {
    "outside (caller, between calls)",
    "ws: entry (guard, memo scope)",
    "ws: reuse check (handle, compare)",
    "ws: build_problem",
    "ws: pointer checks",
    "ws: select + plan + remember",
    "ws: exit (clear_error, return)",
    "fwd: entry (guard, memo scope)",
    "fwd: reuse check (handle, compare)",
    "fwd: build_problem",
    "fwd: pointer checks",
    "fwd: select + plan + remember",
    "fwd: workspace checks",
    "fwd: device (cudaGetDevice, ws ptr)",
    "fwd: dispatch (run, family plan)",
    "fwd: make_fwd_params",
    "fwd: launch (opt-in, launch, status)",
    "fwd: run (rest; all of it if unstamped)",
    "fwd: exit (device scope, clear_error)",
};

// Samples per stage kept per thread (bench_overhead takes 20000 pairs a
// row, two kOutside gaps each); later samples of a stage are dropped.
constexpr size_t kMaxSamples = size_t{1} << 17;

uint64_t ticks() {
#if FMHA_PROFILE_TSC
  return __rdtsc();
#else
  return static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
#endif
}

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct ThreadLog {
  uint64_t last = 0;
  bool in_call = false;
  bool forward = false;    // the call is fmha_forward (prepare's kWs* stamps become kFwd*)
  bool have_exit = false;  // `last` is a previous call's exit
  std::vector<uint32_t> samples[kStageCount];
  uint64_t tick0;          // calibration of ticks against the steady clock
  int64_t ns0;

  ThreadLog() : tick0(ticks()), ns0(steady_ns()) {
    for (auto& s : samples) s.reserve(kMaxSamples);
  }

  void record(Stage stage, uint64_t now) {
    std::vector<uint32_t>& s = samples[stage];
    const uint64_t d = now - last;
    if (s.size() < kMaxSamples) s.push_back(static_cast<uint32_t>(std::min<uint64_t>(d, UINT32_MAX)));
    last = now;
  }

  // Nanoseconds per tick, from the span since the log began (the steady
  // clock's own unit when there is no TSC).
  double ns_per_tick() const {
#if FMHA_PROFILE_TSC
    const uint64_t t = ticks();
    const int64_t ns = steady_ns();
    if (t <= tick0 || ns - ns0 < 1000000) return 0;  // under 1 ms: not calibrated yet
    return static_cast<double>(ns - ns0) / static_cast<double>(t - tick0);
#else
    return 1.0;
#endif
  }
};

thread_local std::unique_ptr<ThreadLog> t_log;

ThreadLog& log() {
  if (!t_log) t_log = std::make_unique<ThreadLog>();
  return *t_log;
}

}  // namespace

void enter(Call call) {
  ThreadLog& l = log();
  l.forward = call == kForward;
  const uint64_t now = ticks();
  if (l.have_exit) l.record(kOutside, now);
  l.last = now;
  l.in_call = true;
}

void stamp(Stage stage) {
  ThreadLog& l = log();
  if (!l.in_call) return;
  static_assert(kWsSelect - kWsEntry == kFwdSelect - kFwdEntry, "prepare's stages come in the same order");
  if (l.forward && stage >= kWsEntry && stage <= kWsSelect) stage = static_cast<Stage>(stage - kWsEntry + kFwdEntry);
  l.record(stage, ticks());
}

void exit(Stage last) {
  ThreadLog& l = log();
  if (!l.in_call) return;
  l.record(last, ticks());
  l.in_call = false;
  l.have_exit = true;
}

}  // namespace fmha::prof

// The report of the calling thread's samples since the last reset, as text
// in buf (snprintf's contract: returns the length it wanted). reset != 0
// clears the samples afterwards. Exported by profiling builds only (the
// name matches fmha.map's fmha_*); not part of the C API.
extern "C" FMHA_API int fmha_internal_host_profile(char* buf, size_t len, int reset);

extern "C" int fmha_internal_host_profile(char* buf, size_t len, int reset) {
  using namespace fmha::prof;
  ThreadLog& l = log();
  const double scale = l.ns_per_tick();
  // The cost of one stamp (a tick read and a stored sample), which every
  // stage carries once.
  double stamp_ns = 0;
  {
    constexpr int kRuns = 1000;
    std::vector<uint32_t> scratch;
    scratch.reserve(kRuns);
    uint64_t last = ticks();
    const uint64_t t0 = last;
    for (int i = 0; i < kRuns; ++i) {
      const uint64_t now = ticks();
      scratch.push_back(static_cast<uint32_t>(now - last));
      last = now;
    }
    stamp_ns = static_cast<double>(last - t0) * scale / kRuns;
  }
  std::string text;
  char line[160];
  std::snprintf(line, sizeof line, "  %-40s %8s %10s %10s   (%.2f ns/tick, one stamp ~%.0f ns, in each stage)\n",
                "host stage", "count", "median_ns", "mean_ns", scale, stamp_ns);
  text += line;
  double total_mean = 0;
  for (int s = 0; s < kStageCount; ++s) {
    std::vector<uint32_t> v = l.samples[s];
    if (v.empty()) continue;
    double sum = 0;
    for (uint32_t x : v) sum += x;
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    const double median = v[v.size() / 2] * scale, mean = sum / v.size() * scale;
    std::snprintf(line, sizeof line, "  %-40s %8zu %10.0f %10.0f\n", kStageNames[s], v.size(), median, mean);
    text += line;
    total_mean += sum * scale;
  }
  const size_t pairs = l.samples[kFwdExit].size() > 0 ? l.samples[kFwdExit].size() : l.samples[kWsExit].size();
  if (pairs > 0) {
    std::snprintf(line, sizeof line, "  %-40s %8zu %10s %10.0f   (sum of all stages / calls)\n", "total per call",
                  pairs, "", total_mean / pairs);
    text += line;
  }
  if (reset) {
    for (auto& v : l.samples) v.clear();
    l.have_exit = false;  // the next call's kOutside would hold the caller's report and printing
  }
  return std::snprintf(buf, len, "%s", text.c_str());
}
