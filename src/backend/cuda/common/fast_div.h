// FastDiv: division by a divisor fixed per launch, as a multiply and a
// shift; host and device code (the host test checks it against `/`).
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace fmha::cuda {

// n / d for 0 <= n < 2^31 - 1 and 1 <= d, by a multiply and a shift (the
// round-up reciprocal of Granlund and Montgomery): the paged K/V loaders
// divide every key position by the page size, and a 64-bit division costs
// ~70 instructions. Divisors >= 2^31 are stored as 2^31 - 1, which gives
// the same quotient (0) for every such n (key positions stay below
// kMaxFwdSeq < 2^31 - 1).
struct FastDiv {
  uint32_t magic = 1;
  uint32_t shift = 0;

  FastDiv() = default;
  explicit FastDiv(int64_t d) {
    const uint64_t dd = static_cast<uint64_t>(d < 1 ? 1 : d > INT32_MAX ? INT32_MAX : d);
    while ((uint64_t{1} << shift) < dd) ++shift;
    magic = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - dd)) / dd + 1);
  }
  FMHA_HOST_DEVICE uint32_t div(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t hi = __umulhi(n, magic);
#else
    const uint32_t hi = static_cast<uint32_t>((static_cast<uint64_t>(n) * magic) >> 32);
#endif
    return (hi + n) >> shift;
  }
};

}  // namespace fmha::cuda
