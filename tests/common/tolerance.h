// Every numerical tolerance of the attention tests, in one place.
//
// The reference is float64 on the exact input values, so the error measured
// is the kernel's own: FP32 scores and softmax state, plus the rounding of O
// to the output dtype (2^-11 relative for F16, 2^-8 for BF16) and, in the
// GPU kernels, P rounded to the input dtype before the P.V product. The
// bounds sit a few times above what a correct kernel of that precision
// reaches (FP16 attention vs an FP32 softmax is ~3e-4 relative L2 in the
// seed article's measurements) and far below what a wrong mask, a lost tile
// or a bad rescale gives (>= 1e-2, usually O(1)).
#pragma once

#include "fmha/fmha.h"

namespace fmha_test {

struct Tolerance {
  // ||O - O_ref||_2 / ||O_ref||_2 over the whole output.
  double o_rel_l2;
  // max_e |O_e - O_ref_e| / max_e |O_ref_e|: a backstop for one bad row that
  // the L2 norm of a large tensor would average away.
  double o_max_abs_rel;
  // |lse - lse_ref| / max(1, |lse_ref|) per row: an absolute error for the
  // usual lse magnitudes, relative once the logits themselves are large (a
  // logit of 1e4 has an FP32 ulp of ~1e-3).
  double lse_abs;
};

// FP32 inputs: the whole path is FP32.
constexpr Tolerance kToleranceF32 = {1e-5, 1e-4, 1e-5};
// FP16: O rounded to 11 significant bits; lse limited by the P it sums.
constexpr Tolerance kToleranceF16 = {2e-3, 1e-2, 2e-3};
// BF16: 8 significant bits.
constexpr Tolerance kToleranceBF16 = {1e-2, 5e-2, 1e-2};

constexpr Tolerance tolerance_for(fmha_dtype dtype) {
  return dtype == FMHA_DTYPE_F32 ? kToleranceF32
         : dtype == FMHA_DTYPE_F16 ? kToleranceF16
                                   : kToleranceBF16;
}

// Two bounds' looser one, field by field.
constexpr Tolerance loosest(const Tolerance& a, const Tolerance& b) {
  return {a.o_rel_l2 > b.o_rel_l2 ? a.o_rel_l2 : b.o_rel_l2,
          a.o_max_abs_rel > b.o_max_abs_rel ? a.o_max_abs_rel : b.o_max_abs_rel,
          a.lse_abs > b.lse_abs ? a.lse_abs : b.lse_abs};
}

constexpr bool is_fp8_dtype(fmha_dtype t) { return t == FMHA_DTYPE_F8E4M3 || t == FMHA_DTYPE_F8E5M2; }

// Mixed dtypes (fmha.h 0.3: q, k/v and o each their own), against the
// float64 reference on the dequantized inputs: the output's bound, loosened
// to q's and k/v's for 16-bit inputs (a kernel may round P to the input
// dtype before P.V). FP8 inputs are exact in FP32 (every FP8 value is an F16
// value), so a kernel that decodes them to FP32 or F16/BF16 before its
// products (cpu_tiled; CUDA kernels converting FP8 K/V in registers) adds
// only o's rounding; a kernel that rounds P to FP8 for an FP8 MMA needs
// kToleranceFp8P (P with 3 or 2 mantissa bits: 2^-4 relative per weight).
constexpr Tolerance kToleranceFp8P = {3e-2, 1.5e-1, 3e-2};
constexpr Tolerance tolerance_for(fmha_dtype q, fmha_dtype kv, fmha_dtype o) {
  Tolerance t = tolerance_for(o);
  if (!is_fp8_dtype(q)) t = loosest(t, tolerance_for(q));
  if (!is_fp8_dtype(kv)) t = loosest(t, tolerance_for(kv));
  return t;
}

}  // namespace fmha_test
