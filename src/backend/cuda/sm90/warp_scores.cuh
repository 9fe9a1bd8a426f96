// S = Q K^T of one warp's 16 query rows by mma.sync: the rare redo of
// OnlineSoftmax::step_speculative (common/softmax.cuh) in the sm90 kernels,
// which otherwise compute S with wgmma for the whole warpgroup, so a warp
// that needs its scores again cannot issue one alone.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/sm80/ptx.cuh"  // ldmatrix_x4, MmaType (m16n8k16)

namespace fmha::cuda::sm90 {

// d += a * b for one m16n8k32 tile of 8-bit operands (sm_89 and newer):
// a0..a3 hold 4 bytes each (rows g, g + 8 at bytes 4 t and 16 + 4 t of the
// k32 step, g = lane / 4, t = lane % 4), b0 / b1 key g's bytes 4 t and
// 16 + 4 t; the accumulator is m16n8k16's.
template <class T>
struct MmaK32;
template <>
struct MmaK32<__nv_fp8_e4m3> {
  __device__ __forceinline__ static void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};
template <>
struct MmaK32<__nv_fp8_e5m2> {
  __device__ __forceinline__ static void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

// s = this warp's scores against kNTiles * 8 keys of a K tile in shared
// memory at k_base: key rows of 128 bytes in 128-byte-swizzled panels
// (16-byte chunk c of row r at c ^ (r % 8)) panel_bytes apart, the layout
// the copy engine gives wgmma; a k-step is 32 bytes of a row (16 16-bit or
// 32 8-bit elements), kKSteps of them. a_frag(ks, a) writes the warp's A
// fragment of k-step ks (Q, in the m16n8k16 / m16n8k32 layout, which is
// also wgmma's register-A layout per warp). Lane l addresses key row
// 16 np + 8 (l / 16) + l % 8 and chunk 2 ks + (l / 8) % 2, so one x4 load
// returns b0, b1 of n8 tile 2 np and b0, b1 of 2 np + 1. s's layout is the
// wgmma accumulator's (element e of n8 tile nt of lane l: row l / 4 + 8
// (e / 2), key 8 nt + 2 (l % 4) + e % 2).
// kRolled: the k-steps in a rolled loop (a_frag must then take a run-time
// ks, e.g. reading Q from shared memory): unrolled, ptxas hoists every
// step's loads, which made the FP8 kernel spill in its key loop.
template <class T, int kNTiles>
__device__ __forceinline__ void warp_scores_step(float (&s)[1][kNTiles][4], const uint32_t (&a)[4], uint32_t k_base,
                                                 int panel_bytes, int lane, int ks) {
  const int chunk = 2 * ks + (lane / 8) % 2;
#pragma unroll
  for (int np = 0; np < kNTiles / 2; ++np) {
    const int key = 16 * np + 8 * (lane / 16) + lane % 8;
    uint32_t b[4];
    sm80::ldmatrix_x4(b, k_base + (chunk / 8) * panel_bytes + key * 128 + (((chunk % 8) ^ (key % 8)) << 4));
    if constexpr (sizeof(T) == 1) {
      MmaK32<T>::mma(s[0][2 * np], a, b[0], b[1]);
      MmaK32<T>::mma(s[0][2 * np + 1], a, b[2], b[3]);
    } else {
      sm80::MmaType<T>::mma(s[0][2 * np], a, b[0], b[1]);
      sm80::MmaType<T>::mma(s[0][2 * np + 1], a, b[2], b[3]);
    }
  }
}

template <class T, int kKSteps, int kNTiles, bool kRolled = false, class AFrag>
__device__ __forceinline__ void warp_scores(float (&s)[1][kNTiles][4], uint32_t k_base, int panel_bytes, int lane,
                                            AFrag&& a_frag) {
  static_assert(kNTiles % 2 == 0, "pairs of n8 tiles per ldmatrix x4");
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[0][nt][e] = 0.f;
  if constexpr (kRolled) {
#pragma unroll 1
    for (int ks = 0; ks < kKSteps; ++ks) {
      uint32_t a[4];
      a_frag(ks, a);
      warp_scores_step<T>(s, a, k_base, panel_bytes, lane, ks);
    }
  } else {
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      uint32_t a[4];
      a_frag(ks, a);
      warp_scores_step<T>(s, a, k_base, panel_bytes, lane, ks);
    }
  }
}

}  // namespace fmha::cuda::sm90
