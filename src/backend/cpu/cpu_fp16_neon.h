// F16 scores with the FP16 multiply-add long of AArch64 (FEAT_FHM:
// FMLAL/FMLAL2), for the neonfp16 path of cpu_attention.cpp (cpu_isa.h).
// The AArch64 counterpart of the avx512bf16 path's vdpbf16ps kernels.
//
// FMLAL widens F16 lanes to FP32 and adds their product into FP32 lanes
// with one rounding: the product of two halves (11-bit significands) is
// exact in FP32, so the scores keep FP32 accumulation and Q and K need no
// conversion. Plain FP16 FMLA (asimdhp alone) would round every partial sum
// to F16, far outside the F16 tolerance: not used. Q is not pre-scaled
// (scale * q rounded to F16 would lose bits); the scale multiplies the FP32
// sums.
//
// Each function is compiled for +fp16fml through a target attribute and is
// out of line, so the rest of the library stays at the AArch64 baseline;
// call one only when isa_available(kNeonFp16) holds.
#pragma once

#include <cstdint>

#if defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(FMHA_CPU_BASELINE_ONLY)
#define FMHA_CPU_NEON_FP16 1
#else
#define FMHA_CPU_NEON_FP16 0
#endif

#if FMHA_CPU_NEON_FP16
namespace fmha::cpu {

// S = scale * K_tile . Q^T, keys x rows: s[j * lds + r] = scale * sum_{d <
// head_dim} k[j * ldk + d] * qt[d * ldq + r], for keys j < nk and rows r <
// np (a multiple of 16; Q^T's rows past the block's are 0). K and Q^T raw
// F16 bits.
void f16_score_tile_neon(const uint16_t* k, int64_t ldk, const uint16_t* qt, int64_t ldq, float* s, int64_t lds,
                         int64_t nk, int64_t np, int64_t head_dim, float scale);

// The dot-product form for packed decode blocks, S rows x keys:
// s[r * lds + j] = scale * sum_{d < dp} k[j * ldk + d] * q[r * ldq + d] for
// keys j < nk and rows r < nr, with K rows and Q rows raw F16, zero past
// head_dim up to dp (a multiple of 8). Each (key, row) sums 4 FP32 lanes,
// folded as (a0 + a2) + (a1 + a3).
void f16_dot_tile_neon(const uint16_t* k, int64_t ldk, const uint16_t* q, int64_t ldq, float* s, int64_t lds,
                       int64_t nk, int64_t nr, int64_t dp, float scale);

}  // namespace fmha::cpu
#endif
