// The object behind fmha_handle.
#pragma once

#include <memory>

#include "backend/cpu/thread_pool.h"
#include "core/device_info.h"

struct fmha_context {
  fmha::DeviceInfo device;
  void* stream = nullptr;                  // CUDA handles
  std::unique_ptr<fmha::ThreadPool> pool;  // CPU handles: own threads or the caller's parallel-for
  int requested_threads = 0;               // CPU handles: fmha_set_num_threads's count (0 = automatic)
  fmha_parallel_for_fn parallel_for = nullptr;  // CPU handles: fmha_set_parallel_for's fn, or NULL
  void* parallel_for_user = nullptr;
};
