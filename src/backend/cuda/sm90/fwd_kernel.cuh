// The Hopper forward kernel (cuda_sm90_ws), FlashAttention-3's data flow:
//
//   producer warpgroup  one thread issues the copy engine's loads: the Q tile
//                       once, then K and V tiles into a ring of kStages
//                       stages, each guarded by a full and an empty mbarrier
//   consumer warpgroups each owns 64 query rows: S = Q K^T by wgmma from
//                       shared memory, softcap / bias + ALiBi / mask /
//                       online softmax in registers (common/), P converted
//                       in registers and O += P V by wgmma with A from
//                       registers; q/k descales scale the logits, v_descale
//                       O
//   epilogue            O / l staged in shared memory and written by the
//                       copy engine (rows past the sequence are clipped),
//                       lse from registers; or the split-KV partials for the
//                       shared combine
//
// The grid is persistent (TileConfig::kPersistent): one CTA per SM, whose
// first work tile is blockIdx.x in the scheduler's order
// (common/tile_scheduler.h: the longest causal rows first) and whose next
// ones come from an atomic counter, so a CTA that finishes early takes more.
// The K/V ring runs on across tiles, so the producer loads
// the next tile's Q, K and V while the consumers finish the last one. Within
// a tile each consumer keeps S of tile t and P V of tile t - 1 in flight
// together (the softmax of t waits only for S), and the two consumers take
// turns issuing their GEMMs (ping-pong), so one's softmax runs under the
// other's tensor-core work. Registers are rebalanced with setmaxnreg: the
// producer gives its share to the consumers.
#pragma once

#include <cuda.h>
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
#include "backend/cuda/sm90/tile_config.h"
#include "backend/cuda/sm90/tma.cuh"
#include "backend/cuda/sm90/warp_scores.cuh"
#include "backend/cuda/sm90/wgmma.cuh"
#include "core/key_tiles.h"

// The score-ops kernel's Q in registers (fwd_kernel below): 1 by default;
// -DFMHA_SM90_OPS_QREGS=0 in CMAKE_CUDA_FLAGS is the Q-in-shared-memory A/B
// of tools/device/bias3.sh.
#ifndef FMHA_SM90_OPS_QREGS
#define FMHA_SM90_OPS_QREGS 1
#endif

namespace fmha::cuda::sm90 {

// The tensor maps of one launch (tma.h): Q and O boxes of 64-row halves
// (o_map: one consumer's rows), K and V boxes of kBlockN rows; and, for the
// score-transform kernel, the bias when the copy engine can stage it
// (bias_rows 64: boxes of one consumer's 64 query rows; 1: a bias
// broadcast over queries, one row for all; 0: no map, the consumers load
// their elements from global memory).
struct FwdMaps {
  CUtensorMap q, k, v, o, bias;
  int bias_rows;
  int bias_ahead;  // staged bias: key tiles ahead of the next load prefetched into L2 (0: none)
};

// The speculative softmax step on steady key tiles (fwd_kernel below,
// kSpeculate; fwd_fp8_kernel.cuh: FMHA_SM90_FP8_SPECULATE): 1 by default.
#ifndef FMHA_SM90_SPECULATE
#define FMHA_SM90_SPECULATE 1
#endif
#ifndef FMHA_SM90_FP8_SPECULATE
#define FMHA_SM90_FP8_SPECULATE FMHA_SM90_SPECULATE
#endif

// Consumer cw's 64 rows of panel p of a [kBlockM][D] tile of 128-byte
// panels (Q or O), in either kernel's layout.
template <int kBlockM>
__device__ __forceinline__ unsigned char* consumer_rows(unsigned char* tile, int cw, int panel) {
  return tile + panel * kBlockM * 128 + cw * 64 * 128;
}

// O's accumulators (columns 8 dt .. of the lane's rows r and r + 8) times f.
template <int kDTiles>
__device__ __forceinline__ void scale_o(float (&o)[1][kDTiles][4], float f) {
#pragma unroll
  for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[0][dt][e] *= f;
}

// O's accumulators as To into consumer cw's rows of the [kBlockM][D] tile
// in the copy engine's panel layout (chunk c of row r at c ^ (r % 8)).
template <class To, int kBlockM, int kDTiles>
__device__ __forceinline__ void o_to_panels(const float (&o)[1][kDTiles][4], unsigned char* tile, int cw, int warp,
                                            int lane) {
  const int r_local = warp * 16 + lane / 4;
#pragma unroll
  for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = r_local + 8 * hh;
      unsigned char* row = consumer_rows<kBlockM>(tile, cw, dt / 8) + r * 128;
      *reinterpret_cast<uint32_t*>(row + (((dt % 8) ^ (r % 8)) << 4) + (lane % 4) * 4) =
          pack2<To>(o[0][dt][2 * hh], o[0][dt][2 * hh + 1]);
    }
}

// The Q barriers and the K/V ring's full and empty barriers of either
// kernel's layout (one thread, before mbar_init_fence): the copy engine
// completes a full barrier, each consumer warpgroup arrives once on an
// empty one (or each of its warps: k_empty_arrivals per consumer).
template <class Cfg, class Layout>
__device__ void init_ring_barriers(const Layout& sm, int k_empty_arrivals = 1) {
  mbar_init(sm.q_full(), 1);
  mbar_init(sm.q_empty(), Cfg::kConsumers);
  for (int s = 0; s < Cfg::kStages; ++s) {
    mbar_init(sm.k_full(s), 1);
    mbar_init(sm.v_full(s), 1);
    mbar_init(sm.k_empty(s), Cfg::kConsumers * k_empty_arrivals);
    mbar_init(sm.v_empty(s), Cfg::kConsumers);
  }
}

// A consumer's release of K stage `bar` (either kernel): by the warpgroup's
// leader once its Q K^T is done, or, where the speculative step's redo reads
// the stage again (kPerWarp; init_ring_barriers' k_empty_arrivals = 4), by
// each warp after its softmax step.
template <bool kPerWarp>
__device__ __forceinline__ void release_k_stage(uint64_t* bar, int lane, bool leader) {
  if constexpr (kPerWarp) {
    __syncwarp();
    if (lane == 0) mbar_arrive(bar);
  } else if (leader) {
    mbar_arrive(bar);
  }
}

// Shared memory of one CTA, carved from the 1024-aligned dynamic base.
template <class Cfg>
struct SmemLayout {
  unsigned char* base;
  __device__ unsigned char* q() const { return base; }
  __device__ unsigned char* k(int stage) const { return base + Cfg::kQBytes + stage * Cfg::kKVBytes; }
  __device__ unsigned char* v(int stage) const {
    return base + Cfg::kQBytes + (Cfg::kStages + stage) * Cfg::kKVBytes;
  }
  __device__ unsigned char* o() const {
    return Cfg::kSeparateO ? base + Cfg::kQBytes + 2 * Cfg::kStages * Cfg::kKVBytes : base;
  }
  __device__ uint64_t* bars() const {
    return reinterpret_cast<uint64_t*>(base + Cfg::kQBytes + 2 * Cfg::kStages * Cfg::kKVBytes +
                                       (Cfg::kSeparateO ? Cfg::kQBytes : 0));
  }
  __device__ uint64_t* q_full() const { return bars(); }
  __device__ uint64_t* q_empty() const { return bars() + 1; }
  __device__ uint64_t* k_full(int s) const { return bars() + 2 + s; }
  __device__ uint64_t* k_empty(int s) const { return bars() + 2 + Cfg::kStages + s; }
  __device__ uint64_t* v_full(int s) const { return bars() + 2 + 2 * Cfg::kStages + s; }
  __device__ uint64_t* v_empty(int s) const { return bars() + 2 + 3 * Cfg::kStages + s; }
  // Bias stage s of consumer cw (ScoreOps::kAll kernels; tile_config.h).
  __device__ uint64_t* bias_full(int s, int cw) const {
    return bars() + 2 + 4 * Cfg::kStages + s * Cfg::kConsumers + cw;
  }
  __device__ uint64_t* bias_empty(int s, int cw) const {
    return bars() + 2 + 4 * Cfg::kStages + (Cfg::kMaxBiasStages + s) * Cfg::kConsumers + cw;
  }
  __device__ unsigned char* bias(int s, int cw) const {
    return base + Cfg::kBiasOffset + s * Cfg::kBiasStageBytes + cw * Cfg::kBiasBytes;
  }
  // The work tile the producer hands the consumers with Q (-1: no more).
  __device__ volatile int64_t* tile_slot() const {
    return reinterpret_cast<volatile int64_t*>(bars() + 2 + 4 * Cfg::kStages +
                                               2 * Cfg::kMaxBiasStages * Cfg::kConsumers);
  }
  // The work tile (a TileWork) the producer derived, after the slot.
  __device__ unsigned char* tile_work() const {
    return reinterpret_cast<unsigned char*>(bars() + 2 + 4 * Cfg::kStages + 2 * Cfg::kMaxBiasStages * Cfg::kConsumers +
                                            1);
  }
  // Consumer cw's 64 rows of panel p of a [kBlockM][D] tile (Q or O).
  __device__ static unsigned char* rows(unsigned char* tile, int cw, int panel) {
    return consumer_rows<Cfg::kBlockM>(tile, cw, panel);
  }
};

