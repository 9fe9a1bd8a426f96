// extern "C" entry points: argument checks, handle state, and the hand-off
// to validation and dispatch. Each body runs inside guard().
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "api/context.h"
#include "api/guard.h"
#include "backend/cpu/cpu_merge.h"
#include "core/merge.h"
#include "core/host_profile.h"
#include "core/pointer_memo.h"
#include "core/validate.h"
#include "dispatch/registry.h"
#if FMHA_WITH_CUDA
#include "backend/cuda/common/merge.h"
#include "backend/cuda/cuda_device.h"
#endif

using fmha::fail;
using fmha::guard;

namespace {

constexpr fmha_status kInvalid = FMHA_ERROR_INVALID_ARGUMENT;
constexpr int kMaxThreads = 1024;

int resolve_threads(int requested) {
  if (requested > 0) return requested;
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(std::min<unsigned>(hw, kMaxThreads));
}

// The runtime's pointer query for check_memory_location: on CUDA handles,
// and on CPU handles once a CUDA handle exists (so a CPU-only user never
// pays for CUDA initialization); null (no check) otherwise.
fmha::PointerKindQuery pointer_query(const fmha::DeviceInfo& dev) {
#if FMHA_WITH_CUDA
  if (dev.kind == FMHA_DEVICE_CUDA || fmha::cuda::runtime_in_use()) return fmha::cuda::pointer_kind;
#else
  (void)dev;
#endif
  return nullptr;
}

// What prepare() hands to the entry points.
struct Prepared {
  fmha::Problem problem;
  const fmha::KernelEntry* kernel = nullptr;  // null for empty work (no query rows)
  size_t workspace = 0;                       // the kernel's workspace bytes for the problem
};

// Workspace bytes of `k` for p; 0 for empty work (no kernel).
size_t workspace_for(const fmha::KernelEntry* k, const fmha::Problem& p, const fmha::DeviceInfo& d) {
  return k != nullptr && k->workspace_bytes ? k->workspace_bytes(p, d) : 0;
}

// The last successful validation and dispatch on this thread, so that the
// usual pair (the workspace query, then the forward with the same params)
// validates and dispatches once. build_problem, select_kernel and
// workspace_bytes read nothing but the params' bytes (struct_size of them),
// the forced kernel's name and the handle's DeviceInfo: equal bytes give
// the same Problem, kernel and workspace, so nothing is skipped that could
// answer differently. What reads the world, where the pointers live, runs on
// every call. Failures are never remembered.
struct LastPrepared {
  bool valid = false;
  uint32_t size = 0;
  unsigned char params[sizeof(fmha_forward_params)];
  unsigned char device[sizeof(fmha::DeviceInfo)];
  char kernel_name[64];  // the forced kernel's name; only names shorter than this are remembered
  Prepared result;
};
thread_local LastPrepared t_last;

// The forced kernel's name fits kernel_name (with its terminator).
bool name_fits(const char* name) {
  return name == nullptr || strnlen(name, sizeof LastPrepared::kernel_name) < sizeof LastPrepared::kernel_name;
}

bool same_as_last(const fmha_forward_params* params, const fmha::DeviceInfo& dev) {
  const LastPrepared& m = t_last;
  if (!m.valid || params->struct_size != m.size || std::memcmp(params, m.params, m.size) != 0 ||
      std::memcmp(&dev, m.device, sizeof m.device) != 0)
    return false;
  // Equal bytes hold the same kernel pointer; the name it points to may
  // have been rewritten since.
  const char* name = params->kernel;
  return name == nullptr || (name_fits(name) && std::strcmp(name, m.kernel_name) == 0);
}

void remember(const fmha_forward_params* params, const fmha::DeviceInfo& dev, const Prepared& r) {
  LastPrepared& m = t_last;
  m.valid = false;
  const uint32_t size = params->struct_size;
  if (size > sizeof m.params || !name_fits(params->kernel)) return;
  m.size = size;
  std::memcpy(m.params, params, size);
  std::memcpy(m.device, &dev, sizeof m.device);
  if (params->kernel != nullptr)
    std::strcpy(m.kernel_name, params->kernel);
  else
    m.kernel_name[0] = '\0';
  m.result = r;
  m.valid = true;
}

// Validates params for this handle and selects the kernel. With `explain`,
// the decision in prose (and nothing is remembered or reused).
fmha_status prepare(fmha_handle h, const fmha_forward_params* params, Prepared* out, std::string* explain) {
  FMHA_PROFILE_STAGE(kWsEntry);  // (kFwd* in a forward: host_profile.h)
  if (h == nullptr) return fail(kInvalid, "handle is NULL");
  fmha_status s;
  const bool reuse = explain == nullptr && params != nullptr && same_as_last(params, h->device);
  if (reuse) {
    *out = t_last.result;
    FMHA_PROFILE_STAGE(kWsReuse);
  } else {
    FMHA_PROFILE_STAGE(kWsReuse);
    if ((s = fmha::build_problem(params, &out->problem)) != FMHA_SUCCESS) return s;
    FMHA_PROFILE_STAGE(kWsBuild);
  }
  // Where the pointers live is asked every call (and before dispatch, so a
  // host pointer on a CUDA handle is INVALID_ARGUMENT even when no kernel
  // would run the problem).
  if ((s = fmha::check_memory_location(out->problem, h->device, pointer_query(h->device))) != FMHA_SUCCESS)
    return s;
  FMHA_PROFILE_STAGE(kWsPointers);
  if (reuse) return FMHA_SUCCESS;
  const fmha::Problem& p = out->problem;
  if (p.no_rows()) {
    // Empty work (batch or seq 0): SUCCESS, nothing read or written, no
    // workspace, and no kernel is asked (their plans divide by the rows).
    // A forced name must still be one. Not remembered.
    out->kernel = nullptr;
    out->workspace = 0;
    if (p.forced_kernel != nullptr && fmha::find_kernel(p.forced_kernel) == nullptr)
      return fail(kInvalid, "kernel=\"%s\" is not a registered kernel", p.forced_kernel);
    if (explain) *explain += "empty problem (no query rows): nothing to compute, no kernel runs\n";
    return FMHA_SUCCESS;
  }
  if ((s = fmha::select_kernel(out->problem, h->device, &out->kernel, explain)) != FMHA_SUCCESS) return s;
  out->workspace = workspace_for(out->kernel, out->problem, h->device);
  if (explain == nullptr) remember(params, h->device, *out);
  FMHA_PROFILE_STAGE(kWsSelect);
  return FMHA_SUCCESS;
}

}  // namespace

