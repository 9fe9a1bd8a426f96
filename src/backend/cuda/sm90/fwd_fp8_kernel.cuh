// The Hopper FP8 forward kernel (cuda_sm90_ws with q, k, v all e4m3 or all
// e5m2, o F16 or BF16): fwd_kernel.cuh's data flow (a producer warpgroup,
// two ping-ponging consumers, a persistent grid, the K/V ring running on
// across tiles) on wgmma m64nNk32 with 8-bit operands.
//
// The differences from the 16-bit kernel, all forced by the FP8 MMA:
//   - both wgmma operands are K-major, so O += P V reads V^T [d][keys]: the
//     caller stores V transposed (v.strides[2] = 1; sm90_forward.cu declares
//     any other V unsupported) and the copy engine loads V^T tiles as is;
//   - P's A fragment (4 bytes per register: keys 4t .. 4t + 3 and 16 + 4t ..
//     of a k32 block, t = lane % 4) is not the S accumulator's layout (keys
//     2t, 2t + 1 of each n8 block): pack_p_fp8 converts S to e4m3 pairs and
//     trades them within the quad (fp8_fragment.cuh);
//   - the descales: q * k folds into the softmax's units (a negative factor
//     flips the scores' sign instead: P must stay <= 2^8 for e4m3), v
//     scales O.
// Dense batches only (the serving layouts stay with cuda_generic); softcap,
// causal and windows as the 16-bit kernel, and its guard against a NaN in V
// at a masked key; no bias or ALiBi.
#pragma once

#include <cuda.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/common/device_math.cuh"
#include "backend/cuda/common/epilogue.cuh"
#include "backend/cuda/common/fwd_params.h"
#include "backend/cuda/common/numerics.cuh"
#include "backend/cuda/common/score_mask.cuh"
#include "backend/cuda/common/softmax.cuh"
#include "backend/cuda/common/tile_scheduler.h"
#include "backend/cuda/sm90/barrier.cuh"
#include "backend/cuda/sm90/fp8_fragment.cuh"
#include "backend/cuda/sm90/fp8_tile_config.h"
#include "backend/cuda/sm90/fwd_kernel.cuh"  // TileWork, total_tiles
#include "backend/cuda/sm90/tma.cuh"
#include "backend/cuda/sm90/wgmma.cuh"
#include "core/key_tiles.h"

