// The dynamic shared-memory opt-in of a kernel, shared by the CUDA kernel
// families.
//
// A kernel that takes more than 48 KiB of dynamic shared memory launches
// only after cudaFuncSetAttribute(kernel, MaxDynamicSharedMemorySize, bytes)
// ran in the device's context, so the attribute has to be set once for each
// (kernel, device) pair; setting it on every launch is legal but costs a
// runtime call per forward. Each kernel owns one SmemOptIn (a function-local
// static next to its launch: one per template instantiation is one per
// kernel), which remembers the devices it has been raised on.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "fmha/fmha.h"

namespace fmha::cuda {

class SmemOptIn {
 public:
  constexpr SmemOptIn() = default;
  SmemOptIn(const SmemOptIn&) = delete;
  SmemOptIn& operator=(const SmemOptIn&) = delete;

  // Lets `kernel` take `bytes` of dynamic shared memory on `device`, which
  // must be the calling thread's current device. The runtime call runs the
  // first time for each device (bytes <= 48 KiB need none); later calls cost
  // one atomic load. Thread-safe: concurrent first calls set the attribute
  // once. A failure is not remembered (the next launch tries again) and
  // comes back as FMHA_ERROR_DEVICE naming `what` and the runtime's message.
  // Devices past 63 are not tracked and set the attribute on every call.
  fmha_status ensure(const void* kernel, size_t bytes, int device, const char* what);

 private:
  static constexpr int kTrackedDevices = 64;
  std::atomic<uint64_t> raised_{0};  // bit d: done on device d
};

}  // namespace fmha::cuda
