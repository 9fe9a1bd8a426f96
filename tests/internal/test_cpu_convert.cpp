// The hardware F16 conversions of the CPU backend (src/backend/cpu/
// cpu_convert.h) against the software ones of src/core/numeric.h, which
// every path must match bit for bit: widening over all 65536 halves
// (signalling NaNs included), narrowing over every float that lies on or
// next to a rounding boundary of F16 (each half, each midpoint between
// neighbours, one float ulp either side), the specials and many random
// floats, with and without a multiplier. Each form runs only where this CPU
// has it, and says so when it cannot.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_convert.h"
#include "backend/cpu/cpu_isa.h"
#include "core/numeric.h"

namespace {

using fmha::bits_float;
using fmha::float_bits;

// The floats the narrowing is checked on.
std::vector<float> narrowing_inputs() {
  std::vector<float> out;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint32_t f = float_bits(fmha::half_to_float(static_cast<uint16_t>(h)));
    const uint32_t next = float_bits(fmha::half_to_float(static_cast<uint16_t>(h + 1)));
    for (uint32_t u : {f - 1, f, f + 1}) out.push_back(bits_float(u));
    // The midpoint toward the next half of the same sign (its bits are
    // the average: both share sign and, within a binade, scale).
    if ((h & 0x7fff) < 0x7c00 && ((h + 1) & 0x7fff) <= 0x7c00) {
      const uint32_t mid = f + (next - f) / 2;
      for (uint32_t u : {mid - 1, mid, mid + 1}) out.push_back(bits_float(u));
    }
  }
  // Float specials: zeros, subnormals, the largest finite, infinities,
  // quiet and signalling NaNs with payloads.
  for (uint32_t u : {0x00000000u, 0x00000001u, 0x007fffffu, 0x00800000u, 0x7f7fffffu, 0x7f800000u, 0x7f800001u,
                     0x7fa00000u, 0x7fc00000u, 0x7fc01234u, 0x7fffffffu, 0x477fefffu, 0x477ff000u, 0x33000000u,
                     0x33000001u, 0x32ffffffu})
    for (uint32_t sign : {0u, 0x80000000u}) out.push_back(bits_float(u | sign));
  // Random floats over the whole bit range (a fixed xorshift stream).
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < 1 << 20; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    out.push_back(bits_float(static_cast<uint32_t>(x >> 16)));
  }
  return out;
}

template <class Widen>
void check_widening(Widen widen) {
  std::vector<uint16_t> h(0x10000);
  for (uint32_t i = 0; i < 0x10000; ++i) h[i] = static_cast<uint16_t>(i);
  // Odd lengths and offsets reach the tail code too.
  for (int64_t n : {int64_t{0x10000}, int64_t{0xffff - 6}, int64_t{5}, int64_t{1}}) {
    std::vector<float> got(n, 0.f);
    const int64_t at = n == 0x10000 ? 0 : 3;
    widen(h.data() + at, n, got.data());
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t want = float_bits(fmha::half_to_float(h[at + i]));
      if (float_bits(got[i]) != want) {
        CAPTURE(h[at + i]);
        CAPTURE(want);
        REQUIRE(float_bits(got[i]) == want);
      }
    }
  }
}

template <class Narrow>
void check_narrowing(Narrow narrow) {
  const std::vector<float> in = narrowing_inputs();
  for (float mul : {1.f, 0.37f, 3.0f}) {
    for (int64_t off : {int64_t{0}, int64_t{5}}) {
      const int64_t n = static_cast<int64_t>(in.size()) - off;
      std::vector<uint16_t> got(n, 0);
      narrow(in.data() + off, mul, n, got.data());
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t want = fmha::float_to_half(in[off + i] * mul);
        if (got[i] != want) {
          CAPTURE(float_bits(in[off + i]));
          CAPTURE(mul);
          CAPTURE(want);
          REQUIRE(got[i] == want);
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("software F16 widening quiets signalling NaNs, keeps payloads") {
  CHECK(float_bits(fmha::half_to_float(0x7c01)) == 0x7fc02000u);
  CHECK(float_bits(fmha::half_to_float(0xfd00)) == 0xffe00000u);
  CHECK(float_bits(fmha::half_to_float(0x7e00)) == 0x7fc00000u);
  CHECK(float_bits(fmha::half_to_float(0x7c00)) == 0x7f800000u);
  CHECK(float_bits(fmha::half_to_float(0x0001)) == 0x33800000u);
}

#if FMHA_CPU_HW_F16
TEST_CASE("F16C conversions match the software ones bit for bit") {
  if (!fmha::cpu::isa_available(fmha::cpu::CpuIsa::kAvx2)) {
    MESSAGE("this CPU lacks AVX2/F16C: the F16C conversions are not checked");
    return;
  }
  check_widening(fmha::cpu::f16_to_f32_f16c);
  check_narrowing(fmha::cpu::f32_to_f16_f16c);
}

TEST_CASE("AVX-512 F16 conversions match the software ones bit for bit") {
  if (!fmha::cpu::isa_available(fmha::cpu::CpuIsa::kAvx512)) {
    MESSAGE("this CPU lacks AVX-512: the AVX-512 conversions are not checked");
    return;
  }
  check_widening(fmha::cpu::f16_to_f32_avx512);
  check_narrowing(fmha::cpu::f32_to_f16_avx512);
}
#endif

#if FMHA_CPU_NEON_F16
TEST_CASE("NEON F16 conversions match the software ones bit for bit") {
  REQUIRE(fmha::cpu::isa_available(fmha::cpu::CpuIsa::kNeon));  // every AArch64 CPU
  check_widening(fmha::cpu::f16_to_f32_neon);
  check_narrowing(fmha::cpu::f32_to_f16_neon);
}
#endif
