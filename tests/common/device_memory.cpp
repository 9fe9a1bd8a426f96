#include "common/device_memory.h"

#include <stdlib.h>

#include <cstdlib>
#include <cstring>

namespace fmha_test {

namespace {
constexpr size_t kHostAlignment = 256;  // as cudaMalloc gives
}

// posix_memalign takes the exact size (aligned_alloc wants a multiple of
// the alignment), so AddressSanitizer sees the exact end of the buffer.
void* HostMemory::allocate(size_t bytes) {
  void* p = nullptr;
  return posix_memalign(&p, kHostAlignment, bytes) == 0 ? p : nullptr;
}

void HostMemory::release(void* ptr) { std::free(ptr); }

bool HostMemory::to_device(void* device_dst, const void* host_src, size_t bytes) {
  if (bytes > 0) std::memcpy(device_dst, host_src, bytes);
  return true;
}

bool HostMemory::to_host(void* host_dst, const void* device_src, size_t bytes) {
  if (bytes > 0) std::memcpy(host_dst, device_src, bytes);
  return true;
}

}  // namespace fmha_test
