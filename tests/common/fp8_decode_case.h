// The FP8 decode check every backend runs: each byte 0..255 of a format is
// one column of v with a single key, so the softmax weight is exactly 1 and
// o (F32) must be v's decoded value, bit for bit (-0 aside: o's accumulator
// starts at +0). The caller places the inputs in its handle's memory.
#pragma once

#include <doctest/doctest.h>
#include <fmha/fmha.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/numeric_types.h"

namespace fmha_test {

constexpr int64_t kFp8DecodeD = 256;  // one column per byte

// q = k = 0.5 in every column (finite logits), v column d = byte d.
struct Fp8DecodeInputs {
  std::vector<uint8_t> qk, v;
};
inline Fp8DecodeInputs fp8_decode_inputs(fmha_dtype t) {
  Fp8DecodeInputs in{std::vector<uint8_t>(kFp8DecodeD, t == FMHA_DTYPE_F8E4M3 ? 0x30 : 0x38),
                     std::vector<uint8_t>(kFp8DecodeD)};
  for (int64_t d = 0; d < kFp8DecodeD; ++d) in.v[d] = static_cast<uint8_t>(d);
  return in;
}

// p over [1, 1, 1, 256] q, k, v of format t and an F32 o, with lse.
inline void fp8_decode_params(fmha_forward_params* p, fmha_dtype t, void* q, void* k, void* v, void* o, float* lse) {
  fmha_forward_params_init(p);
  auto view = [](fmha_tensor* x, void* data, fmha_dtype dt) {
    x->data = data;
    x->dtype = dt;
    const int64_t dims[4] = {1, 1, 1, kFp8DecodeD}, strides[4] = {kFp8DecodeD, kFp8DecodeD, kFp8DecodeD, 1};
    std::memcpy(x->dims, dims, sizeof dims);
    std::memcpy(x->strides, strides, sizeof strides);
  };
  view(&p->q, q, t);
  view(&p->k, k, t);
  view(&p->v, v, t);
  view(&p->o, o, FMHA_DTYPE_F32);
  p->lse = lse;
}

// Checks o (host copy) against every byte's decoded value; returns how
// many bytes decode to NaN and to inf.
struct Fp8DecodeCounts {
  int nans = 0, infs = 0;
};
inline Fp8DecodeCounts check_fp8_decoded(fmha_dtype t, const float* o) {
  Fp8DecodeCounts n;
  for (int64_t d = 0; d < kFp8DecodeD; ++d) {
    const float want = fp8_to_float(static_cast<uint8_t>(d), t);
    CAPTURE(d);
    if (std::isnan(want)) {
      ++n.nans;
      CHECK(std::isnan(o[d]));
    } else {
      n.infs += std::isinf(want);
      if (want == 0.f)
        CHECK(o[d] == 0.f);  // -0 (0x80) meets an accumulator that starts at +0
      else
        CHECK(std::memcmp(&o[d], &want, 4) == 0);
    }
  }
  return n;
}

}  // namespace fmha_test
