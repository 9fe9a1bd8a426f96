// The hash behind hashed tensors, compiled for host and device alike so the
// host can recompute any element the device filled.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define FMHA_TEST_HD __host__ __device__ __forceinline__
#else
#define FMHA_TEST_HD inline
#endif

namespace fmha_gpu_test {

// splitmix64's finalizer.
FMHA_TEST_HD uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// 24 random bits k as (k - 2^23) * sqrt(3) / 2^23: one exact int-to-float
// conversion and one rounded multiply, so host and device agree bit for bit
// (no contraction into an FMA is possible).
FMHA_TEST_HD float hashed_value_impl(uint64_t seed, uint64_t offset) {
  constexpr float kStep = 1.7320508075688772f / 8388608.0f;  // sqrt(3) / 2^23
  const int64_t k = static_cast<int64_t>(mix64(offset ^ mix64(seed)) >> 40) - (int64_t{1} << 23);
  return static_cast<float>(k) * kStep;
}

}  // namespace fmha_gpu_test
