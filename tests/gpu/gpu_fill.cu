// Device side of the hashed tensors (gpu_support.h): fills a buffer with
// hashed_value(seed, e) rounded to the dtype, round to nearest even as the
// host's fmha_test::round_to_dtype does.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "gpu/gpu_hash.h"
#include "gpu/gpu_support.h"

namespace fmha_gpu_test {
namespace {

template <typename T>
__device__ T convert(float x);
template <>
__device__ float convert<float>(float x) { return x; }
template <>
__device__ __half convert<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __nv_bfloat16 convert<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

template <typename T>
__global__ void fill_hashed_kernel(T* p, int64_t count, uint64_t seed) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < count; e += step)
    p[e] = convert<T>(hashed_value_impl(seed, static_cast<uint64_t>(e)));
}

template <typename T>
cudaError_t launch(void* ptr, int64_t count, uint64_t seed, cudaStream_t stream) {
  constexpr int kThreads = 256;
  int64_t blocks = (count + kThreads - 1) / kThreads;
  if (blocks > 65536) blocks = 65536;
  if (blocks < 1) blocks = 1;
  fill_hashed_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(static_cast<T*>(ptr), count, seed);
  return cudaGetLastError();
}

}  // namespace

cudaError_t fill_hashed(void* ptr, fmha_dtype dtype, int64_t count, uint64_t seed, cudaStream_t stream) {
  switch (dtype) {
    case FMHA_DTYPE_F16: return launch<__half>(ptr, count, seed, stream);
    case FMHA_DTYPE_BF16: return launch<__nv_bfloat16>(ptr, count, seed, stream);
    case FMHA_DTYPE_F32: return launch<float>(ptr, count, seed, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace fmha_gpu_test
