// The FP8 wgmma layouts cuda_sm90_ws's FP8 kernel relies on
// (sm90/fwd_fp8_kernel.cuh), in isolation, on one warpgroup:
//   S = Q K^T   MmaSsK32, Q [64][128] and K [128][128] K-major in the
//               128-byte swizzle (what the copy engine writes);
//   O = P V     P given in the S accumulator layout, turned into the A
//               fragments of m64nNk32 by pack_p_fp8 (the quad shuffle), V
//               as V^T [128 d][kN keys] K-major: panels of 128 keys in the
//               128-byte swizzle, then (kN = 192) a panel of 64 keys in
//               the 64-byte swizzle, as the kernel's key tiles of 192.
// Both against a float64 reference on the decoded inputs, outputs poisoned
// first; P's values are e4m3-exact, so the only rounding is the MMA's
// accumulation. A layout mistake (a wrong key, row or byte) shows as an
// error of the order of the values themselves.
#include <doctest/doctest.h>

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "backend/cuda/sm90/fp8_fragment.cuh"
#include "backend/cuda/sm90/wgmma.cuh"
#include "common/numeric_types.h"

namespace {

namespace hw = fmha::cuda::sm90;

#define CUDA_OK(x) REQUIRE_EQ(cudaError_t(x), cudaSuccess)

constexpr int kRows = 64, kD = 128;  // S: [64][kN]; O: [64][kD]

// Byte (r, c) of a [rows][128] 128-byte-swizzled panel.
__host__ __device__ inline int swizzled(int r, int c) { return r * 128 + ((((c / 16) ^ (r % 8)) * 16) | (c % 16)); }
// Byte (r, c) of a [rows][64] 64-byte-swizzled panel (address bits 4-5 ^= bits 7-8).
__host__ __device__ inline int swizzled64(int r, int c) {
  return r * 64 + ((((c / 16) ^ ((r / 2) % 4)) * 16) | (c % 16));
}
// Byte of V^T (d, key j) in the kernel's V^T tile layout of kN keys.
template <int kN>
__host__ __device__ inline int vt_at(int d, int j) {
  constexpr int kFull = kN / 128;
  return j < 128 * kFull ? (j / 128) * kD * 128 + swizzled(d, j % 128)
                         : kFull * kD * 128 + swizzled64(d, j - 128 * kFull);
}

template <class T, int kN>
__global__ void __launch_bounds__(128, 1)
    fp8_fragments_kernel(const uint8_t* q, const uint8_t* k, const uint8_t* vt, const float* p, float* s_out,
                         float* o_out) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem_raw[];
  uint8_t* sq = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  uint8_t* sk = sq + kRows * 128;
  uint8_t* sv = sk + kN * 128;
  constexpr int kFull = kN / 128;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  for (int i = tid; i < kRows * 128; i += 128) sq[swizzled(i / 128, i % 128)] = q[i];
  for (int i = tid; i < kN * 128; i += 128) sk[swizzled(i / 128, i % 128)] = k[i];
  for (int i = tid; i < kD * kN; i += 128) sv[vt_at<kN>(i / kN, i % kN)] = vt[i];
  __syncthreads();
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // generic writes -> wgmma reads

  float s[kN / 8][4];
  auto& s_flat = reinterpret_cast<float(&)[kN / 2]>(s);
  const uint64_t dq = hw::smem_desc(static_cast<uint32_t>(__cvta_generic_to_shared(sq)), 0, 1024);
  const uint64_t dk = hw::smem_desc(static_cast<uint32_t>(__cvta_generic_to_shared(sk)), 0, 1024);
  const uint64_t dv = hw::smem_desc(static_cast<uint32_t>(__cvta_generic_to_shared(sv)), 0, 1024);
  const uint64_t dv_tail =
      hw::smem_desc(static_cast<uint32_t>(__cvta_generic_to_shared(sv + kFull * kD * 128)), 0, 512, 64);
  hw::wgmma_fence();
  for (int ks = 0; ks < kD / 32; ++ks)
    hw::MmaSsK32<T, kN>::run(s_flat, hw::desc_advance(dq, ks * 32), hw::desc_advance(dk, ks * 32), ks > 0 ? 1u : 0u);
  hw::wgmma_commit();
  hw::wgmma_wait<0>();
  hw::fence_operands(s_flat);
  // Accumulator layout: row warp * 16 + lane / 4 (+ 8), column 8 j + 2 (lane % 4) + e.
  const int r0 = warp * 16 + lane / 4, c0 = 2 * (lane % 4);
  for (int j = 0; j < kN / 8; ++j)
    for (int e = 0; e < 4; ++e) s_out[(r0 + 8 * (e / 2)) * kN + 8 * j + c0 + e % 2] = s[j][e];