// One work tile as both roles see it, with its sequence: the Problem's
// extents for a dense batch, else the tile's own (core/seq_layout.h: ragged,
// seqused_k and paged layouts; the producer pages K/V, load_kv below). The copy
// engine addresses a sequence by its first row on the packed seq axis of a
// batch-1 map (ragged) or by its batch coordinate (dense rows). kServing =
// false compiles the dense batch alone (the Problem's extents, read from the
// parameters, so they hold no registers across the key loop).
// A sequence's extents on the maps (serving layouts only).
struct TileSeq {
  int len_q, len_k;
  int64_t diag;
  int q_row, q_batch, k_row, k_batch;
};
struct NoTileSeq {};

template <class Cfg, bool kServing>
struct TileWork {
  WorkTile w;
  int m0;         // first unit row (sm90 never packs heads: rows are queries)
  // Key tiles and the unmasked interior, in int (sequences are below
  // kMaxFwdSeq): the per-tile "unmasked" test is then two 32-bit compares,
  // not two 64-bit ones with their sign extensions (SASS: 10 -> 4
  // instructions, twice per key tile).
  KeyTilesOf<int> kt;
  std::conditional_t<kServing, TileSeq, NoTileSeq> seq;
  __device__ TileWork(const FwdParams& p, int64_t index) {
    w = schedule_tile(p, index);
    m0 = w.m_block * Cfg::kBlockM;
    if constexpr (kServing) {
      const SeqExtent e = seq_extent(p.layout, w.b);
      seq.len_q = static_cast<int>(e.len_q);
      seq.len_k = static_cast<int>(e.len_k);
      seq.diag = e.diag_offset;
      seq.q_row = p.layout.ragged_q() ? static_cast<int>(e.q_begin) : 0;
      seq.q_batch = p.layout.ragged_q() ? 0 : static_cast<int>(w.b);
      seq.k_row = p.layout.ragged_k() ? static_cast<int>(e.k_begin) : 0;
      seq.k_batch = p.layout.ragged_k() ? 0 : static_cast<int>(w.b);
    }
    const int m_last = min(m0 + Cfg::kBlockM, len_q(p)) - 1;
    kt = key_tiles<int>(m0, m_last, len_k(p), diag(p), p.window_left, p.window_right, Cfg::kBlockN, w.split,
                        p.num_splits);
  }
  // The sequence's query and key counts and d(i) = i + diag.
  __device__ int len_q(const FwdParams& p) const {
    if constexpr (kServing) return seq.len_q; else return p.rows;
  }
  __device__ int len_k(const FwdParams& p) const {
    if constexpr (kServing) return seq.len_k; else return p.seq_k;
  }
  __device__ int64_t diag(const FwdParams& p) const {
    if constexpr (kServing) return seq.diag; else return p.diag_offset;
  }
  // Its first row and batch coordinate on the q/o and the k/v maps.
  __device__ int q_row() const {
    if constexpr (kServing) return seq.q_row; else return 0;
  }
  __device__ int q_batch() const {
    if constexpr (kServing) return seq.q_batch; else return static_cast<int>(w.b);
  }
  __device__ int k_row() const {
    if constexpr (kServing) return seq.k_row; else return 0;
  }
  __device__ int k_batch() const {
    if constexpr (kServing) return seq.k_batch; else return static_cast<int>(w.b);
  }
  __device__ int t_begin() const { return static_cast<int>(kt.t_begin); }
  __device__ int t_end() const { return static_cast<int>(kt.t_end); }
};

// No query row of its sequence in work tile `index` (a ragged batch's
// shorter sequences): the producer skips such tiles, so the consumers never
// see one.
template <class Cfg>
__device__ __forceinline__ bool tile_is_empty(const FwdParams& p, int64_t index) {
  const WorkTile w = schedule_tile(p, index);
  return w.m_block * Cfg::kBlockM >= seq_extent(p.layout, w.b).len_q;
}

__device__ __forceinline__ int64_t total_tiles(const FwdParams& p) {
  return static_cast<int64_t>(p.num_m_tiles) * p.units * p.num_splits;
}

