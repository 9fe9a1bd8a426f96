// Which CUDA kernel runs which of the 0.3 inference-numerics features
// (fmha.h: FP8 inputs, mixed dtypes, descales, bias, ALiBi), as the GPU
// numerics tests expect it: one table, so that when a kernel family gains a
// feature (its registry row declares the bit) one entry flips here and the
// tests follow (test_gpu_numerics_api.cpp: UNSUPPORTED and explain's reason,
// or a run; test_gpu_numerics.cpp: the case matrix forced on the kernel).
#pragma once

#include <string>

#include "common/serving_case.h"
#include "fmha/fmha.h"

namespace fmha_gpu_test {

enum class NumericsFeature {
  kFp8,      // an FP8 q or K/V (registry: the kernel's dtypes)
  kMixed,    // q, k/v and o not one dtype (kFeatureMixedDtypes)
  kDescale,  // q/k/v descales (kFeatureDescale)
  kBias,     // an additive bias (kFeatureBias)
  kAlibi,    // ALiBi slopes (kFeatureAlibi)
};

struct KernelNumerics {
  const char* kernel;
  bool fp8, mixed, descale, bias, alibi;
  // Descales only with FP8 K/V (cuda_sm80_tc: its 16-bit instantiations
  // refuse them; `descale` is then false).
  bool descale_fp8_kv = false;
  // A bias and ALiBi only with 16-bit K/V (cuda_sm80_tc: its FP8 K/V
  // instantiations have no score-ops kernel).
  bool bias_16bit_kv = false;
};

// The table. A kernel not listed runs none of the features. cuda_sm80_tc's
// fp8 and mixed are an FP8 KV cache under an F16/BF16 q with o in q's
// dtype: the other combinations (an FP8 q, o in another dtype) it declines
// without naming a numerics feature ("FP8 q is not run", "does not run
// dtype F32", "o in another dtype than q is not run"). cuda_sm90_ws runs
// FP8 only as q, k and v all of one FP8 dtype with V stored transposed
// (v.strides[2] = 1), o F16/BF16 and no bias or ALiBi (its FP8 kernel,
// test_gpu_sm90_fp8.cpp; runs_fp8_prefill): for the other FP8 cases its fp8
// and mixed stay false, and its reasons name a dtype ("does not run dtype
// ...") or mixed dtypes.
inline constexpr KernelNumerics kKernelNumerics[] = {
    //  kernel           fp8    mixed  descale bias   alibi  descale_fp8_kv bias_16bit_kv
    {"cuda_sm90_ws", false, false, true, true, true},
    {"cuda_sm80_tc", true, true, false, true, true, true, true},
    {"cuda_generic", true, true, true, true, true},
};

inline bool is_fp8(fmha_dtype t) { return t == FMHA_DTYPE_F8E4M3 || t == FMHA_DTYPE_F8E5M2; }

// Whether `c` is the one FP8 problem cuda_sm90_ws's FP8 prefill kernel runs:
// q, k and v of one FP8 dtype, V stored transposed, o F16/BF16, no bias or
// ALiBi (descales fold into its score factor and O).
inline bool is_sm90_fp8_prefill(const fmha_test::ServingCase& c) {
  return is_fp8(c.dtype) && c.k_type() == c.dtype && c.v_transposed &&
         (c.o_type() == FMHA_DTYPE_F16 || c.o_type() == FMHA_DTYPE_BF16) && c.bias == fmha_test::BiasPattern::kNone &&
         c.alibi == 0;
}

// Whether `kernel` rounds P to FP8 for its P V product on case `c` (so its
// bound is kToleranceFp8P, not o's dtype alone). The automatic choice may
// pick such a kernel.
inline bool rounds_p_to_fp8(const std::string& kernel, const fmha_test::ServingCase& c) {
  return (kernel == "cuda_sm90_ws" || kernel.empty()) && is_sm90_fp8_prefill(c);
}

inline bool runs_descale_with_fp8_kv(const std::string& kernel) {
  for (const KernelNumerics& k : kKernelNumerics)
    if (kernel == k.kernel) return k.descale || k.descale_fp8_kv;
  return false;
}

inline bool runs_bias_with_fp8_kv(const std::string& kernel) {
  for (const KernelNumerics& k : kKernelNumerics)
    if (kernel == k.kernel) return (k.bias || k.alibi) && !k.bias_16bit_kv;
  return false;
}

inline bool runs_feature(const std::string& kernel, NumericsFeature f) {
  for (const KernelNumerics& k : kKernelNumerics) {
    if (kernel != k.kernel) continue;
    switch (f) {
      case NumericsFeature::kFp8: return k.fp8;
      case NumericsFeature::kMixed: return k.mixed;
      case NumericsFeature::kDescale: return k.descale;
      case NumericsFeature::kBias: return k.bias;
      case NumericsFeature::kAlibi: return k.alibi;
    }
  }
  return false;
}

// Whether `kernel` runs every numerics feature serving case `c` uses (it
// may still decline c for another reason: a dtype, head dim or layout).
inline bool runs_numerics_of(const std::string& kernel, const fmha_test::ServingCase& c) {
  if (kernel == "cuda_sm90_ws" && is_sm90_fp8_prefill(c)) return true;
  const bool fp8 = is_fp8(c.dtype) || is_fp8(c.k_type());
  const bool mixed = c.k_type() != c.dtype || c.o_type() != c.dtype;
  const bool descale = c.q_descale || c.k_descale || c.v_descale;
  const bool fp8_kv_cache = is_fp8(c.k_type()) && !is_fp8(c.dtype);
  return (!fp8 || runs_feature(kernel, NumericsFeature::kFp8)) &&
         (!mixed || runs_feature(kernel, NumericsFeature::kMixed)) &&
         (!descale || runs_feature(kernel, NumericsFeature::kDescale) ||
          (fp8_kv_cache && runs_descale_with_fp8_kv(kernel))) &&
         (c.bias == fmha_test::BiasPattern::kNone || runs_feature(kernel, NumericsFeature::kBias)) &&
         (c.alibi == 0 || runs_feature(kernel, NumericsFeature::kAlibi)) &&
         ((c.bias == fmha_test::BiasPattern::kNone && c.alibi == 0) || !is_fp8(c.k_type()) ||
          runs_bias_with_fp8_kv(kernel));
}

}  // namespace fmha_gpu_test