extern "C" {

const char* fmha_status_string(fmha_status status) {
  switch (fmha::enum_bits(status)) {  // any int the caller passed, read as one
#define FMHA_STATUS_CASE_(name, value, text) \
  case value:                                \
    return text;
    FMHA_STATUS_MAP(FMHA_STATUS_CASE_)
#undef FMHA_STATUS_CASE_
    default:
      return "unknown status";
  }
}

const char* fmha_last_error_message(void) { return fmha::last_error(); }

void fmha_forward_params_init_sized(fmha_forward_params* params, size_t struct_size) {
  if (params == nullptr || struct_size < sizeof(uint32_t)) return;
  // Zero is the default of every field (no mask, scale and softcap 0, no
  // lse, automatic kernel and splits, the dense layout) except these. The
  // caller's struct has struct_size bytes: write those, no more.
  std::memset(params, 0, struct_size);
  params->struct_size = static_cast<uint32_t>(std::min<size_t>(struct_size, UINT32_MAX));
  constexpr size_t kWindowsEnd = offsetof(fmha_forward_params, window_right) + sizeof(int32_t);
  if (struct_size >= kWindowsEnd) {
    params->window_left = -1;
    params->window_right = -1;
  }
}

void(fmha_forward_params_init)(fmha_forward_params* params) {
  fmha_forward_params_init_sized(params, FMHA_FORWARD_PARAMS_SIZE_V1);
}

fmha_status fmha_create(fmha_handle* handle, fmha_device_kind kind, int device_ordinal) {
  return guard("fmha_create", [&]() -> fmha_status {
    if (handle == nullptr) return fail(kInvalid, "handle is NULL");
    *handle = nullptr;
    auto ctx = std::make_unique<fmha_context>();
    const int32_t kind_bits = fmha::enum_bits(kind);  // any int the caller passed
    switch (kind_bits) {
      case FMHA_DEVICE_CPU:
        if (device_ordinal != 0)
          return fail(kInvalid, "device_ordinal=%d must be 0 for FMHA_DEVICE_CPU", device_ordinal);
        ctx->device.kind = FMHA_DEVICE_CPU;
        // The automatic thread count: run with the threads the system lets
        // us start (at least the calling thread).
        ctx->pool = std::make_unique<fmha::ThreadPool>(resolve_threads(0), fmha::ThreadPool::kAllowFewer);
        ctx->device.num_threads = ctx->pool->size();
        break;
      case FMHA_DEVICE_CUDA: {
#if FMHA_WITH_CUDA
        const fmha_status s = fmha::cuda::query_device(device_ordinal, &ctx->device);
        if (s != FMHA_SUCCESS) return s;
        break;
#else
        return fail(FMHA_ERROR_NOT_AVAILABLE, "this fmha was built without CUDA (FMHA_ENABLE_CUDA=OFF)");
#endif
      }
      default:
        return fail(kInvalid, "kind=%d is not an fmha_device_kind (CPU=0, CUDA=1)", kind_bits);
    }
    *handle = ctx.release();
    return FMHA_SUCCESS;
  });
}

void fmha_destroy(fmha_handle handle) { delete handle; }

fmha_status fmha_set_stream(fmha_handle handle, void* cuda_stream) {
  return guard("fmha_set_stream", [&]() -> fmha_status {
    if (handle == nullptr) return fail(kInvalid, "handle is NULL");
    if (handle->device.kind != FMHA_DEVICE_CUDA && cuda_stream != nullptr)
      return fail(kInvalid, "cuda_stream=%p given to a CPU handle (only NULL is accepted)", cuda_stream);
    handle->stream = cuda_stream;
    return FMHA_SUCCESS;
  });
}

fmha_status fmha_set_num_threads(fmha_handle handle, int num_threads) {
  return guard("fmha_set_num_threads", [&]() -> fmha_status {
    if (handle == nullptr) return fail(kInvalid, "handle is NULL");
    if (num_threads < 0 || num_threads > kMaxThreads)
      return fail(kInvalid, "num_threads=%d must be in [0, %d]", num_threads, kMaxThreads);
    if (handle->device.kind != FMHA_DEVICE_CPU) return FMHA_SUCCESS;
    const int n = resolve_threads(num_threads);
    if (handle->parallel_for != nullptr) {
      // The caller's parallel-for: n worker slots, no threads to start.
      handle->pool = std::make_unique<fmha::ThreadPool>(n, handle->parallel_for, handle->parallel_for_user);
      handle->device.num_threads = handle->pool->size();
    } else if (n != handle->device.num_threads) {
      // An explicit count is all or nothing: when a thread cannot start, the
      // pool throws std::bad_alloc (FMHA_ERROR_OUT_OF_MEMORY) and the handle
      // keeps its old pool. The automatic count takes what it can get.
      auto pool = std::make_unique<fmha::ThreadPool>(
          n, num_threads == 0 ? fmha::ThreadPool::kAllowFewer : fmha::ThreadPool::kAllOrNothing);
      handle->pool = std::move(pool);
      handle->device.num_threads = handle->pool->size();
    }
    handle->requested_threads = num_threads;
    return FMHA_SUCCESS;
  });
}

fmha_status fmha_set_parallel_for(fmha_handle handle, fmha_parallel_for_fn fn, void* user) {
  return guard("fmha_set_parallel_for", [&]() -> fmha_status {
    if (handle == nullptr) return fail(kInvalid, "handle is NULL");
    if (fn == nullptr && user != nullptr)
      return fail(kInvalid, "user=%p given with fn=NULL (fn=NULL restores fmha's threads; pass user=NULL)",
                  user);
    if (handle->device.kind != FMHA_DEVICE_CPU) return FMHA_SUCCESS;  // no CPU work items
    const int n = resolve_threads(handle->requested_threads);
    if (fn != nullptr) {
      // fmha's threads stop here (the old pool joins them); n worker slots.
      handle->pool = std::make_unique<fmha::ThreadPool>(n, fn, user);
    } else if (handle->parallel_for != nullptr) {
      // Back to fmha's threads, as fmha_set_num_threads would start them.
      handle->pool = std::make_unique<fmha::ThreadPool>(
          n, handle->requested_threads == 0 ? fmha::ThreadPool::kAllowFewer : fmha::ThreadPool::kAllOrNothing);
    }
    handle->device.num_threads = handle->pool->size();
    handle->parallel_for = fn;
    handle->parallel_for_user = user;
    return FMHA_SUCCESS;
  });
}

fmha_status fmha_forward_workspace_size(fmha_handle handle, const fmha_forward_params* params,
                                        size_t* bytes) {
  FMHA_PROFILE_ENTER(kWorkspaceSize);
  const fmha_status status = guard("fmha_forward_workspace_size", [&]() -> fmha_status {
    if (bytes == nullptr) return fail(kInvalid, "bytes is NULL");
    fmha::PointerMemoScope memo;  // this call's allocation lookups
    Prepared pr;
    const fmha_status s = prepare(handle, params, &pr, nullptr);
    if (s != FMHA_SUCCESS) return s;
    *bytes = pr.workspace;
    return FMHA_SUCCESS;
  });
  FMHA_PROFILE_EXIT(kWsExit);
  return status;
}

fmha_status fmha_forward(fmha_handle handle, const fmha_forward_params* params, void* workspace,
                         size_t workspace_bytes) {
  FMHA_PROFILE_ENTER(kForward);
  const fmha_status status = guard("fmha_forward", [&]() -> fmha_status {
    fmha::PointerMemoScope memo;  // this call's allocation lookups (tensors, then the workspace)
    Prepared pr;
    fmha_status s = prepare(handle, params, &pr, nullptr);
    if (s != FMHA_SUCCESS) return s;
    const fmha::Problem& p = pr.problem;
    const fmha::KernelEntry* kernel = pr.kernel;
    if (kernel == nullptr) return FMHA_SUCCESS;  // empty work: nothing to read or write
    const size_t need = pr.workspace;
    if (workspace_bytes < need)
      return fail(FMHA_ERROR_WORKSPACE_TOO_SMALL, "workspace_bytes=%zu but kernel %s needs %zu",
                  workspace_bytes, kernel->name, need);
    if (need > 0 && workspace == nullptr)
      return fail(kInvalid, "workspace is NULL but kernel %s needs %zu bytes", kernel->name, need);
    if (reinterpret_cast<uintptr_t>(workspace) % 16 != 0)
      return fail(kInvalid, "workspace=%p is not 16-byte aligned", workspace);
    if ((s = fmha::check_workspace(p, workspace, need)) != FMHA_SUCCESS) return s;
    FMHA_PROFILE_STAGE(kFwdWorkspace);
#if FMHA_WITH_CUDA
    fmha::cuda::ScopedDevice device_scope;  // restores the caller's device on return
    if (handle->device.kind == FMHA_DEVICE_CUDA) {
      if ((s = device_scope.enter(handle->device.ordinal)) != FMHA_SUCCESS) return s;
      if (need > 0 && fmha::cuda::pointer_kind(workspace, nullptr) == fmha::PointerKind::kHost)
        return fail(kInvalid, "workspace=%p is host memory but the handle is CUDA", workspace);
    }
#endif
    FMHA_PROFILE_STAGE(kFwdDevice);
    fmha::LaunchContext ctx;
    ctx.device = &handle->device;
    ctx.stream = handle->stream;
    ctx.pool = handle->pool.get();
    ctx.workspace = workspace;
    ctx.workspace_bytes = workspace_bytes;
    s = kernel->run(p, ctx);
    FMHA_PROFILE_STAGE(kFwdRun);
    return s;
  });
  FMHA_PROFILE_EXIT(kFwdExit);
  return status;
}

void fmha_merge_params_init_sized(fmha_merge_params* params, size_t struct_size) {
  if (params == nullptr || struct_size < sizeof(uint32_t)) return;
  std::memset(params, 0, struct_size);  // the caller's struct has these bytes, no more
  params->struct_size = static_cast<uint32_t>(std::min<size_t>(struct_size, UINT32_MAX));
}

void(fmha_merge_params_init)(fmha_merge_params* params) {
  fmha_merge_params_init_sized(params, FMHA_MERGE_PARAMS_SIZE_V1);
}

fmha_status fmha_merge(fmha_handle handle, const fmha_merge_params* params) {
  return guard("fmha_merge", [&]() -> fmha_status {
    if (handle == nullptr) return fail(kInvalid, "handle is NULL");
    fmha::PointerMemoScope memo;  // this call's allocation lookups
    fmha::MergeProblem p;
    fmha_status s = fmha::build_merge_problem(params, &p);
    if (s != FMHA_SUCCESS) return s;
    if ((s = fmha::check_merge_memory_location(p, handle->device, pointer_query(handle->device))) != FMHA_SUCCESS)
      return s;
    if (p.empty()) return FMHA_SUCCESS;
    if (handle->device.kind == FMHA_DEVICE_CPU) return fmha::cpu::merge(p, handle->pool.get());
#if FMHA_WITH_CUDA
    fmha::cuda::ScopedDevice device_scope;  // restores the caller's device on return
    if ((s = device_scope.enter(handle->device.ordinal)) != FMHA_SUCCESS) return s;
    return fmha::cuda::launch_merge(p, handle->stream);
#else
    return fail(FMHA_ERROR_INTERNAL, "fmha_merge: a CUDA handle in a build without CUDA");
#endif
  });
}

int fmha_kernel_count(void) { return fmha::kernel_count(); }

const char* fmha_kernel_name(int index) {
  if (index < 0 || index >= fmha::kernel_count()) return nullptr;
  return fmha::kernel_at(index).name;
}

fmha_status fmha_forward_explain(fmha_handle handle, const fmha_forward_params* params, char* buf,
                                 size_t len) {
  return guard("fmha_forward_explain", [&]() -> fmha_status {
    if (buf == nullptr || len == 0) return fail(kInvalid, "buf is NULL or len is 0");
    buf[0] = '\0';
    fmha::PointerMemoScope memo;
    Prepared pr;
    std::string text;
    const fmha_status s = prepare(handle, params, &pr, &text);
    if (s == FMHA_SUCCESS || s == FMHA_ERROR_UNSUPPORTED) {
      if (s == FMHA_SUCCESS) text += "workspace: " + std::to_string(pr.workspace) + " bytes\n";
      std::snprintf(buf, len, "%s", text.c_str());
    }
    return s;
  });
}

uint32_t fmha_version(void) { return FMHA_VERSION_NUMBER; }

}  // extern "C"
