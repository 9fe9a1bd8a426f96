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
  // The max over the 4 lanes of a quad (one row).
  __device__ __forceinline__ static float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
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
        const float x = quad_max(fmaxf(m[ms][hh], row_max(s, ms, hh)));
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

  // Whether some row of the warp has seen no key yet (m = -inf): step_speculative
  // needs a finite reference in every row (warp-uniform).
  __device__ __forceinline__ bool any_unseen() const {
    bool u = false;
#pragma unroll
    for (int ms = 0; ms < kMSlices; ++ms)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) u |= m[ms][hh] == kNegInf;
    return __any_sync(0xffffffffu, u);
  }

  // step() with the exponentials taken against the reference max m before
  // the tile's max is known, so they start as soon as the scores are there
  // instead of after the row max, its quad shuffles and the vote (the path
  // between "S ready" and the first ex2 in step()). Every row's m must be
  // finite (!any_unseen()). The result stands while no p exceeds
  // 2^kRescaleLog2, which holds wherever the lane's row sums stay below it
  // (p >= 0), so the warp votes on its sums: no max at all on that path.
  // Otherwise (rare: some row's max grew by more than kRescaleLog2, or a sum
  // reached the bound without any p doing so) the rows' maxima come from p
  // (max p = 2^((max s - m) c)); where a row's exceeds 1 its reference moves
  // up by log2 max p and its p, its sum and alpha are scaled by
  // 2^((m - m') c), the same state step() reaches with m' the exact max (any
  // reference gives the same O and lse). Only a p that overflowed (the max
  // grew by ~2^128 in one tile: logits ~88 apart) cannot be scaled back:
  // then kRedo, with the state untouched and s lost; the caller recomputes
  // the scores and calls step().
  enum SpecResult { kKept, kMoved, kRedo };
  __device__ __forceinline__ SpecResult step_speculative(float (&s)[kMSlices][kNTiles][4], float c,
                                                        float (&alpha)[kMSlices][2]) {
    constexpr float kBound = static_cast<float>(1u << static_cast<int>(kRescaleLog2));  // 2^kRescaleLog2
    float base[kMSlices][2], lt[kMSlices][2];
    bool over = false;
#pragma unroll
    for (int ms = 0; ms < kMSlices; ++ms)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        base[ms][hh] = m[ms][hh] * c;
        lt[ms][hh] = exp_row(s, ms, hh, c, base[ms][hh]);
        over |= lt[ms][hh] > kBound;
        alpha[ms][hh] = 1.f;
      }
    bool moved = false;
    if (__any_sync(0xffffffffu, over)) {
      float pm[kMSlices][2];
      bool grow = false, lost = false;
#pragma unroll
      for (int ms = 0; ms < kMSlices; ++ms)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const float x = quad_max(row_max(s, ms, hh));
          pm[ms][hh] = x;
          grow |= x > kBound;
          lost |= x == -kNegInf;  // +inf: a p overflowed
        }
      if (__any_sync(0xffffffffu, lost)) return kRedo;
      moved = __any_sync(0xffffffffu, grow);
      if (moved) {
#pragma unroll
        for (int ms = 0; ms < kMSlices; ++ms)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            float f = 1.f;  // where the row's max stays below m: m' = max(m, tile max) = m
            if (pm[ms][hh] > 1.f) {
              m[ms][hh] = (base[ms][hh] + fast_log2(pm[ms][hh])) / c;
              // The factor from the new m as every later tile computes its
              // reference (m c), so O, l and p share one reference exactly.
              f = fast_exp2(base[ms][hh] - m[ms][hh] * c);
            }
            alpha[ms][hh] = f;
            l[ms][hh] *= f;
            lt[ms][hh] *= f;
#pragma unroll
            for (int i = 0; i < 2 * kNTiles; ++i) s[ms][i / 2][2 * hh + i % 2] *= f;
          }
      }
    }
#pragma unroll
    for (int ms = 0; ms < kMSlices; ++ms)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) l[ms][hh] += lt[ms][hh];
    return moved ? kMoved : kKept;
  }

  // A steady key tile's step, the scores' transforms (mask, softcap: a
  // callable on s) still to apply: step_speculative unless some row of the
  // warp has seen no key yet (`unseen`, any_unseen() voted before the scores
  // arrived), and for its rare kRedo the scores again (`recompute`) and
  // step(). Returns whether alpha moved (as step()).
  template <class Transform, class Recompute>
  __device__ __forceinline__ bool step_steady(float (&s)[kMSlices][kNTiles][4], float c, float (&alpha)[kMSlices][2],
                                              bool unseen, Transform&& transform, Recompute&& recompute) {
    transform();
    if (unseen) return step(s, c, alpha);
    const SpecResult r = step_speculative(s, c, alpha);
    if (r != kRedo) return r == kMoved;
    recompute();
    transform();
    return step(s, c, alpha);
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
