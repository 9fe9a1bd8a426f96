#include "common/numeric_types.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace fmha_test {
namespace {

uint32_t float_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  return x;
}

float bits_float(uint32_t x) {
  float f;
  std::memcpy(&f, &x, sizeof f);
  return f;
}

// Shifts m right by `shift` (1..31) rounding to nearest, ties to even.
uint32_t shift_round_even(uint32_t m, int shift) {
  const uint32_t kept = m >> shift;
  const uint32_t rest = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  return kept + ((rest > half || (rest == half && (kept & 1u))) ? 1u : 0u);
}

}  // namespace

float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const int exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in float
    const float mag = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -mag : mag;
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (mant << 13));  // inf, NaN
  return bits_float(sign | (static_cast<uint32_t>(exp - 15 + 127) << 23) | (mant << 13));
}

uint16_t float_to_half(float value) {
  const uint32_t x = float_bits(value);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t mag = x & 0x7fffffffu;
  if (mag > 0x7f800000u)  // NaN: keep the top payload bits, force quiet
    return static_cast<uint16_t>(sign | 0x7e00u | ((mag >> 13) & 0x3ffu));
  if (mag == 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u);
  const int exp = static_cast<int>(mag >> 23) - 127;  // unbiased
  const uint32_t mant = mag & 0x7fffffu;
  if (exp > 15) return static_cast<uint16_t>(sign | 0x7c00u);
  if (exp >= -14) {
    // Normal half: keep 10 of 23 mantissa bits. A carry out of the mantissa
    // bumps the exponent, and out of exponent 30 gives 0x7c00 = inf.
    const uint32_t biased = (static_cast<uint32_t>(exp + 15) << 10) | (mant >> 13);
    const uint32_t rest = mant & 0x1fffu;
    const uint32_t up = (rest > 0x1000u || (rest == 0x1000u && (biased & 1u))) ? 1u : 0u;
    return static_cast<uint16_t>(sign | (biased + up));
  }
  // Subnormal half: the value in units of 2^-24 is (1.mant) * 2^(exp + 1).
  const int shift = -exp - 1;  // 14 for exp = -15, 24 for exp = -25
  if (shift > 24) return sign;  // below half of the smallest subnormal
  return static_cast<uint16_t>(sign | shift_round_even(mant | 0x800000u, shift));
}

float bf16_to_float(uint16_t bits) { return bits_float(static_cast<uint32_t>(bits) << 16); }

uint16_t float_to_bf16(float value) {
  const uint32_t x = float_bits(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  // Overflow carries into the exponent and ends at inf, as it should.
  const uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

// OCP FP8, from the format's definition (sign, exponent, mantissa fields):
// E4M3 bias 7 with no infinities and NaN only at S.1111.111; E5M2 bias 15,
// IEEE-style (exponent 31 = inf or NaN). Subnormals at exponent 0.
float fp8_to_float(uint8_t bits, fmha_dtype dtype) {
  const bool e4m3 = dtype == FMHA_DTYPE_F8E4M3;
  const int mant_bits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const int exp = (bits & 0x7f) >> mant_bits;
  const int mant = bits & ((1 << mant_bits) - 1);
  const float sign = (bits & 0x80) ? -1.f : 1.f;
  if (e4m3 && exp == 15 && mant == 7) return std::numeric_limits<float>::quiet_NaN();
  if (!e4m3 && exp == 31)
    return mant == 0 ? sign * std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
  if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), 1 - bias - mant_bits);
  return sign * std::ldexp(static_cast<float>((1 << mant_bits) + mant), exp - bias - mant_bits);
}

uint8_t float_to_fp8(float value, fmha_dtype dtype) {
  const bool e4m3 = dtype == FMHA_DTYPE_F8E4M3;
  if (std::isnan(value)) return e4m3 ? 0x7f : 0x7e;
  const uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  const float a = std::fabs(value);
  // Positive codes are ordered like their values: binary search the
  // largest finite code not above a, then round to nearest (ties to even
  // code); saturate past the largest finite value.
  const int max_code = e4m3 ? 0x7e : 0x7b;
  if (a >= fp8_to_float(static_cast<uint8_t>(max_code), dtype)) return static_cast<uint8_t>(sign | max_code);
  int lo = 0, hi = max_code;  // fp8(lo) <= a < fp8(hi)
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    (fp8_to_float(static_cast<uint8_t>(mid), dtype) <= a ? lo : hi) = mid;
  }
  const float dl = a - fp8_to_float(static_cast<uint8_t>(lo), dtype);
  const float dh = fp8_to_float(static_cast<uint8_t>(hi), dtype) - a;
  const int code = dl < dh ? lo : dh < dl ? hi : (lo % 2 == 0 ? lo : hi);
  return static_cast<uint8_t>(sign | code);
}

