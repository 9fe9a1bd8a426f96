// Hardware F16 row conversions (see cpu_convert.h).
#include "backend/cpu/cpu_convert.h"

#if FMHA_CPU_HW_F16
#include <immintrin.h>

#include <cstring>

#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's _mm512_cvtph_ps and _mm512_cvtps_ph pass an _mm512_undefined_*()
// operand that -Wmaybe-uninitialized reports once inlined: the header's
// doing, not this file's.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define FMHA_TARGET_F16C __attribute__((target("avx2,fma,f16c")))
#define FMHA_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")))

namespace fmha::cpu {

// Rounding of vcvtps2ph: to nearest even from the immediate, never MXCSR's
// mode, and no precision exception.
constexpr int kRoundNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

FMHA_TARGET_F16C void f16_to_f32_f16c(const uint16_t* src, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  if (i < n) {  // the tail through a zero-padded copy
    uint16_t h[8] = {};
    float f[8];
    std::memcpy(h, src + i, (n - i) * sizeof(uint16_t));
    _mm256_storeu_ps(f, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h))));
    std::memcpy(dst + i, f, (n - i) * sizeof(float));
  }
}

FMHA_TARGET_AVX512 void f16_to_f32_avx512(const uint16_t* src, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  if (i < n) {
    const __mmask16 k = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(dst + i, k, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, src + i)));
  }
}

FMHA_TARGET_F16C void f32_to_f16_f16c(const float* src, float mul, int64_t n, uint16_t* dst) {
  const __m256 m = _mm256_set1_ps(mul);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_mul_ps(_mm256_loadu_ps(src + i), m), kRoundNearest));
  if (i < n) {
    float f[8] = {};
    uint16_t h[8];
    std::memcpy(f, src + i, (n - i) * sizeof(float));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(h), _mm256_cvtps_ph(_mm256_mul_ps(_mm256_loadu_ps(f), m), kRoundNearest));
    std::memcpy(dst + i, h, (n - i) * sizeof(uint16_t));
  }
}

FMHA_TARGET_AVX512 void f32_to_f16_avx512(const float* src, float mul, int64_t n, uint16_t* dst) {
  const __m512 m = _mm512_set1_ps(mul);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm512_cvtps_ph(_mm512_mul_ps(_mm512_loadu_ps(src + i), m), kRoundNearest));
  if (i < n) {
    const __mmask16 k = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm256_mask_storeu_epi16(dst + i, k, _mm512_cvtps_ph(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, src + i), m),
                                                         kRoundNearest));
  }
}

}  // namespace fmha::cpu
#endif

#if FMHA_CPU_NEON_F16
#include <arm_neon.h>

#include <cstring>

namespace fmha::cpu {

// 8 halves a step (one FCVTL and one FCVTL2), the tail through a zero-padded
// copy.
void f16_to_f32_neon(const uint16_t* src, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(src + i));
    vst1q_f32(dst + i, vcvt_f32_f16(vget_low_f16(h)));
    vst1q_f32(dst + i + 4, vcvt_high_f32_f16(h));
  }
  if (i < n) {
    uint16_t h[8] = {};
    float f[8];
    std::memcpy(h, src + i, (n - i) * sizeof(uint16_t));
    const float16x8_t v = vreinterpretq_f16_u16(vld1q_u16(h));
    vst1q_f32(f, vcvt_f32_f16(vget_low_f16(v)));
    vst1q_f32(f + 4, vcvt_high_f32_f16(v));
    std::memcpy(dst + i, f, (n - i) * sizeof(float));
  }
}

// 8 floats a step: multiplied, then FCVTN and FCVTN2 (one rounding each: the
// product rounds to FP32 first, as float_to_half(src[i] * mul) does).
void f32_to_f16_neon(const float* src, float mul, int64_t n, uint16_t* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const float16x4_t lo = vcvt_f16_f32(vmulq_n_f32(vld1q_f32(src + i), mul));
    const float16x8_t h = vcvt_high_f16_f32(lo, vmulq_n_f32(vld1q_f32(src + i + 4), mul));
    vst1q_u16(dst + i, vreinterpretq_u16_f16(h));
  }
  if (i < n) {
    float f[8] = {};
    uint16_t h[8];
    std::memcpy(f, src + i, (n - i) * sizeof(float));
    const float16x4_t lo = vcvt_f16_f32(vmulq_n_f32(vld1q_f32(f), mul));
    vst1q_u16(h, vreinterpretq_u16_f16(vcvt_high_f16_f32(lo, vmulq_n_f32(vld1q_f32(f + 4), mul))));
    std::memcpy(dst + i, h, (n - i) * sizeof(uint16_t));
  }
}

}  // namespace fmha::cpu
#endif
