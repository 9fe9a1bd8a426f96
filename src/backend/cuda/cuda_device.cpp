#include "backend/cuda/cuda_device.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <atomic>
#include <cstdint>

#include "core/error.h"
#include "core/pointer_memo.h"

namespace fmha::cuda {
namespace {

std::atomic<bool> g_runtime_in_use{false};

// The driver's cuPointerGetAttributes through the runtime's entry-point
// query (no link to libcuda), or null when the driver does not provide it.
PFN_cuPointerGetAttributes_v7000 driver_pointer_query() {
  static const PFN_cuPointerGetAttributes_v7000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuPointerGetAttributes", &p, 12000, cudaEnableDefault, &found) ==
            cudaSuccess &&
        found == cudaDriverEntryPointSuccess)
      return reinterpret_cast<PFN_cuPointerGetAttributes_v7000>(p);
    (void)cudaGetLastError();
    return static_cast<PFN_cuPointerGetAttributes_v7000>(nullptr);
  }();
  return fn;
}

// The runtime's answer, where the driver's query is missing or failed.
PointerKind runtime_pointer_kind(const void* ptr, int* device) {
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

}  // namespace

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
  const uintptr_t address = reinterpret_cast<uintptr_t>(ptr);
  PointerMemo* const memo = PointerMemoScope::current();
  if (memo != nullptr) {
    const int owner = memo->find(address);
    if (owner >= 0) {
      if (device) *device = owner;
      return PointerKind::kDevice;
    }
  }
  if (const PFN_cuPointerGetAttributes_v7000 query = driver_pointer_query()) {
    // One driver call with just what the check needs. Booleans are read
    // into zeroed ints (the driver may write fewer bytes).
    CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,      CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                   CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,   CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                   CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    unsigned int type = 0;
    int managed = 0, ordinal = -1, legacy_ipc = 0;
    uint64_t start = 0, size = 0;
    void* data[] = {&type, &managed, &ordinal, &legacy_ipc, &start, &size};
    constexpr unsigned kAttrs = sizeof attrs / sizeof attrs[0];
    static_assert(kAttrs == sizeof data / sizeof data[0], "one result slot per attribute");
    if (query(kAttrs, attrs, data, static_cast<CUdeviceptr>(address)) == CUDA_SUCCESS &&
        (type != CU_MEMORYTYPE_DEVICE || ordinal >= 0)) {
      if (device) *device = ordinal;
      if (managed) return PointerKind::kManaged;
      if (type == CU_MEMORYTYPE_HOST) return PointerKind::kPinnedHost;
      if (type != CU_MEMORYTYPE_DEVICE) return PointerKind::kHost;  // not a CUDA pointer
      // A cudaMalloc allocation (legacy IPC works on nothing else: not on
      // VMM ranges, which may map several devices, nor pools, managed or
      // host memory) is one range on one device: later pointers of this
      // call inside it need no query (core/pointer_memo.h).
      if (memo != nullptr && legacy_ipc && address - start < size) memo->remember(start, size, ordinal);
      return PointerKind::kDevice;
    }
  }
  return runtime_pointer_kind(ptr, device);
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
