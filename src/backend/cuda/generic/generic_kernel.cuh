// The general CUDA fallback: exact FlashAttention-style forward on CUDA
// cores, for every dtype, head dim <= 256, any strides and no alignment.
//
// One CTA takes one work item = (batch * head, block of query rows, split of
// the key range), as the shared scheduler (common/tile_scheduler.h) names it
// and the shared key-tile partition (core/key_tiles.h) cuts the keys. Its
// threads stage each K/V tile once, converted to float,
// in shared memory, so every K/V element is read from global memory once per
// CTA; each warp then scores its own query rows against the tile and folds
// the tile into its running (m, l, o) state, kept in registers, with the
// online softmax of the seed's section 4. Scores, m and lse stay in natural
// units (the queries are pre-scaled by `scale` alone, or with softcap the
// raw score goes through softcap_out * tanh(raw * softcap_in)) and only the
// difference s - m, exact when it is small, is multiplied by log2(e) for
// exp2f: folding log2(e) into the scale instead would round every logit,
// an absolute error of ~|s| 2^-24 that large logits (|s| ~ 1e4) turn into a
// visible error in the probabilities.
//
// With splits > 1 each CTA writes its unnormalized o, row max m and row sum
// l to the workspace (the format of common/split_combine.h) and the shared
// split-KV combine merges the splits with the same equations.
//
// Serving layouts (FwdParams::layout: ragged, seqused_k, paged): each work
// item resolves its sequence once (fwd_seq: the clamped extent of
// core/seq_layout.h; a uniform branch, nothing read for a dense batch),
// skips query blocks past the sequence's Nq, and stages paged K/V rows
// through the clamped block table (paged_kv_row).
//
// Inference numerics (fmha.h 0.3), all at run time in the same instances:
// an operand whose dtype is not the instance's T (FP8 K/V under an F16 or
// BF16 q, an all-FP8 problem's q and K/V) is decoded by common/numerics.cuh's
// load_as_float while it is staged; the staging loop of K/V is compiled
// twice, typed and decoding, and a uniform branch picks one per work item.
// o is stored in its own dtype. The descales of the unit's (sequence, kv
// head) fold into Q's staging factor (q_descale * k_descale) and into the
// epilogue (v_descale multiplies o, and each split's o before the combine,
// never lse); the bias and ALiBi term (bias_alibi) is added to the scaled,
// soft-capped logit of every visible key before the mask, as cpu_tiled does.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/common/device_math.cuh"
#include "backend/cuda/common/fwd_params.h"
#include "backend/cuda/common/numerics.cuh"
#include "backend/cuda/common/smem_opt_in.h"
#include "backend/cuda/common/split_combine.h"
#include "backend/cuda/common/tile_scheduler.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/generic/generic_config.h"
#include "core/error.h"
#include "core/key_tiles.h"
#include "core/mask.h"