// The producer: per tile, Q once the consumers have released the last one
// (with the tile's index in shared memory, published by the q_full
// arrival), then K and V of each key tile, on a ring that runs on across
// tiles. A CTA's first tile is blockIdx.x; with a persistent grid the next
// ones come from the launch's counter (dynamic: a CTA that finishes early
// takes more, as the hardware's block scheduler would), else there is none.
// kStagedBias: the kernel may stage bias tiles (maps.bias_rows > 0 says
// whether this launch does): per key tile, ahead of its K, one box of each
// consumer's rows into the bias ring, which also runs on across tiles.
// kPublish: the consumers take the tile as derived here (SmemLayout::
// tile_work; fwd_kernel's kTakeTile).
template <class Cfg, bool kServing, bool kStagedBias, bool kPublish>
__device__ void produce(const FwdParams& p, const FwdMaps& maps, const SmemLayout<Cfg>& sm, int* tile_counter) {
  PipeState<Cfg::kStages> st;
  PipeState<Cfg::kBiasStages> bst;
  const bool staged_bias = kStagedBias && maps.bias_rows > 0;
  uint32_t q_phase = 0;
  auto next = [&] { return Cfg::kPersistent ? gridDim.x + atomicAdd(tile_counter, 1) : total_tiles(p); };
  for (int64_t index = blockIdx.x;;) {
    if constexpr (kServing)
      while (index < total_tiles(p) && tile_is_empty<Cfg>(p, index)) index = next();
    mbar_wait(sm.q_empty(), q_phase ^ 1u);  // a fresh barrier passes parity 1
    if (index >= total_tiles(p)) {
      *sm.tile_slot() = -1;
      mbar_arrive(sm.q_full());
      return;
    }
    *sm.tile_slot() = index;
    // kPublish: the consumers take the tile as derived here (published by
    // the q_full arrival) rather than derive it again: that derivation
    // (schedule_tile's and key_tiles' 64-bit divisions, four calls of the
    // division routine, ~400 instructions) sat between a consumer's Q
    // arriving and its first Q K^T, while the tensor core idled at every
    // work tile. H200, 3 interleaved rounds: batched GQA B8 H32/8 N2048
    // causal +3.7%, causal FP16 D=128 N=2048 +3.1%, 8192 +2.2%, non-causal
    // 8192 +0.4%.
    const TileWork<Cfg, kServing> tw(p, index);
    static_assert(sizeof(tw) <= Cfg::kTileWorkBytes, "the published work tile fits its room");
    if constexpr (kPublish) *reinterpret_cast<TileWork<Cfg, kServing>*>(sm.tile_work()) = tw;
    const int h = static_cast<int>(tw.w.hs), hk = static_cast<int>(tw.w.hk);
    mbar_arrive_expect_tx(sm.q_full(), Cfg::kQBytes);
#pragma unroll
    for (int pn = 0; pn < Cfg::kPanels; ++pn)
      tma_load_panel(sm.q() + pn * Cfg::kBlockM * 128, &maps.q, 64 * pn, tw.q_row() + tw.m0, h, tw.q_batch(),
                     sm.q_full());
    q_phase ^= 1u;
    // K of tile t + 1 goes out before V of tile t: the consumers need them in
    // that order (S of t + 1 and P V of t are issued together), and V's
    // stage frees later than K's, so K never waits behind V.
    // Key tile t of K or V into `dst`: one box per panel at the sequence's
    // rows, or with a block table one box per page the tile spans (a page of
    // at least kBlockN keys holds the whole tile; smaller pages, a multiple
    // of 8 keys, land at their 1024-byte-aligned rows of the panel). Keys
    // past the sequence end read its last page; the consumers mask them.
    auto load_kv = [&](unsigned char* dst, const CUtensorMap* map, int t, uint64_t* bar) {
      if constexpr (kServing) {
        if (p.layout.paged()) {
          const int ps = static_cast<int>(p.layout.page_size);
          const int rows = min(ps, Cfg::kBlockN);
          const int last = tw.len_k(p) - 1;  // >= 0: a visited tile has a key
          for (int r0 = 0; r0 < Cfg::kBlockN; r0 += rows) {
            const int j = min(t * Cfg::kBlockN + r0, last);
            const uint32_t entry = p.page_div.div(static_cast<uint32_t>(j));
            const PageSlot at = page_slot(p.layout, tw.w.b, j, entry);
            const int slot = ps >= Cfg::kBlockN ? static_cast<int>(at.slot) : 0;
#pragma unroll
            for (int pn = 0; pn < Cfg::kPanels; ++pn)
              tma_load_panel(dst + pn * Cfg::kBlockN * 128 + r0 * 128, map, 64 * pn, slot, hk,
                             static_cast<int>(at.page), bar);
          }
          return;
        }
      }
#pragma unroll
      for (int pn = 0; pn < Cfg::kPanels; ++pn)
        tma_load_panel(dst + pn * Cfg::kBlockN * 128, map, 64 * pn, tw.k_row() + t * Cfg::kBlockN, hk, tw.k_batch(),
                       bar);
    };
    auto load_k = [&](int t, const PipeState<Cfg::kStages>& at) {
      mbar_wait(sm.k_empty(at.stage), at.phase ^ 1u);
      mbar_arrive_expect_tx(sm.k_full(at.stage), Cfg::kKVBytes);
      load_kv(sm.k(at.stage), &maps.k, t, sm.k_full(at.stage));
    };
    auto load_v = [&](int t, const PipeState<Cfg::kStages>& at) {
      mbar_wait(sm.v_empty(at.stage), at.phase ^ 1u);
      mbar_arrive_expect_tx(sm.v_full(at.stage), Cfg::kKVBytes);
      load_kv(sm.v(at.stage), &maps.v, t, sm.v_full(at.stage));
    };
    // The bias of key tile t at the sequence's local positions: rows m0 +
    // 64 cw on (or row 0 of a bias broadcast over queries); a broadcast head
    // or batch (stride 0, a map extent of 1) is coordinate 0. Rows and keys
    // past the tensor read as 0; the consumers mask keys past the sequence.
    auto load_bias = [&](int t) {
      if constexpr (kStagedBias) {
        const int rows = maps.bias_rows;
        const int bh = p.bias_stride[1] == 0 ? 0 : h;
        const int bb = p.bias_stride[0] == 0 ? 0 : static_cast<int>(tw.w.b);
        for (int c = 0; c < Cfg::kConsumers; ++c) {
          mbar_wait(sm.bias_empty(bst.stage, c), bst.phase ^ 1u);
          mbar_arrive_expect_tx(sm.bias_full(bst.stage, c), rows * 128 * (Cfg::kBlockN / 64));
#pragma unroll
          for (int pn = 0; pn < Cfg::kBlockN / 64; ++pn)
            tma_load_panel(sm.bias(bst.stage, c) + pn * 64 * 128, &maps.bias, t * Cfg::kBlockN + 64 * pn,
                           rows == 1 ? 0 : tw.m0 + 64 * c, bh, bb, sm.bias_full(bst.stage, c));
        }
        bst.advance();
        // Key tile t + bias_ahead into L2: with one ring stage (D=128) the
        // load of t + 1 goes out only once both consumers have read t, about
        // half a key tile before the first of them needs it, too little for
        // an HBM read; from L2 it is.
        const int ta = t + maps.bias_ahead;
        if (maps.bias_ahead > 0 && ta < tw.t_end())
          for (int c = 0; c < (rows == 1 ? 1 : Cfg::kConsumers); ++c)
#pragma unroll
            for (int pn = 0; pn < Cfg::kBlockN / 64; ++pn)
              tma_prefetch_panel(&maps.bias, ta * Cfg::kBlockN + 64 * pn, rows == 1 ? 0 : tw.m0 + 64 * c, bh, bb);
      }
    };
    if (tw.t_begin() < tw.t_end()) {
      // A bias tile goes out with the K tile of its Q K^T (the consumers
      // read it just before), after the V tile ahead of it, so the bias
      // ring's wait never holds up V.
      if (staged_bias) load_bias(tw.t_begin());
      load_k(tw.t_begin(), st);
      PipeState<Cfg::kStages> kst = st;
      for (int t = tw.t_begin(); t < tw.t_end(); ++t) {
        if (t + 1 < tw.t_end()) {
          kst.advance();
          load_k(t + 1, kst);
        }
        load_v(t, st);
        if (staged_bias && t + 1 < tw.t_end()) load_bias(t + 1);
        st.advance();
      }
    }
    index = next();
  }
}

// The bias terms with a bias tensor's elements loaded from global memory (a
// bias the copy engine cannot stage; ScoreMask::init_bias / add_bias), out
// of line: inlined beside the staged path they made the score-ops kernel
// spill 1.8 KB (ptxas, f16 D=128), with spill traffic on every key tile of
// every problem it runs, a bias or not. This rare path pays the call
// instead: ptxas saves the live registers around it (an 800-byte frame;
// H200, FP16 D=128 N=8192: "bias loaded" / none 5.1-5.2 against 3.9-4.0
// inlined, while every other score-ops column gained 3-14%). ALiBi without
// a bias tensor stays inline.
template <int kNTiles>
__device__ __noinline__ void bias_from_global_call(float (&s)[1][kNTiles][4], const FwdParams& p, const WorkTile& w,
                                                   int rows, int seq_k, int64_t diag, float factor, int row0,
                                                   int n0, int lane, bool init) {
  if (init) ScoreMask<1, kNTiles>::init_bias(s, p, w, rows, seq_k, diag, factor, row0, n0, lane);
  else ScoreMask<1, kNTiles>::add_bias(s, p, w, rows, seq_k, diag, factor, row0, n0, lane);
}
// The call through a copy of s: s itself never has its address taken, so
// it stays in registers on every other path (passed by reference, s lived
// in local memory: 66 stores and 43 loads per key tile on the hot path).
template <int kNTiles>
__device__ __forceinline__ void bias_from_global(float (&s)[1][kNTiles][4], const FwdParams& p, const WorkTile& w,
                                                 int rows, int seq_k, int64_t diag, float factor, int row0, int n0,
                                                 int lane, bool init) {
  float x[1][kNTiles][4];
  if (!init)
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) x[0][nt][e] = s[0][nt][e];
  bias_from_global_call<kNTiles>(x, p, w, rows, seq_k, diag, factor, row0, n0, lane, init);
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[0][nt][e] = x[0][nt][e];
}

