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

}  // namespace fmha_test