namespace fmha::cuda::generic {

// The keys [lo, hi) query row i of sequence `seq` sees within the CTA's key
// range [ks, ke); empty (lo >= hi) for rows past the sequence's Nq.
__device__ __forceinline__ KeyRange row_keys(const FwdParams& p, const FwdSeq& seq, int64_t i, int64_t ks,
                                             int64_t ke) {
  if (i >= seq.len_q) return {0, 0};
  KeyRange r = key_range(i, seq.len_k, seq.diag_offset, p.window_left, p.window_right);
  r.lo = r.lo > ks ? r.lo : ks;
  r.hi = r.hi < ke ? r.hi : ke;
  return r;
}

// Element loads of one operand. The typed load reads T through the
// read-only path (the inputs do not change during the kernel); the decoding
// one any fmha dtype (load_as_float's switch on a grid-uniform dtype).
template <typename T>
struct TypedLoad {
  const T* base;
  __device__ __forceinline__ float operator()(int64_t idx) const { return to_float(__ldg(base + idx)); }
};
struct DecodingLoad {
  const void* base;
  int dtype;
  __device__ __forceinline__ float operator()(int64_t idx) const { return load_as_float(base, idx, dtype); }
};

// Where one K/V tile of a work item comes from: keys [k0, k0 + kBlockN) of
// the item's range [ks, ke), element offsets of key 0 of its kv head in k and
// v, and its sequence b (for the block table when paged).
struct KvTile {
  int64_t k0, ks, ke;
  int64_t kbase, vbase;
  int64_t b;
  bool paged;
};

// Stages tile `t` of K and V as float through `load_k` and `load_v` (typed
// or decoding): K transposed into float4 slots of k_s, V row-major into v_s
// (generic_config.h's layout). Keys outside [ks, ke) and dims past head_dim
// are zero so no garbage (or NaN) meets a zero probability. Returns whether
// this thread staged a NaN or inf of V.
template <int kD, int kBlockN, int kThreads, class LoadK, class LoadV>
__device__ __forceinline__ bool stage_kv(const FwdParams& p, const KvTile& t, float4* k_s, float* v_s, LoadK load_k,
                                         LoadV load_v) {
  constexpr int kKStride = kBlockN + 1;  // float4s per K row (1 pad)
  constexpr int kStageElems = kBlockN * kD;
  constexpr int kStageBatch = 8;  // loads in flight per thread
  static_assert(kStageElems % (kThreads * kStageBatch) == 0, "staging loop must tile evenly");
  const int tid = threadIdx.x;
  const int D = p.head_dim;
  bool v_bad = false;
  for (int e0 = 0; e0 < kStageElems; e0 += kThreads * kStageBatch) {
    float kx[kStageBatch], vx[kStageBatch];
#pragma unroll
    for (int u = 0; u < kStageBatch; ++u) {
      const int e = e0 + u * kThreads + tid;
      const int j = e / kD;
      const int d = e % kD;
      const int64_t key = t.k0 + j;
      kx[u] = 0.f;
      vx[u] = 0.f;
      if (key >= t.ks && key < t.ke && d < D) {
        int64_t krow = key * p.k_stride[2], vrow = key * p.v_stride[2];
        if (t.paged) {
          const KvRow row = paged_kv_row(p, t.b, static_cast<int>(key));
          krow = row.k;
          vrow = row.v;
        }
        kx[u] = load_k(t.kbase + krow + d * p.k_stride[3]);
        vx[u] = load_v(t.vbase + vrow + d * p.v_stride[3]);
      }
      v_bad |= !isfinite(vx[u]);
    }
#pragma unroll
    for (int u = 0; u < kStageBatch; ++u) {
      const int e = e0 + u * kThreads + tid;
      const int j = e / kD;
      const int d = e % kD;
      reinterpret_cast<float*>(k_s + (d / 4) * kKStride + j)[d % 4] = kx[u];
      v_s[e] = vx[u];
    }
  }
  return v_bad;
}

template <typename T, int kD, int kRows, int kKeys, int kWarps>
__global__ void __launch_bounds__(kWarps * kThreadsPerWarp)
    generic_attention_kernel(const FwdParams p) {
  constexpr int kThreads = kWarps * kThreadsPerWarp;
  constexpr int kBlockM = kRows * kWarps;        // query rows per CTA
  constexpr int kBlockN = kKeys * kThreadsPerWarp;  // keys per tile
  constexpr int kD4 = kD / 4;                    // float4 slots of a head
  constexpr int kC = kD / kThreadsPerWarp;       // output dims per lane
  constexpr int kKStride = kBlockN + 1;          // float4s per K row (1 pad)
  static_assert(kD % kThreadsPerWarp == 0 && (kD & (kD - 1)) == 0, "head-dim bucket: power of 2, >= 32");
  static_assert(kBlockN % 4 == 0, "P.V reads probabilities as float4");

  // Layout: see smem_bytes() in generic_config.h. Q rows and V rows are
  // read by a warp as broadcast float4 (Q) or 32 consecutive floats (V);
  // K is stored transposed in float4 slots so lane j reads key j's 4 dims
  // with one conflict-free 16-byte load.
  extern __shared__ float4 smem[];
  float* q_s = reinterpret_cast<float*>(smem);                   // [kBlockM][kD]
  float4* k_s = smem + kBlockM * kD4;                            // [kD4][kKStride]
  float* v_s = reinterpret_cast<float*>(k_s + kD4 * kKStride);   // [kBlockN][kD]
  float* p_s = v_s + kBlockN * kD;                               // [kWarps][kRows][kBlockN]

  const int tid = threadIdx.x;
  const int warp = tid / kThreadsPerWarp;
  const int lane = tid % kThreadsPerWarp;
  const int D = p.head_dim;
  const int nd4 = (D + 3) / 4;                   // Q.K^T runs over these slots
  const int nc = (D + kThreadsPerWarp - 1) / kThreadsPerWarp;  // P.V dim groups
  const int64_t work = static_cast<int64_t>(p.num_m_tiles) * p.units * p.num_splits;
  // With softcap the raw score goes into the tanh (softcap_in holds the
  // scale); else Q is staged pre-scaled. The descales multiply either way.
  const float q_scale = p.softcap_out != 0.f ? 1.f : p.scale;
  // Operands of the instance's type take typed loads; others (FP8, or q of
  // an all-FP8 problem run by the F16 instance) are decoded. Grid-uniform.
  const bool q_typed = p.dtype == kDtypeOf<T>;
  const bool kv_typed = p.kv_dtype == kDtypeOf<T>;
  const bool extra = has_bias_or_alibi(p);

  for (int64_t w = blockIdx.x; w < work; w += gridDim.x) {
    // Work order (the shared scheduler): splits fastest, then (batch, head)
    // units (GQA siblings share K/V in L2), then query blocks last-first so
    // the longest causal rows start first. Units are unpacked: unit = b * heads_q + h.
    const WorkTile tile = schedule_tile(p, w);
    const int split = tile.split;
    const int64_t bh = tile.unit;
    const int64_t b = tile.b;
    const int64_t h = tile.hs;
    const int64_t hk = tile.hk;
    const int64_t i0 = static_cast<int64_t>(tile.m_block) * kBlockM;
    // The sequence of this item (the whole batch entry when dense); query
    // blocks past its Nq have no rows (the same for every thread).
    const FwdSeq seq = fwd_seq(p, b);
    if (i0 >= seq.len_q) continue;
    const int64_t i_end = i0 + kBlockM < seq.len_q ? i0 + kBlockM : seq.len_q;
    const bool paged = p.layout.paged();

    // The CTA's key tiles and keys [ks, ke) (core/key_tiles.h): tiles
    // outside the rows' band are never loaded, and keys of the first and
    // last tile outside [ks, ke) are staged as zeros.
    const KeyTiles kt = key_tiles(i0, i_end - 1, seq.len_k, seq.diag_offset, p.window_left, p.window_right, kBlockN,
                                  split, p.num_splits);
    const int64_t ks = kt.lo;
    const int64_t ke = kt.hi;

    // Stage Q, pre-scaled (times q_descale * k_descale of the unit's kv
    // head), zero past seq_q and past head_dim. The barrier first: the
    // previous work item may still read q_s.
    __syncthreads();
    {
      const float q_factor = q_scale * qk_descale(p, b, hk);
      const int64_t qbase = seq.q_offset + h * p.q_stride[1];
      for (int e = tid; e < kBlockM * kD; e += kThreads) {
        const int r = e / kD;
        const int d = e % kD;
        const int64_t i = i0 + r;
        float x = 0.f;
        if (i < seq.len_q && d < D) {
          const int64_t at = qbase + i * p.q_stride[2] + d * p.q_stride[3];
          x = (q_typed ? to_float(static_cast<const T*>(p.q)[at]) : load_as_float(p.q, at, p.dtype)) * q_factor;
        }
        q_s[e] = x;
      }
    }

    // Running state of the seed's section 4, per owned row: m (warp-uniform), this lane's share of l, and o for dims lane + 32 c.
    float m[kRows], l[kRows], o[kRows][kC];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      m[r] = -INFINITY;
      l[r] = 0.f;
#pragma unroll
      for (int c = 0; c < kC; ++c) o[r][c] = 0.f;
    }

    const int64_t wi0 = i0 + static_cast<int64_t>(warp) * kRows;  // warp's first row
    const int64_t wi1 = wi0 + kRows < i_end ? wi0 + kRows : i_end;  // one past its last
    const int64_t kbase = seq.k_offset + hk * p.k_stride[1];
    const int64_t vbase = seq.v_offset + hk * p.v_stride[1];

    for (int64_t t = kt.t_begin; t < kt.t_end; ++t) {
      const int64_t k0 = t * kBlockN;
      // Stage the K/V tile (and publish Q on the first pass).
      __syncthreads();
      const KvTile tile_at{k0, ks, ke, kbase, vbase, b, paged};
      const bool v_bad =
          kv_typed ? stage_kv<kD, kBlockN, kThreads>(p, tile_at, k_s, v_s, TypedLoad<T>{static_cast<const T*>(p.k)},
                                                     TypedLoad<T>{static_cast<const T*>(p.v)})
                   : stage_kv<kD, kBlockN, kThreads>(p, tile_at, k_s, v_s, DecodingLoad{p.k, p.kv_dtype},
                                                     DecodingLoad{p.v, p.kv_dtype});
      // A NaN or inf in V would reach, as 0 * NaN = NaN, the rows that give
      // its key weight 0 (masked keys included): a tile holding one (a
      // CTA-wide vote, on the barrier that publishes the tile) skips every
      // zero weight in P V below. Finite tiles, the rule, keep plain FMAs.
      const bool v_guard = __syncthreads_or(v_bad) != 0;

      // Skip the tile when none of this warp's rows sees any of its keys
      // (causal blocks on the diagonal, window edges, rows past seq_q).
      const int64_t k1 = k0 + kBlockN < ke ? k0 + kBlockN : ke;
      if (wi0 >= wi1) continue;
      const int64_t warp_lo = row_keys(p, seq, wi0, ks, ke).lo;
      const int64_t warp_hi = row_keys(p, seq, wi1 - 1, ks, ke).hi;
      if (warp_hi <= k0 || warp_lo >= k1 || warp_lo >= warp_hi) continue;

      // S = Q K^T for the warp's rows and the lane's keys.
      float s[kRows][kKeys];
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int t = 0; t < kKeys; ++t) s[r][t] = 0.f;
      const float4* q4 = reinterpret_cast<const float4*>(q_s) + warp * kRows * kD4;
#pragma unroll 2
      for (int d4 = 0; d4 < nd4; ++d4) {
        float4 kk[kKeys];
#pragma unroll
        for (int t = 0; t < kKeys; ++t) kk[t] = k_s[d4 * kKStride + lane + kThreadsPerWarp * t];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const float4 qq = q4[r * kD4 + d4];  // broadcast
#pragma unroll
          for (int t = 0; t < kKeys; ++t) {
            s[r][t] = fmaf(qq.x, kk[t].x, s[r][t]);
            s[r][t] = fmaf(qq.y, kk[t].y, s[r][t]);
            s[r][t] = fmaf(qq.z, kk[t].z, s[r][t]);
            s[r][t] = fmaf(qq.w, kk[t].w, s[r][t]);
          }
        }
      }

