// ScoreMask: the element-wise score transform of the tensor-core families,
// softcap and the mask band, on register fragments in the m16n8 accumulator
// layout (see common/softmax.cuh): in slice ms, element e of n8 tile nt of
// lane l is row (l / 4) + 8 * (e / 2), column 8 * nt + 2 * (l % 4) + e % 2.
#pragma once

#include "backend/cuda/common/device_math.cuh"
#include "backend/cuda/common/fwd_params.h"
#include "core/mask.h"

namespace fmha::cuda {

template <int kMSlices, int kNTiles>
struct ScoreMask {
  using Acc = float[kMSlices][kNTiles][4];

  // s -> cap * tanh(s * scale / cap), on the scaled logits, before the mask
  // (cap_in = FwdParams::softcap_in, cap_out = softcap_out).
  // tanh(x) = 1 - 2 / (e^(2x) + 1), |x| clamped to 15 (tanh(15) rounds to 1).
  __device__ __forceinline__ static void softcap(Acc& s, float cap_in, float cap_out) {
#pragma unroll
    for (int ms = 0; ms < kMSlices; ++ms)
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          // Comparisons, not fminf/fmaxf, so a NaN stays NaN (fmha.h).
          const float y = s[ms][nt][e] * cap_in;
          const float x = y > 15.f ? 15.f : y < -15.f ? -15.f : y;
          const float t = 1.f - __fdividef(2.f, fast_exp2(2.f * kLog2e * x) + 1.f);
          s[ms][nt][e] = cap_out * t;
        }
  }

  // Keys outside row i's visible range [lo(i), hi(i)) (core/mask.h) -> -inf.
  // row0: the unit row (packed, FwdParams::pack) of row 0 of the warp's
  // first 16-row slice; slice ms starts at row0 + 16 ms. n0: the key of
  // column 0 of the tile. Callers run it only on tiles that straddle a range
  // edge or the sequence end (core/key_tiles.h).
  // seq_k, diag_offset: the sequence's own (FwdSeq; the Problem's for a
  // dense batch, the overload below).
  __device__ __forceinline__ static void apply(Acc& s, const FwdParams& p, int64_t seq_k, int64_t diag_offset,
                                               int row0, int n0, int lane) {
#pragma unroll
    for (int ms = 0; ms < kMSlices; ++ms)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int i = (row0 + ms * 16 + (lane >> 2) + 8 * hh) / p.pack;  // the row's query
        const KeyRange r = key_range(i, seq_k, diag_offset, p.window_left, p.window_right);
        const int lo = static_cast<int>(r.lo) - n0;  // tile-relative
        const int hi = static_cast<int>(r.hi) - n0;
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int j = nt * 8 + (lane & 3) * 2 + e;
            if (j < lo || j >= hi) s[ms][nt][2 * hh + e] = kNegInf;
          }
      }
  }

  __device__ __forceinline__ static void apply(Acc& s, const FwdParams& p, int row0, int n0, int lane) {
    apply(s, p, p.seq_k, p.diag_offset, row0, n0, lane);
  }
};

}  // namespace fmha::cuda
