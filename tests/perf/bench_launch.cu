// The launch floor for bench_overhead (the "launch" rows): an empty kernel
// enqueued each way fmha could enqueue one, with a by-value parameter of 8
// bytes and of sizeof(FwdParams) (what the CUDA families pass), so the
// fmha_forward rows can be read against the cheapest launch there is.
// bench_overhead.c (C) times bench_launch_once; this file only launches.
//
// It is built twice: into bench_overhead itself (the CUDA runtime that also
// created the stream: libcudart.so), and, with BENCH_LAUNCH_STATIC=1, into
// libbench_launch_static.so with its own static runtime, as libfmha has one
// (cudart_static): its launches enqueue on a stream another runtime created,
// which is libfmha's situation inside any program that uses CUDA itself.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cstdio>
#include <cstring>

#include "backend/cuda/common/fwd_params.h"
#include "bench_launch.h"

namespace {

struct Small {
  long long x;
};
static_assert(sizeof(Small) == 8, "the 8-byte row");

// A parameter of exactly FwdParams' size; `spin` (cycles, first field) lets
// one row keep the GPU busy like a real kernel would.
struct Big {
  long long spin;
  unsigned char rest[sizeof(fmha::cuda::FwdParams) - sizeof(long long)];
};
static_assert(sizeof(Big) == sizeof(fmha::cuda::FwdParams), "the FwdParams-sized row");

__global__ void empty_small(Small s) {
  if (s.x == 1234567) asm volatile("trap;");  // never: keeps the parameter alive
}

__global__ void empty_big(const __grid_constant__ Big b) {
  if (b.spin > 0 && threadIdx.x == 0) {
    const long long t0 = clock64();
    while (clock64() - t0 < b.spin) {
    }
  }
}

// The sm80 family's tiny-problem launch: 1 CTA of 32 threads (the narrow
// tile), 66 KiB of dynamic shared memory for D = 64 (opted in once).
constexpr int kThreads = 32;
constexpr size_t kSm80NarrowSmem = (16 * 64 + 2 * 2 * 128 * 64) * 2;
constexpr long long kBusySpin = 16000;  // cycles, ~8 us at the H200's 1.98 GHz: the GPU stays behind the host

Small g_small{0};
Big g_big{};
void* g_small_args[] = {&g_small};
void* g_big_args[] = {&g_big};

PFN_cuLaunchKernel_v4000 g_cu_launch = nullptr;
CUfunction g_fn_small = nullptr, g_fn_big = nullptr;  // cudaGetFuncBySymbol (current context)
cudaKernel_t g_kernel_big = nullptr;                  // cudaGetKernel (context-free CUkernel)

enum Row {
  kChevronSmall,
  kChevronBig,
  kChevronBigLastError,
  kRuntimeSmall,
  kRuntimeBig,
  kRuntimeEx,
  kDriverSmall,
  kDriverBig,
  kDriverKernelBig,
  kRuntimeBigSmem,
  kRuntimeBigBusy,
  kRowCount
};

// At most 34 characters: bench_overhead's column (overhead.sh reads it).
const char* const kNames[kRowCount] = {
    "<<<>>> 8 B",
    "<<<>>> FwdParams",
    "<<<>>> FwdParams + GetLastError",
    "cudaLaunchKernel 8 B",
    "cudaLaunchKernel FwdParams",
    "cudaLaunchKernelEx FwdParams",
    "cuLaunchKernel 8 B (CUfunction)",
    "cuLaunchKernel FwdParams (CUfunc)",
    "cuLaunchKernel FwdParams (CUkern)",
    "cudaLaunchKernel FwdParams +66KiB",
    "cudaLaunchKernel FwdParams busy",
};

bool driver_ready() { return g_cu_launch != nullptr && g_fn_small != nullptr && g_fn_big != nullptr; }

}  // namespace

