// Host-side CUDA runtime queries used by the C API (compiled only when fmha
// is built with CUDA; see FMHA_WITH_CUDA).
#pragma once

#include "core/device_info.h"

namespace fmha::cuda {

// Fills `info` for device `ordinal`. FMHA_ERROR_NOT_AVAILABLE when no GPU
// (or no driver) is present or the ordinal names none.
fmha_status query_device(int ordinal, DeviceInfo* info);

// Where `ptr` lives, as far as the driver can tell (PointerKind,
// core/device_info.h). `*device` (may be null) receives the owning device
// for kDevice. Matches core/validate.h's PointerKindQuery. One driver call
// (cuPointerGetAttributes; the runtime's cudaPointerGetAttributes when the
// driver's entry point is missing or fails), or none when the calling
// thread's PointerMemoScope (core/pointer_memo.h) already holds the
// cudaMalloc allocation that contains ptr; such allocations are remembered
// there for the rest of the call. Nothing is remembered across calls.
PointerKind pointer_kind(const void* ptr, int* device);

// True once a CUDA handle was created in this process. CPU handles check
// pointers with the CUDA runtime only then, so a CPU-only user never pays
// for CUDA initialization (context creation takes a GPU's memory and time).
bool runtime_in_use();

// Makes a handle's device current on the calling thread for its lifetime
// and then restores the caller's device, so fmha never changes the current
// device behind its caller's back.
class ScopedDevice {
 public:
  ScopedDevice() = default;
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;
  ~ScopedDevice();
  fmha_status enter(int ordinal);

 private:
  int previous_ = -1;  // the caller's device, when it had to be changed
};

// Checks the stream's last launch error (cudaGetLastError) and returns
// FMHA_ERROR_DEVICE with the runtime's message when there was one. `what`
// names the launch.
fmha_status check_launch(const char* what);

}  // namespace fmha::cuda
