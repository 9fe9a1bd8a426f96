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

#include "backend/cuda/sm80/ptx.cuh"  // MmaType (m16n8k16); ldmatrix_x4 (the callers' Q fragments)

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

// s = this warp's scores against kNTiles * 8 keys read from global memory
// (the K stage is the producer's again by the time a warp finds it needs
// them: the redo is rare, so its keys come through L2 instead of holding
// the stage for every tile). key_row(n): key n's row, D elements of T,
// 4-byte aligned. B fragment of n8 tile nt at k-step ks (m16n8k16, or
// m16n8k32 for 8-bit T): lane l's 32-bit words 8 ks + l % 4 (b0) and
// 8 ks + 4 + l % 4 (b1) of key 8 nt + l / 4 (2 16-bit or 4 8-bit elements
// each). a_frag(ks, a) writes the warp's A fragment of k-step ks (Q, in the
// m16n8k16 / m16n8k32 layout, which is also wgmma's register-A layout per
// warp). s's layout is the wgmma accumulator's (element e of n8 tile nt of
// lane l: row l / 4 + 8 (e / 2), key 8 nt + 2 (l % 4) + e % 2).
// kRolled: the k-steps in a rolled loop (a_frag must then take a run-time
// ks, e.g. reading Q from shared memory); the n8 tiles are always unrolled
// (s's registers), one key row pointer live at a time.
template <class T, int kKSteps, int kNTiles, bool kRolled = false, class KeyRow, class AFrag>
__device__ __forceinline__ void warp_scores(float (&s)[1][kNTiles][4], KeyRow&& key_row, int lane, AFrag&& a_frag) {
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) {
    const uint32_t* row = reinterpret_cast<const uint32_t*>(key_row(8 * nt + lane / 4)) + lane % 4;
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    auto step = [&](int ks) {
      uint32_t a[4];
      a_frag(ks, a);
      const uint32_t b0 = __ldg(row + 8 * ks), b1 = __ldg(row + 8 * ks + 4);
      if constexpr (sizeof(T) == 1)
        MmaK32<T>::mma(d, a, b0, b1);
      else
        sm80::MmaType<T>::mma(d, a, b0, b1);
    };
    if constexpr (kRolled) {
#pragma unroll 1
      for (int ks = 0; ks < kKSteps; ++ks) step(ks);
    } else {
#pragma unroll
      for (int ks = 0; ks < kKSteps; ++ks) step(ks);
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) s[0][nt][e] = d[e];
  }
}

}  // namespace fmha::cuda::sm90