  // P in the same accumulator layout -> A fragments -> O = P V.
  for (int j = 0; j < kN / 8; ++j)
    for (int e = 0; e < 4; ++e) s[j][e] = p[(r0 + 8 * (e / 2)) * kN + 8 * j + c0 + e % 2];
  uint32_t pf[kN / 32][4];
  for (int kb = 0; kb < kN / 32; ++kb)
    hw::pack_p_fp8<__nv_fp8_e4m3>(reinterpret_cast<const float(&)[4][4]>(s[4 * kb]), pf[kb], lane);
  float o[kD / 2];
  for (float& x : o) x = 0.f;
  hw::wgmma_fence();
  for (int kb = 0; kb < kN / 32; ++kb)
    hw::MmaRsK32<__nv_fp8_e4m3, T, kD>::run(o, pf[kb],
                             kb < 4 * kFull ? hw::desc_advance(dv, (kb / 4) * kD * 128 + (kb % 4) * 32)
                                            : hw::desc_advance(dv_tail, (kb - 4 * kFull) * 32),
                             1u);
  hw::wgmma_commit();
  hw::wgmma_wait<0>();
  hw::fence_operands(o);
  for (int j = 0; j < kD / 8; ++j)
    for (int e = 0; e < 4; ++e) o_out[(r0 + 8 * (e / 2)) * kD + 8 * j + c0 + e % 2] = o[4 * j + e];
#endif
}

