// F16 scores with FMLAL/FMLAL2 (see cpu_fp16_neon.h).
#include "backend/cpu/cpu_fp16_neon.h"

#if FMHA_CPU_NEON_FP16
#include <arm_neon.h>

#define FMHA_TARGET_FP16FML __attribute__((target("arch=armv8.2-a+fp16fml")))

namespace fmha::cpu {
namespace {

// The key and row strips: kScoreKeys keys x 16 rows in the score tile (16
// accumulators, 4 rows each, beside 2 Q and kScoreKeys K registers of the
// 32), kDotKeys keys x kDotRows rows in the dot tile (8 accumulators).
constexpr int64_t kScoreKeys = 4;
constexpr int64_t kScoreRows = 16;
constexpr int64_t kDotKeys = 2;
constexpr int64_t kDotRows = 4;

FMHA_TARGET_FP16FML inline float16x8_t load_f16x8(const uint16_t* p) { return vreinterpretq_f16_u16(vld1q_u16(p)); }

// One strip of kKeys keys x all np rows, 16 rows at a time: per d, each key's
// element is broadcast and multiplied against 16 rows of Q^T's column d
// (rows 0-3 and 8-11 with FMLAL, 4-7 and 12-15 with FMLAL2).
template <int64_t kKeys>
FMHA_TARGET_FP16FML inline void score_strip(const uint16_t* k, int64_t ldk, const uint16_t* qt, int64_t ldq,
                                            float* s, int64_t lds, int64_t np, int64_t head_dim, float scale) {
  for (int64_t r = 0; r < np; r += kScoreRows) {
    float32x4_t acc[kKeys][4];
    for (int64_t j = 0; j < kKeys; ++j)
      for (int64_t c = 0; c < 4; ++c) acc[j][c] = vdupq_n_f32(0.f);
    for (int64_t d = 0; d < head_dim; ++d) {
      const float16x8_t q0 = load_f16x8(qt + d * ldq + r);
      const float16x8_t q1 = load_f16x8(qt + d * ldq + r + 8);
      for (int64_t j = 0; j < kKeys; ++j) {
        const float16x8_t kd = vreinterpretq_f16_u16(vld1q_dup_u16(k + j * ldk + d));
        acc[j][0] = vfmlalq_low_f16(acc[j][0], q0, kd);
        acc[j][1] = vfmlalq_high_f16(acc[j][1], q0, kd);
        acc[j][2] = vfmlalq_low_f16(acc[j][2], q1, kd);
        acc[j][3] = vfmlalq_high_f16(acc[j][3], q1, kd);
      }
    }
    for (int64_t j = 0; j < kKeys; ++j)
      for (int64_t c = 0; c < 4; ++c) vst1q_f32(s + j * lds + r + 4 * c, vmulq_n_f32(acc[j][c], scale));
  }
}

// kKeys keys x kR rows of dot products over dp: per 8 elements, FMLAL adds
// the products of elements 0-3 and FMLAL2 those of 4-7 into the same 4 lanes.
template <int64_t kKeys, int64_t kR>
FMHA_TARGET_FP16FML inline void dot_strip(const uint16_t* k, int64_t ldk, const uint16_t* q, int64_t ldq, float* s,
                                          int64_t lds, int64_t dp, float scale) {
  float32x4_t acc[kKeys][kR];
  for (int64_t j = 0; j < kKeys; ++j)
    for (int64_t r = 0; r < kR; ++r) acc[j][r] = vdupq_n_f32(0.f);
  for (int64_t d = 0; d < dp; d += 8) {
    float16x8_t kv[kKeys];
    for (int64_t j = 0; j < kKeys; ++j) kv[j] = load_f16x8(k + j * ldk + d);
    for (int64_t r = 0; r < kR; ++r) {
      const float16x8_t qv = load_f16x8(q + r * ldq + d);
      for (int64_t j = 0; j < kKeys; ++j) {
        acc[j][r] = vfmlalq_low_f16(acc[j][r], kv[j], qv);
        acc[j][r] = vfmlalq_high_f16(acc[j][r], kv[j], qv);
      }
    }
  }
  for (int64_t j = 0; j < kKeys; ++j)
    for (int64_t r = 0; r < kR; ++r) {
      const float32x4_t a = acc[j][r];
      const float sum = (vgetq_lane_f32(a, 0) + vgetq_lane_f32(a, 2)) + (vgetq_lane_f32(a, 1) + vgetq_lane_f32(a, 3));
      s[r * lds + j] = scale * sum;
    }
}

}  // namespace

FMHA_TARGET_FP16FML void f16_score_tile_neon(const uint16_t* k, int64_t ldk, const uint16_t* qt, int64_t ldq,
                                             float* s, int64_t lds, int64_t nk, int64_t np, int64_t head_dim,
                                             float scale) {
  int64_t j = 0;
  for (; j + kScoreKeys <= nk; j += kScoreKeys)
    score_strip<kScoreKeys>(k + j * ldk, ldk, qt, ldq, s + j * lds, lds, np, head_dim, scale);
  for (; j < nk; ++j) score_strip<1>(k + j * ldk, ldk, qt, ldq, s + j * lds, lds, np, head_dim, scale);
}

FMHA_TARGET_FP16FML void f16_dot_tile_neon(const uint16_t* k, int64_t ldk, const uint16_t* q, int64_t ldq, float* s,
                                           int64_t lds, int64_t nk, int64_t nr, int64_t dp, float scale) {
  int64_t j = 0;
  for (; j + kDotKeys <= nk; j += kDotKeys) {
    int64_t r = 0;
    for (; r + kDotRows <= nr; r += kDotRows)
      dot_strip<kDotKeys, kDotRows>(k + j * ldk, ldk, q + r * ldq, ldq, s + r * lds + j, lds, dp, scale);
    for (; r < nr; ++r) dot_strip<kDotKeys, 1>(k + j * ldk, ldk, q + r * ldq, ldq, s + r * lds + j, lds, dp, scale);
  }
  for (; j < nk; ++j) {
    int64_t r = 0;
    for (; r + kDotRows <= nr; r += kDotRows)
      dot_strip<1, kDotRows>(k + j * ldk, ldk, q + r * ldq, ldq, s + r * lds + j, lds, dp, scale);
    for (; r < nr; ++r) dot_strip<1, 1>(k + j * ldk, ldk, q + r * ldq, ldq, s + r * lds + j, lds, dp, scale);
  }
}

}  // namespace fmha::cpu
#endif