// The rows' ALiBi constants of one work tile on the score-ops kernel (rows
// are queries: sm90 never packs heads): the tile's slope and, per lane row,
// d(i) - 2 (lane % 4) (the key offset of the lane's first pair) as float;
// d(i) of the warp's first and last rows, for the side test.
struct AlibiRows {
  float slope;
  float d[2];
  int d_lo, d_hi;
};

// The bias (kTensor: a 16-bit tile B staged in shared memory) and ALiBi
// (kAlibi) terms of one key tile n0 into s, in the accumulator's layout
// (element e of n8 tile nt of lane l: row l / 4 + 8 (e / 2), key n0 + 8 nt
// + 2 (l % 4) + e % 2): kInit: s = terms * f (Q K^T's starting value,
// f = 1 / the score factor, or no multiply at all without kScale: Q
// carries the factor); else s = s * f + terms (after softcap f = 1, else
// the score factor).
// The tile is ScoreMask::staged_bias_terms' (128-byte-swizzled panels of
// 64 keys, panel_bytes apart), read with ldmatrix x4: four n8 tiles of 8
// rows per instruction, each lane getting its accumulator pair (row l / 4,
// keys 2 (l % 4) and + 1 of each 8x8 matrix). addr[hh]: this lane's row
// address for rows 8 hh .. 8 hh + 7 of the warp (tile_lane_rows below);
// group g of n8 tiles 4 g .. 4 g + 3 is at (addr ^ (g % 2) 64) + (g / 2)
// panel_bytes, as chunk (4 (g % 2) + m) ^ (row % 8) = (4 (g % 2)) ^ (m ^
// row % 8) for matrix m < 4. 8 instructions per key tile instead of 32
// shared loads with their swizzle arithmetic. ALiBi: on a tile wholly on
// one side of every row's diagonal, one FFMA per element from the per-row
// base (ScoreMask::alibi_terms). Returns whether a bias element is -inf.
template <class B, bool kInit, bool kScale, bool kTensor, bool kAlibi, int kNTiles>
__device__ __forceinline__ bool tile_terms(float (&s)[1][kNTiles][4], float f, const uint32_t (&addr)[2],
                                           int panel_bytes, const AlibiRows& al, int n0) {
  static_assert(kNTiles % 4 == 0, "whole ldmatrix x4 groups of n8 tiles");
  using Mask = ScoreMask<1, kNTiles>;
  using B2 = typename std::conditional<std::is_same<B, __nv_bfloat16>::value, __nv_bfloat162, __half2>::type;
  const int side = !kAlibi ? 0 : al.d_lo >= n0 + kNTiles * 8 - 1 ? 1 : al.d_hi <= n0 ? -1 : 0;
  const float slope = kInit && kScale ? al.slope * f : al.slope;
  B2 lowest;  // the lane's least element pair (a -inf wins every min)
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    float2 x[kNTiles];
    if constexpr (kTensor) {
#pragma unroll
      for (int g = 0; g < kNTiles / 4; ++g) {
        const uint32_t a = (addr[hh] ^ ((g & 1) << 6)) + (g >> 1) * panel_bytes;
        uint32_t raw[4];
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(raw[0]), "=r"(raw[1]), "=r"(raw[2]), "=r"(raw[3])
                     : "r"(a)
                     : "memory");
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          const B2 pair = *reinterpret_cast<const B2*>(&raw[m]);
          lowest = hh == 0 && g == 0 && m == 0 ? pair : __hmin2(lowest, pair);
          x[4 * g + m] = Mask::template to_float2<B>(raw[m]);
        }
      }
    }
    float2 t[kNTiles];
    if constexpr (kAlibi) Mask::alibi_terms(t, slope, al.d[hh] - static_cast<float>(n0), side);
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& y = s[0][nt][2 * hh + e];
        const float xe = e ? x[nt].y : x[nt].x, ae = e ? t[nt].y : t[nt].x;
        if constexpr (kInit && kTensor && kAlibi) y = kScale ? fmaf(xe, f, ae) : xe + ae;
        else if constexpr (kInit && kTensor) y = kScale ? xe * f : xe;
        else if constexpr (kInit && kAlibi) y = ae;
        else if constexpr (kTensor && kAlibi) y = fmaf(y, f, xe) + ae;
        else if constexpr (kTensor) y = fmaf(y, f, xe);
        else if constexpr (kAlibi) y = fmaf(y, f, ae);
      }
  }
  if constexpr (kTensor) {
    const float2 m = Mask::template to_float2<B>(*reinterpret_cast<const uint32_t*>(&lowest));
    return m.x == kNegInf || m.y == kNegInf;
  } else {
    return false;
  }
}

// This lane's ldmatrix row addresses (tile_terms' addr, less the stage's
// base) for rows 8 hh .. of warp `warp`'s 16 in a consumer's bias tile:
// lane l addresses row (l % 8) of matrix l / 8, at its swizzled chunk of
// group 0; a bias broadcast over queries has one row, row 0 for all.
__device__ __forceinline__ void tile_lane_rows(uint32_t (&off)[2], int warp, int lane, bool row_bcast) {
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int r = row_bcast ? 0 : warp * 16 + 8 * hh + (lane & 7);
    off[hh] = r * 128 + ((((lane >> 3) ^ r) & 7) << 4);
  }
}