      // Online softmax, per row: softcap, the bias and ALiBi term of the
      // visible keys (only they are read: a key past Nk(b) may lie past the
      // bias), then the mask (before the tile max), then m_new = max(m_old,
      // tile max), alpha = exp(m_old - m_new), p = exp(s - m_new), l = alpha l + sum p, o = alpha o (+ P V below).
      // A row that has seen no key keeps m = -inf; it uses 0 in place of
      // m_new so that no -inf - -inf (NaN) arises, and its p and alpha are 0.
      float* pw = p_s + warp * kRows * kBlockN;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const KeyRange rk = row_keys(p, seq, wi0 + r, ks, ke);
        float tile_max = -INFINITY;
#pragma unroll
        for (int t = 0; t < kKeys; ++t) {
          const int64_t key = k0 + lane + kThreadsPerWarp * t;
          float x = s[r][t];
          if (p.softcap_out != 0.f) x = p.softcap_out * tanhf(x * p.softcap_in);
          const bool visible = key >= rk.lo && key < rk.hi;
          if (extra && visible) x += bias_alibi(p, b, h, wi0 + r, key, seq.diag_offset);
          x = visible ? x : -INFINITY;
          s[r][t] = x;
          tile_max = fmaxf(tile_max, x);
        }
        tile_max = warp_max(tile_max);
        const float m_new = fmaxf(m[r], tile_max);
        const float m_use = m_new == -INFINITY ? 0.f : m_new;
        const float alpha = exp2f((m[r] - m_use) * kLog2e);
        m[r] = m_new;
        float sum = 0.f;
#pragma unroll
        for (int t = 0; t < kKeys; ++t) {
          const float pr = exp2f((s[r][t] - m_use) * kLog2e);
          sum += pr;
          pw[r * kBlockN + lane + kThreadsPerWarp * t] = pr;
        }
        l[r] = fmaf(l[r], alpha, sum);
#pragma unroll
        for (int c = 0; c < kC; ++c) o[r][c] *= alpha;
      }
      __syncwarp();

      // O += P V: the lane's dims lane + 32 c, four keys per step.
