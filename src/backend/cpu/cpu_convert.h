// Row conversions between F16 and FP32 in hardware, for the paths of
// cpu_attention.cpp above baseline (cpu_isa.h):
//   x86-64: F16C vcvtph2ps / vcvtps2ph, or their AVX-512 forms, for the avx2
//   and avx512 paths. Each function is compiled for its own instruction set
//   through a target attribute and is out of line, so the rest of the
//   library stays baseline; call one only when isa_available(kAvx2) (the
//   *_f16c forms) or isa_available(kAvx512) (the *_avx512 forms) holds.
//   AArch64: ASIMD FCVTL / FCVTN (part of every AArch64 CPU), for the neon
//   paths.
//
// The results are bit for bit those of numeric.h's half_to_float and
// float_to_half for every input (tests/internal/test_cpu_convert.cpp checks
// all 65536 halves and the rounding boundaries of the narrowing): widening
// is exact and turns a signalling NaN quiet, narrowing rounds to nearest
// even (on x86-64 the instruction's immediate rounding, whatever MXCSR
// says; on AArch64 FPCR's rounding mode, nearest even unless the program
// changed it, as for numeric.h's own rounding; Linux starts processes with
// FPCR's flush-to-zero and default-NaN modes off, which these need).
#pragma once

#include <cstdint>

#include "backend/cpu/cpu_isa.h"

namespace fmha::cpu {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(FMHA_CPU_BASELINE_ONLY)
#define FMHA_CPU_HW_F16 1
// dst[i] = half_to_float(src[i]) for i < n (contiguous).
void f16_to_f32_f16c(const uint16_t* src, int64_t n, float* dst);
void f16_to_f32_avx512(const uint16_t* src, int64_t n, float* dst);
// dst[i] = float_to_half(src[i] * mul) for i < n (contiguous).
void f32_to_f16_f16c(const float* src, float mul, int64_t n, uint16_t* dst);
void f32_to_f16_avx512(const float* src, float mul, int64_t n, uint16_t* dst);
#else
#define FMHA_CPU_HW_F16 0
#endif

#if defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(FMHA_CPU_BASELINE_ONLY)
#define FMHA_CPU_NEON_F16 1
// dst[i] = half_to_float(src[i]) for i < n (contiguous).
void f16_to_f32_neon(const uint16_t* src, int64_t n, float* dst);
// dst[i] = float_to_half(src[i] * mul) for i < n (contiguous).
void f32_to_f16_neon(const float* src, float mul, int64_t n, uint16_t* dst);
#else
#define FMHA_CPU_NEON_F16 0
#endif

}  // namespace fmha::cpu