template <class T, int kN>
void check_fragments(fmha_dtype dtype, uint64_t seed) {
  CAPTURE(kN);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  auto fp8 = [&](float x) { return fmha_test::float_to_fp8(x, dtype); };
  auto val = [&](uint8_t b) { return static_cast<double>(fmha_test::fp8_to_float(b, dtype)); };
  std::vector<uint8_t> q(kRows * kD), k(kN * kD), vt(kD * kN);
  for (auto& x : q) x = fp8(normal(rng));
  for (auto& x : k) x = fp8(normal(rng));
  for (auto& x : vt) x = fp8(normal(rng));
  // P as the kernel has it: in [0, 2^8], e4m3-exact (round-tripped; P is
  // e4m3 whatever the inputs' kind), with zeros and the top value among them.
  std::vector<float> p(kRows * kN);
  std::uniform_real_distribution<float> unif(0.f, 256.f);
  for (size_t i = 0; i < p.size(); ++i)
    p[i] = i % 17 == 0   ? 0.f
           : i % 29 == 0 ? 256.f
                         : fmha_test::fp8_to_float(fmha_test::float_to_fp8(unif(rng), FMHA_DTYPE_F8E4M3),
                                                   FMHA_DTYPE_F8E4M3);

  uint8_t *dq, *dk, *dvt;
  float *dp, *ds, *dout;
  CUDA_OK(cudaMalloc(&dq, q.size()));
  CUDA_OK(cudaMalloc(&dk, k.size()));
  CUDA_OK(cudaMalloc(&dvt, vt.size()));
  CUDA_OK(cudaMalloc(&dp, p.size() * 4));
  CUDA_OK(cudaMalloc(&ds, kRows * kN * 4));
  CUDA_OK(cudaMalloc(&dout, kRows * kD * 4));
  CUDA_OK(cudaMemcpy(dq, q.data(), q.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dk, k.data(), k.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dvt, vt.data(), vt.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dp, p.data(), p.size() * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(ds, 0xff, kRows * kN * 4));  // NaN poison
  CUDA_OK(cudaMemset(dout, 0xff, kRows * kD * 4));
  constexpr int kSmem = 1024 + kRows * 128 + 2 * kN * 128;
  CUDA_OK(cudaFuncSetAttribute(fp8_fragments_kernel<T, kN>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  fp8_fragments_kernel<T, kN><<<1, 128, kSmem>>>(dq, dk, dvt, dp, ds, dout);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> s(kRows * kN), o(kRows * kD);
  CUDA_OK(cudaMemcpy(s.data(), ds, s.size() * 4, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(o.data(), dout, o.size() * 4, cudaMemcpyDeviceToHost));
  for (void* x : {static_cast<void*>(dq), static_cast<void*>(dk), static_cast<void*>(dvt), static_cast<void*>(dp),
                  static_cast<void*>(ds), static_cast<void*>(dout)})
    CUDA_OK(cudaFree(x));

  // rel-L2 and the worst element of each product.
  double s_num = 0, s_den = 0, o_num = 0, o_den = 0, s_worst = 0, o_worst = 0;
  bool finite = true;
  for (int i = 0; i < kRows; ++i)
    for (int j = 0; j < kN; ++j) {
      double ref = 0;
      for (int d = 0; d < kD; ++d) ref += val(q[i * kD + d]) * val(k[j * kD + d]);
      const double err = s[i * kN + j] - ref;
      finite = finite && std::isfinite(s[i * kN + j]);
      s_num += err * err;
      s_den += ref * ref;
      s_worst = std::fmax(s_worst, std::fabs(err));
    }
  for (int i = 0; i < kRows; ++i)
    for (int d = 0; d < kD; ++d) {
      double ref = 0;
      for (int j = 0; j < kN; ++j) ref += static_cast<double>(p[i * kN + j]) * val(vt[d * kN + j]);
      const double err = o[i * kD + d] - ref;
      finite = finite && std::isfinite(o[i * kD + d]);
      o_num += err * err;
      o_den += ref * ref;
      o_worst = std::fmax(o_worst, std::fabs(err));
    }
  CHECK(finite);
  const double s_err = std::sqrt(s_num / s_den), o_err = std::sqrt(o_num / o_den);
  MESSAGE("S = Q K^T rel-L2 " << s_err << " (worst " << s_worst << "), O = P V rel-L2 " << o_err << " (worst "
                              << o_worst << ")");
  // The products are exact, but the FP8 MMA accumulates with fewer bits
  // than FP32 (H200: rel-L2 0.9-1.3e-4 over 128 terms, the first device
  // run; DeepSeek-V3 reports ~14 bits for FP8 GEMM accumulation on Hopper).
  // A layout mistake (a wrong key, row, byte or swizzle) is of the order of
  // the values themselves: rel-L2 > 0.1.
  CHECK(s_err < 1e-3);
  CHECK(o_err < 1e-3);
}

}  // namespace

TEST_CASE("sm90 FP8 wgmma: Q K^T from shared memory, P V with P's A fragments from the accumulator (pack_p_fp8)") {
  check_fragments<__nv_fp8_e4m3, 128>(FMHA_DTYPE_F8E4M3, 21);
  check_fragments<__nv_fp8_e5m2, 128>(FMHA_DTYPE_F8E5M2, 22);  // P e4m3 x V e5m2
}

TEST_CASE("sm90 FP8 wgmma: 192-key tiles, V^T's last 64 keys in the 64-byte swizzle (FMHA_SM90_FP8_EXPERIMENTS)") {
  // The layout of the 128 x 192 candidate configs (fp8_tile_config.h), which
  // only an FMHA_SM90_FP8_EXPERIMENTS build compiles into the library.
  check_fragments<__nv_fp8_e4m3, 192>(FMHA_DTYPE_F8E4M3, 23);
  check_fragments<__nv_fp8_e5m2, 192>(FMHA_DTYPE_F8E5M2, 24);
}
