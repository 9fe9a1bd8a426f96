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
// both kinds; saturation only guards the conversion's contract). The FP8
// kernel converts P to e4m3 whatever its inputs' kind.
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
// Per row, lane t holds the FP8 pairs u_j (keys 8 j + 2t, + 1) of blocks
// j = 0..3 and needs keys 4t .. 4t + 3 (block t / 2, from quad lanes
// 2 (t % 2) and 2 (t % 2) + 1) and 16 + 4t .. (block 2 + t / 2, the same
// lanes). Two shuffle rounds in which each lane is read by exactly one
// other, so the sender picks what its reader needs: round 1 lane t reads
// lane {1, 2, 0, 3}[t], round 2 lane {0, 3, 1, 2}[t]; with p = t's parity
// bit (t ^ t / 2) & 1, a sender offers X = (u0, u2) or Y = (u1, u3), X in
// round 1 when p, in round 2 when !p. The reader's round-(p ? 1 : 2) word
// holds its first pair, the other its second; byte permutes join the low
// halves (a0 / a1) and the high halves (a2 / a3). 2 shuffles per row and
// k32 block.
template <class T>
__device__ __forceinline__ void pack_p_fp8(const float (&s)[4][4], uint32_t (&a)[4], int lane) {
  const int t = lane % 4;
  const int quad0 = lane & ~3;
  const int src1 = quad0 + ((0x3021 >> (4 * t)) & 0xf);
  const int src2 = quad0 + ((0x2130 >> (4 * t)) & 0xf);
  const bool p = ((t ^ (t >> 1)) & 1) != 0;
  const uint32_t send1 = p ? 0x5410u : 0x7632u;  // of (u0 | u1 << 16, u2 | u3 << 16): X or Y
  const uint32_t send2 = p ? 0x7632u : 0x5410u;
  const uint32_t lo = p ? 0x5410u : 0x1054u;     // of (w1, w2): the first pair's low half first
  const uint32_t hi = p ? 0x7632u : 0x3276u;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const uint32_t u01 = fp8x2<T>(s[0][2 * hh], s[0][2 * hh + 1]) | (fp8x2<T>(s[1][2 * hh], s[1][2 * hh + 1]) << 16);
    const uint32_t u23 = fp8x2<T>(s[2][2 * hh], s[2][2 * hh + 1]) | (fp8x2<T>(s[3][2 * hh], s[3][2 * hh + 1]) << 16);
    const uint32_t w1 = __shfl_sync(0xffffffffu, __byte_perm(u01, u23, send1), src1);
    const uint32_t w2 = __shfl_sync(0xffffffffu, __byte_perm(u01, u23, send2), src2);
    a[hh] = __byte_perm(w1, w2, lo);      // keys 4t .. 4t + 3
    a[2 + hh] = __byte_perm(w1, w2, hi);  // keys 16 + 4t .. 16 + 4t + 3
  }
}

}  // namespace fmha::cuda::sm90
