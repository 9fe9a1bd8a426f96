// How the CUDA kernel families enqueue a kernel: one call that returns the
// launch's own status, so no cudaGetLastError follows it.
//
// `kernel<<<grid, block, smem, stream>>>(args)` is three runtime calls
// (push and pop of the launch configuration, then cudaLaunchKernel) and
// returns nothing, so the launch's error has to be fetched with a fourth,
// cudaGetLastError. KernelLauncher::launch makes one: cudaLaunchKernel by
// default, or, in a build with FMHA_CUDA_LAUNCH=DRIVER (CMake), the driver's
// cuLaunchKernel on the kernel's CUkernel (cudaGetKernel, looked up once per
// kernel; the context is the stream's, or the current one for the NULL
// stream), which skips the runtime's own per-launch bookkeeping.
// tests/perf/bench_overhead times each way on an empty kernel ("launch"
// rows), which is what decides the default.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>

#include "fmha/fmha.h"

namespace fmha::cuda {

class KernelLauncher {
 public:
  constexpr KernelLauncher() = default;
  KernelLauncher(const KernelLauncher&) = delete;
  KernelLauncher& operator=(const KernelLauncher&) = delete;

  // Enqueues `kernel` (the address of a __global__ function; the launcher
  // must always be given the same one) on `stream`, on the calling thread's
  // current device. `args` holds one pointer per kernel parameter, as for
  // cudaLaunchKernel. A failed launch comes back as FMHA_ERROR_DEVICE naming
  // `what` and the CUDA error, and is cleared from the runtime's last error
  // (as the cudaGetLastError after <<<>>> cleared it).
  fmha_status launch(const void* kernel, dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream,
                     void** args, const char* what);

 private:
  std::atomic<void*> driver_kernel_{nullptr};  // FMHA_CUDA_LAUNCH=DRIVER: the kernel's CUkernel
};

// Which of the two ways this build launches with ("runtime" or "driver").
const char* launch_mode();

}  // namespace fmha::cuda
