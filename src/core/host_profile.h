// An opt-in stage timer for the per-call host path (issue 9: where the
// microseconds of one fmha_forward_workspace_size + fmha_forward go).
//
// Built only with the CMake option FMHA_HOST_PROFILE=ON (off by default).
// Off, FMHA_PROFILE_* expand to nothing: no code, no data, no symbol.
// On, each FMHA_PROFILE_STAGE(s) reads the time stamp counter and charges
// the time since the calling thread's previous stamp to stage s, i.e. a
// stage is named by the work that *ends* at its stamp. FMHA_PROFILE_ENTER
// starts a call (charging the time since the previous call's exit, the
// caller's own code, to kOutside). Samples are kept per thread, one slot
// per stage per call, so the report gives medians, like bench_overhead.
//
// The report is read through fmha_internal_host_profile, which a profiling
// build of libfmha exports (not declared in fmha.h, absent from every other
// build): bench_overhead finds it with dlsym and prints one breakdown per
// row (tools/device/overhead.sh --profile).
#pragma once

#if FMHA_HOST_PROFILE

namespace fmha::prof {

// Where a stamp's time went: the work between the previous stamp and this
// one. The order is the order of the path; the report prints them so.
enum Stage : int {
  kOutside,          // the caller, between one call's exit and the next entry
  kWsEntry,          // workspace_size: the entry point up to prepare (guard, memo scope)
  kWsReuse,          // prepare: the handle check and the compare with the last call
  kWsBuild,          // prepare: build_problem (params changed only)
  kWsPointers,       // prepare: check_memory_location (the pointer queries)
  kWsSelect,         // prepare: select_kernel + workspace plan + remember (params changed only)
  kWsExit,           // the rest: *bytes, memo scope, guard's clear_error, return
  kFwdEntry,         // forward: the entry point up to prepare (then as the kWs* above)
  kFwdReuse,
  kFwdBuild,
  kFwdPointers,
  kFwdSelect,
  kFwdWorkspace,     // workspace size/alignment and overlap checks
  kFwdDevice,        // ScopedDevice::enter (cudaGetDevice) and the workspace's pointer query
  kFwdDispatch,      // LaunchContext, registry run, the family's plan and instance checks (CUDA sm80)
  kFwdParams,        // make_fwd_params + LaunchArgs
  kFwdLaunch,        // shared-memory opt-in check + the launch call and its status (CUDA sm80)
  kFwdRun,           // the rest of the kernel's run (all of it where the family has no stamps: CPU, the other CUDA families)
  kFwdExit,          // back out: ScopedDevice, memo scope, guard's clear_error
  kStageCount
};

// Which entry point a call is. prepare() is shared: its stamps name the
// kWs* stages, which a forward's call charges to the matching kFwd* ones.
enum Call : int { kWorkspaceSize, kForward };

// Starts a call on this thread (an entry point's first statement): the time
// since the previous call's exit() is charged to kOutside.
void enter(Call call);
// Charges the time since this thread's previous stamp to `stage`.
void stamp(Stage stage);
// Ends a call (the entry point's last statement before return), charging
// the time since the previous stamp to `last`.
void exit(Stage last);

}  // namespace fmha::prof

#define FMHA_PROFILE_ENTER(call) ::fmha::prof::enter(::fmha::prof::call)
#define FMHA_PROFILE_STAGE(stage) ::fmha::prof::stamp(::fmha::prof::stage)
#define FMHA_PROFILE_EXIT(stage) ::fmha::prof::exit(::fmha::prof::stage)

#else

#define FMHA_PROFILE_ENTER(call) ((void)0)
#define FMHA_PROFILE_STAGE(stage) ((void)0)
#define FMHA_PROFILE_EXIT(stage) ((void)0)

#endif