extern "C" {

BENCH_LAUNCH_EXPORT size_t BENCH_LAUNCH_FN(param_bytes)(void) { return sizeof(Big); }

BENCH_LAUNCH_EXPORT int BENCH_LAUNCH_FN(rows)(void) { return kRowCount; }

BENCH_LAUNCH_EXPORT const char* BENCH_LAUNCH_FN(name)(int row) {
  return row >= 0 && row < kRowCount ? kNames[row] : "?";
}

BENCH_LAUNCH_EXPORT int BENCH_LAUNCH_FN(prepare)(void) {
  if (cudaFuncSetAttribute(reinterpret_cast<const void*>(empty_big), cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(kSm80NarrowSmem)) != cudaSuccess)
    return -1;
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion("cuLaunchKernel", &p, 12000, cudaEnableDefault, &found) == cudaSuccess &&
      found == cudaDriverEntryPointSuccess)
    g_cu_launch = reinterpret_cast<PFN_cuLaunchKernel_v4000>(p);
  cudaFunction_t f = nullptr;
  if (cudaGetFuncBySymbol(&f, reinterpret_cast<const void*>(empty_small)) == cudaSuccess) g_fn_small = f;
  if (cudaGetFuncBySymbol(&f, reinterpret_cast<const void*>(empty_big)) == cudaSuccess) g_fn_big = f;
  cudaKernel_t k = nullptr;
  if (cudaGetKernel(&k, reinterpret_cast<const void*>(empty_big)) == cudaSuccess) g_kernel_big = k;
  cudaGetLastError();
  return 0;
}

// One launch of `row` on `stream`; 0 on success, 1 when this row cannot run
// here (no driver entry point), -1 on a CUDA error.
BENCH_LAUNCH_EXPORT int BENCH_LAUNCH_FN(once)(int row, void* stream_ptr) {
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  cudaError_t err = cudaSuccess;
  g_big.spin = 0;
  switch (row) {
    case kChevronSmall:
      empty_small<<<1, kThreads, 0, stream>>>(g_small);
      return 0;
    case kChevronBig:
      empty_big<<<1, kThreads, 0, stream>>>(g_big);
      return 0;
    case kChevronBigLastError:
      empty_big<<<1, kThreads, 0, stream>>>(g_big);
      err = cudaGetLastError();
      break;
    case kRuntimeSmall:
      err = cudaLaunchKernel(reinterpret_cast<const void*>(empty_small), dim3(1), dim3(kThreads), g_small_args, 0,
                             stream);
      break;
    case kRuntimeBig:
      err = cudaLaunchKernel(reinterpret_cast<const void*>(empty_big), dim3(1), dim3(kThreads), g_big_args, 0,
                             stream);
      break;
    case kRuntimeEx: {
      cudaLaunchConfig_t config = {};
      config.gridDim = dim3(1);
      config.blockDim = dim3(kThreads);
      config.dynamicSmemBytes = 0;
      config.stream = stream;
      err = cudaLaunchKernelExC(&config, reinterpret_cast<const void*>(empty_big), g_big_args);
      break;
    }
    case kDriverSmall:
    case kDriverBig:
    case kDriverKernelBig: {
      if (!driver_ready()) return 1;
      CUfunction f = row == kDriverSmall ? g_fn_small : g_fn_big;
      if (row == kDriverKernelBig) {
        if (g_kernel_big == nullptr) return 1;
        f = reinterpret_cast<CUfunction>(g_kernel_big);
      }
      void** args = row == kDriverSmall ? g_small_args : g_big_args;
      return g_cu_launch(f, 1, 1, 1, kThreads, 1, 1, 0, static_cast<CUstream>(stream), args, nullptr) ==
                     CUDA_SUCCESS
                 ? 0
                 : -1;
    }
    case kRuntimeBigSmem:
      err = cudaLaunchKernel(reinterpret_cast<const void*>(empty_big), dim3(1), dim3(kThreads), g_big_args,
                             kSm80NarrowSmem, stream);
      break;
    case kRuntimeBigBusy:
      g_big.spin = kBusySpin;
      err = cudaLaunchKernel(reinterpret_cast<const void*>(empty_big), dim3(1), dim3(kThreads), g_big_args, 0,
                             stream);
      break;
    default:
      return 1;
  }
  return err == cudaSuccess ? 0 : -1;
}

}  // extern "C"
