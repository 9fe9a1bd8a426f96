// The register side of the FP8 wgmma (m64nNk32) that cuda_sm90_ws's FP8
// kernel (fwd_fp8_kernel.cuh) needs beyond wgmma.cuh: P, an FP32
// accumulator, as the 8-bit A fragments of O += P V. Standalone (no
// generated headers), so tests/sm90 checks it in isolation.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

namespace fmha::cuda::sm90 {

template <class T>
constexpr __nv_fp8_interpretation_t kFp8Kind = std::is_same<T, __nv_fp8_e5m2>::value ? __NV_E5M2 : __NV_E4M3;

// Two floats as an FP8 pair (lo in the low byte), saturating (P <= 2^8 fits
// both kinds; saturation only guards the conversion's contract).
template <class T>
__device__ __forceinline__ uint32_t fp8x2(float lo, float hi) {
  return __nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, kFp8Kind<T>);
}

// The S accumulator of one warp's 16 rows and 32 keys (k32 block kb of the
// key tile: n8 blocks 4 kb .. 4 kb + 3 of s) as the A fragment of wgmma
// m64nNk32 for O += P V with the keys in order.
//   S: lane (g, t) = (lane / 4, lane % 4) holds keys 8 j + 2t, 8 j + 2t + 1
//      of n8 block j, rows g (s[j][0..1]) and g + 8 (s[j][2..3]);
//   A: a0 = row g, keys 4t .. 4t + 3; a1 = row g + 8, the same keys;
//      a2, a3 = the same rows at keys 16 + 4t .. 16 + 4t + 3.
// Lane t's keys 4t .. 4t + 3 are block t / 2's pairs held by quad lanes
// src0 = 2 (t % 2) and src0 + 1, and its keys 16 + 4t .. the same lanes'
// pairs of block 2 + t / 2. Each lane offers X = (pair of block 0, pair of
// block 2) and Y = (block 1, block 3) per row; the receiver takes X (t < 2)
// or Y from both sources and joins their low halves (a0 / a1) and high
// halves (a2 / a3). 4 shuffles per row and k32 block.
template <class T>
__device__ __forceinline__ void pack_p_fp8(const float (&s)[4][4], uint32_t (&a)[4], int lane) {
  const int t = lane % 4;
  const int src0 = (lane & ~3) + 2 * (t % 2);
  const bool take_x = t < 2;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const uint32_t u0 = fp8x2<T>(s[0][2 * hh], s[0][2 * hh + 1]);
    const uint32_t u1 = fp8x2<T>(s[1][2 * hh], s[1][2 * hh + 1]);
    const uint32_t u2 = fp8x2<T>(s[2][2 * hh], s[2][2 * hh + 1]);
    const uint32_t u3 = fp8x2<T>(s[3][2 * hh], s[3][2 * hh + 1]);
    const uint32_t x = u0 | (u2 << 16), y = u1 | (u3 << 16);
    const uint32_t x0 = __shfl_sync(0xffffffffu, x, src0), y0 = __shfl_sync(0xffffffffu, y, src0);
    const uint32_t x1 = __shfl_sync(0xffffffffu, x, src0 + 1), y1 = __shfl_sync(0xffffffffu, y, src0 + 1);
    const uint32_t w0 = take_x ? x0 : y0, w1 = take_x ? x1 : y1;
    a[hh] = __byte_perm(w0, w1, 0x5410);      // low halves: keys 4t .. 4t + 3
    a[2 + hh] = __byte_perm(w0, w1, 0x7632);  // high halves: keys 16 + 4t ..
  }
}

}  // namespace fmha::cuda::sm90
