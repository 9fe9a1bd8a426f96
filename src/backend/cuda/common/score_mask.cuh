// ScoreMask: the element-wise score transform of the tensor-core families,
// softcap, the additive bias and ALiBi, and the mask band, on register
// fragments in the m16n8 accumulator layout (see common/softmax.cuh): in
// slice ms, element e of n8 tile nt of lane l is row (l / 4) + 8 * (e / 2),
// column 8 * nt + 2 * (l % 4) + e % 2.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/common/device_math.cuh"
#include "backend/cuda/common/fwd_params.h"
#include "backend/cuda/common/numerics.cuh"
#include "backend/cuda/common/tile_scheduler.h"
#include "core/mask.h"
#include "fmha/fmha.h"

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

  // Bias and ALiBi (FwdParams::bias, alibi_slopes): the fragment form of
  // numerics.cuh's bias_alibi, its loads hoisted per row and paired:
  //   s -> s * factor + bias[b, h, i, j] - slope(b, h) * |d(i) - j|.
  // `factor` turns the tile's scores into the scaled (and soft-capped)
  // logits in natural units: the scale (times the q/k descales) on raw
  // scores, 1 after softcap(). The caller's softmax then
  // runs with c = log2(e) on every tile of the work tile, and the caller runs
  // this on EVERY key tile (not only the masked ones), before apply(), when
  // has_bias_or_alibi(p). Rows are unit rows as in apply() (row0, lane), of
  // work tile w (its head slot and sequence b); `rows`, seq_k and diag are
  // the sequence's (FwdSeq). Elements of rows at or past `rows` or keys at
  // or past seq_k are never read (they lie past the bias tensor): they get
  // no bias, apply() hides such keys and such rows are never stored.
  __device__ __forceinline__ static void add_bias(Acc& s, const FwdParams& p, const WorkTile& w, int rows,
                                                  int seq_k, int64_t diag, float factor, int row0, int n0,
                                                  int lane) {
    bias_terms<false>(s, p, w, rows, seq_k, diag, factor, row0, n0, lane);
  }

  // The same terms divided by `factor` (the scale times the q/k descales),
  // written into s as the starting value of the Q K^T accumulator: then
  // s = q.k + (bias + ALiBi) / factor, and the caller's softmax keeps the
  // raw-score units of the plain path (c = score_log2 times the descales).
  // Only without softcap (its tanh comes between the scale and the bias).
  // The loads can go out ahead of the tile's MMA, where s is free.
  __device__ __forceinline__ static void init_bias(Acc& s, const FwdParams& p, const WorkTile& w, int rows,
                                                   int seq_k, int64_t diag, float factor, int row0, int n0,
                                                   int lane) {
    bias_terms<true>(s, p, w, rows, seq_k, diag, 1.f / factor, row0, n0, lane);
  }

  // kInit: s = terms * f (init_bias, f = 1 / factor); else s = s * f + terms.
  template <bool kInit>
  __device__ __forceinline__ static void bias_terms(Acc& s, const FwdParams& p, const WorkTile& w, int rows,
                                                    int seq_k, int64_t diag, float f, int row0, int n0, int lane) {
    // One uniform branch per tile, so each element loop knows its load
    // and whether it has an ALiBi term.
    if (p.alibi_slopes != nullptr) bias_terms_by_dtype<kInit, true>(s, p, w, rows, seq_k, diag, f, row0, n0, lane);
    else bias_terms_by_dtype<kInit, false>(s, p, w, rows, seq_k, diag, f, row0, n0, lane);
  }
  template <bool kInit, bool kAlibi>
  __device__ __forceinline__ static void bias_terms_by_dtype(Acc& s, const FwdParams& p, const WorkTile& w,
                                                             int rows, int seq_k, int64_t diag, float f, int row0,
                                                             int n0, int lane) {
    switch (p.bias == nullptr ? 0 : p.bias_dtype) {
      case FMHA_DTYPE_F16:
        return bias_terms_as<__half, kInit, kAlibi>(s, p, w, rows, seq_k, diag, f, row0, n0, lane);
      case FMHA_DTYPE_BF16:
        return bias_terms_as<__nv_bfloat16, kInit, kAlibi>(s, p, w, rows, seq_k, diag, f, row0, n0, lane);
      case FMHA_DTYPE_F32:
        return bias_terms_as<float, kInit, kAlibi>(s, p, w, rows, seq_k, diag, f, row0, n0, lane);
      default:  // ALiBi alone
        if constexpr (kAlibi) bias_terms_as<void, kInit, true>(s, p, w, rows, seq_k, diag, f, row0, n0, lane);
    }
  }

  // Bias elements as loaded: a 16-bit pair packed in 32 bits (converted
  // where it is added, so a tile's loads in flight hold one register per
  // pair), or an F32 pair.
  template <class B>
  using Raw = typename std::conditional<sizeof(B) == 2, uint32_t, float2>::type;

  // Elements j and j + 1 (key stride 1, the pair's address aligned to twice
  // the element size).
  template <class B>
  __device__ __forceinline__ static Raw<B> load_pair(const B* ptr) {
    if constexpr (sizeof(B) == 2) return __ldg(reinterpret_cast<const unsigned int*>(ptr));
    else return __ldg(reinterpret_cast<const float2*>(ptr));
  }
  // The same one element at a time: any key stride, elements at or past
  // seq_k read as 0 (+0 in every dtype).
  template <class B>
  __device__ __forceinline__ static Raw<B> load_each(const B* row, int64_t stride, int j, int seq_k) {
    if constexpr (sizeof(B) == 2) {
      const unsigned short* e = reinterpret_cast<const unsigned short*>(row);
      const uint32_t lo = j < seq_k ? __ldg(e + static_cast<int64_t>(j) * stride) : 0u;
      const uint32_t hi = j + 1 < seq_k ? __ldg(e + static_cast<int64_t>(j + 1) * stride) : 0u;
      return lo | (hi << 16);
    } else {
      return make_float2(j < seq_k ? __ldg(row + static_cast<int64_t>(j) * stride) : 0.f,
                         j + 1 < seq_k ? __ldg(row + static_cast<int64_t>(j + 1) * stride) : 0.f);
    }
  }
  template <class B>
  __device__ __forceinline__ static float2 to_float2(Raw<B> x) {
    if constexpr (std::is_same<B, __half>::value) return __half22float2(*reinterpret_cast<const __half2*>(&x));
    else if constexpr (std::is_same<B, __nv_bfloat16>::value)
      return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&x));
    else return x;
  }

  // bias_terms with bias elements of type B (void: no bias tensor, ALiBi
  // only) and, with kAlibi, the ALiBi term. Per row, a straight run of pair
  // loads when the whole tile lies inside the row (the common case), else
  // element by element; then the adds.
  template <class B, bool kInit, bool kAlibi>
  __device__ __forceinline__ static void bias_terms_as(Acc& s, const FwdParams& p, const WorkTile& w, int rows,
                                                       int seq_k, int64_t diag, float f, int row0, int n0,
                                                       int lane) {
    constexpr bool kTensor = !std::is_void<B>::value;
    const int j_lane = n0 + 2 * (lane & 3);  // the lane's first key; even, as n0 is a multiple of 8
    const int side = kAlibi ? alibi_side(p, diag, row0, n0) : 0;
#pragma unroll
    for (int ms = 0; ms < kMSlices; ++ms)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int r = row0 + ms * 16 + (lane >> 2) + 8 * hh;
        int64_t h;
        int i;
        w.locate(p, r, &h, &i);
        float2 x[kNTiles];
        if constexpr (kTensor) {
          Raw<B> raw[kNTiles];
          const B* brow = static_cast<const B*>(p.bias) + w.b * p.bias_stride[0] + h * p.bias_stride[1] +
                          static_cast<int64_t>(i) * p.bias_stride[2];
          if (r >= rows) {  // past the sequence: nothing to read
#pragma unroll
            for (int nt = 0; nt < kNTiles; ++nt) raw[nt] = Raw<B>{};
          } else if (p.bias_stride[3] == 1 && n0 + kNTiles * 8 <= seq_k &&
                     reinterpret_cast<uintptr_t>(brow + j_lane) % (2 * sizeof(B)) == 0) {
#pragma unroll
            for (int nt = 0; nt < kNTiles; ++nt) raw[nt] = load_pair(brow + j_lane + nt * 8);
          } else {
#pragma unroll
            for (int nt = 0; nt < kNTiles; ++nt) raw[nt] = load_each(brow, p.bias_stride[3], j_lane + nt * 8, seq_k);
          }
#pragma unroll
          for (int nt = 0; nt < kNTiles; ++nt) x[nt] = to_float2<B>(raw[nt]);
        } else {
#pragma unroll
          for (int nt = 0; nt < kNTiles; ++nt) x[nt] = make_float2(0.f, 0.f);
        }
        float2 a[kNTiles];
        if constexpr (kAlibi) {
          const float slope = p.alibi_slopes[w.b * p.alibi_stride + h];
          alibi_terms(a, kInit ? slope * f : slope, static_cast<float>(i + diag - j_lane), side);
        }
        combine<kInit, kTensor, kAlibi>(s, ms, hh, x, a, f);
      }
  }

  // Which side of the diagonal the warp's elements of key tile n0 lie on,
  // uniform over the warp: +1 when every key is at or before d(i) for every
  // row (|d(i) - j| = d(i) - j), -1 when at or after, 0 when the tile
  // crosses some row's diagonal. Rows are unit rows from row0, as in apply().
  __device__ __forceinline__ static int alibi_side(const FwdParams& p, int64_t diag, int row0, int n0) {
    const int64_t d_lo = row0 / p.pack + diag, d_hi = (row0 + 16 * kMSlices - 1) / p.pack + diag;
    return d_lo >= n0 + kNTiles * 8 - 1 ? 1 : d_hi <= n0 ? -1 : 0;
  }

  // ALiBi's terms of one row's lane elements: t = -slope * |dist0 - (8 nt +
  // e)|, dist0 = d(i) - (the lane's first key), in float (exact below 2^24;
  // the distances are dist0 minus compile-time offsets). On one side of the
  // diagonal (alibi_side) the term is affine in the key, side * slope *
  // (8 nt + e) - side * slope * dist0: one FFMA per element from a per-row
  // base; a tile that crosses a diagonal takes the |.| per element.
  // `slope` carries whatever factor the caller folds into the terms.
  __device__ __forceinline__ static void alibi_terms(float2 (&t)[kNTiles], float slope, float dist0, int side) {
    if (side != 0) {
      const float a = side > 0 ? slope : -slope;
      const float base = -a * dist0;
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
        t[nt] = make_float2(fmaf(a, static_cast<float>(nt * 8), base), fmaf(a, static_cast<float>(nt * 8 + 1), base));
    } else {
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
        t[nt] = make_float2(-slope * fabsf(dist0 - static_cast<float>(nt * 8)),
                            -slope * fabsf(dist0 - static_cast<float>(nt * 8 + 1)));
    }
  }

  // Row hh of slice ms: kInit: s = x * f + a (a carries f already); else
  // s = s * f + x + a. x: the bias elements (kTensor), a: ALiBi's (kAlibi).
  template <bool kInit, bool kTensor, bool kAlibi>
  __device__ __forceinline__ static void combine(Acc& s, int ms, int hh, const float2 (&x)[kNTiles],
                                                 const float2 (&a)[kNTiles], float f) {
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& y = s[ms][nt][2 * hh + e];
        if constexpr (kTensor && kAlibi) {
          const float xe = e ? x[nt].y : x[nt].x, ae = e ? a[nt].y : a[nt].x;
          y = kInit ? fmaf(xe, f, ae) : fmaf(y, f, xe) + ae;
        } else if constexpr (kTensor) {
          const float xe = e ? x[nt].y : x[nt].x;
          y = kInit ? xe * f : fmaf(y, f, xe);
        } else if constexpr (kAlibi) {
          const float ae = e ? a[nt].y : a[nt].x;
          y = kInit ? ae : fmaf(y, f, ae);
        }
      }
  }

  // The bias (and ALiBi) terms with the bias tile staged in shared memory
  // (B: a 16-bit type) instead of loaded from global memory per element:
  // 128-byte-swizzled panels of 64 keys (the copy engine's), key k of tile
  // row r at byte (k / 64) panel_bytes + 128 r + 16 ((k % 64) / 8 ^ r % 8) +
  // 2 (k % 8) from `tile` (a shared address, 128-aligned). The lane's 16-byte chunks
  // of one n8 tile fall on 8 distinct chunk columns for its 8 rows, so a
  // warp's loads are free of bank conflicts. tile_row0: the tile row of unit
  // row row0; row_bcast: the tile holds one row, shared by every query (a
  // bias broadcast over Nq). Same kInit / f as bias_terms. Returns whether
  // one of the lane's elements is -inf (a key the row does not see).
  template <bool kInit>
  __device__ __forceinline__ static bool staged_bias_terms(Acc& s, const FwdParams& p, const WorkTile& w,
                                                           int64_t diag, float f, int row0, int n0, int lane,
                                                           uint32_t tile, int panel_bytes, int tile_row0,
                                                           bool row_bcast) {
    const bool bf16 = p.bias_dtype == FMHA_DTYPE_BF16;
    if (p.alibi_slopes != nullptr)
      return bf16 ? staged_as<__nv_bfloat16, kInit, true>(s, p, w, diag, f, row0, n0, lane, tile, panel_bytes,
                                                         tile_row0, row_bcast)
                  : staged_as<__half, kInit, true>(s, p, w, diag, f, row0, n0, lane, tile, panel_bytes, tile_row0,
                                                   row_bcast);
    return bf16 ? staged_as<__nv_bfloat16, kInit, false>(s, p, w, diag, f, row0, n0, lane, tile, panel_bytes,
                                                        tile_row0, row_bcast)
                : staged_as<__half, kInit, false>(s, p, w, diag, f, row0, n0, lane, tile, panel_bytes, tile_row0,
                                                  row_bcast);
  }
  template <class B, bool kInit, bool kAlibi>
  __device__ __forceinline__ static bool staged_as(Acc& s, const FwdParams& p, const WorkTile& w, int64_t diag,
                                                   float f, int row0, int n0, int lane, uint32_t tile,
                                                   int panel_bytes, int tile_row0, bool row_bcast) {
    using B2 = typename std::conditional<std::is_same<B, __half>::value, __half2, __nv_bfloat162>::type;
    const int j_lane = n0 + 2 * (lane & 3);
    const int side = kAlibi ? alibi_side(p, diag, row0, n0) : 0;
    B2 lowest = B2{};  // the lane's least element pair (a -inf wins every min)
#pragma unroll
    for (int ms = 0; ms < kMSlices; ++ms)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int r = row0 + ms * 16 + (lane >> 2) + 8 * hh;
        const int tr = row_bcast ? 0 : tile_row0 + ms * 16 + (lane >> 2) + 8 * hh;
        const uint32_t row = tile + tr * 128 + (lane & 3) * 4;
        float2 x[kNTiles];
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
          uint32_t raw;
          asm volatile("ld.shared.b32 %0, [%1];\n"
                       : "=r"(raw)
                       : "r"(row + (nt / 8) * panel_bytes + ((((nt % 8) ^ (tr % 8))) << 4))
                       : "memory");
          const B2 pair = *reinterpret_cast<const B2*>(&raw);
          lowest = ms == 0 && hh == 0 && nt == 0 ? pair : __hmin2(lowest, pair);
          x[nt] = to_float2<B>(raw);
        }
        float2 a[kNTiles];
        if constexpr (kAlibi) {
          int64_t h;
          int i;
          w.locate(p, r, &h, &i);
          const float slope = p.alibi_slopes[w.b * p.alibi_stride + h];
          alibi_terms(a, kInit ? slope * f : slope, static_cast<float>(i + diag - j_lane), side);
        }
        combine<kInit, true, kAlibi>(s, ms, hh, x, a, f);
      }
    const float2 m = to_float2<B>(*reinterpret_cast<const uint32_t*>(&lowest));
    return m.x == kNegInf || m.y == kNegInf;
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
