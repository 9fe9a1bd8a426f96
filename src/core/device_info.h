// What a handle knows about its device, and what a kernel launch receives.
#pragma once

#include <cstddef>

#include "fmha/fmha.h"

namespace fmha {

class ThreadPool;

struct DeviceInfo {
  fmha_device_kind kind = FMHA_DEVICE_CPU;
  int ordinal = 0;
  // CUDA only.
  int sm = 0;                      // compute capability * 10 (90 = sm_90)
  int num_sms = 0;                 // multiprocessors
  size_t smem_per_block_optin = 0; // bytes a block may opt in to
  size_t l2_bytes = 0;
  // CPU only.
  int num_threads = 1;             // resolved worker count (>= 1)
};

// Where a pointer lives, as a GPU runtime can tell: kHost is plain
// (unregistered) host memory a GPU cannot read; kPinnedHost is page-locked
// host memory mapped into the device address space.
enum class PointerKind { kHost, kPinnedHost, kDevice, kManaged };

struct LaunchContext {
  const DeviceInfo* device = nullptr;
  void* stream = nullptr;          // cudaStream_t for CUDA handles
  ThreadPool* pool = nullptr;      // CPU handles
  void* workspace = nullptr;       // at least the kernel's workspace_bytes
  size_t workspace_bytes = 0;
};

}  // namespace fmha
