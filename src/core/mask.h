// The key range each query row sees. Shared by every backend (host and
// device code), so all kernels agree on the mask to the element.
//
// The mask of Problem (problem.h) is a band around d(i) = i + diag_offset;
// for every query row it is one contiguous range [lo, hi) of keys, and both
// ends are non-decreasing in i. That monotonicity is what tile skipping
// relies on: the keys a block of rows [i0, i1) needs are
// [key_lo(i0), key_hi(i1 - 1)), and only the tiles that straddle either
// edge need element-wise masking.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define FMHA_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FMHA_HOST_DEVICE inline
#endif

namespace fmha {

struct KeyRange {
  int64_t lo;  // first visible key
  int64_t hi;  // one past the last visible key; hi <= lo means none
};

// The visible keys of query row i for a band (diag_offset, window_left,
// window_right) over seq_k keys; negative windows are unbounded.
// No overflow: validation bounds seq_q, seq_k by FMHA_MAX_DIM = 2^62 and the
// windows by int32, so for 0 <= i < seq_q, |d| < 2^62 and every sum below
// stays within +-(2^62 + 2^31); tile loops that step a key position past
// hi <= seq_k by one tile stay far below 2^63 too.
FMHA_HOST_DEVICE KeyRange key_range(int64_t i, int64_t seq_k, int64_t diag_offset,
                                    int64_t window_left, int64_t window_right) {
  const int64_t d = i + diag_offset;
  int64_t lo = window_left < 0 ? 0 : d - window_left;
  int64_t hi = window_right < 0 ? seq_k : d + window_right + 1;
  lo = lo < 0 ? 0 : lo;
  hi = hi > seq_k ? seq_k : hi;
  return {lo, hi};
}

}  // namespace fmha
