// The object behind fmha_handle.
#pragma once

#include <memory>

#include "backend/cpu/thread_pool.h"
#include "core/device_info.h"

struct fmha_context {
  fmha::DeviceInfo device;
  void* stream = nullptr;                  // CUDA handles
  std::unique_ptr<fmha::ThreadPool> pool;  // CPU handles
};
