// extern "C" entry points: argument checks, handle state, and the hand-off
// to validation and dispatch. Each body runs inside guard().
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "api/context.h"
#include "api/guard.h"
#include "core/validate.h"
#include "dispatch/registry.h"
#if FMHA_WITH_CUDA
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

// Validates params for this handle and selects the kernel.
fmha_status prepare(fmha_handle h, const fmha_forward_params* params, fmha::Problem* p,
                    const fmha::KernelEntry** kernel, std::string* explain) {
  if (h == nullptr) return fail(kInvalid, "handle is NULL");
  fmha_status s = fmha::build_problem(params, p);
  if (s != FMHA_SUCCESS) return s;
  if ((s = fmha::check_memory_location(*p, h->device, pointer_query(h->device))) != FMHA_SUCCESS) return s;
  if (p->no_rows()) {
    // Empty work (batch or seq 0): SUCCESS, nothing read or written, no
    // workspace, and no kernel is asked (their plans divide by the rows).
    // A forced name must still be one.
    *kernel = nullptr;
    if (p->forced_kernel != nullptr && fmha::find_kernel(p->forced_kernel) == nullptr)
      return fail(kInvalid, "kernel=\"%s\" is not a registered kernel", p->forced_kernel);
    if (explain) *explain += "empty problem (no query rows): nothing to compute, no kernel runs\n";
    return FMHA_SUCCESS;
  }
  return fmha::select_kernel(*p, h->device, kernel, explain);
}

// Workspace bytes of `k` for p; 0 for empty work (no kernel).
size_t workspace_for(const fmha::KernelEntry* k, const fmha::Problem& p, const fmha::DeviceInfo& d) {
  return k != nullptr && k->workspace_bytes ? k->workspace_bytes(p, d) : 0;
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

void fmha_forward_params_init(fmha_forward_params* params) {
  if (params == nullptr) return;
  // Zero is the default of every field (no mask, scale and softcap 0, no
  // lse, automatic kernel and splits) except these.
  std::memset(params, 0, sizeof *params);
  params->struct_size = FMHA_FORWARD_PARAMS_SIZE_V2;
  params->window_left = -1;
  params->window_right = -1;
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
  return guard("fmha_forward_workspace_size", [&]() -> fmha_status {
    if (bytes == nullptr) return fail(kInvalid, "bytes is NULL");
    fmha::Problem p;
    const fmha::KernelEntry* kernel = nullptr;
    const fmha_status s = prepare(handle, params, &p, &kernel, nullptr);
    if (s != FMHA_SUCCESS) return s;
    *bytes = workspace_for(kernel, p, handle->device);
    return FMHA_SUCCESS;
  });
}

fmha_status fmha_forward(fmha_handle handle, const fmha_forward_params* params, void* workspace,
                         size_t workspace_bytes) {
  return guard("fmha_forward", [&]() -> fmha_status {
    fmha::Problem p;
    const fmha::KernelEntry* kernel = nullptr;
    fmha_status s = prepare(handle, params, &p, &kernel, nullptr);
    if (s != FMHA_SUCCESS) return s;
    if (kernel == nullptr) return FMHA_SUCCESS;  // empty work: nothing to read or write
    const size_t need = workspace_for(kernel, p, handle->device);
    if (workspace_bytes < need)
      return fail(FMHA_ERROR_WORKSPACE_TOO_SMALL, "workspace_bytes=%zu but kernel %s needs %zu",
                  workspace_bytes, kernel->name, need);
    if (need > 0 && workspace == nullptr)
      return fail(kInvalid, "workspace is NULL but kernel %s needs %zu bytes", kernel->name, need);
    if (reinterpret_cast<uintptr_t>(workspace) % 16 != 0)
      return fail(kInvalid, "workspace=%p is not 16-byte aligned", workspace);
    if ((s = fmha::check_workspace(p, workspace, need)) != FMHA_SUCCESS) return s;
#if FMHA_WITH_CUDA
    fmha::cuda::ScopedDevice device_scope;  // restores the caller's device on return
    if (handle->device.kind == FMHA_DEVICE_CUDA) {
      if ((s = device_scope.enter(handle->device.ordinal)) != FMHA_SUCCESS) return s;
      if (need > 0 && fmha::cuda::pointer_kind(workspace, nullptr) == fmha::PointerKind::kHost)
        return fail(kInvalid, "workspace=%p is host memory but the handle is CUDA", workspace);
    }
#endif
    fmha::LaunchContext ctx;
    ctx.device = &handle->device;
    ctx.stream = handle->stream;
    ctx.pool = handle->pool.get();
    ctx.workspace = workspace;
    ctx.workspace_bytes = workspace_bytes;
    return kernel->run(p, ctx);
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
    fmha::Problem p;
    const fmha::KernelEntry* kernel = nullptr;
    std::string text;
    const fmha_status s = prepare(handle, params, &p, &kernel, &text);
    if (s == FMHA_SUCCESS || s == FMHA_ERROR_UNSUPPORTED) {
      if (s == FMHA_SUCCESS)
        text += "workspace: " + std::to_string(workspace_for(kernel, p, handle->device)) + " bytes\n";
      std::snprintf(buf, len, "%s", text.c_str());
    }
    return s;
  });
}

uint32_t fmha_version(void) { return FMHA_VERSION_NUMBER; }

}  // extern "C"