#pragma unroll 2
      for (int j4 = 0; j4 < kBlockN / 4; ++j4) {
        float vv[4][kC];
#pragma unroll
        for (int jj = 0; jj < 4; ++jj)
#pragma unroll
          for (int c = 0; c < kC; ++c)
            vv[jj][c] = c < nc ? v_s[(j4 * 4 + jj) * kD + lane + kThreadsPerWarp * c] : 0.f;
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const float4 pp = reinterpret_cast<const float4*>(pw + r * kBlockN)[j4];  // broadcast
#pragma unroll
          for (int c = 0; c < kC; ++c) {
            if (c < nc && !v_guard) {
              o[r][c] = fmaf(pp.x, vv[0][c], o[r][c]);
              o[r][c] = fmaf(pp.y, vv[1][c], o[r][c]);
              o[r][c] = fmaf(pp.z, vv[2][c], o[r][c]);
              o[r][c] = fmaf(pp.w, vv[3][c], o[r][c]);
            } else if (c < nc) {
              o[r][c] = pp.x != 0.f ? fmaf(pp.x, vv[0][c], o[r][c]) : o[r][c];
              o[r][c] = pp.y != 0.f ? fmaf(pp.y, vv[1][c], o[r][c]) : o[r][c];
              o[r][c] = pp.z != 0.f ? fmaf(pp.z, vv[2][c], o[r][c]) : o[r][c];
              o[r][c] = pp.w != 0.f ? fmaf(pp.w, vv[3][c], o[r][c]) : o[r][c];
            }
          }
        }
      }
      __syncwarp();  // pw is rewritten by the next tile
    }

    // Epilogue: O = o / l * v_descale, lse = m + log l; a row that saw no
    // key (l = 0; a bias of -inf on every key included) gets O = 0 and lse
    // = -inf, a row with a NaN logit (l NaN) O and lse NaN. Split CTAs
    // store the raw state, o times v_descale (the combine is linear in o).
    const float v_factor = descale_at(p.v_descale, p, b, hk);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float l_row = warp_sum(l[r]);
      const int64_t i = wi0 + r;
      if (i >= seq.len_q) continue;
      if (p.num_splits == 1) {
        const float inv = l_row == 0.f ? 0.f : 1.f / l_row;  // NaN l stays NaN (fmha.h)
        const float factor = inv * v_factor;
        const int64_t orow = seq.o_offset + h * p.o_stride[1] + i * p.o_stride[2];
#pragma unroll
        for (int c = 0; c < kC; ++c) {
          const int d = lane + kThreadsPerWarp * c;
          if (d < D) store_from_float(p.o, orow + d * p.o_stride[3], p.o_dtype, o[r][c] * factor);
        }
        if (p.lse != nullptr && lane == 0)
          p.lse[seq.lse_row0 + h * seq.lse_head + i] = l_row == 0.f ? -INFINITY : m[r] + logf(l_row);
      } else {
        const int64_t slot = (split * p.units + bh) * p.rows + i;  // common/split_combine.h, pack 1
        float* wo = p.o_partial + slot * D;
#pragma unroll
        for (int c = 0; c < kC; ++c) {
          const int d = lane + kThreadsPerWarp * c;
          if (d < D) wo[d] = o[r][c] * v_factor;
        }
        if (lane == 0) {
          p.m_partial[slot] = m[r];
          p.l_partial[slot] = l_row;
        }
      }
    }
  }
}

