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
  // The lane's part of row (ms, hh): its max, and p = 2^(s c - base) in
  // place with the sum of p. Four independent accumulators each, so the
  // reductions are trees of depth kNTiles / 2 + 2 rather than chains of
  // 2 kNTiles dependent instructions (the chains' latency showed as the top
  // stall of the sm90 kernel).
  static constexpr int kLanes = kNTiles >= 2 ? 4 : 2;
  __device__ __forceinline__ static float row_max(const float (&s)[kMSlices][kNTiles][4], int ms, int hh) {
    float acc[kLanes];
#pragma unroll
    for (int a = 0; a < kLanes; ++a) acc[a] = s[ms][a / 2][2 * hh + a % 2];
#pragma unroll
    for (int i = kLanes; i < 2 * kNTiles; ++i) acc[i % kLanes] = fmaxf(acc[i % kLanes], s[ms][i / 2][2 * hh + i % 2]);
#pragma unroll
    for (int w = kLanes / 2; w > 0; w /= 2)
#pragma unroll
      for (int a = 0; a < w; ++a) acc[a] = fmaxf(acc[a], acc[a + w]);
    return acc[0];
  }
  __device__ __forceinline__ static float exp_row(float (&s)[kMSlices][kNTiles][4], int ms, int hh, float c,
                                                  float base) {
    float acc[kLanes];
#pragma unroll
    for (int a = 0; a < kLanes; ++a) acc[a] = 0.f;
#pragma unroll
    for (int i = 0; i < 2 * kNTiles; ++i) {
      float& x = s[ms][i / 2][2 * hh + i % 2];
      x = fast_exp2(fmaf(x, c, -base));
      acc[i % kLanes] += x;
    }
#pragma unroll
    for (int w = kLanes / 2; w > 0; w /= 2)
#pragma unroll
      for (int a = 0; a < w; ++a) acc[a] += acc[a + w];
    return acc[0];
  }

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
    float alpha[kMSlices][2];
    if (step(s, c, alpha)) rescale(o, alpha);
  }

  // update() in two halves, for kernels whose O accumulator is still being
  // written by an asynchronous MMA when the next scores arrive (the sm90
  // family calls them apart; update() is the two back to back, the O
  // rescale after this tile's p, which is the same arithmetic as step 3
  // before step 4): step() does 1, 2 and 4 and leaves in alpha the factor of step 3
  // (1 where m did not move); the caller applies it with rescale() once O is
  // its own again. Returns whether any alpha differs from 1 (warp-uniform).
  __device__ __forceinline__ bool step(float (&s)[kMSlices][kNTiles][4], float c, float (&alpha)[kMSlices][2]) {
    float mx[kMSlices][2];
    bool grow = false;
#pragma unroll
    for (int ms = 0; ms < kMSlices; ++ms)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        float x = fmaxf(m[ms][hh], row_max(s, ms, hh));
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
        mx[ms][hh] = x;
        // m = -inf, x finite: +inf > threshold; both -inf: NaN, false.
        grow |= (x - m[ms][hh]) * c > kRescaleLog2;
        alpha[ms][hh] = 1.f;
      }
    const bool any = __any_sync(0xffffffffu, grow);
    if (any) {
#pragma unroll
      for (int ms = 0; ms < kMSlices; ++ms)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const float x = mx[ms][hh];
          alpha[ms][hh] = fast_exp2(m[ms][hh] * c - (x == kNegInf ? 0.f : x * c));
          m[ms][hh] = x;
          l[ms][hh] *= alpha[ms][hh];
        }
    }
#pragma unroll
    for (int ms = 0; ms < kMSlices; ++ms)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const float base = m[ms][hh] == kNegInf ? 0.f : m[ms][hh] * c;
        l[ms][hh] += exp_row(s, ms, hh, c, base);
      }
    return any;
  }

  __device__ __forceinline__ static void rescale(float (&o)[kMSlices][kDTiles][4], const float (&alpha)[kMSlices][2]) {
#pragma unroll
    for (int ms = 0; ms < kMSlices; ++ms)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh)
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt) {
          o[ms][dt][2 * hh] *= alpha[ms][hh];
          o[ms][dt][2 * hh + 1] *= alpha[ms][hh];
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
