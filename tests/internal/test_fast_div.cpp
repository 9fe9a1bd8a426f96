// The paged K/V loaders' divider (src/backend/cuda/common/fast_div.h) gives
// exactly n / d: every page size a test or a cache uses, powers of two and
// odd sizes, near-limit divisors, and numerators up to the int32 positions
// the kernels use.
#include <doctest/doctest.h>

#include <cstdint>
#include <initializer_list>

#include "backend/cuda/common/fast_div.h"

// Key positions in the kernels stay below kMaxFwdSeq = 2^31 - 1025.
constexpr int64_t kLimit = (int64_t{1} << 31) - 1;

TEST_CASE("FastDiv: exact quotients for int32 positions") {
  const int64_t divisors[] = {1,    2,    3,    5,     7,     15,         16,         17,         63,
                              64,   100,  128,  255,   256,   1000,       4096,       65535,      65537,
                              1 << 20,    (1 << 20) + 1,    1 << 30,    (int64_t{1} << 31) - 1, int64_t{1} << 31,
                              int64_t{1} << 40};
  for (int64_t d : divisors) {
    CAPTURE(d);
    const fmha::cuda::FastDiv f(d);
    auto check = [&](uint32_t n) {
      CAPTURE(n);
      const uint32_t want = static_cast<uint32_t>(static_cast<int64_t>(n) / d);
      REQUIRE(f.div(n) == want);
    };
    for (uint32_t n = 0; n < 5000; ++n) check(n);
    for (int64_t m = 1; m < 2000; ++m)  // around the multiples of d
      for (int64_t e : {-1, 0, 1}) {
        const int64_t n = m * d + e;
        if (n >= 0 && n < kLimit) check(static_cast<uint32_t>(n));
      }
    for (int64_t n = kLimit - 1; n > kLimit - 5000; --n) check(static_cast<uint32_t>(n));
    uint64_t x = 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(d);
    for (int i = 0; i < 20000; ++i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      check(static_cast<uint32_t>((x & 0x7fffffffu) % kLimit));
    }
  }
}