namespace fmha::cuda::sm90 {

// The tensor maps of one launch: Q, K (boxes of kBlockM / kBlockN rows of
// 128 bytes), V^T (boxes of kHeadDim rows of 128 keys, and of 64 keys in
// the 64-byte swizzle for a tile's tail panel; unused without one), O
// (16-bit boxes of 64 x 64).
struct Fp8Maps {
  CUtensorMap q, k, v, v_tail, o;
};

// Shared memory of one CTA (fp8_tile_config.h), from the 1024-aligned base:
// Q, kStages K stages, kStages V^T stages (each its 128-key panels, then
// the 64-key one), the O staging tile, the barriers.
template <class Cfg>
struct Fp8SmemLayout {
  unsigned char* base;
  __device__ unsigned char* q() const { return base; }
  __device__ unsigned char* k(int stage) const { return base + Cfg::kQBytes + stage * Cfg::kKVBytes; }
  __device__ unsigned char* v(int stage) const {
    return base + Cfg::kQBytes + Cfg::kStages * Cfg::kKVBytes + stage * Cfg::kVBytes;
  }
  // V^T panel pn of a stage (pn = kVFullPanels: the 64-key tail panel).
  __device__ static constexpr int v_panel(int pn) { return pn * Cfg::kVPanelBytes; }
  __device__ unsigned char* o() const {
    return base + Cfg::kQBytes + Cfg::kStages * (Cfg::kKVBytes + Cfg::kVBytes);
  }
  __device__ uint64_t* bars() const { return reinterpret_cast<uint64_t*>(o() + Cfg::kOBytes); }
  __device__ uint64_t* q_full() const { return bars(); }
  __device__ uint64_t* q_empty() const { return bars() + 1; }
  __device__ uint64_t* k_full(int s) const { return bars() + 2 + s; }
  __device__ uint64_t* k_empty(int s) const { return bars() + 2 + Cfg::kStages + s; }
  __device__ uint64_t* v_full(int s) const { return bars() + 2 + 2 * Cfg::kStages + s; }
  __device__ uint64_t* v_empty(int s) const { return bars() + 2 + 3 * Cfg::kStages + s; }
  __device__ volatile int64_t* tile_slot() const {
    return reinterpret_cast<volatile int64_t*>(bars() + 2 + 4 * Cfg::kStages);
  }
  // Consumer cw's 64 rows of 16-bit O panel p.
  __device__ unsigned char* o_rows(int cw, int panel) const { return consumer_rows<Cfg::kBlockM>(o(), cw, panel); }
};

// The producer (fwd_kernel.cuh's produce, dense batches): per tile Q once
// the consumers have released the last one, then K of tile t + 1 before
// V^T of tile t. maps.v is V^T: [batch][head][d][keys], so a V^T tile is
// the boxes at columns (keys) t * kBlockN + 128 p, row (d) 0, and the tail
// panel's box of 64 keys.
template <class Cfg>
__device__ void produce_fp8(const FwdParams& p, const Fp8Maps& maps, const Fp8SmemLayout<Cfg>& sm,
                            int* tile_counter) {
  PipeState<Cfg::kStages> st;
  uint32_t q_phase = 0;
  auto next = [&] { return Cfg::kPersistent ? gridDim.x + atomicAdd(tile_counter, 1) : total_tiles(p); };
  for (int64_t index = blockIdx.x;;) {
    mbar_wait(sm.q_empty(), q_phase ^ 1u);  // a fresh barrier passes parity 1
    if (index >= total_tiles(p)) {
      *sm.tile_slot() = -1;
      mbar_arrive(sm.q_full());
      return;
    }
    *sm.tile_slot() = index;
    const TileWork<Cfg, false> tw(p, index);
    const int h = static_cast<int>(tw.w.hs), hk = static_cast<int>(tw.w.hk), b = static_cast<int>(tw.w.b);
    mbar_arrive_expect_tx(sm.q_full(), Cfg::kQBytes);
    tma_load_panel(sm.q(), &maps.q, 0, tw.m0, h, b, sm.q_full());
    q_phase ^= 1u;
    auto load_k = [&](int t, const PipeState<Cfg::kStages>& at) {
      mbar_wait(sm.k_empty(at.stage), at.phase ^ 1u);
      mbar_arrive_expect_tx(sm.k_full(at.stage), Cfg::kKVBytes);
      tma_load_panel(sm.k(at.stage), &maps.k, 0, t * Cfg::kBlockN, hk, b, sm.k_full(at.stage));
    };
    auto load_v = [&](int t, const PipeState<Cfg::kStages>& at) {
      mbar_wait(sm.v_empty(at.stage), at.phase ^ 1u);
      mbar_arrive_expect_tx(sm.v_full(at.stage), Cfg::kKVBytes);
#pragma unroll
      for (int pn = 0; pn < Cfg::kVFullPanels; ++pn)
        tma_load_panel(sm.v(at.stage) + sm.v_panel(pn), &maps.v, t * Cfg::kBlockN + 128 * pn, 0, hk, b,
                       sm.v_full(at.stage));
      if constexpr (Cfg::kVTailKeys > 0)
        tma_load_panel(sm.v(at.stage) + sm.v_panel(Cfg::kVFullPanels), &maps.v_tail,
                       t * Cfg::kBlockN + 128 * Cfg::kVFullPanels, 0, hk, b, sm.v_full(at.stage));
    };
    if (tw.t_begin() < tw.t_end()) {
      load_k(tw.t_begin(), st);
      PipeState<Cfg::kStages> kst = st;
      for (int t = tw.t_begin(); t < tw.t_end(); ++t) {
        if (t + 1 < tw.t_end()) {
          kst.advance();
          load_k(t + 1, kst);
        }
        load_v(t, st);
        st.advance();
      }
    }
    index = next();
  }
}

// T: the FP8 element type of q, k and v; To: o's (__half or __nv_bfloat16).
template <class T, class To, class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    fwd_fp8_kernel(const __grid_constant__ FwdParams p, const __grid_constant__ Fp8Maps maps, int* tile_counter) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int D = Cfg::kHeadDim;
  constexpr int kNTiles = Cfg::kBlockN / 8;
  constexpr int kDTiles = D / 8;
  constexpr int kKBlocks = Cfg::kBlockN / 32;  // k32 steps of P V
  // P is e4m3 whatever the inputs' FP8 kind (P <= 2^8 needs no more range;
  // e5m2's 2 mantissa bits would double P's rounding): P V is an
  // e4m3 x T MMA.
  using P8 = __nv_fp8_e4m3;
  using Softmax = OnlineSoftmax<1, kNTiles, kDTiles>;
  // Steady key tiles take the speculative softmax step (fwd_kernel.cuh's
  // kSpeculate; its redo reads Q and the K stage again, so each warp
  // releases the K stage after its step and Q stays until the tile's last).
  constexpr bool kSpeculate = FMHA_SM90_FP8_SPECULATE != 0;
  extern __shared__ unsigned char smem_raw[];
  const Fp8SmemLayout<Cfg> sm{
      reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023})};

  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    init_ring_barriers<Cfg>(sm, kSpeculate ? 4 : 1);
    mbar_init_fence();
  }
  __syncthreads();

  if (wg == 0) {
    regs_release<Cfg::kProducerRegs>();
    if (threadIdx.x == 0) {
      tma_prefetch(&maps.q);
      tma_prefetch(&maps.k);
      tma_prefetch(&maps.v);
      if constexpr (Cfg::kVTailKeys > 0) tma_prefetch(&maps.v_tail);
      produce_fp8<Cfg>(p, maps, sm, tile_counter);
    }
    return;
  }

  regs_acquire<Cfg::kConsumerRegs>();
  const int cw = wg - 1;
  const int tid = threadIdx.x % 128;
  const int lane = tid % 32;
  const int warp = tid / 32;
  const bool leader = tid == 0;

  float o[1][kDTiles][4];
  auto& o_flat = reinterpret_cast<float(&)[D / 2]>(o);
  float s[1][kNTiles][4];
  auto& s_flat = reinterpret_cast<float(&)[Cfg::kBlockN / 2]>(s);
  uint32_t pf[kKBlocks][4];  // P as the A fragments of P V's k32 steps
  float alpha[1][2];

  // Descriptors: Q's 64 rows of this consumer, K and V^T of stage 0 (V^T's
  // tail panel in the 64-byte swizzle, 512-byte atoms); a k32 step is 32
  // bytes into the panel, a stage kKVBytes (K) or kVBytes (V^T) on.
  const uint64_t desc_q =
      smem_desc(static_cast<uint32_t>(__cvta_generic_to_shared(sm.q() + cw * 64 * 128)), 0, 1024);
  const uint64_t desc_k = smem_desc(static_cast<uint32_t>(__cvta_generic_to_shared(sm.k(0))), 0, 1024);
  const uint64_t desc_v = smem_desc(static_cast<uint32_t>(__cvta_generic_to_shared(sm.v(0))), 0, 1024);
  const uint64_t desc_v_tail = smem_desc(
      static_cast<uint32_t>(__cvta_generic_to_shared(sm.v(0) + sm.v_panel(Cfg::kVFullPanels))), 0, 512, 64);
  // With Cfg::kQInRegs, Q's A fragments: qf[ks] holds the warp's 16 rows at
  // bytes 32 ks .. 32 ks + 31. ldmatrix moves 4-byte pieces, so the 16-bit
  // kernel's load (fwd_kernel.cuh) is the 8-bit fragment too: matrix i of
  // the x4 is rows 8 (i % 2) .. + 7, bytes 16 (i / 2) .. + 15 of the step,
  // lane l's piece row l / 4, bytes 4 (l % 4) .. + 3, i.e. a0..a3 of the
  // m64nNk32 A layout (fp8_fragment.cuh).
  uint32_t qf[Cfg::kQInRegs ? D / 32 : 1][4];
  auto q_frag_addr = [&](int ks) {
    const int r = warp * 16 + (lane % 8) + 8 * ((lane / 8) % 2);
    const int chunk = ks * 2 + lane / 16;
    return static_cast<uint32_t>(__cvta_generic_to_shared(sm.q() + cw * 64 * 128)) + r * 128 +
           ((chunk ^ (r % 8)) << 4);
  };
  auto load_q_regs = [&] {
#pragma unroll
    for (int ks = 0; ks < D / 32; ++ks) {
      const uint32_t addr = q_frag_addr(ks);
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(qf[ks][0]), "=r"(qf[ks][1]), "=r"(qf[ks][2]), "=r"(qf[ks][3])
                   : "r"(addr)
                   : "memory");
    }
  };

  // Descriptors made warp-uniform after the stage's wait (wgmma.cuh:
  // UniformDesc): one uniform add per wgmma.
  auto issue_qk = [&](int stage, uint32_t phase) {
    mbar_wait(sm.k_full(stage), phase);
    fence_operands(s_flat);
    wgmma_fence();
    const UniformDesc dk = warp_uniform_desc(desc_advance(desc_k, stage * Cfg::kKVBytes));
    const UniformDesc dq = warp_uniform_desc(Cfg::kQInRegs ? 0 : desc_q);
#pragma unroll
    for (int ks = 0; ks < D / 32; ++ks) {
      if constexpr (Cfg::kQInRegs)
        MmaRsK32<T, T, Cfg::kBlockN>::run(s_flat, qf[ks], dk.at(ks * 32), ks > 0 ? 1u : 0u);
      else
        MmaSsK32<T, Cfg::kBlockN>::run(s_flat, dq.at(ks * 32), dk.at(ks * 32), ks > 0 ? 1u : 0u);
    }
    wgmma_commit();
  };
  auto issue_pv = [&](int stage, uint32_t phase) {
    mbar_wait(sm.v_full(stage), phase);
    fence_operands(o_flat);
    wgmma_fence();
    const UniformDesc dv = warp_uniform_desc(desc_advance(desc_v, stage * Cfg::kVBytes));
    const UniformDesc dv_tail = warp_uniform_desc(desc_advance(desc_v_tail, stage * Cfg::kVBytes));
#pragma unroll
    for (int kk = 0; kk < kKBlocks; ++kk) {
      // k32 step kk: panel kk / 4 of 128 keys, else the 64-key tail panel.
      const uint64_t b = kk < 4 * Cfg::kVFullPanels ? dv.at(Fp8SmemLayout<Cfg>::v_panel(kk / 4) + (kk % 4) * 32)
                                                    : dv_tail.at((kk - 4 * Cfg::kVFullPanels) * 32);
      MmaRsK32<P8, T, D>::run(o_flat, pf[kk], b, 1u);
    }
    wgmma_commit();
  };
  auto release_k = [&](int stage) { release_k_stage<kSpeculate>(sm.k_empty(stage), lane, leader); };
  // This warp's scores against the stage's K tile again, by mma.sync m16n8k32
  // (warp_scores.cuh), Q's fragments from registers or, read as
  // load_q_regs reads them, from the Q tile.
  auto recompute_s = [&](int stage) {
    const uint32_t kb = static_cast<uint32_t>(__cvta_generic_to_shared(sm.k(stage)));
    warp_scores<T, D / 32, kNTiles, !Cfg::kQInRegs>(s, kb, Cfg::kBlockN * 128, lane, [&](int ks, uint32_t(&a)[4]) {
      if constexpr (Cfg::kQInRegs) {
#pragma unroll
        for (int i = 0; i < 4; ++i) a[i] = qf[ks][i];
      } else {
        sm80::ldmatrix_x4(a, q_frag_addr(ks));
      }
    });
  };
  auto pack_p = [&] {
#pragma unroll
    for (int kk = 0; kk < kKBlocks; ++kk)
      pack_p_fp8<P8>(reinterpret_cast<const float(&)[4][4]>(s[0][4 * kk]), pf[kk], lane);
  };

  // fmha.h: keys a row does not see never affect it; inside the tensor core
  // 0 x NaN = NaN (fwd_kernel.cuh's guard, for FP8: e4m3's NaN is
  // S.1111.111, e5m2's inf / NaN S.11111.xx). On a key tile with a mask
  // edge the warpgroup votes over the V^T tile; one that holds such a byte
  // (never in practice) takes P V on the CUDA cores, skipping zero weights.
  // Named barriers: 1 .. n epilogues, n + 1 .. 2n turns, 2n + 1 .. 3n votes.
  constexpr int kVote = 1 + 2 * Cfg::kConsumers;
  auto v_nonfinite = [&](int stage, uint32_t phase) {
    mbar_wait(sm.v_full(stage), phase);
    constexpr uint32_t kExp = kFp8Kind<T> == __NV_E5M2 ? 0x7c7c7c7cu : 0x7f7f7f7fu;
    const uint4* v = reinterpret_cast<const uint4*>(sm.v(stage));
    uint32_t bad = 0;
    constexpr int kBytes = Cfg::kVFullPanels * Cfg::kVPanelBytes + (Cfg::kVTailKeys ? Cfg::kVTailBytes : 0);
#pragma unroll 4
    for (int i = tid; i < kBytes / 16; i += 128) {
      const uint4 x = v[i];
      for (uint32_t w : {x.x, x.y, x.z, x.w}) {
        const uint32_t e = (w & kExp) ^ kExp;                  // a byte is 0 where its bits of kExp are all ones
        bad |= ((e - 0x01010101u) & ~e & 0x80808080u) != 0u;  // some byte of e is 0
      }
    }
    return named_any(kVote + cw, 128, bad != 0);
  };
  // O += P V of the stage's V^T tile on the CUDA cores, a term only where
  // the weight is non-zero. Key j of k32 block kb = j / 32 sits in byte
  // j % 4 of pf[kb][2 h] (row g) and pf[kb][2 h + 1] (row g + 8), h =
  // (j % 32) / 16, of quad lane (j % 16) / 4 (pack_p_fp8's A layout); key
  // by key the holder hands its weights around and each lane adds to its
  // own O columns. No wgmma may be writing o. It ends on the vote barrier:
  // the leader alone releases the stage, after plain reads by every thread
  // (fwd_kernel.cuh's pv_guarded).
  auto pv_guarded = [&](int stage) {
    const unsigned char* vt = sm.v(stage);
    const int c = lane % 4;
    const int quad0 = lane & ~3;
#pragma unroll 1
    for (int j = 0; j < Cfg::kBlockN; ++j) {
      const int kb = j / 32, h = (j % 32) / 16;
      uint32_t r0 = 0, r1 = 0;
#pragma unroll
      for (int x = 0; x < kKBlocks; ++x)
        if (x == kb) {
          r0 = h ? pf[x][2] : pf[x][0];
          r1 = h ? pf[x][3] : pf[x][1];
        }
      r0 = __shfl_sync(0xffffffffu, r0, quad0 + (j % 16) / 4);
      r1 = __shfl_sync(0xffffffffu, r1, quad0 + (j % 16) / 4);
      const int shift = 8 * (j % 4);
      const float w0 = fp8_to_float(static_cast<uint8_t>(r0 >> shift), kFp8Kind<P8>);
      const float w1 = fp8_to_float(static_cast<uint8_t>(r1 >> shift), kFp8Kind<P8>);
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          // V^T row d, key j: byte j % 128 of row d
          // of 128-key panel j / 128 (chunks ^ d % 8), or byte jj of the
          // 64-byte tail panel's row d (chunks ^ (d / 2) % 4: the swizzle
          // XORs address bits 4-5 with 7-8).
          const int d = 8 * dt + 2 * c + e;
          const int jj = j - 128 * Cfg::kVFullPanels;
          const int at = jj < 0 ? Fp8SmemLayout<Cfg>::v_panel(j / 128) + d * 128 + ((((j % 128) / 16) ^ (d % 8)) << 4) +
                                      j % 16
                                : Fp8SmemLayout<Cfg>::v_panel(Cfg::kVFullPanels) + d * 64 +
                                      (((jj / 16) ^ ((d / 2) % 4)) << 4) + jj % 16;
          const float v = fp8_to_float(vt[at], kFp8Kind<T>);
          if (w0 != 0.f) o[0][dt][e] = fmaf(w0, v, o[0][dt][e]);
          if (w1 != 0.f) o[0][dt][2 + e] = fmaf(w1, v, o[0][dt][2 + e]);
        }
    }
    named_sync(kVote + cw, 128);  // every warp's reads of the stage before its release
  };
  auto needs_guard = [&](const TileWork<Cfg, false>& tw, int t, const PipeState<Cfg::kStages>& ps) {
    const int n0 = t * Cfg::kBlockN;
    return !tw.kt.unmasked(n0, n0 + Cfg::kBlockN) && v_nonfinite(ps.stage, ps.phase);
  };

  constexpr int kTurn = 1 + Cfg::kConsumers;
  auto turn_wait = [&] {
    if constexpr (Cfg::kPingPong) named_sync(kTurn + cw, 256);
  };
  auto turn_pass = [&] {
    if constexpr (Cfg::kPingPong) named_arrive(kTurn + (cw + 1) % Cfg::kConsumers, 256);
  };

  PipeState<Cfg::kStages> st;
  uint32_t q_phase = 0;
  for (;;) {
    mbar_wait(sm.q_full(), q_phase);
    q_phase ^= 1u;
    const int64_t index = *sm.tile_slot();
    if (index < 0) break;
    const TileWork<Cfg, false> tw(p, index);
    const int t_begin = tw.t_begin(), t_end = tw.t_end();
    const int row0 = tw.m0 + cw * 64 + warp * 16;
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[0][dt][e] = 0.f;
    Softmax softmax;
    softmax.init();
    // The logit of raw score x is scale * qk * x (qk: the q/k descales of
    // the tile's (batch, kv head)), soft-capped when softcap is set (qk then
    // scales softcap's input). Without softcap qk joins the softmax's units
    // c, and a negative qk flips the scores' sign instead, so the running
    // max stays a max and P stays <= 2^8 (sm80/fwd_kernel.cuh does the same;
    // with c < 0 the exponents would grow without bound and P saturate FP8).
    const float qk = qk_descale(p, tw.w.b, tw.w.hk);
    const bool softcapped = p.softcap_out != 0.f;
    const bool negate = !softcapped && qk < 0.f;
    const float c = softcapped ? p.score_log2 : p.score_log2 * fabsf(qk);
    // Key tile t's transforms on s (the sign, softcap, the mask).
    auto transform = [&](int t) {
      fence_operands(s_flat);
      if (negate) {
#pragma unroll
        for (int i = 0; i < Cfg::kBlockN / 2; ++i) s_flat[i] = -s_flat[i];
      }
      if (softcapped) ScoreMask<1, kNTiles>::softcap(s, p.softcap_in * qk, p.softcap_out);
      const int n0 = t * Cfg::kBlockN;
      if (!tw.kt.unmasked(n0, n0 + Cfg::kBlockN)) ScoreMask<1, kNTiles>::apply(s, p, row0, n0, lane);
    };
    auto score = [&](int t) {
      transform(t);
      return softmax.step(s, c, alpha);
    };
    // A steady key tile's score() and the stage's release (fwd_kernel.cuh's
    // score_steady).
    auto score_steady = [&](int t, int stage, bool unseen) {
      if constexpr (!kSpeculate) {
        release_k(stage);
        return score(t);
      }
      const bool moved =
          softmax.step_steady(s, c, alpha, unseen, [&] { transform(t); }, [&] { recompute_s(stage); });
      release_k(stage);
      return moved;
    };
    auto release_q = [&] {
      if (leader) mbar_arrive(sm.q_empty());
    };
    if constexpr (Cfg::kQInRegs) {
      // Q now lives in registers: its buffer goes back to the producer at
      // once (the warpgroup's reads done first).
      load_q_regs();
      named_sync(1 + cw, 128);
      release_q();
    }
    constexpr bool kReleaseQAfterQk = !Cfg::kQInRegs;

    if (t_begin < t_end) {
      if (cw == Cfg::kConsumers - 1) turn_pass();
      turn_wait();
      issue_qk(st.stage, st.phase);
      turn_pass();
      wgmma_wait<0>();
      if (kReleaseQAfterQk && t_begin + 1 == t_end) release_q();
      if constexpr (!kSpeculate) release_k(st.stage);
      score(t_begin);
      if constexpr (kSpeculate) release_k(st.stage);
      pack_p();
      PipeState<Cfg::kStages> prev = st;
      st.advance();
      for (int t = t_begin + 1; t < t_end; ++t) {
        // (Each branch issues, waits and touches o in its own order, as in
        // fwd_kernel.cuh.)
        const bool guard = needs_guard(tw, t - 1, prev);
        const bool unseen = kSpeculate && softmax.any_unseen();
        turn_wait();
        issue_qk(st.stage, st.phase);
        if (guard) {
          turn_pass();
          wgmma_wait<0>();
          pv_guarded(prev.stage);
        } else {
          issue_pv(prev.stage, prev.phase);
          turn_pass();
          wgmma_wait<1>();
        }
        if (kReleaseQAfterQk && !kSpeculate && t + 1 == t_end) release_q();
        const bool moved = score_steady(t, st.stage, unseen);
        // With kSpeculate Q stays until the tile's last step (its redo reads
        // Q); the warpgroup's barrier orders every warp's reads before the
        // leader's release.
        if (kReleaseQAfterQk && kSpeculate && t + 1 == t_end) {
          named_sync(1 + cw, 128);
          release_q();
        }
        wgmma_wait<0>();
        fence_operands(o_flat);
        if (leader) mbar_arrive(sm.v_empty(prev.stage));
        if (moved) Softmax::rescale(o, alpha);
        pack_p();
        prev = st;
        st.advance();
      }
      const bool guard = needs_guard(tw, t_end - 1, prev);
      turn_wait();
      if (guard) {
        if (cw != Cfg::kConsumers - 1) turn_pass();
        pv_guarded(prev.stage);
      } else {
        issue_pv(prev.stage, prev.phase);
        if (cw != Cfg::kConsumers - 1) turn_pass();
        wgmma_wait<0>();
      }
      fence_operands(o_flat);
      if (leader) mbar_arrive(sm.v_empty(prev.stage));
    } else if (kReleaseQAfterQk) {
      // A tile without key tiles issues no wgmma, whose warpgroup-wide
      // completion orders the other warps' reads of the tile slot (and of
      // Q) before the leader's release elsewhere: the warpgroup's barrier
      // does it here, or the producer could write the next tile's index
      // before a lagging warp read this one's.
      named_sync(1 + cw, 128);
      release_q();
    }

    softmax.finish();
    if (p.v_descale != nullptr) scale_o(o, descale_at(p.v_descale, p, tw.w.b, tw.w.hk));
    const float lse_scale = c * kLn2;
    const int lane_row = row0 + lane / 4;
    if (p.num_splits > 1) {
      store_split_partials<1, kDTiles, D>(p, tw.w, lane_row, o, softmax.m, softmax.l, lse_scale, lane);
      continue;
    }
    float lse[1][2];
    finalize_rows<1, kDTiles>(o, softmax.m, softmax.l, lse_scale, lse);
    store_lse<1>(p, tw.w, lse, lane_row, lane);

    // O -> this consumer's rows of the 16-bit O panels (chunk c of row r at
    // c ^ (r % 8)) once the previous tile's store has read them; one thread
    // stores them (the copy engine clips rows past the tensor's end).
    if (leader) ::cuda::ptx::cp_async_bulk_wait_group_read(::cuda::ptx::n32_t<0>{});
    named_sync(1 + cw, 128);
    o_to_panels<To, Cfg::kBlockM>(o, sm.o(), cw, warp, lane);
    ::cuda::ptx::fence_proxy_async(::cuda::ptx::space_shared);  // generic writes -> copy engine reads
    named_sync(1 + cw, 128);
    if (leader && tw.m0 + cw * 64 < tw.len_q(p)) {
#pragma unroll
      for (int pn = 0; pn < Cfg::kOPanels; ++pn)
        tma_store_panel(&maps.o, sm.o_rows(cw, pn), 64 * pn, tw.m0 + cw * 64, static_cast<int>(tw.w.hs),
                        static_cast<int>(tw.w.b));
      ::cuda::ptx::cp_async_bulk_commit_group();
    }
  }
  if (leader) ::cuda::ptx::cp_async_bulk_wait_group_read(::cuda::ptx::n32_t<0>{});
#endif
}

}  // namespace fmha::cuda::sm90
