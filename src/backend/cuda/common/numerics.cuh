// Element-level numerics of fmha.h 0.3 shared by the CUDA families: OCP FP8
// decoding, a load of any fmha dtype as float, the per-(batch, kv head)
// descales, and the additive bias + ALiBi term of one logit. The semantics
// are FwdParams' (common/fwd_params.h) and cpu_tiled's, the oracle.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "backend/cuda/common/fwd_params.h"
#include "fmha/fmha.h"

namespace fmha::cuda {

__device__ __forceinline__ constexpr __nv_fp8_interpretation_t fp8_kind(int dtype) {
  return dtype == FMHA_DTYPE_F8E4M3 ? __NV_E4M3 : __NV_E5M2;
}

// FP8 -> F16 is exact for both formats (e4m3: 4-bit exponent, 3-bit
// mantissa, max 448; e5m2 is F16's top byte), and so is F16 -> F32 or FP8
// -> BF16 through F32. e4m3's 0x7f/0xff decode to NaN (it has no inf). The
// intrinsics use the sm_89+ cvt instructions and a software path below.
__device__ __forceinline__ __half2 fp8x2_to_half2(uint16_t two, __nv_fp8_interpretation_t kind) {
  return __half2(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two), kind));
}
__device__ __forceinline__ float fp8_to_float(uint8_t x, __nv_fp8_interpretation_t kind) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(x), kind)));
}

// Element idx of an array of fmha dtype `dtype` (an fmha_dtype value), as float.
__device__ __forceinline__ float load_as_float(const void* base, int64_t idx, int dtype) {
  switch (dtype) {
    case FMHA_DTYPE_F16: return __half2float(static_cast<const __half*>(base)[idx]);
    case FMHA_DTYPE_BF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[idx]);
    case FMHA_DTYPE_F32: return static_cast<const float*>(base)[idx];
    default: return fp8_to_float(static_cast<const uint8_t*>(base)[idx], fp8_kind(dtype));
  }
}

// The fmha_dtype of a CUDA element type.
template <class T>
inline constexpr int kDtypeOf = -1;
template <>
inline constexpr int kDtypeOf<__half> = FMHA_DTYPE_F16;
template <>
inline constexpr int kDtypeOf<__nv_bfloat16> = FMHA_DTYPE_BF16;
template <>
inline constexpr int kDtypeOf<float> = FMHA_DTYPE_F32;

// Stores x, rounded to nearest even, as element idx of an array of dtype
// `dtype`: an output dtype (F16, BF16 or F32; fmha.h has no FP8 o).
__device__ __forceinline__ void store_from_float(void* base, int64_t idx, int dtype, float x) {
  switch (dtype) {
    case FMHA_DTYPE_F16: static_cast<__half*>(base)[idx] = __float2half_rn(x); break;
    case FMHA_DTYPE_BF16: static_cast<__nv_bfloat16*>(base)[idx] = __float2bfloat16_rn(x); break;
    default: static_cast<float*>(base)[idx] = x; break;
  }
}

// A [batch, heads_kv] descale of batch entry (sequence) b and kv head hk; 1 when absent.
__device__ __forceinline__ float descale_at(const float* d, const FwdParams& p, int64_t b, int64_t hk) {
  return d == nullptr ? 1.f : d[b * (p.heads_q / p.group) + hk];
}

// The factor that turns q.k into the logit of kv head hk of sequence b:
// scale * q_descale * k_descale (before softcap), cpu_tiled's order.
__device__ __forceinline__ float qk_descale(const FwdParams& p, int64_t b, int64_t hk) {
  return descale_at(p.q_descale, p, b, hk) * descale_at(p.k_descale, p, b, hk);
}

__device__ __forceinline__ bool has_bias_or_alibi(const FwdParams& p) {
  return p.bias != nullptr || p.alibi_slopes != nullptr;
}

// bias[b, h, i, j] - slope(b, h) * |d(i) - j| in natural units, added to the
// scaled (and soft-capped) logit before the mask; i and j are the sequence's
// local query and key positions, diag its diag_offset (d(i) = i + diag).
__device__ __forceinline__ float bias_alibi(const FwdParams& p, int64_t b, int64_t h, int64_t i, int64_t j,
                                            int64_t diag) {
  float x = 0.f;
  if (p.bias != nullptr)
    x = load_as_float(p.bias, b * p.bias_stride[0] + h * p.bias_stride[1] + i * p.bias_stride[2] + j * p.bias_stride[3],
                      p.bias_dtype);
  if (p.alibi_slopes != nullptr) {
    const int64_t d = i + diag;
    const int64_t dist = d > j ? d - j : j - d;
    x -= p.alibi_slopes[b * p.alibi_stride + h] * static_cast<float>(dist);
  }
  return x;
}

}  // namespace fmha::cuda
