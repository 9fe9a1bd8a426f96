#include "backend/cuda/cuda_device.h"

#include <cuda_runtime.h>

#include <atomic>

#include "core/error.h"

namespace fmha::cuda {
namespace {
std::atomic<bool> g_runtime_in_use{false};
}

bool runtime_in_use() { return g_runtime_in_use.load(std::memory_order_relaxed); }

fmha_status query_device(int ordinal, DeviceInfo* info) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error
    // No driver at all reads as "driver version is insufficient" from the
    // runtime; the driver version 0 says what it really is.
    int driver = 0;
    if (cudaDriverGetVersion(&driver) == cudaSuccess && driver == 0)
      return fail(FMHA_ERROR_NOT_AVAILABLE, "no NVIDIA driver found (CUDA: %s)", cudaGetErrorString(err));
    return fail(FMHA_ERROR_NOT_AVAILABLE, "no CUDA device available: %s", cudaGetErrorString(err));
  }
  if (ordinal < 0 || ordinal >= count)
    return fail(FMHA_ERROR_NOT_AVAILABLE, "device_ordinal=%d but %d CUDA device(s) present", ordinal,
                count);
  cudaDeviceProp prop;
  err = cudaGetDeviceProperties(&prop, ordinal);
  if (err != cudaSuccess)
    return fail(FMHA_ERROR_DEVICE, "cudaGetDeviceProperties(%d): %s", ordinal, cudaGetErrorString(err));
  info->kind = FMHA_DEVICE_CUDA;
  info->ordinal = ordinal;
  info->sm = prop.major * 10 + prop.minor;
  info->num_sms = prop.multiProcessorCount;
  info->smem_per_block_optin = prop.sharedMemPerBlockOptin;
  info->l2_bytes = static_cast<size_t>(prop.l2CacheSize);
  info->num_threads = 1;
  g_runtime_in_use.store(true, std::memory_order_relaxed);
  return FMHA_SUCCESS;
}

PointerKind pointer_kind(const void* ptr, int* device) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    cudaGetLastError();
    return PointerKind::kHost;
  }
  if (device) *device = attr.device;
  switch (attr.type) {
    case cudaMemoryTypeDevice: return PointerKind::kDevice;
    case cudaMemoryTypeManaged: return PointerKind::kManaged;
    case cudaMemoryTypeHost: return PointerKind::kPinnedHost;
    default: return PointerKind::kHost;  // cudaMemoryTypeUnregistered
  }
}

fmha_status ScopedDevice::enter(int ordinal) {
  int current = -1;
  cudaError_t err = cudaGetDevice(&current);
  if (err != cudaSuccess)
    return fail(FMHA_ERROR_DEVICE, "cudaGetDevice: %s", cudaGetErrorString(err));
  if (current == ordinal) return FMHA_SUCCESS;
  err = cudaSetDevice(ordinal);
  if (err != cudaSuccess)
    return fail(FMHA_ERROR_DEVICE, "cudaSetDevice(%d): %s", ordinal, cudaGetErrorString(err));
  previous_ = current;
  return FMHA_SUCCESS;
}

ScopedDevice::~ScopedDevice() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

fmha_status check_launch(const char* what) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    return fail(FMHA_ERROR_DEVICE, "%s launch failed: %s", what, cudaGetErrorString(err));
  return FMHA_SUCCESS;
}

}  // namespace fmha::cuda