// Launches config kCfg of kConfigs for element type T (the split combine,
// if any, is the caller's: generic_forward, by o's dtype).
template <typename T, int kCfg>
fmha_status launch_config(const FwdParams& prm, const GenericPlan& plan, const LaunchContext& ctx) {
  constexpr GenericConfig c = kConfigs[kCfg];
  constexpr size_t smem = smem_bytes(c);
  auto kernel = generic_attention_kernel<T, c.head_dim_max, c.rows_per_warp, c.keys_per_lane, c.warps>;
  static SmemOptIn opt_in;  // one per instantiation, i.e. per kernel
  fmha_status s = opt_in.ensure(reinterpret_cast<const void*>(kernel), smem, ctx.device->ordinal,
                                "cuda_generic attention");
  if (s != FMHA_SUCCESS) return s;
  const cudaStream_t stream = static_cast<cudaStream_t>(ctx.stream);
  const int64_t work = plan.grid.blocks();
  const int64_t grid = work < kMaxGrid ? work : kMaxGrid;
  kernel<<<static_cast<unsigned>(grid), c.warps * kThreadsPerWarp, smem, stream>>>(prm);
  return check_launch("cuda_generic attention");
}

// Launches plan.config for instance type T (instantiated once per dtype in
// generic_<dtype>.cu; the problem's q, k/v and o dtypes are read at run time).
template <typename T>
fmha_status launch_typed(const FwdParams& prm, const GenericPlan& plan, const LaunchContext& ctx) {
  static_assert(kConfigCount == 5, "add a case for each config");
  switch (plan.config) {
    case 0: return launch_config<T, 0>(prm, plan, ctx);
    case 1: return launch_config<T, 1>(prm, plan, ctx);
    case 2: return launch_config<T, 2>(prm, plan, ctx);
    case 3: return launch_config<T, 3>(prm, plan, ctx);
    case 4: return launch_config<T, 4>(prm, plan, ctx);
    default: return fail(FMHA_ERROR_INTERNAL, "cuda_generic: no config %d", plan.config);
  }
}

}  // namespace fmha::cuda::generic
