// OnlineSoftmax: the running state of the seed's section 4 on register
// fragments, shared by the tensor-core families.
//
// Fragment layout (the m16n8 accumulator of mma.sync, which is also what a
// wgmma m64nNk16 accumulator gives each warp of a warpgroup, with
// kMSlices = 1 and kNTiles = N / 8): the warp owns kMSlices slices of 16
// rows; in slice ms, element e of n8 tile nt of lane l is
//   row (l / 4) + 8 * (e / 2),   column 8 * nt + 2 * (l % 4) + e % 2.
// So each lane holds 2 rows per slice (hh = e / 2), and the 4 lanes of a
// quad (l / 4 equal) share a row: one quad shuffle reduces a row.
//
// The state is in FP32 and in log2 units (exp(x) = 2^(x * c), c =
// score_log2, with log2(e) folded into the scale so every exponential is
// one FFMA + ex2). Per tile, in this order:
//   1. the mask is already applied (-inf), so the tile max ignores hidden keys;
//   2. m' = max(m, tile max)            (quad shuffle: 4 lanes share a row)
//   3. if m' exceeds the reference max m by more than kRescaleLog2 in any row
//      of the warp: alpha = 2^((m - m') c); O *= alpha; l *= alpha; m = m'
//      (the old state is rescaled BEFORE this tile's P V is added);
//   4. p = 2^((s - m) c); l += sum p    (l stays lane-partial until finish())
// Step 3 is skipped while the max grows by less than kRescaleLog2: any
// reference m works as long as O, l and lse use the same one (O = o / l and
// lse = m c ln2 + ln l are exact for every m), and p <= 2^kRescaleLog2 = 256
// stays far inside FP16/BF16 range. Past the first tiles the max rarely
// moves that much, so the O rescale mostly drops out.
// A row with no visible key so far has m = -inf; it exponentiates against 0
// instead, so -inf - (-inf) never makes NaN: p = 0, alpha = 0, O = l = 0.
#pragma once

#include "backend/cuda/common/device_math.cuh"

namespace fmha::cuda {

constexpr float kRescaleLog2 = 8.f;

template <int kMSlices, int kNTiles, int kDTiles>
struct OnlineSoftmax {
  float m[kMSlices][2];  // reference max of the lane's rows, raw-score units (times c: log2 units)
  float l[kMSlices][2];  // row sums against m; lane-partial until finish()

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int ms = 0; ms < kMSlices; ++ms)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        m[ms][hh] = kNegInf;
        l[ms][hh] = 0.f;
      }
  }

  // s (scores, masked) -> p (unnormalized probabilities), in place; o, the
  // output accumulator of the same rows, rescaled when m moves. c: raw score
  // -> log2 units (FwdParams::score_log2).
  __device__ __forceinline__ void update(float (&s)[kMSlices][kNTiles][4], float (&o)[kMSlices][kDTiles][4],
                                         float c) {
    float mx[kMSlices][2];
    bool grow = false;
#pragma unroll
    for (int ms = 0; ms < kMSlices; ++ms)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        float x = m[ms][hh];
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) x = fmaxf(x, fmaxf(s[ms][nt][2 * hh], s[ms][nt][2 * hh + 1]));
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
        mx[ms][hh] = x;
        // m = -inf, x finite: +inf > threshold; both -inf: NaN, false.
        grow |= (x - m[ms][hh]) * c > kRescaleLog2;
      }
    if (__any_sync(0xffffffffu, grow)) {
#pragma unroll
      for (int ms = 0; ms < kMSlices; ++ms)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const float x = mx[ms][hh];
          const float alpha = fast_exp2(m[ms][hh] * c - (x == kNegInf ? 0.f : x * c));
          m[ms][hh] = x;
          l[ms][hh] *= alpha;
#pragma unroll
          for (int dt = 0; dt < kDTiles; ++dt) {
            o[ms][dt][2 * hh] *= alpha;
            o[ms][dt][2 * hh + 1] *= alpha;
          }
        }
    }
#pragma unroll
    for (int ms = 0; ms < kMSlices; ++ms)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const float base = m[ms][hh] == kNegInf ? 0.f : m[ms][hh] * c;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float pv = fast_exp2(fmaf(s[ms][nt][2 * hh + e], c, -base));
            s[ms][nt][2 * hh + e] = pv;
            sum += pv;
          }
        l[ms][hh] += sum;
      }
  }

  // The full row sums (the 4 lanes of a row hold partial sums); after it,
  // every lane of a quad holds its rows' l.
  __device__ __forceinline__ void finish() {
#pragma unroll
    for (int ms = 0; ms < kMSlices; ++ms)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        float x = l[ms][hh];
        x += __shfl_xor_sync(0xffffffffu, x, 1);
        x += __shfl_xor_sync(0xffffffffu, x, 2);
        l[ms][hh] = x;
      }
  }
};

}  // namespace fmha::cuda
