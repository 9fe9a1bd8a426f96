#include "backend/cuda/common/kernel_launch.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include "core/error.h"

#ifndef FMHA_CUDA_DRIVER_LAUNCH
#define FMHA_CUDA_DRIVER_LAUNCH 0
#endif

namespace fmha::cuda {
namespace {

fmha_status launch_failed(const char* what, cudaError_t err) {
  cudaGetLastError();  // the runtime records a failed launch as its last error too
  return fail(FMHA_ERROR_DEVICE, "%s launch failed: %s", what, cudaGetErrorString(err));
}

#if FMHA_CUDA_DRIVER_LAUNCH
// The driver's cuLaunchKernel through the runtime's entry-point query (no
// link to libcuda), or null when the driver does not provide it.
PFN_cuLaunchKernel_v4000 driver_launch() {
  static const PFN_cuLaunchKernel_v4000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuLaunchKernel", &p, 12000, cudaEnableDefault, &found) == cudaSuccess &&
        found == cudaDriverEntryPointSuccess)
      return reinterpret_cast<PFN_cuLaunchKernel_v4000>(p);
    (void)cudaGetLastError();
    return static_cast<PFN_cuLaunchKernel_v4000>(nullptr);
  }();
  return fn;
}
#endif

}  // namespace

const char* launch_mode() { return FMHA_CUDA_DRIVER_LAUNCH ? "driver" : "runtime"; }

fmha_status KernelLauncher::launch(const void* kernel, dim3 grid, dim3 block, size_t smem_bytes,
                                   cudaStream_t stream, void** args, const char* what) {
#if FMHA_CUDA_DRIVER_LAUNCH
  if (const PFN_cuLaunchKernel_v4000 launch = driver_launch()) {
    void* handle = driver_kernel_.load(std::memory_order_acquire);
    if (handle == nullptr) {
      cudaKernel_t k = nullptr;
      const cudaError_t err = cudaGetKernel(&k, kernel);
      if (err != cudaSuccess) return launch_failed(what, err);
      handle = k;
      driver_kernel_.store(handle, std::memory_order_release);  // racing threads store the same handle
    }
    const CUresult r = launch(reinterpret_cast<CUfunction>(handle), grid.x, grid.y, grid.z, block.x, block.y,
                              block.z, static_cast<unsigned>(smem_bytes), static_cast<CUstream>(stream), args,
                              nullptr);
    if (r == CUDA_SUCCESS) return FMHA_SUCCESS;
    // No current context (a thread that never used the runtime, launching
    // on the NULL stream): the runtime's launch below makes the device's
    // primary context current, as it always did.
    if (r != CUDA_ERROR_INVALID_CONTEXT)
      return fail(FMHA_ERROR_DEVICE, "%s launch failed: CUDA driver error %d", what, static_cast<int>(r));
  }
#endif
  const cudaError_t err = cudaLaunchKernel(kernel, grid, block, args, smem_bytes, stream);
  if (err == cudaSuccess) return FMHA_SUCCESS;
  return launch_failed(what, err);
}

}  // namespace fmha::cuda