size_t dtype_bytes(fmha_dtype dtype) {
  switch (dtype) {
    case FMHA_DTYPE_F8E4M3:
    case FMHA_DTYPE_F8E5M2:
      return 1;
    case FMHA_DTYPE_F16:
    case FMHA_DTYPE_BF16:
      return 2;
    case FMHA_DTYPE_F32:
      return 4;
  }
  return 0;
}

const char* dtype_label(fmha_dtype dtype) {
  switch (dtype) {
    case FMHA_DTYPE_F16:
      return "F16";
    case FMHA_DTYPE_BF16:
      return "BF16";
    case FMHA_DTYPE_F32:
      return "F32";
    case FMHA_DTYPE_F8E4M3:
      return "F8E4M3";
    case FMHA_DTYPE_F8E5M2:
      return "F8E5M2";
  }
  return "?";
}

float round_to_dtype(float value, fmha_dtype dtype) {
  switch (dtype) {
    case FMHA_DTYPE_F16:
      return half_to_float(float_to_half(value));
    case FMHA_DTYPE_BF16:
      return bf16_to_float(float_to_bf16(value));
    case FMHA_DTYPE_F32:
      return value;
    case FMHA_DTYPE_F8E4M3:
    case FMHA_DTYPE_F8E5M2:
      return fp8_to_float(float_to_fp8(value, dtype), dtype);
  }
  return value;
}

double load_element(const void* base, fmha_dtype dtype, int64_t index) {
  const unsigned char* p = static_cast<const unsigned char*>(base) + index * static_cast<int64_t>(dtype_bytes(dtype));
  if (dtype == FMHA_DTYPE_F32) {
    float f;
    std::memcpy(&f, p, sizeof f);
    return f;
  }
  if (dtype_bytes(dtype) == 1) return fp8_to_float(*p, dtype);
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return dtype == FMHA_DTYPE_F16 ? half_to_float(h) : bf16_to_float(h);
}

void store_element(void* base, fmha_dtype dtype, int64_t index, float value) {
  unsigned char* p = static_cast<unsigned char*>(base) + index * static_cast<int64_t>(dtype_bytes(dtype));
  if (dtype == FMHA_DTYPE_F32) {
    std::memcpy(p, &value, sizeof value);
    return;
  }
  if (dtype_bytes(dtype) == 1) {
    *p = float_to_fp8(value, dtype);
    return;
  }
  const uint16_t h = dtype == FMHA_DTYPE_F16 ? float_to_half(value) : float_to_bf16(value);
  std::memcpy(p, &h, sizeof h);
}

uint32_t poison_bits(fmha_dtype dtype) {
  return dtype == FMHA_DTYPE_F16 ? kPoisonF16 : dtype == FMHA_DTYPE_BF16 ? kPoisonBF16 : kPoisonF32;
}

void fill_poison(void* base, fmha_dtype dtype, size_t count) {
  unsigned char* p = static_cast<unsigned char*>(base);
  const size_t esize = dtype_bytes(dtype);
  if (esize == 4) {
    const uint32_t bits = kPoisonF32;
    for (size_t i = 0; i < count; ++i) std::memcpy(p + i * 4, &bits, 4);
  } else {
    const uint16_t bits = static_cast<uint16_t>(poison_bits(dtype));
    for (size_t i = 0; i < count; ++i) std::memcpy(p + i * 2, &bits, 2);
  }
}

bool is_poison(const void* base, fmha_dtype dtype, int64_t index) {
  const unsigned char* p = static_cast<const unsigned char*>(base) + index * static_cast<int64_t>(dtype_bytes(dtype));
  if (dtype_bytes(dtype) == 4) {
    uint32_t bits;
    std::memcpy(&bits, p, 4);
    return bits == kPoisonF32;
  }
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return bits == poison_bits(dtype);
}

}  // namespace fmha_test
