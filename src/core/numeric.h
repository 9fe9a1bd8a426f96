// Scalar conversions between FP32 and the 16-bit storage formats (IEEE
// binary16 "F16" and bfloat16 "BF16"), and from the OCP FP8 formats
// (E4M3, E5M2) to FP32, host only.
//
// Storage values are passed as their raw uint16_t bits. Widening is exact for
// every input; narrowing rounds to nearest, ties to even, keeps the sign,
// turns values past the largest finite into inf, and keeps NaN a (quiet)
// NaN. Widening an F16 signalling NaN gives the quiet NaN with the same
// payload, as IEEE 754's convertFormat and the hardware (F16C vcvtph2ps) do,
// so the CPU backend's software and hardware conversions agree bit for bit.
// The widening functions are written without branches so that a loop over
// an array of them vectorizes.
#pragma once

#include <cstdint>
#include <cstring>

namespace fmha {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// binary16 -> float, exact.
inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;  // exponent and mantissa
  const uint32_t shifted = em << 13;  // the 15 bits at the float position
  // Normal: rebias the exponent by 127 - 15 = 112.
  const uint32_t normal = shifted + (112u << 23);
  // Subnormal (exponent 0, value em * 2^-24): give it the exponent of 2^-14
  // as if it had the implicit 1, then subtract that 1 (2^-14). Both operands
  // and the exact result are normal floats, so DAZ/FTZ modes cannot flush it.
  const uint32_t subnormal = float_bits(bits_float(shifted + (113u << 23)) - 0x1p-14f);
  // Inf/NaN: exponent all ones, the mantissa (NaN payload) kept, a NaN
  // made quiet (the top mantissa bit set).
  const uint32_t is_nan = 0u - static_cast<uint32_t>(em > 0x7c00u);
  const uint32_t special = shifted | 0x7f800000u | (is_nan & 0x00400000u);
  // Select with masks rather than ?: so the compiler keeps the loop
  // branch-free (it will not if-convert a float subtraction it has moved
  // under a branch, since that might trap) and vectorizes it.
  const uint32_t is_sub = 0u - static_cast<uint32_t>(em < 0x0400u);
  const uint32_t is_special = 0u - static_cast<uint32_t>(em >= 0x7c00u);
  const uint32_t mag = (subnormal & is_sub) | (special & is_special) | (normal & ~(is_sub | is_special));
  return bits_float(sign | mag);
}

// float -> binary16, round to nearest even.
inline uint16_t float_to_half(float f) {
  uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u)  // NaN: quiet, top of the payload kept
    return static_cast<uint16_t>(sign | 0x7e00u | ((u >> 13) & 0x03ffu));
  if (u >= 0x477ff000u)  // >= 65520 (halfway to 2^16) rounds to inf; inf stays inf
    return static_cast<uint16_t>(sign | 0x7c00u);
  if (u < 0x38800000u) {  // below 2^-14: a binary16 subnormal or zero
    // In [0.5, 1) one float ulp is 2^-24, the binary16 subnormal step, so
    // adding 0.5 makes the FPU round |f| to that step (ties to even); the
    // bits above 0.5's are the subnormal's. 2^-14 - 2^-25 and up round to
    // 0x0400, the smallest normal, which is the right answer.
    return static_cast<uint16_t>(sign | (float_bits(bits_float(u) + 0.5f) - 0x3f000000u));
  }
  // Normal: rebias 127 -> 15, then round the 13 dropped bits to nearest
  // even (add 0x0fff plus the lowest kept bit); a carry out of the mantissa
  // correctly bumps the exponent.
  const uint32_t odd = (u >> 13) & 1u;
  u += 0xc8000000u /* (15 - 127) << 23, mod 2^32 */ + 0x0fffu + odd;
  return static_cast<uint16_t>(sign | (u >> 13));
}

// bfloat16 -> float, exact (bfloat16 is the top half of a float).
inline float bf16_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

// float -> bfloat16, round to nearest even.
inline uint16_t float_to_bf16(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)  // NaN: quiet, sign and top payload kept
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  // Add just under half an ulp plus the lowest kept bit: rounds up past
  // halfway, and at exactly halfway only when that makes the result even.
  // Overflow carries into the exponent and gives inf, as it should.
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// OCP FP8 E4M3 (bias 7, no infinities, NaN = S.1111.111) -> float, exact.
inline float fp8_e4m3_to_float(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t e = (b >> 3) & 0xfu, m = b & 0x7u;
  if (e == 0xfu && m == 0x7u) return bits_float(sign | 0x7fc00000u);
  // Subnormal: m * 2^-9; normal: (8 + m) * 2^(e - 10). Both exact in float.
  const float mag = e == 0 ? static_cast<float>(m) * 0x1p-9f
                           : static_cast<float>(8u + m) * bits_float((e - 10u + 127u) << 23);
  return bits_float(sign | float_bits(mag));
}

// OCP FP8 E5M2 (bias 15, IEEE-like: inf and NaNs) -> float, exact: it is
// the top byte of a binary16.
inline float fp8_e5m2_to_float(uint8_t b) { return half_to_float(static_cast<uint16_t>(b << 8)); }

}  // namespace fmha