// kOps: the score transforms this instantiation compiles (common/
// fwd_params.h; the family builds kNone and kAll, whose softcap, bias, ALiBi
// and descales each run under a run-time uniform branch); the plain path
// carries no code for them.
// kServing: ragged, seqused_k and paged batches (TileWork).
template <class T, class Cfg, ScoreOps kOps, bool kServing>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    fwd_kernel(const __grid_constant__ FwdParams p, const __grid_constant__ FwdMaps maps, int* tile_counter) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int D = Cfg::kHeadDim;
  // Q's A fragments in registers (tile_config.h).
  constexpr bool kScoreOps = kOps != ScoreOps::kNone;
  constexpr bool kAllOps = kOps == ScoreOps::kAll;
  // FMHA_SM90_OPS_QREGS (1 by default; 0 is the A/B of
  // tools/device/bias3.sh): the score-ops kernel keeps Q in registers too
  // where the tile config does (D=128), pre-scaled by the score factor
  // (`prescaled` below). SASS (f16 D=128, steady key tile, per thread):
  // 565 instructions with nothing to do against 627 with Q in shared
  // memory, 719 against 844 for an F16 bias, 660 against 722 for ALiBi.
  constexpr bool kQInRegs = Cfg::kQInRegs && (!kScoreOps || FMHA_SM90_OPS_QREGS != 0);
  // The consumers take each work tile as the producer derived it (produce)
  // in the plain 2-consumer kernels (D=128, D=256), where it was measured.
  // The score-ops kernels derive it again: with the copy ptxas spilled
  // 0.1-0.4 KB more in them, whose speed hangs on their spills; so do the
  // 3-consumer ones (D=64, 160 registers: the copy spilled, 92 / 108 bytes
  // against 64 / 52, some of it in the diagonal tiles' mask code; not run).
  constexpr bool kTakeTile = !kScoreOps && Cfg::kConsumers == 2;
  constexpr int kNTiles = Cfg::kBlockN / 8;
  constexpr int kDTiles = D / 8;
  using Softmax = OnlineSoftmax<1, kNTiles, kDTiles>;
  // The plain kernel with Q in registers exponentiates each steady key tile
  // against the running reference max before the tile's max is known
  // (OnlineSoftmax::step_speculative); its rare redo recomputes a warp's
  // scores from Q's registers and the K stage (recompute_s below), so each
  // warp releases the K stage itself, after its softmax step.
  // -DFMHA_SM90_SPECULATE=0 in CMAKE_CUDA_FLAGS: the old step on every tile
  // (an A/B in one tree).
  constexpr bool kSpeculate = FMHA_SM90_SPECULATE != 0 && !kScoreOps && Cfg::kConsumers == 2;
  extern __shared__ unsigned char smem_raw[];
  const SmemLayout<Cfg> sm{
      reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023})};

  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    init_ring_barriers<Cfg>(sm, kSpeculate ? 4 : 1);
    if constexpr (kAllOps)
      for (int s = 0; s < Cfg::kBiasStages; ++s)
        for (int c = 0; c < Cfg::kConsumers; ++c) {
          mbar_init(sm.bias_full(s, c), 1);
          mbar_init(sm.bias_empty(s, c), 4);  // one arrival per warp of the consumer
        }
    mbar_init_fence();
  }
  __syncthreads();

  if (wg == 0) {
    regs_release<Cfg::kProducerRegs>();
    if (threadIdx.x == 0) {
      tma_prefetch(&maps.q);
      tma_prefetch(&maps.k);
      tma_prefetch(&maps.v);
      if (kAllOps && maps.bias_rows > 0) tma_prefetch(&maps.bias);
      produce<Cfg, kServing, kAllOps, kTakeTile>(p, maps, sm, tile_counter);
    }
    return;
  }

  regs_acquire<Cfg::kConsumerRegs>();
  const int cw = wg - 1;
  const int tid = threadIdx.x % 128;
  const int lane = tid % 32;
  const int warp = tid / 32;
  const bool leader = tid == 0;
  const uint32_t q_base = static_cast<uint32_t>(__cvta_generic_to_shared(SmemLayout<Cfg>::rows(sm.q(), cw, 0)));

  float o[1][kDTiles][4];
  auto& o_flat = reinterpret_cast<float(&)[D / 2]>(o);
  float s[1][kNTiles][4];
  auto& s_flat = reinterpret_cast<float(&)[Cfg::kBlockN / 2]>(s);
  uint32_t pf[Cfg::kBlockN / 16][4];  // P as the m16n8k16 A fragments of P V's k16 steps
  float alpha[1][2];
  // 1 while s holds the key tile's bias terms (ScoreMask::init_bias), the
  // starting value of its Q K^T (kAllOps only).
  uint32_t s_init = 0;

  // S = Q K^T of the stage's K tile over D / 16 k-steps (k-step ks is 32
  // bytes into panel ks / 4); committed, not waited for.
  // The operands' descriptors, built once: a k-step, a panel or a stage is a
  // constant added to the start address field (desc_advance), so the issue
  // of a GEMM is a run of wgmma with one add each, not an address
  // computation per instruction (the masks and shifts of smem_desc showed
  // as 15% of the consumers' stall samples).
  const uint64_t desc_q = smem_desc(q_base, 0, 1024);
  const uint64_t desc_k = smem_desc(static_cast<uint32_t>(__cvta_generic_to_shared(sm.k(0))), 0, 1024);
  const uint64_t desc_v =
      smem_desc(static_cast<uint32_t>(__cvta_generic_to_shared(sm.v(0))), Cfg::kBlockN * 128, 1024);
  // With kQInRegs, Q's A fragments (m16n8k16 layout, as P's): qf[ks] holds
  // the warp's 16 rows at columns 16 ks .. 16 ks + 15.
  uint32_t qf[kQInRegs ? D / 16 : 1][4];
  // ldmatrix x4 of k-step ks of the warp's Q rows: lane l addresses row
  // (l % 8) + 8 ((l / 8) % 2) of the warp's 16 and the 8 columns (l / 16) * 8
  // on from the k-step's start; the four 8x8 matrices come back as a0..a3 of
  // the fragment.
  auto q_frag_addr = [&](int ks) {
    const int r = warp * 16 + (lane % 8) + 8 * ((lane / 8) % 2);
    const int chunk = (ks % 4) * 2 + lane / 16;
    return static_cast<uint32_t>(__cvta_generic_to_shared(SmemLayout<Cfg>::rows(sm.q(), cw, ks / 4))) + r * 128 +
           ((chunk ^ (r % 8)) << 4);
  };
  auto load_q_regs = [&] {
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      const uint32_t addr = q_frag_addr(ks);
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(qf[ks][0]), "=r"(qf[ks][1]), "=r"(qf[ks][2]), "=r"(qf[ks][3])
                   : "r"(addr)
                   : "memory");
    }
  };
  // Each GEMM's descriptors are made warp-uniform (warp_uniform_desc) after
  // its stage's wait: the k-steps' adds then run in the uniform datapath,
  // one per wgmma, instead of a 64-bit add and two moves in the vector pipes.
  auto issue_qk = [&](int stage, uint32_t phase) {
    mbar_wait(sm.k_full(stage), phase);
    fence_operands(s_flat);
    wgmma_fence();
    const UniformDesc dk = warp_uniform_desc(desc_advance(desc_k, stage * Cfg::kKVBytes));
    const UniformDesc dq = warp_uniform_desc(kQInRegs ? 0 : desc_q);
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      const uint64_t b = dk.at((ks / 4) * Cfg::kBlockN * 128 + (ks % 4) * 32);
      if constexpr (kQInRegs)
        MmaRs<T, Cfg::kBlockN, 0>::run(s_flat, qf[ks], b, ks > 0 ? 1u : kAllOps ? s_init : 0u);
      else
        MmaSs<T, Cfg::kBlockN, 0, 0>::run(s_flat, dq.at((ks / 4) * Cfg::kBlockM * 128 + (ks % 4) * 32), b,
                                          ks > 0 ? 1u : kAllOps ? s_init : 0u);
    }
    wgmma_commit();
  };
  // O += P V of the stage's V tile: k-step kk reads keys 16 kk.. of every
  // panel (LBO = one panel); committed, not waited for.
  auto issue_pv = [&](int stage, uint32_t phase) {
    mbar_wait(sm.v_full(stage), phase);
    fence_operands(o_flat);
    wgmma_fence();
    const UniformDesc dv = warp_uniform_desc(desc_advance(desc_v, stage * Cfg::kKVBytes));
#pragma unroll
    for (int kk = 0; kk < Cfg::kBlockN / 16; ++kk) MmaRs<T, D, 1>::run(o_flat, pf[kk], dv.at(kk * 16 * 128), 1u);
    wgmma_commit();
  };
  auto release_k = [&](int stage) { release_k_stage<kSpeculate>(sm.k_empty(stage), lane, leader); };
  // S of this warp's 16 rows against the stage's K tile again, by mma.sync
  // from Q's registers (warp_scores.cuh): the rare redo of step_speculative.
  auto recompute_s = [&](int stage) {
    const uint32_t kb = static_cast<uint32_t>(__cvta_generic_to_shared(sm.k(stage)));
    if constexpr (kQInRegs) {
      warp_scores<T, D / 16>(s, kb, Cfg::kBlockN * 128, lane, [&](int ks, uint32_t(&a)[4]) {
#pragma unroll
        for (int i = 0; i < 4; ++i) a[i] = qf[ks][i];
      });
    } else {  // Q's fragments from the Q tile, as load_q_regs reads them (rolled)
      warp_scores<T, D / 16, kNTiles, true>(s, kb, Cfg::kBlockN * 128, lane,
                                            [&](int ks, uint32_t(&a)[4]) { sm80::ldmatrix_x4(a, q_frag_addr(ks)); });
    }
  };
  // Q of this consumer's 64 rows negated in place (score-ops kernels, a
  // negative q/k descale: `flip` in the tile loop): every 16-bit element's
  // sign bit, whatever the swizzle; then a fence to the async proxy (wgmma
  // reads its shared operands there) and the warpgroup's barrier before its
  // first Q K^T of the tile.
  auto flip_q = [&] {
#pragma unroll
    for (int pn = 0; pn < Cfg::kPanels; ++pn) {
      uint4* rows = reinterpret_cast<uint4*>(SmemLayout<Cfg>::rows(sm.q(), cw, pn));
#pragma unroll
      for (int i = tid; i < 64 * 128 / 16; i += 128) {
        uint4 x = rows[i];
        x.x ^= 0x80008000u;
        x.y ^= 0x80008000u;
        x.z ^= 0x80008000u;
        x.w ^= 0x80008000u;
        rows[i] = x;
      }
    }
    ::cuda::ptx::fence_proxy_async(::cuda::ptx::space_shared);  // generic writes -> wgmma's reads
    named_sync(1 + cw, 128);
  };
  auto pack_p = [&] {
#pragma unroll
    for (int kk = 0; kk < Cfg::kBlockN / 16; ++kk) {
      pf[kk][0] = pack2<T>(s[0][2 * kk][0], s[0][2 * kk][1]);
      pf[kk][1] = pack2<T>(s[0][2 * kk][2], s[0][2 * kk][3]);
      pf[kk][2] = pack2<T>(s[0][2 * kk + 1][0], s[0][2 * kk + 1][1]);
      pf[kk][3] = pack2<T>(s[0][2 * kk + 1][2], s[0][2 * kk + 1][3]);
    }
  };
  // fmha.h: keys a row does not see never affect it. A masked key has p = 0,
  // but inside the tensor core 0 x NaN = NaN, so a NaN or inf in the V tile
  // of a tile with a mask edge (where rows differ in which keys they see)
  // would reach rows that do not see its key. On such tiles the warpgroup
  // votes over the V tile in shared memory; a tile that holds a non-finite
  // value (never in practice) takes P V on the CUDA cores, skipping zero
  // weights. kGuardNonFiniteV = false compiles the guard out.
  // Named barriers: 0 is __syncthreads; 1 .. n the consumers' epilogues,
  // n + 1 .. 2n their turns, 2n + 1 .. 3n their votes (n consumers).
  constexpr int kVote = 1 + 2 * Cfg::kConsumers;  // one per consumer
  // Whether x holds in some thread of the warpgroup (all 128 take part).
  auto wg_any = [&](bool x) { return named_any(kVote + cw, 128, x); };
  auto v_nonfinite = [&](int stage, uint32_t phase) {
    mbar_wait(sm.v_full(stage), phase);
    constexpr uint32_t kExp = std::is_same<T, __half>::value ? 0x7c00u : 0x7f80u;
    constexpr uint32_t kMask = kExp | (kExp << 16);
    const uint4* v = reinterpret_cast<const uint4*>(sm.v(stage));
    uint32_t bad = 0;
#pragma unroll 4
    for (int i = tid; i < Cfg::kKVBytes / 16; i += 128) {
      const uint4 x = v[i];
      for (uint32_t w : {x.x, x.y, x.z, x.w}) {
        const uint32_t e = (w & kMask) ^ kMask;  // a half is 0 where its exponent is all ones
        bad |= (e & 0xffffu) == 0 || (e >> 16) == 0;
      }
    }
    return wg_any(bad != 0);
  };
  // O += P V of the stage's V tile on the CUDA cores, a term only where the
  // weight is non-zero. Lane l holds P of rows l / 4 (+ 8) at keys 16 kk +
  // 8 (i / 2) + 2 (l % 4) + {0, 1} in pf[kk][i]; key by key (a rolled loop,
  // so this rare path stays small beside the hot one), the quad's lane that
  // holds the key hands its weights around, and each lane adds to its own O
  // columns. No wgmma may be writing o. It ends on the warpgroup's vote
  // barrier: the stage is released by the leader alone (one arrival per
  // warpgroup), and these are plain shared-memory reads by every thread,
  // which a wgmma_wait does not cover; without the barrier the producer
  // refilled the stage with a later V tile while other warps still read it
  // (wrong O, or inf from that tile's own non-finite rows).
  auto pv_guarded = [&](int stage) {
    const uint32_t v_base = static_cast<uint32_t>(__cvta_generic_to_shared(sm.v(stage)));
    const int c = lane % 4;
    const int quad0 = lane & ~3;
#pragma unroll 1
    for (int j = 0; j < Cfg::kBlockN; ++j) {
      const int kk = j / 16, half = (j % 16) / 8;
      uint32_t r0 = 0, r1 = 0;  // pf[kk][2 half] and pf[kk][2 half + 1]: rows r and r + 8
#pragma unroll
      for (int x = 0; x < Cfg::kBlockN / 16; ++x)
        if (x == kk) {
          r0 = half ? pf[x][2] : pf[x][0];
          r1 = half ? pf[x][3] : pf[x][1];
        }
      r0 = __shfl_sync(0xffffffffu, r0, quad0 + (j % 8) / 2);
      r1 = __shfl_sync(0xffffffffu, r1, quad0 + (j % 8) / 2);
      const float2 p0 = unpack2<T>(r0), p1 = unpack2<T>(r1);
      const float w0 = j % 2 ? p0.y : p0.x, w1 = j % 2 ? p1.y : p1.x;
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
        const uint32_t addr = v_base + (dt / 8) * Cfg::kBlockN * 128 + j * 128 + (((dt % 8) ^ (j % 8)) << 4) + c * 4;
        uint32_t raw;
        asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(raw) : "r"(addr));
        const float2 v = unpack2<T>(raw);
        if (w0 != 0.f) {
          o[0][dt][0] = fmaf(w0, v.x, o[0][dt][0]);
          o[0][dt][1] = fmaf(w0, v.y, o[0][dt][1]);
        }
        if (w1 != 0.f) {
          o[0][dt][2] = fmaf(w1, v.x, o[0][dt][2]);
          o[0][dt][3] = fmaf(w1, v.y, o[0][dt][3]);
        }
      }
    }
    named_sync(kVote + cw, 128);  // every warp's reads of the stage before its release
  };
  // Whether P V of key tile t (in stage `ps`) must take pv_guarded. Under
  // a bias tensor any tile may have a hidden key (a -inf entry): a staged
  // bias tile says whether it has one (bit t % 2 of `hidden`, the
  // warpgroup's vote), so the V scan runs only on such tiles; with the
  // bias loaded from global memory every tile is scanned.
  const bool staged_bias = kAllOps && maps.bias_rows > 0;
  uint32_t hidden = 0;
  uint32_t lane_rows[2];  // this lane's ldmatrix rows in a staged bias tile (tile_lane_rows)
  tile_lane_rows(lane_rows, warp, lane, maps.bias_rows == 1);
  auto needs_guard = [&](const TileWork<Cfg, kServing>& tw, int t, const PipeState<Cfg::kStages>& ps) {
    if constexpr (!Cfg::kGuardNonFiniteV) return false;
    const int n0 = t * Cfg::kBlockN;
    if (tw.kt.unmasked(n0, n0 + Cfg::kBlockN)) {
      if (!kAllOps || p.bias == nullptr) return false;
      if (staged_bias && !wg_any((hidden >> (t & 1)) & 1u)) return false;
    }
    return v_nonfinite(ps.stage, ps.phase);
  };

  // Ping-pong: consumer cw waits on named barrier kTurn + cw, which the
  // previous consumer in the ring (cw - 1 mod n) completes by arriving.
  constexpr int kTurn = 1 + Cfg::kConsumers;
  auto turn_wait = [&] {
    if constexpr (Cfg::kPingPong) named_sync(kTurn + cw, 256);
  };
  auto turn_pass = [&] {
    if constexpr (Cfg::kPingPong) named_arrive(kTurn + (cw + 1) % Cfg::kConsumers, 256);
  };

  PipeState<Cfg::kStages> st;
  PipeState<Cfg::kBiasStages> bst;  // the bias ring (staged_bias)
  uint32_t q_phase = 0;
  for (;;) {
    mbar_wait(sm.q_full(), q_phase);
    q_phase ^= 1u;
    const int64_t index = *sm.tile_slot();
    if (index < 0) break;
    // kTakeTile: the producer's derivation of the tile (produce), read
    // before Q's release.
    const TileWork<Cfg, kServing> tw = kTakeTile ? *reinterpret_cast<const TileWork<Cfg, kServing>*>(sm.tile_work())
                                                 : TileWork<Cfg, kServing>(p, index);
    const int t_begin = tw.t_begin(), t_end = tw.t_end();
    const int row0 = tw.m0 + cw * 64 + warp * 16;  // the warp's first unit row
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[0][dt][e] = 0.f;
    Softmax softmax;
    softmax.init();
    // The logit of raw score x is scale * qk * x (qk: the tile's q/k
    // descales, 1 without), soft-capped; that folds into the softmax's units
    // c (or softcap's input). A bias or ALiBi term: without softcap, divided
    // by the scale, it is the starting value of the tile's Q K^T
    // (ScoreMask::init_bias, loaded while s is free, ahead of the MMA);
    // after softcap it is added in natural units (softcap's output, c =
    // score_log2 = log2(e)). The plain instantiation has none of it.
    const float qk = kAllOps ? qk_descale(p, tw.w.b, tw.w.hk) : 1.f;
    const bool softcapped = kOps == ScoreOps::kSoftcap || (kAllOps && p.softcap_out != 0.f);
    const bool biased = kAllOps && has_bias_or_alibi(p);
    // FMHA_SM90_OPS_QREGS (kQInRegs in this kernel): without softcap, Q's
    // registers are multiplied by the score factor scale * qk once per work
    // tile (rounded to T, as Q itself is: ~2^-12 relative per element), so
    // Q K^T comes out as the logits in natural units: the bias terms start
    // the accumulator as they are (no multiply per element), the sign of a
    // negative descale is in Q, and c = log2(e). Only where the factor keeps
    // Q in range (2^-8 <= |factor| <= 1); otherwise a bias is added after
    // the MMA as s * factor + terms (also in natural units).
    const float factor = p.scale * qk;
    const bool prescaled =
        kAllOps && kQInRegs && !softcapped && fabsf(factor) <= 1.f && fabsf(factor) >= 0x1p-8f;
    const bool natural = kAllOps && kQInRegs && !softcapped && (prescaled || biased);
    const bool bias_init = biased && !softcapped && (!kQInRegs || prescaled);
    // The factor of the terms added after the MMA (softcap's output: 1).
    const float add_f = softcapped ? 1.f : factor;
    // A negative q_descale * k_descale flips the scores' sign instead, so the
    // running max stays a max (as in cuda_sm80_tc; softcap takes the signed
    // factor in its input scale): the consumer negates its rows of the Q
    // tile in shared memory once per work tile (flip_q), so Q K^T comes out
    // negated and the key loop does nothing for it. (A multiply by +-1 of
    // every score tile instead cost 64 FMULs per tile and made ptxas spill
    // 22 of the scores around the softmax on every tile: descales=1 / none
    // 1.66-1.81 on the H200 against 1.22-1.24 without it; a branch around a
    // negation there made ptxas serialize every wgmma of the kernel, C7514.)
    const bool flip = kAllOps && !softcapped && qk < 0.f && !natural;
    const float c = (!kAllOps || softcapped) ? p.score_log2 : natural ? kLog2e : p.score_log2 * fabsf(qk);
    // The bias terms' divisor: the score factor's magnitude, so they add to
    // the (possibly negated) Q K^T in the same units.
    const float bias_div = p.scale * fabsf(qk);
    s_init = bias_init ? 1u : 0u;
    // The work tile's ALiBi constants (AlibiRows), read once here.
    AlibiRows al{};
    if (kAllOps && p.alibi_slopes != nullptr) {
      const int64_t dg = tw.diag(p);
      al.slope = p.alibi_slopes[tw.w.b * p.alibi_stride + tw.w.hs];
      const int i0 = row0 + lane / 4;
      al.d[0] = static_cast<float>(i0 + dg - 2 * (lane & 3));
      al.d[1] = static_cast<float>(i0 + 8 + dg - 2 * (lane & 3));
      al.d_lo = static_cast<int>(row0 + dg);
      al.d_hi = static_cast<int>(row0 + 15 + dg);
    }
    // The key tile's terms by bias dtype and ALiBi (uniform branches).
    // Instantiated for the score-ops kernels only (the plain D=256 tile's
    // 80 keys are not whole ldmatrix x4 groups).
    auto terms = [&](int t, bool init, const uint32_t(&addr)[2]) -> bool {
      if constexpr (!kAllOps) {
        return false;
      } else {
      const int n0 = t * Cfg::kBlockN;
      constexpr int kPanel = 64 * 128;  // a 64-key panel of the consumer's 64 rows
      constexpr bool kSc = !kQInRegs;   // init multiplies by f unless Q carries the factor
      const bool bf16 = p.bias_dtype == FMHA_DTYPE_BF16, alibi = p.alibi_slopes != nullptr;
      const float f = init ? 1.f / bias_div : add_f;
      if (p.bias == nullptr) {  // ALiBi alone
        if (init) tile_terms<__half, true, kSc, false, true>(s, f, addr, kPanel, al, n0);
        else tile_terms<__half, false, true, false, true>(s, f, addr, kPanel, al, n0);
        return false;
      }
      if (init) {
        if (alibi)
          return bf16 ? tile_terms<__nv_bfloat16, true, kSc, true, true>(s, f, addr, kPanel, al, n0)
                      : tile_terms<__half, true, kSc, true, true>(s, f, addr, kPanel, al, n0);
        return bf16 ? tile_terms<__nv_bfloat16, true, kSc, true, false>(s, f, addr, kPanel, al, n0)
                    : tile_terms<__half, true, kSc, true, false>(s, f, addr, kPanel, al, n0);
      }
      if (alibi)
        return bf16 ? tile_terms<__nv_bfloat16, false, true, true, true>(s, f, addr, kPanel, al, n0)
                    : tile_terms<__half, false, true, true, true>(s, f, addr, kPanel, al, n0);
      return bf16 ? tile_terms<__nv_bfloat16, false, true, true, false>(s, f, addr, kPanel, al, n0)
                  : tile_terms<__half, false, true, true, false>(s, f, addr, kPanel, al, n0);
      }
    };
    // Key tile t's bias tile from the ring into s (init: as Q K^T's
    // starting value, divided by the score factor; else added after
    // softcap), its stage released by each warp once read; notes whether it
    // hides a key.
    auto staged = [&](int t, bool init) {
      mbar_wait(sm.bias_full(bst.stage, cw), bst.phase);
      const uint32_t tile = static_cast<uint32_t>(__cvta_generic_to_shared(sm.bias(bst.stage, cw)));
      const uint32_t addr[2] = {tile + lane_rows[0], tile + lane_rows[1]};
      const bool h = terms(t, init, addr);
      __syncwarp();
      if (lane == 0) mbar_arrive(sm.bias_empty(bst.stage, cw));
      bst.advance();
      const uint32_t bit = 1u << (t & 1);
      hidden = h ? hidden | bit : hidden & ~bit;
    };
    // ALiBi without a bias tensor (no tile to read).
    auto alibi_only = [&](int t, bool init) {
      const uint32_t none[2] = {0u, 0u};
      terms(t, init, none);
    };
    // The bias terms of key tile t into s, before its Q K^T is issued.
    auto preload = [&](int t) {
      if (!bias_init) return;
      if (staged_bias)
        staged(t, true);
      else if (p.bias != nullptr)
        bias_from_global<kNTiles>(s, p, tw.w, tw.len_q(p), tw.len_k(p), tw.diag(p), kQInRegs ? 1.f : bias_div, row0,
                                  t * Cfg::kBlockN, lane, true);
      else
        alibi_only(t, true);
    };
    // Key tile t's score transforms (softcap, bias, ALiBi, the mask) on s.
    auto transform = [&](int t) {
      fence_operands(s_flat);
      if (softcapped) ScoreMask<1, kNTiles>::softcap(s, p.softcap_in * qk, p.softcap_out);
      const int n0 = t * Cfg::kBlockN;
      if (biased && !bias_init) {
        if (staged_bias)
          staged(t, false);
        else if (p.bias != nullptr)
          bias_from_global<kNTiles>(s, p, tw.w, tw.len_q(p), tw.len_k(p), tw.diag(p), add_f, row0, n0, lane, false);
        else
          alibi_only(t, false);
      }
      if (!tw.kt.unmasked(n0, n0 + Cfg::kBlockN)) {
        if constexpr (kServing) ScoreMask<1, kNTiles>::apply(s, p, tw.len_k(p), tw.diag(p), row0, n0, lane);
        else ScoreMask<1, kNTiles>::apply(s, p, row0, n0, lane);
      }
    };
    // Scores of key tile t -> probabilities (in s) and the O rescale factor.
    auto score = [&](int t) {
      transform(t);
      return softmax.step(s, c, alpha);
    };
    // score() of a steady key tile t in stage `stage` (kSpeculate: the
    // speculative step unless some row of the warp has seen no key yet
    // (`unseen`, voted before the scores arrive), its redo from recomputed
    // scores), then the stage's release.
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
    // With a separate O buffer, Q is free after the tile's last Q K^T;
    // otherwise after the O store has read it (below).
    auto release_q = [&] {
      if (leader) mbar_arrive(sm.q_empty());
    };
    if constexpr (kQInRegs) {
      // Q now lives in registers: its buffer goes back to the producer at
      // once (the warpgroup's reads done first).
      load_q_regs();
      if (kAllOps && prescaled) {
#pragma unroll
        for (int ks = 0; ks < (kQInRegs ? D / 16 : 1); ++ks)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const float2 x = unpack2<T>(qf[ks][i]);
            qf[ks][i] = pack2<T>(x.x * factor, x.y * factor);
          }
      } else if (kAllOps && flip) {
#pragma unroll
        for (int ks = 0; ks < (kQInRegs ? D / 16 : 1); ++ks)
#pragma unroll
          for (int i = 0; i < 4; ++i) qf[ks][i] ^= 0x80008000u;
      }
      named_sync(1 + cw, 128);
      release_q();
    }
    constexpr bool kReleaseQAfterQk = Cfg::kSeparateO && !kQInRegs;
    if constexpr (kAllOps && !kQInRegs)
      if (flip && t_begin < t_end) flip_q();

    if (t_begin < t_end) {
      // The last consumer lets consumer 0 go first; it skips its last pass
      // below, so every arrival meets a wait.
      if (cw == Cfg::kConsumers - 1) turn_pass();
      preload(t_begin);
      turn_wait();
      issue_qk(st.stage, st.phase);
      turn_pass();
      wgmma_wait<0>();
      if (kReleaseQAfterQk && t_begin + 1 == t_end) release_q();
      if constexpr (!kSpeculate) release_k(st.stage);
      score(t_begin);  // O is still 0: nothing to rescale
      if constexpr (kSpeculate) release_k(st.stage);
      pack_p();
      if (t_begin + 1 < t_end) preload(t_begin + 1);
      PipeState<Cfg::kStages> prev = st;
      st.advance();
      // Steady state: S of tile t and O += P V of tile t - 1 in flight
      // together; the softmax of t waits only for S, the O rescale for P V.
      for (int t = t_begin + 1; t < t_end; ++t) {
        // The vote runs before this consumer takes its turn, so it never
        // holds up the other one's GEMMs. (Each branch below issues, waits
        // and touches o in its own order: ptxas serializes every wgmma of the
        // kernel if any path could read o while a P V is in flight.)
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
        // With kSpeculate Q stays until the tile's last step (its redo may
        // read Q); the warpgroup's barrier orders every warp's reads before
        // the leader's release.
        if (kReleaseQAfterQk && kSpeculate && t + 1 == t_end) {
          named_sync(1 + cw, 128);
          release_q();
        }
        wgmma_wait<0>();
        fence_operands(o_flat);
        if (leader) mbar_arrive(sm.v_empty(prev.stage));
        if (moved) Softmax::rescale(o, alpha);
        pack_p();
        if (t + 1 < t_end) preload(t + 1);
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
    // v_descale multiplies O (and the split partials' o), never lse.
    if (kAllOps && p.v_descale != nullptr) scale_o(o, descale_at(p.v_descale, p, tw.w.b, tw.w.hk));
    const float lse_scale = c * kLn2;
    const int lane_row = row0 + lane / 4;
    if (p.num_splits > 1) {
      store_split_partials<1, kDTiles, D>(p, tw.w, lane_row, o, softmax.m, softmax.l, lse_scale, lane);
      if (!Cfg::kSeparateO) release_q();
      continue;
    }
    float lse[1][2];
    finalize_rows<1, kDTiles>(o, softmax.m, softmax.l, lse_scale, lse);
    if constexpr (kServing)
      store_lse<1>(p, tw.w, fwd_seq(p, tw.w.b), lse, lane_row, lane);
    else
      store_lse<1>(p, tw.w, lse, lane_row, lane);

    // O -> this warpgroup's rows of the O tile in the copy engine's panel
    // layout (chunk c of row r at c ^ (r % 8)), once the previous tile's
    // store has read them; then one thread stores them (the copy engine
    // clips rows past the tensor's end). A ragged sequence's last tile would
    // run into the next sequence's rows, so its rows are stored by the
    // warpgroup's threads, each row checked.
    if (leader) ::cuda::ptx::cp_async_bulk_wait_group_read(::cuda::ptx::n32_t<0>{});
    named_sync(1 + cw, 128);
    o_to_panels<T, Cfg::kBlockM>(o, sm.o(), cw, warp, lane);
    if constexpr (kServing) {
      const int first = tw.m0 + cw * 64;  // the warpgroup's first query of the sequence
      if (p.layout.ragged_q() && first + 64 > tw.len_q(p)) {
      named_sync(1 + cw, 128);
      const FwdSeq seq = fwd_seq(p, tw.w.b);
      T* o_rows = static_cast<T*>(p.o) + seq.o_offset + tw.w.hs * p.o_stride[1];
      constexpr int kChunks = D / 8;  // 16-byte chunks per row
#pragma unroll 1
      for (int idx = tid; idx < 64 * kChunks; idx += 128) {
        const int r = idx / kChunks, c = idx % kChunks;
        if (first + r >= tw.len_q(p)) continue;
        const unsigned char* row = SmemLayout<Cfg>::rows(sm.o(), cw, c / 8) + r * 128;
        *reinterpret_cast<uint4*>(o_rows + (first + r) * p.o_stride[2] + c * 8) =
            *reinterpret_cast<const uint4*>(row + (((c % 8) ^ (r % 8)) << 4));
      }
      named_sync(1 + cw, 128);  // the rows are read before the next tile's writes or Q's release
      if (!Cfg::kSeparateO) release_q();
      continue;
      }
    }
    ::cuda::ptx::fence_proxy_async(::cuda::ptx::space_shared);  // generic writes -> copy engine reads
    named_sync(1 + cw, 128);
    if (leader) {
      if (tw.m0 + cw * 64 < tw.len_q(p)) {
#pragma unroll
        for (int pn = 0; pn < Cfg::kPanels; ++pn) {
          // (The dense form spelled apart: the accessors' form, equal in
          // value, costs the dense kernel 120 bytes of spills in ptxas.)
          if constexpr (kServing)
            tma_store_panel(&maps.o, SmemLayout<Cfg>::rows(sm.o(), cw, pn), 64 * pn, tw.q_row() + tw.m0 + cw * 64,
                            static_cast<int>(tw.w.hs), tw.q_batch());
          else
            tma_store_panel(&maps.o, SmemLayout<Cfg>::rows(sm.o(), cw, pn), 64 * pn, tw.m0 + cw * 64,
                            static_cast<int>(tw.w.hs), static_cast<int>(tw.w.b));
        }
        ::cuda::ptx::cp_async_bulk_commit_group();
      }
      if (!Cfg::kSeparateO) {
        ::cuda::ptx::cp_async_bulk_wait_group_read(::cuda::ptx::n32_t<0>{});
        release_q();
      }
    }
  }
  if (leader) ::cuda::ptx::cp_async_bulk_wait_group_read(::cuda::ptx::n32_t<0>{});
#endif
}

}  // namespace fmha::cuda::sm90
