// Constants and integer helpers every backend shares, host and device code
// alike, so that no kernel family carries its own copy.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace fmha {

// Unit conversions of the softmax exponent: e^x = 2^(x * kLog2e), and a
// value m in log2 units is m * kLn2 in natural units.
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
// The score of a hidden key and the max of a row that has seen none.
constexpr float kNegInf = -__builtin_huge_valf();

// ceil(a / b) for a >= 0, b > 0.
FMHA_HOST_DEVICE constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The smallest multiple of m that is >= x, for x >= 0, m > 0.
FMHA_HOST_DEVICE constexpr int64_t round_up(int64_t x, int64_t m) { return ceil_div(x, m) * m; }

}  // namespace fmha
