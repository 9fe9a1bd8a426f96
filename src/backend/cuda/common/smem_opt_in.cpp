#include "backend/cuda/common/smem_opt_in.h"

#include <cuda_runtime.h>

#include <mutex>

#include "core/error.h"

namespace fmha::cuda {
namespace {

// Serializes first-time opt-ins (all kernels share it: the slow path runs a
// handful of times per process), so each (kernel, device) is set once.
std::mutex g_opt_in_mutex;

constexpr size_t kDefaultDynamicSmem = 48 * 1024;  // needs no opt-in

fmha_status set_attribute(const void* kernel, size_t bytes, int device, const char* what) {
  const cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (err == cudaSuccess) return FMHA_SUCCESS;
  cudaGetLastError();  // not sticky: keep it out of the next launch check
  return fail(FMHA_ERROR_DEVICE, "%s: cudaFuncSetAttribute(%zu bytes of dynamic shared memory) on device %d: %s",
              what, bytes, device, cudaGetErrorString(err));
}

}  // namespace

fmha_status SmemOptIn::ensure(const void* kernel, size_t bytes, int device, const char* what) {
  if (bytes <= kDefaultDynamicSmem) return FMHA_SUCCESS;
  if (device < 0 || device >= kTrackedDevices) return set_attribute(kernel, bytes, device, what);
  const uint64_t bit = uint64_t{1} << device;
  if (raised_.load(std::memory_order_acquire) & bit) return FMHA_SUCCESS;
  std::lock_guard<std::mutex> lock(g_opt_in_mutex);
  if (raised_.load(std::memory_order_relaxed) & bit) return FMHA_SUCCESS;
  const fmha_status s = set_attribute(kernel, bytes, device, what);
  if (s == FMHA_SUCCESS) raised_.fetch_or(bit, std::memory_order_release);
  return s;
}

}  // namespace fmha::cuda
