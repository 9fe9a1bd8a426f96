// The sm80 forward kernel, FlashAttention-2 data flow, composed of named
// parts (the arch-neutral ones live in common/ and serve every family):
//
//   BlockWork      which work tile (common/tile_scheduler.h: key split,
//                  unit = batch x head slot, row tile) a CTA owns, its
//                  sequence (common/fwd_params.h: FwdSeq, the clamped
//                  extent of a ragged, KV-cache or paged batch's sequence)
//                  and which key tiles it visits (core/key_tiles.h: tiles
//                  outside the rows' key range are never loaded)
//   TileLoader     global -> swizzled shared memory with 16-byte cp.async,
//                  zero-filling rows past the sequence end; paged K/V
//                  gathered through the block table, whose entries for a
//                  key tile are staged in shared memory before the tile
//                  is issued (one read per page run of a tile, or per row
//                  for other page sizes)
//   WarpQK         S = Q K^T for the warp's rows: ldmatrix + mma.sync
//   ScoreMask      softcap, bias + ALiBi (every tile, when the problem
//                  has them) and the element-wise mask of boundary tiles
//                  (common/score_mask.cuh)
//   OnlineSoftmax  the running max / sum and the rescale of O, in FP32
//                  (common/softmax.cuh)
//   WarpPV         O += P V with P taken from registers (no shared memory
//                  round trip) and V through ldmatrix.trans
//   Fp8KvTile      an FP8 K/V cache (kFp8Kv): K/V read from global memory
//                  as FP8 into raw, swizzled shared stages that stay FP8;
//   WarpQKFp8,     S = Q K^T and O += P V on them in F16, converting
//   WarpPVFp8      each FP8 fragment in registers after its load; a BF16
//                  q's rows become F16 once per work tile, each scaled by
//                  a power of two (QRowsToF16)
//   Epilogue       O / l and lse, or the per-split partials
//                  (common/epilogue.cuh)
//
// Shared memory layout: every tile is [rows][kPitch] of 2-byte elements
// (kPitch = D rounded up to 64) in the swizzled layout of
// common/swizzle.cuh: 16-byte chunk c of row r is stored at chunk c ^ (r & 7).
// An ldmatrix 8x8 read (8 consecutive rows, one chunk) and a cp.async warp
// write (8 consecutive chunks of a row per quarter warp) then touch 8
// distinct 16-byte bank groups: no bank conflicts, no padding.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/common/device_math.cuh"
#include "backend/cuda/common/epilogue.cuh"
#include "backend/cuda/common/fwd_params.h"
#include "backend/cuda/common/numerics.cuh"
#include "backend/cuda/common/score_mask.cuh"
#include "backend/cuda/common/softmax.cuh"
#include "backend/cuda/common/swizzle.cuh"
#include "backend/cuda/common/tile_scheduler.h"
#include "backend/cuda/sm80/bias_tile.cuh"
#include "backend/cuda/sm80/ptx.cuh"
#include "backend/cuda/sm80/tile_config.h"
#include "core/key_tiles.h"

namespace fmha::cuda::sm80 {

// ---------------------------------------------------------------------------
// BlockWork: the CTA's work tile (blockIdx.x through the shared scheduler),
// its sequence and the key tiles its rows visit (the shared key-tile
// partition). kServing: the problem has a serving layout (FwdParams::
// layout); the dense instantiation never reads metadata. The grid is sized
// by the host-known bounds (max_seqlen_q), so a tile may lie past its
// sequence's rows: empty() then, and the CTA exits before its first barrier.
// ---------------------------------------------------------------------------
template <class Cfg, bool kServing>
struct BlockWork : WorkTile {
  // The unit's sequence (serving instantiations): its valid rows, keys and
  // diagonal. Its o / lse offsets are held through the key loop in the
  // multi-warp tiles (kHoldSeq) and re-resolved in the epilogue by the
  // one-warp decode tile, whichever spilled less (ptxas, sm_90: the other
  // choice spilled 150-300 more bytes).
  static constexpr bool kHoldSeq = Cfg::kWarps > 1;
  int seq_rows, seq_len_k, seq_diag;
  FwdSeq seq;  // kHoldSeq only
  __device__ FwdSeq epilogue_seq(const FwdParams& p) const {
    if constexpr (kHoldSeq) return seq;
    else return fwd_seq(p, b);
  }
  int m0;          // first row of the unit
  int m_last;      // last valid row (< rows())
  int t_begin;     // key tiles [t_begin, t_end) of this CTA
  int t_end;
  int lo_max;      // a tile [n0, n0 + kBlockN) with n0 >= lo_max and
  int hi_min;      // n0 + kBlockN <= hi_min needs no element-wise mask

  __device__ bool empty() const { return kServing && m0 >= seq_rows; }
  // The sequence's facts; the dense instantiation reads the params (as it
  // always did), so it keeps its registers.
  __device__ int rows(const FwdParams& p) const { return kServing ? seq_rows : p.rows; }
  __device__ int len_k(const FwdParams& p) const { return kServing ? seq_len_k : p.seq_k; }
  __device__ int64_t diag_offset(const FwdParams& p) const { return kServing ? seq_diag : p.diag_offset; }
  __device__ int64_t q_offset(const FwdParams& p) const { return kServing ? fwd_seq(p, b).q_offset : b * p.q_stride[0]; }
  __device__ int64_t o_offset(const FwdParams& p) const { return kServing ? epilogue_seq(p).o_offset : b * p.o_stride[0]; }
  __device__ int64_t k_offset(const FwdParams& p) const { return kServing ? fwd_seq(p, b).k_offset : b * p.k_stride[0]; }
  __device__ int64_t v_offset(const FwdParams& p) const { return kServing ? fwd_seq(p, b).v_offset : b * p.v_stride[0]; }

  __device__ static BlockWork make(const FwdParams& p) {
    BlockWork w;
    static_cast<WorkTile&>(w) = schedule_tile(p, blockIdx.x);
    if constexpr (kServing) {
      const FwdSeq s = fwd_seq(p, w.b);
      if constexpr (kHoldSeq) w.seq = s;
      w.seq_rows = s.rows;
      w.seq_len_k = s.len_k;
      w.seq_diag = static_cast<int>(s.diag_offset);  // Nk(b) - Nq(b) or 0: |d| < 2^31
    }
    w.m0 = w.m_block * Cfg::kBlockM;
    if (w.empty()) return w;
    w.m_last = min(w.m0 + Cfg::kBlockM, w.rows(p)) - 1;
    // The query r / pack is non-decreasing in the row, so the rows
    // [m0, m_last] are the queries [m0 / pack, m_last / pack].
    // int positions: FwdParams positions fit int32 (kMaxFwdSeq).
    const KeyTilesOf<int> kt = key_tiles<int>(w.m0 / p.pack, w.m_last / p.pack, w.len_k(p), w.diag_offset(p),
                                              p.window_left, p.window_right, Cfg::kBlockN, w.split, p.num_splits);
    w.t_begin = kt.t_begin;
    w.t_end = kt.t_end;
    w.lo_max = kt.full_lo;
    w.hi_min = kt.full_hi;
    return w;
  }
};

// ---------------------------------------------------------------------------
// TileLoader: kRows x kHeadDim elements of a [seq][D] operand (row stride
// `stride` elements, head_dim stride 1) into a swizzled shared tile, copied
// by kCopiers threads (the CTA; or one 16-bit key warp copying its own
// share of a key tile, Cfg::kOwnKeys: then kRows is that share, `tid` the
// lane and the tile's address and row0 those of the share). Thread t copies
// chunk t % kChunks of rows t / kChunks + pass * kRowsPerPass (when whole
// rows fit a pass), so a warp reads whole row segments (coalesced; 16-byte
// copies need the registry row's 16-byte alignment). Rows at or past `n`
// are zero-filled: K tails give score 0 (then masked), V tails give 0
// contributions instead of garbage times a zero probability. A share starts
// at a multiple of 8 rows, so its swizzle is the tile's.
// ---------------------------------------------------------------------------
template <class T, class Cfg, int kRows, int kCopiers = Cfg::kThreads>
struct TileLoader {
  static constexpr int kChunks = Cfg::kHeadDim / 8;  // 16-byte chunks per row
  static constexpr int kTotal = kRows * kChunks;
  static constexpr int kPasses = (kTotal + kCopiers - 1) / kCopiers;
  // Row-stepped paths: a pass covers whole rows, so a thread keeps its chunk
  // and steps its row by kRowsPerPass; when that is a multiple of 8 the
  // swizzle phase is the same in every pass too. Otherwise (D = 96) the
  // generic walk divides the linear chunk index.
  static constexpr bool kRowStepped = kCopiers % kChunks == 0 && kTotal % kCopiers == 0;
  static constexpr int kRowsPerPass = kCopiers / kChunks;
  static constexpr bool kRowAligned = kRowStepped && kRowsPerPass % 8 == 0;
  static_assert(kRows % 8 == 0, "a tile or share is whole 8-row swizzle groups");

  // The (row, chunk) of the thread's copy in pass `pass` (generic path).
  __device__ static bool at(int tid, int pass, int* r, int* c) {
    const int idx = tid + pass * kCopiers;
    *r = idx / kChunks;
    *c = idx % kChunks;
    return kTotal % kCopiers == 0 || idx < kTotal;
  }

  __device__ static void load(uint32_t smem_tile, const T* base, int64_t stride, int row0, int n,
                              int tid) {
    if constexpr (kRowAligned) {
      const int c = tid % kChunks;
      const int r = tid / kChunks;
      const uint32_t dst = smem_tile + swizzle<Cfg::kPitch>(r, c);
      const T* src = base + static_cast<int64_t>(row0 + r) * stride + c * 8;
#pragma unroll
      for (int pass = 0; pass < kPasses; ++pass) {
        const bool in = row0 + r + pass * kRowsPerPass < n;
        const T* g = src + static_cast<int64_t>(pass * kRowsPerPass) * stride;
        cp_async_16(dst + pass * kRowsPerPass * Cfg::kPitch * 2, in ? g : base, in);
      }
    } else if constexpr (kRowStepped) {
      const int c = tid % kChunks;
      const int r = tid / kChunks;
      const T* src = base + static_cast<int64_t>(row0 + r) * stride + c * 8;
#pragma unroll
      for (int pass = 0; pass < kPasses; ++pass) {
        const int rr = r + pass * kRowsPerPass;
        const bool in = row0 + rr < n;
        const T* g = src + static_cast<int64_t>(pass * kRowsPerPass) * stride;
        cp_async_16(smem_tile + swizzle<Cfg::kPitch>(rr, c), in ? g : base, in);
      }
    } else {
#pragma unroll 1  // a rolled loop: unrolled, the hoisted addresses spill
      for (int pass = 0; pass < kPasses; ++pass) {
        int r, c;
        if (!at(tid, pass, &r, &c)) break;
        const bool in = row0 + r < n;
        const T* g = base + static_cast<int64_t>(row0 + r) * stride + c * 8;
        cp_async_16(smem_tile + swizzle<Cfg::kPitch>(r, c), in ? g : base, in);
      }
    }
  }

  // Rows [row0, row0 + kRows) of a unit whose row r starts at row_ptr(r)
  // (the Q tile under row packing); rows at or past n are zero-filled.
  template <class RowPtr>
  __device__ static void load_rows(uint32_t smem_tile, const T* valid, RowPtr row_ptr, int row0,
                                   int n, int tid) {
#pragma unroll
    for (int pass = 0; pass < kPasses; ++pass) {
      int r, c;
      if (!at(tid, pass, &r, &c)) break;
      const bool in = row0 + r < n;
      cp_async_16(smem_tile + swizzle<Cfg::kPitch>(r, c), in ? row_ptr(row0 + r) + c * 8 : valid, in);
    }
  }

  // Paged operands. The page_size rows of a page are contiguous (row
  // stride `stride`), so when the rows sharing a page form aligned runs of
  // kRun rows, a power of two and a multiple of kRowsPerPass (every row a
  // thread copies in one pass then lies in the run of that pass's first
  // row), one block-table read per run places all of them: kRun = kRows
  // when page_size is a multiple of kRows (the tile lies in one page), else
  // kRun = page_size for page sizes 16, 32 and 64 that divide kRows. Other
  // page sizes read the table once per row. Returns the run length, or 0.
  __device__ static int page_run(int64_t page_size) {
    const int64_t g = page_size % kRows == 0 ? kRows : page_size;
    const bool ok = kRowStepped && (g == kRows || g == 16 || g == 32 || g == 64) && g <= kRows &&
                    g % kRowsPerPass == 0;
    return ok ? static_cast<int>(g) : 0;
  }

  // Rows [row0, row0 + kRows) of a paged operand whose row j starts at
  // base + row_offset(j) (the clamped block-table lookup); rows at or past
  // n are zero-filled, and their table entries are never read (n <= the
  // sequence's keys, which its table row covers). run: page_run().
  template <class RowOffset>
  __device__ static void load_paged(uint32_t smem_tile, const T* base, int64_t stride, RowOffset row_offset,
                                    int run, int row0, int n, int tid) {
    // A compile-time run length per case, so each pass knows whether it
    // starts a run (no per-pass test) and the unrolled loop holds one base.
    if (run == kRows) return load_runs<kRows>(smem_tile, base, stride, row_offset, row0, n, tid);
    if constexpr (kRows > 64) {
      if (run == 64) return load_runs<64>(smem_tile, base, stride, row_offset, row0, n, tid);
    }
    if constexpr (kRows > 32) {
      if (run == 32) return load_runs<32>(smem_tile, base, stride, row_offset, row0, n, tid);
    }
    if constexpr (kRows > 16) {
      if (run == 16) return load_runs<16>(smem_tile, base, stride, row_offset, row0, n, tid);
    }
    load_rowwise(smem_tile, base, row_offset, row0, n, tid);
  }

  // Any page size: one table read per row, a few rows in flight (a full
  // unroll would hold every row's address in registers at once).
  template <class RowOffset>
  __device__ static void load_rowwise(uint32_t smem_tile, const T* base, RowOffset row_offset, int row0, int n,
                                      int tid) {
#pragma unroll 4
    for (int pass = 0; pass < kPasses; ++pass) {
      int r, c;
      if (!at(tid, pass, &r, &c)) break;
      const bool in = row0 + r < n;
      cp_async_16(smem_tile + swizzle<Cfg::kPitch>(r, c), in ? base + row_offset(row0 + r) + c * 8 : base, in);
    }
  }

  // Block-table staging (the 16-bit paged kernels): the table entries of
  // rows [row0, min(row0 + kRows, n)) of sequence b (a tile, or a key warp's
  // share of one, fetched by its kCopiers), entry div(row0) first,
  // copied with 4-byte cp.async into kRows int32 slots of shared memory at
  // `ent` (at most one page per row: page_size 1). Issued kStages - 1
  // tiles ahead of the tile's own K/V, in the group of a K tile that lands
  // before those are issued (fwd_kernel), so the gather of a tile reads its
  // page ids from shared memory instead of waiting on the table in global
  // memory before its first cp.async. Only entries of rows < n are read
  // (n <= the sequence's keys, which its table row covers); clamping is at
  // the use (page_slot_of), as for every table read.
  static constexpr int kEntryBytes = kRows * 4;
  __device__ static void fetch_entries(uint32_t ent, const FwdParams& p, int64_t b, int row0, int n, int tid) {
    if (row0 >= n) return;
    const uint32_t first = p.page_div.div(static_cast<uint32_t>(row0));
    const int count = static_cast<int>(p.page_div.div(static_cast<uint32_t>(min(row0 + kRows, n) - 1)) - first) + 1;
    const int32_t* src = p.layout.block_table + b * p.layout.block_table_stride + first;
    for (int i = tid; i < count; i += kCopiers) cp_async_4(ent + 4 * i, src + i);
  }

  // K and V rows [row0, row0 + kRows) of a paged pair (the decode tiles of
  // one row warp; with own keys a key warp's share of the tile): K's
  // copies, then between() (the caller's commit, so K and V stay groups of
  // their own), then V's. Each run's block-table lookup
  // (k_offset: an entry read from shared memory, a division, a clamp and
  // two 64-bit products) is made once for both when K and V have the same
  // page strides (`shared`), not once each: at one warp per scheduler its
  // latency is not hidden (H200: page_size 16 on 32-key tiles, two lookups
  // per operand and tile, ran 2% behind page_size 64, one). run: page_run().
  template <class KOffset, class VOffset, class Between>
  __device__ static void load_paged_kv(uint32_t dst_k, uint32_t dst_v, const T* k, const T* v, int64_t k_stride,
                                       int64_t v_stride, KOffset k_offset, VOffset v_offset, bool shared, int run,
                                       int row0, int n, int tid, Between&& between) {
    if (run == kRows)
      return load_runs_kv<kRows>(dst_k, dst_v, k, v, k_stride, v_stride, k_offset, v_offset, shared, row0, n, tid,
                                 between);
    if constexpr (kRows > 64) {
      if (run == 64)
        return load_runs_kv<64>(dst_k, dst_v, k, v, k_stride, v_stride, k_offset, v_offset, shared, row0, n, tid,
                                between);
    }
    if constexpr (kRows > 32) {
      if (run == 32)
        return load_runs_kv<32>(dst_k, dst_v, k, v, k_stride, v_stride, k_offset, v_offset, shared, row0, n, tid,
                                between);
    }
    if constexpr (kRows > 16) {
      if (run == 16)
        return load_runs_kv<16>(dst_k, dst_v, k, v, k_stride, v_stride, k_offset, v_offset, shared, row0, n, tid,
                                between);
    }
    load_rowwise(dst_k, k, k_offset, row0, n, tid);
    between();
    load_rowwise(dst_v, v, v_offset, row0, n, tid);
  }

  template <int kRun, class KOffset, class VOffset, class Between>
  __device__ static void load_runs_kv(uint32_t dst_k, uint32_t dst_v, const T* k, const T* v, int64_t k_stride,
                                      int64_t v_stride, KOffset k_offset, VOffset v_offset, bool shared, int row0,
                                      int n, int tid, Between&& between) {
    if constexpr (kRowStepped && kRun % kRowsPerPass == 0 && kRun <= kRows) {
      constexpr int kRuns = kRows / kRun;
      int64_t off[kRuns];  // each run's first row's offset (0 past n: zero-filled rows)
#pragma unroll
      for (int i = 0; i < kRuns; ++i) off[i] = row0 + i * kRun < n ? k_offset(row0 + i * kRun) : 0;
      issue_runs<kRun>(dst_k, k, k_stride, off, row0, n, tid);
      between();
      if (!shared) {
#pragma unroll
        for (int i = 0; i < kRuns; ++i) off[i] = row0 + i * kRun < n ? v_offset(row0 + i * kRun) : 0;
      }
      issue_runs<kRun>(dst_v, v, v_stride, off, row0, n, tid);
    } else {
      load_rowwise(dst_k, k, k_offset, row0, n, tid);  // page_run() never picks such a kRun
      between();
      load_rowwise(dst_v, v, v_offset, row0, n, tid);
    }
  }

  // The copies of load_runs with the runs' offsets given.
  template <int kRun>
  __device__ static void issue_runs(uint32_t smem_tile, const T* base, int64_t stride,
                                    const int64_t (&off)[kRows / kRun], int row0, int n, int tid) {
    const int c = tid % kChunks;
    const int r = tid / kChunks;
#pragma unroll
    for (int pass = 0; pass < kPasses; ++pass) {
      const int first = pass * kRowsPerPass;  // this pass's rows are first + [0, kRowsPerPass)
      const int in_run = first % kRun;        // compile-time
      const bool in = row0 + first + r < n;
      const T* g = base + off[first / kRun] + static_cast<int64_t>(in_run + r) * stride + c * 8;
      cp_async_16(smem_tile + swizzle<Cfg::kPitch>(first + r, c), in ? g : base, in);
    }
  }

  template <int kRun, class RowOffset>
  __device__ static void load_runs(uint32_t smem_tile, const T* base, int64_t stride, RowOffset row_offset, int row0,
                                   int n, int tid) {
    if constexpr (kRowStepped && kRun % kRowsPerPass == 0 && kRun <= kRows) {
      const int c = tid % kChunks;
      const int r = tid / kChunks;
      const T* run_base = base;
#pragma unroll
      for (int pass = 0; pass < kPasses; ++pass) {
        const int first = pass * kRowsPerPass;  // this pass's rows are first + [0, kRowsPerPass)
        const int in_run = first % kRun;        // compile-time
        if (in_run == 0) run_base = row0 + first < n ? base + row_offset(row0 + first) : base;
        const bool in = row0 + first + r < n;
        const T* g = run_base + static_cast<int64_t>(in_run + r) * stride + c * 8;
        cp_async_16(smem_tile + swizzle<Cfg::kPitch>(first + r, c), in ? g : base, in);
      }
    } else {
      load_rowwise(smem_tile, base, row_offset, row0, n, tid);  // page_run() never picks such a kRun
    }
  }
};

// ---------------------------------------------------------------------------
// Per-lane ldmatrix addresses. In an x4 ldmatrix lane l supplies the row
// address of row (l % 8) of 8x8 matrix (l / 8); every row the lanes name has
// row & 7 == l & 7, so the swizzle of chunk 2*k + x becomes (2*k) ^ phase
// with a per-lane phase.
// ---------------------------------------------------------------------------
template <class Cfg>
struct LaneAddr {
  static constexpr int kRowBytes = Cfg::kPitch * 2;
  // A operand (Q): matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7),
  // (rows 0-7, k 8-15), (rows 8-15, k 8-15) -> a0a1, a2a3, a4a5, a6a7.
  uint32_t q_row;   // byte offset of the lane's row within slice 0
  int q_phase;
  // B operand (K, [key][dim]): (keys 0-7, k 0-7), (keys 0-7, k 8-15),
  // (keys 8-15, k 0-7), (keys 8-15, k 8-15) -> b0b1, b2b3 of n8 tiles 0, 1.
  uint32_t k_row;
  int k_phase;
  // B operand of P V (V, [key][dim], transposed by ldmatrix.trans):
  // (keys 0-7, dims 0-7), (keys 8-15, dims 0-7), (keys 0-7, dims 8-15),
  // (keys 8-15, dims 8-15) -> b0b1, b2b3 of n8 tiles 0, 1.
  uint32_t v_row;
  int v_phase;

  __device__ LaneAddr(int warp, int lane) {
    const int r8 = lane & 7;
    q_row = static_cast<uint32_t>((warp * Cfg::kRowsPerWarp + (lane & 15)) * kRowBytes);
    q_phase = (lane >> 4) ^ r8;
    k_row = static_cast<uint32_t>((r8 + ((lane >> 4) << 3)) * kRowBytes);
    k_phase = ((lane >> 3) & 1) ^ r8;
    v_row = static_cast<uint32_t>((r8 + (((lane >> 3) & 1) << 3)) * kRowBytes);
    v_phase = (lane >> 4) ^ r8;
  }
  // Byte offset of chunk c (a compile-time even number, 2 * k16 step) for a
  // lane of swizzle phase `phase` (< 8): the part above the 8-chunk group is
  // a constant, so only 4 phase-dependent values exist per operand.
  __device__ static uint32_t chunk(int c, int phase) {
    return static_cast<uint32_t>(((c & ~7) << 4) + (((c & 7) ^ phase) << 4));
  }
};

// ---------------------------------------------------------------------------
// WarpQK: s[ms][nt] = Q[rows of slice ms] . K[keys of n8 tile nt]^T over the
// head dim, FP32 accumulation. Q fragments are re-read from shared memory
// each k16 step (keeping Q in registers would cost 64 of the 255 registers at
// D=128); each K fragment feeds all of the warp's m16 slices.
// ---------------------------------------------------------------------------
template <class T, class Cfg>
struct WarpQK {
  using Acc = float[Cfg::kMSlices][Cfg::kNTiles][4];
  __device__ static void run(Acc& s, uint32_t sQ, uint32_t sK, const LaneAddr<Cfg>& a) {
    constexpr int kRowBytes = Cfg::kPitch * 2;
#pragma unroll
    for (int kk = 0; kk < Cfg::kHeadDim / 16; ++kk) {
      uint32_t qf[Cfg::kMSlices][4];
#pragma unroll
      for (int ms = 0; ms < Cfg::kMSlices; ++ms)
        ldmatrix_x4(qf[ms], sQ + a.q_row + ms * 16 * kRowBytes + LaneAddr<Cfg>::chunk(2 * kk, a.q_phase));
#pragma unroll
      for (int np = 0; np < Cfg::kNTiles / 2; ++np) {
        uint32_t kf[4];
        ldmatrix_x4(kf, sK + a.k_row + np * 16 * kRowBytes + LaneAddr<Cfg>::chunk(2 * kk, a.k_phase));
#pragma unroll
        for (int ms = 0; ms < Cfg::kMSlices; ++ms) {
          MmaType<T>::mma(s[ms][2 * np], qf[ms], kf[0], kf[1]);
          MmaType<T>::mma(s[ms][2 * np + 1], qf[ms], kf[2], kf[3]);
        }
      }
    }
  }
};

// P's A fragments of k16 step kk in the product's 16-bit type Pv: the
// accumulator of S tiles 2kk and 2kk+1 packed to 16 bits. kk is a
// compile-time index after the callers' unrolled loops (p lives in registers).
template <class Pv, class Cfg>
__device__ __forceinline__ void pack_p_step(const float (&p)[Cfg::kMSlices][Cfg::kNTiles][4], int kk,
                                            uint32_t (&pf)[Cfg::kMSlices][4]) {
#pragma unroll
  for (int ms = 0; ms < Cfg::kMSlices; ++ms)
#pragma unroll
    for (int x = 0; x < 4; ++x)
      pf[ms][x] = pack2<Pv>(p[ms][2 * kk + x / 2][2 * (x % 2)], p[ms][2 * kk + x / 2][2 * (x % 2) + 1]);
}
// The same step's 0/1 weights (1 where p != 0), for the guarded P V.
template <class Pv, class Cfg>
__device__ __forceinline__ void pack_p_weights(const float (&p)[Cfg::kMSlices][Cfg::kNTiles][4], int kk,
                                               uint32_t (&pw)[Cfg::kMSlices][4]) {
#pragma unroll
  for (int ms = 0; ms < Cfg::kMSlices; ++ms)
#pragma unroll
    for (int x = 0; x < 4; ++x)
      pw[ms][x] = pack2<Pv>(p[ms][2 * kk + x / 2][2 * (x % 2)] != 0.f ? 1.f : 0.f,
                            p[ms][2 * kk + x / 2][2 * (x % 2) + 1] != 0.f ? 1.f : 0.f);
}

// ---------------------------------------------------------------------------
// WarpPV: o += P V. The accumulator of S tiles 2k and 2k+1 (keys 16k..16k+15)
// is exactly the A fragment of k16 step k once packed to 16 bits: rows l/4
// and l/4 + 8, keys 2*(l%4) + {0,1} and + 8. So P never leaves registers.
// ---------------------------------------------------------------------------
template <class T, class Cfg>
struct WarpPV {
  __device__ static void run(float (&o)[Cfg::kMSlices][Cfg::kDTiles][4],
                             const float (&p)[Cfg::kMSlices][Cfg::kNTiles][4], uint32_t sV,
                             const LaneAddr<Cfg>& a) {
    constexpr int kRowBytes = Cfg::kPitch * 2;
#pragma unroll
    for (int kk = 0; kk < Cfg::kNTiles / 2; ++kk) {  // the warp's keys (a key warp's share)
      uint32_t pf[Cfg::kMSlices][4];
      pack_p_step<T, Cfg>(p, kk, pf);
#pragma unroll
      for (int dp = 0; dp < Cfg::kDTiles / 2; ++dp) {
        uint32_t vf[4];
        ldmatrix_x4_trans(vf, sV + a.v_row + kk * 16 * kRowBytes + LaneAddr<Cfg>::chunk(2 * dp, a.v_phase));
#pragma unroll
        for (int ms = 0; ms < Cfg::kMSlices; ++ms) {
          MmaType<T>::mma(o[ms][2 * dp], pf[ms], vf[0], vf[1]);
          MmaType<T>::mma(o[ms][2 * dp + 1], pf[ms], vf[2], vf[3]);
        }
      }
    }
  }
};

// ---------------------------------------------------------------------------
// NonFiniteV: keeps a NaN or inf in V away from the rows that give its key
// weight 0. In P V a masked key has p = 0 exactly, but 0 * NaN = NaN inside
// the mma, so on a tile with a mask edge (where rows differ in which keys
// they see) a non-finite V element would reach every row. Such a tile, found
// by a CTA-wide vote over the chunks each thread copied, takes
// warp_pv_guarded: the P V mma on V with its non-finite elements zeroed (in
// registers), plus a second mma of (p != 0) x (V element non-finite), both
// 0/1 and finite, whose non-zero entries are the (row, dim) pairs that do
// see such a value: those become NaN. Tiles without an edge, and tiles whose
// V is finite (the rule), run the plain WarpPV::run. kGuardNonFiniteV = false
// compiles the guard out (fmha.h's rule then holds on whole tiles only).
// ---------------------------------------------------------------------------
constexpr bool kGuardNonFiniteV = true;

template <class T>
struct NonFiniteV {
  // Exponent bits of a 16-bit element, and the bits of 1.0.
  static constexpr uint32_t kExp = std::is_same<T, __half>::value ? 0x7c00u : 0x7f80u;
  static constexpr uint32_t kOne = std::is_same<T, __half>::value ? 0x3c00u : 0x3f80u;
  // 0xffff in each half of a pair that is NaN or inf.
  __device__ __forceinline__ static uint32_t mask(uint32_t pair) {
    return ((pair & kExp) == kExp ? 0x0000ffffu : 0u) | ((pair & (kExp << 16)) == (kExp << 16) ? 0xffff0000u : 0u);
  }
  // Whether any element of this thread's copied chunks of a tile (the walk
  // of Loader::at, a TileLoader; tile and tid as given to its copies) is NaN
  // or inf; its copies must have landed (cp.async.wait_group).
  template <class Cfg, class Loader>
  __device__ static bool in_own_chunks(const unsigned char* tile, int tid) {
    uint32_t bad = 0;
#pragma unroll
    for (int pass = 0; pass < Loader::kPasses; ++pass) {
      int r, c;
      if (!Loader::at(tid, pass, &r, &c)) break;
      const uint4 x = *reinterpret_cast<const uint4*>(tile + swizzle<Cfg::kPitch>(r, c));
      bad |= mask(x.x) | mask(x.y) | mask(x.z) | mask(x.w);
    }
    return bad != 0;
  }
};

template <class T, class Cfg>
__device__ void warp_pv_guarded(float (&o)[Cfg::kMSlices][Cfg::kDTiles][4],
                                const float (&p)[Cfg::kMSlices][Cfg::kNTiles][4], uint32_t sV,
                                const LaneAddr<Cfg>& a) {
  using NF = NonFiniteV<T>;
  constexpr int kRowBytes = Cfg::kPitch * 2;
  constexpr uint32_t kOnes = NF::kOne | (NF::kOne << 16);
#pragma unroll  // p lives in registers: its indices must be compile-time
  for (int kk = 0; kk < Cfg::kNTiles / 2; ++kk) {
    uint32_t pf[Cfg::kMSlices][4], pw[Cfg::kMSlices][4];
    pack_p_step<T, Cfg>(p, kk, pf);
    pack_p_weights<T, Cfg>(p, kk, pw);
#pragma unroll
    for (int dp = 0; dp < Cfg::kDTiles / 2; ++dp) {
      uint32_t vf[4], vs[4], vb[4];
      ldmatrix_x4_trans(vf, sV + a.v_row + kk * 16 * kRowBytes + LaneAddr<Cfg>::chunk(2 * dp, a.v_phase));
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const uint32_t bad = NF::mask(vf[x]);
        vs[x] = vf[x] & ~bad;  // non-finite -> 0
        vb[x] = bad & kOnes;   // non-finite -> 1, else 0
      }
#pragma unroll
      for (int ms = 0; ms < Cfg::kMSlices; ++ms) {
        float z[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
        MmaType<T>::mma(o[ms][2 * dp], pf[ms], vs[0], vs[1]);
        MmaType<T>::mma(o[ms][2 * dp + 1], pf[ms], vs[2], vs[3]);
        MmaType<T>::mma(z[0], pw[ms], vb[0], vb[1]);
        MmaType<T>::mma(z[1], pw[ms], vb[2], vb[3]);
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (z[h][e] != 0.f) o[ms][2 * dp + h][e] = __int_as_float(0x7fc00000);  // NaN
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Fp8KvTile: the raw FP8 K or V tile of an FP8 KV cache (k/v F8E4M3 or
// F8E5M2 under an F16/BF16 q; the kFp8Kv instantiations, Cfg a
// Fp8KvTileConfig). Global memory is read as FP8, half the bytes of a
// 16-bit tile (decode is bound by these bytes), in 16-byte cp.async chunks
// of 16 elements of one key row, into [kRows][kHeadDim] bytes of shared
// memory that stay FP8: WarpQKFp8 / WarpPVFp8 convert after each fragment
// load, in registers.
//
// Swizzle: chunk c of key row r sits at chunk c ^ phase(r) of the row,
// phase(r) a permutation of the row's chunk group over 8 rows chosen so
// that (a) an ldmatrix 8x8 read (8 consecutive rows, one chunk: the V
// fragments) and (b) a half warp's 8-byte K reads (4 consecutive rows x 2
// adjacent chunks, the halves of a k32 block) touch distinct banks, and a
// quarter warp's 16-byte copies (consecutive chunks) stay conflict-free.
// With 128-byte bank rows: D >= 128 (rows a multiple of 128 bytes, 8-chunk
// groups) needs phase(r) / 2 distinct over 4 consecutive rows, so phase =
// 2 (r & 3) + ((r >> 2) & 1); D = 64 (two rows per bank row, 4-chunk
// groups) needs phase over the even (odd) rows to be a permutation with
// phase(r) ^ phase(r + 2) in {2, 3}; D = 32 (four rows per bank row)
// needs phase(r) != phase(r + 4).
//
// Thread t of the kCopiers that copy the tile (the CTA, or one key warp
// copying its own keys) copies chunk t % kChunks of rows t / kChunks +
// pass * kRowsPerPass (whole row segments per warp: coalesced). Rows at or
// past `n` are zero-filled, as in TileLoader. at() and phase() hold for a
// part of a tile too when it starts at a multiple of 8 rows (phase()
// repeats every 8 rows).
// ---------------------------------------------------------------------------
template <class Cfg, int kRows, int kCopiers = Cfg::kThreads>
struct Fp8KvTile {
  static constexpr int kHeadDim = Cfg::kHeadDim;
  static constexpr int kChunks = kHeadDim / 16;  // 16-byte FP8 chunks per row
  static constexpr int kRowsPerPass = kCopiers / kChunks;
  static constexpr int kPasses = kRows / kRowsPerPass;
  static_assert(kHeadDim == 32 || kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256,
                "FP8 K/V rows are 32, 64, 128 or 256 bytes (the swizzle phases below)");
  static_assert(kCopiers % kChunks == 0 && kRows % kRowsPerPass == 0 && kRows % 16 == 0,
                "FP8 K/V tiles are whole passes of whole rows and whole k16 steps");

  __device__ __forceinline__ static int phase(int r) {
    if constexpr (kHeadDim >= 128) return ((r & 3) << 1) | ((r >> 2) & 1);
    else if constexpr (kHeadDim == 64) return (((r >> 1) & 1) << 1) | ((r >> 2) & 1);
    else return (r >> 2) & 1;
  }
  // Byte offset of 16-byte chunk c of row r in the tile.
  __device__ __forceinline__ static uint32_t at(int r, int c) {
    return static_cast<uint32_t>(r * kHeadDim + ((c ^ phase(r)) << 4));
  }
  // The chunk thread `tid` copies in pass `pass`.
  __device__ __forceinline__ static uint32_t own(int tid, int pass) {
    return at(tid / kChunks + pass * kRowsPerPass, tid % kChunks);
  }

  // Rows [row0, row0 + kRows) of a contiguous operand (row stride `stride`
  // elements = bytes) into the raw tile at shared address `raw`.
  __device__ static void load(uint32_t raw, const uint8_t* base, int64_t stride, int row0, int n, int tid) {
    load_tile(raw, base + static_cast<int64_t>(row0) * stride, stride, n - row0, base, tid);
  }

  // The tile whose row 0 starts at `first`; rows at or past `count` are
  // zero-filled (their copies name `valid`, reading nothing). A whole tile
  // (count >= kRows: every tile but a sequence's last; CTA-uniform) takes
  // no per-row test: a pointer step and a copy per pass, the shared
  // offsets constants past the first kCycle passes (phase() repeats every
  // 8 rows).
  __device__ static void load_tile(uint32_t raw, const uint8_t* first, int64_t stride, int count,
                                   const uint8_t* valid, int tid) {
    const int r = tid / kChunks;
    const uint8_t* src = first + static_cast<int64_t>(r) * stride + (tid % kChunks) * 16;
    if (count >= kRows) {
      constexpr int kCycle = kRowsPerPass % 8 == 0 ? 1 : kRowsPerPass % 4 == 0 ? 2 : kRowsPerPass % 2 == 0 ? 4 : 8;
      uint32_t dst[kCycle];
#pragma unroll
      for (int i = 0; i < kCycle; ++i) dst[i] = raw + own(tid, i);
      // Packed rows (stride == kHeadDim bytes: a [.., N, D] cache, or a
      // page of one head's rows): the tile is one run of kRows * kHeadDim
      // bytes and pass p's copy sits p * kCopiers * 16 bytes past the
      // first, a constant offset of one address instead of a 64-bit add
      // per copy (H200 SASS, fp8dec3's default tile: 43 instructions per 8
      // copies, 2 of them each the IADD3 pair of `src + pass * step`).
      if (stride == kHeadDim) {
#pragma unroll
        for (int pass = 0; pass < kPasses; ++pass)
          cp_async_16(dst[pass % kCycle] + (pass / kCycle) * (kCycle * kRowsPerPass * kHeadDim),
                      src + pass * (kRowsPerPass * kHeadDim));
        return;
      }
      const int64_t step = static_cast<int64_t>(kRowsPerPass) * stride;
#pragma unroll
      for (int pass = 0; pass < kPasses; ++pass)
        cp_async_16(dst[pass % kCycle] + (pass / kCycle) * (kCycle * kRowsPerPass * kHeadDim), src + pass * step);
      return;
    }
#pragma unroll
    for (int pass = 0; pass < kPasses; ++pass) {
      const bool in = r + pass * kRowsPerPass < count;
      const uint8_t* g = src + static_cast<int64_t>(pass * kRowsPerPass) * stride;
      cp_async_16(raw + own(tid, pass), in ? g : valid, in);
    }
  }

  // Paged, one block-table read per row: key j at base + row_offset(j)
  // (paged_kv_row), for page sizes that do not hold the tile in one page
  // (the kernel places a tile that lies in one page with load_tile and an
  // entry it read a tile ahead). Table entries of rows at or past n are
  // never read.
  template <class RowOffset>
  __device__ static void load_paged_rows(uint32_t raw, const uint8_t* base, RowOffset row_offset, int row0, int n,
                                         int tid) {
    const int r = tid / kChunks;
    const int c16 = (tid % kChunks) * 16;
#pragma unroll 4
    for (int pass = 0; pass < kPasses; ++pass) {
      const int row = row0 + r + pass * kRowsPerPass;
      const bool in = row < n;
      cp_async_16(raw + own(tid, pass), in ? base + row_offset(row) + c16 : base, in);
    }
  }

  // Whether any element of this thread's copied chunks is NaN or inf once
  // decoded (NonFiniteV's vote, over this thread's part): e4m3 magnitude
  // 0x7f (NaN; e4m3 has no inf), e5m2 exponent 0x1f (inf, NaN). Bytewise:
  // (x & m) + a carries into bit 7 exactly when x & m == m. Its copies must
  // have landed (cp.async.wait_group).
  __device__ static bool non_finite(const unsigned char* tile, int tid, bool e4m3) {
    const uint32_t m = e4m3 ? 0x7f7f7f7fu : 0x7c7c7c7cu;
    const uint32_t a = e4m3 ? 0x01010101u : 0x04040404u;
    uint32_t bad = 0;
#pragma unroll
    for (int pass = 0; pass < kPasses; ++pass) {
      const uint4 x = *reinterpret_cast<const uint4*>(tile + own(tid, pass));
      bad |= ((x.x & m) + a) | ((x.y & m) + a) | ((x.z & m) + a) | ((x.w & m) + a);
    }
    return (bad & 0x80808080u) != 0;
  }
};

// ---------------------------------------------------------------------------
// Fp8Pairs: FP8 bytes of a 32-bit word -> pairs of T (a B-operand register
// of mma m16n8k16), exactly (every FP8 value is an F16 and a BF16 value).
// pair<kKind>(w, kLo, kHi): the byte kLo of w in the low half, kHi in the
// high half. e5m2 is F16's top byte (a byte permute places it, inf and NaN
// included); e4m3 goes through cvt.rn.f16x2.e4m3x2 (sm_89+; the intrinsic's
// software path on sm_80; the FP8 K/V units are built for sm_89+ only).
// T = BF16 (a BF16 P V, kFp8PvInF16 false; the products run in F16 now)
// then takes F16 -> F32 (exact) and the F32s' top halves: FP8 values have
// at most 4 significant bits, so the BF16 truncation is exact (NaN stays
// NaN, inf stays inf).
// ---------------------------------------------------------------------------
template <class T>
struct Fp8Pairs {
  template <__nv_fp8_interpretation_t kKind, int kLo, int kHi>
  __device__ __forceinline__ static uint32_t pair(uint32_t w) {
    uint32_t h;  // the pair as F16 bits
    if constexpr (kKind == __NV_E5M2) {
      h = __byte_perm(w, 0u, 0x0404u | (kLo << 4) | (kHi << 12));  // [kHi 0 kLo 0]
    } else {
      const uint32_t two = (kLo == 0 && kHi == 1) ? (w & 0xffffu)
                           : (kLo == 2 && kHi == 3) ? (w >> 16)
                                                    : __byte_perm(w, 0u, 0x4400u | kLo | (kHi << 4));
      const __half2 x = fp8x2_to_half2(static_cast<uint16_t>(two), kKind);
      h = *reinterpret_cast<const uint32_t*>(&x);
    }
    if constexpr (std::is_same<T, __half>::value) {
      return h;
    } else {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
      return __byte_perm(__float_as_uint(f.x), __float_as_uint(f.y), 0x7632u);
    }
  }
};

// ---------------------------------------------------------------------------
// QRowsToF16: a BF16 q's rows as F16, so that S = Q K^T over an FP8 cache
// runs in F16 for either q dtype (WarpQKFp8): K's conversion is then one
// cvt (e4m3) or prmt (e5m2) per FP8 pair, not that plus F16 -> F32 ->
// BF16. Once per work tile, in place in the (swizzled, 16-bit) Q tile, each
// warp its own rows: row r is scaled by 2^-e(r), e(r) = E - 14 for the
// largest finite |q| of the row in [2^E, 2^(E+1)), so that it lands in
// [2^14, 2^15) and every value of the row within 2^-14 of it (BF16 has 8
// significant bits, F16 11) is exact in F16; smaller ones fall into F16's
// subnormals and lose what is below 2^-24 after the scale, i.e. < 2^-38 of
// the row's max per element (round to nearest). e >= -126 (so 2^e and 2^-e
// are normal F32s): a row whose max is below 2^-112 is scaled by 2^126,
// losing only what is below 2^-150, which no F32 holds. NaN and inf stay
// NaN and inf (the max is over finite values). The caller multiplies row
// r's scores by 2^e(r) times the score factor (a power of two times a
// float: exact while in F32's normal range). Two lanes per row (each
// half of the row's 16-byte chunks); the rows' factors then go to the lanes
// that hold them in the S accumulator (rows l / 4 and l / 4 + 8 of each
// m16 slice).
// ---------------------------------------------------------------------------
template <class Cfg>
struct QRowsToF16 {
  static constexpr int kChunks = Cfg::kHeadDim / 8;  // 16-byte chunks of a row
  static_assert(kChunks % 2 == 0, "two lanes per row, half of the chunks each");
  // Magnitude bits of a BF16 (low half of x) if finite, else 0.
  __device__ __forceinline__ static uint32_t finite_mag(uint32_t x) {
    const uint32_t m = x & 0x7fffu;
    return m < 0x7f80u ? m : 0u;
  }
  __device__ __forceinline__ static uint32_t to_f16(uint32_t w, float down) {
    const __half2 h = __floats2half2_rn(__uint_as_float(w << 16) * down, __uint_as_float(w & 0xffff0000u) * down);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
  // factor[ms][h]: 2^e of row l / 4 + 8h of slice ms (lane l). row_warp:
  // the warp's group of rows. Key warps (Cfg::kKeyWarps > 1) share the
  // rows: all of them read and find the factors, key warp 0 writes, and
  // the whole CTA calls this (its barriers).
  __device__ static void run(unsigned char* smem, int row_warp, int key_warp, int lane,
                             float (&factor)[Cfg::kMSlices][2]) {
    uint4 u[Cfg::kMSlices][kChunks / 2];
    float down[Cfg::kMSlices];
#pragma unroll
    for (int ms = 0; ms < Cfg::kMSlices; ++ms) {
      const int row = row_warp * Cfg::kRowsPerWarp + ms * 16 + (lane >> 1);
      uint32_t mx = 0;
#pragma unroll
      for (int i = 0; i < kChunks / 2; ++i) {
        u[ms][i] = *reinterpret_cast<const uint4*>(smem + swizzle<Cfg::kPitch>(row, 2 * i + (lane & 1)));
        const uint32_t words[4] = {u[ms][i].x, u[ms][i].y, u[ms][i].z, u[ms][i].w};
#pragma unroll
        for (int k = 0; k < 4; ++k) mx = max(mx, max(finite_mag(words[k]), finite_mag(words[k] >> 16)));
      }
      mx = max(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      // The max's exponent field f (0 for a zero or subnormal max):
      // max < 2^(f - 126), so e = f - 141 puts it in [2^14, 2^15).
      const int e = max(static_cast<int>(mx >> 7) - 141, -126);
      down[ms] = __uint_as_float(static_cast<uint32_t>(127 - e) << 23);  // 2^-e
      const float up = __uint_as_float(static_cast<uint32_t>(127 + e) << 23);  // 2^e
#pragma unroll
      for (int h = 0; h < 2; ++h) factor[ms][h] = __shfl_sync(0xffffffffu, up, 2 * ((lane >> 2) + 8 * h));
    }
    if constexpr (Cfg::kKeyWarps > 1) __syncthreads();  // every key warp has read the BF16 rows
    if (key_warp == 0) {
#pragma unroll
      for (int ms = 0; ms < Cfg::kMSlices; ++ms) {
        const int row = row_warp * Cfg::kRowsPerWarp + ms * 16 + (lane >> 1);
#pragma unroll
        for (int i = 0; i < kChunks / 2; ++i) {
          const uint4 x = u[ms][i];
          *reinterpret_cast<uint4*>(smem + swizzle<Cfg::kPitch>(row, 2 * i + (lane & 1))) =
              make_uint4(to_f16(x.x, down[ms]), to_f16(x.y, down[ms]), to_f16(x.z, down[ms]), to_f16(x.w, down[ms]));
        }
      }
    }
    // The converted rows, before any lane reads another's chunks.
    if constexpr (Cfg::kKeyWarps > 1) __syncthreads();
    else __syncwarp();
  }
};

// ---------------------------------------------------------------------------
// QFragments: the F16 Q tile of an FP8 K/V kernel, rewritten once per work
// tile (after QRowsToF16) from rows into WarpQKFp8's A fragments, so that
// each of its k16 steps reads one 16-byte quad per lane in the register
// order mma.sync takes: {x.x, y.x, x.y, y.y} (step A of k32 block j) and
// {x.z, y.z, x.w, y.w} (step B), x and y lane (g, q)'s 16 bytes of rows g
// and g + 8 at dims 32j + 8q .. +7 (WarpQKFp8's dim order). Read as rows,
// those quads cost four register moves per mma (H200 SASS, fp8dec3's
// first checkpoint: 128 IMAD.MOV per 32 mma, a sixth of a tile's
// instructions). Each 16-row slice keeps its place in the tile and holds
// its fragments lane-minor, quad h = 2j + step at byte (32 h + lane) 16 of
// the slice (conflict-free 16-byte reads), D / 32 x 1 KB of the slice's
// 16 x kPitch x 2 bytes. Each warp rewrites its own slices in place (all
// its reads before its writes); key warps share the rows: key warp 0
// rewrites them after every key warp is past its last row read, and the
// whole CTA calls this (its barriers).
// ---------------------------------------------------------------------------
template <class Cfg>
struct QFragments {
  static constexpr int kQuads = Cfg::kHeadDim / 16;  // 16-byte A quads per lane and slice
  static_assert(kQuads * 32 * 16 <= 16 * Cfg::kPitch * 2, "a slice's fragments fit its rows");
  // Byte offset of slice ms of row group `warp` in the Q tile.
  __host__ __device__ static constexpr uint32_t slice_offset(int warp, int ms) {
    return static_cast<uint32_t>((warp * Cfg::kRowsPerWarp + ms * 16) * Cfg::kPitch * 2);
  }
  // Byte offset of lane `lane`'s quad h in its slice.
  __device__ __forceinline__ static uint32_t at(int h, int lane) { return static_cast<uint32_t>((h * 32 + lane) * 16); }

  __device__ static void run(unsigned char* sQ, int row_warp, int key_warp, int lane) {
    const int q = lane & 3;
    const int row = row_warp * Cfg::kRowsPerWarp + (lane >> 2);
    uint4 f[Cfg::kMSlices][kQuads];
#pragma unroll
    for (int ms = 0; ms < Cfg::kMSlices; ++ms)
#pragma unroll
      for (int j = 0; j < Cfg::kHeadDim / 32; ++j) {
        const uint4 x = *reinterpret_cast<const uint4*>(sQ + swizzle<Cfg::kPitch>(row + ms * 16, 4 * j + q));
        const uint4 y = *reinterpret_cast<const uint4*>(sQ + swizzle<Cfg::kPitch>(row + ms * 16 + 8, 4 * j + q));
        f[ms][2 * j] = make_uint4(x.x, y.x, x.y, y.y);
        f[ms][2 * j + 1] = make_uint4(x.z, y.z, x.w, y.w);
      }
    if constexpr (Cfg::kKeyWarps > 1) __syncthreads();  // every key warp is past its row reads
    else __syncwarp();                                 // every lane of the warp is
    if (key_warp == 0) {
#pragma unroll
      for (int ms = 0; ms < Cfg::kMSlices; ++ms)
#pragma unroll
        for (int h = 0; h < kQuads; ++h)
          *reinterpret_cast<uint4*>(sQ + slice_offset(row_warp, ms) + at(h, lane)) = f[ms][h];
    }
    // The fragments, before any lane (key warp) reads another's.
    if constexpr (Cfg::kKeyWarps > 1) __syncthreads();
    else __syncwarp();
  }
};

// ---------------------------------------------------------------------------
// WarpQKFp8: s[ms][nt] = Q[rows of slice ms] . K[keys of n8 tile nt]^T with
// K raw FP8 (Fp8KvTile). The sum over the head dim may visit the dims in
// any order that Q and K agree on; this one makes each fragment one plain
// load. Per k32 block j (dims 32j .. 32j + 31) lane l (q = l % 4) takes
// dims 32j + 8q .. 32j + 8q + 7: of K's row of key l / 4, one 8-byte read
// (FP8 u.x = dims +0..3, u.y = +4..7); of Q's rows l / 4 and l / 4 + 8, one
// 16-byte read each (x, y: 16-bit dims +0..7). The block's two k16 steps
// then are: step A (k 2q, 2q+1 <- dims +0, +1; k 2q+8, 2q+9 <- dims +2, +3)
// a = {x.x, y.x, x.y, y.y}, b = {pair(u.x: bytes 0, 1), pair(u.x: 2, 3)};
// step B (dims +4..7) a = {x.z, y.z, x.w, y.w}, b from u.y alike; each a
// is one 16-byte read of QFragments' layout. In F16 whatever q's dtype: a BF16 q's tile holds F16 rows by then
// (QRowsToF16), so K converts to F16 only (Fp8Pairs<__half>).
// ---------------------------------------------------------------------------
template <class Cfg>
struct WarpQKFp8 {
  using Acc = float[Cfg::kMSlices][Cfg::kNTiles][4];
  using Tile = Fp8KvTile<Cfg, Cfg::kBlockN>;
  using T = __half;
  // warp: the warp's group of rows; key0: its first key of the tile
  // (Cfg::kKeyWarps > 1: its share), kNTiles n8 tiles from there.
  template <__nv_fp8_interpretation_t kKind>
  __device__ static void run(Acc& s, const unsigned char* sQ, const unsigned char* sK, int warp, int key0,
                             int lane) {
    using P = Fp8Pairs<T>;
    const int q = lane & 3;
#pragma unroll
    for (int j = 0; j < Cfg::kHeadDim / 32; ++j) {
      uint4 f0[Cfg::kMSlices], f1[Cfg::kMSlices];  // the A quads of step A and B (QFragments)
#pragma unroll
      for (int ms = 0; ms < Cfg::kMSlices; ++ms) {
        const unsigned char* frag = sQ + QFragments<Cfg>::slice_offset(warp, ms);
        f0[ms] = *reinterpret_cast<const uint4*>(frag + QFragments<Cfg>::at(2 * j, lane));
        f1[ms] = *reinterpret_cast<const uint4*>(frag + QFragments<Cfg>::at(2 * j + 1, lane));
      }
#pragma unroll
      for (int nt = 0; nt < Cfg::kNTiles; ++nt) {
        const uint2 u =
            *reinterpret_cast<const uint2*>(sK + Tile::at(key0 + nt * 8 + (lane >> 2), 2 * j + (q >> 1)) + 8 * (q & 1));
        const uint32_t b0 = P::template pair<kKind, 0, 1>(u.x), b1 = P::template pair<kKind, 2, 3>(u.x);
        const uint32_t b2 = P::template pair<kKind, 0, 1>(u.y), b3 = P::template pair<kKind, 2, 3>(u.y);
#pragma unroll
        for (int ms = 0; ms < Cfg::kMSlices; ++ms) {
          const uint32_t a0[4] = {f0[ms].x, f0[ms].y, f0[ms].z, f0[ms].w};
          const uint32_t a1[4] = {f1[ms].x, f1[ms].y, f1[ms].z, f1[ms].w};
          MmaType<T>::mma(s[ms][nt], a0, b0, b1);
          MmaType<T>::mma(s[ms][nt], a1, b2, b3);
        }
      }
    }
  }
};

// ---------------------------------------------------------------------------
// WarpPVFp8: o += P V with V raw FP8 (Fp8KvTile). P is WarpPV's (the S
// accumulator repacked). V's B fragment wants two keys of one dim per
// register; an ldmatrix.trans of the byte tile (as b16 elements) gives
// lane l (n = l / 4, q = l % 4) of an 8-key x 16-byte matrix the word
// [V[2q+1][2n+1], V[2q+1][2n], V[2q][2n+1], V[2q][2n]] (byte 3 .. 0): bytes
// 0 and 2 are the (k 2q, 2q+1) pair of dim 2n, bytes 1 and 3 that of dim
// 2n+1. So each 16-dim chunk c feeds two n8 tiles of O in a permuted dim
// order: tile 2c holds dims 16c + 2n (even), tile 2c+1 dims 16c + 2n + 1
// (odd); unpermute_o restores WarpPV's order after the key loop. One x4
// (keys 16kk + 0..7, + 8..15 of chunks 2cp and 2cp + 1) feeds four mma.
// kGuarded: NonFiniteV's guarded product (warp_pv_guarded's), on the
// converted pairs.
//
// The product runs in F16 whatever q's type (kFp8PvInF16): V's FP8 values
// are exact in F16, so a BF16 q skips the F16 -> BF16 step on V (3 of its
// 5 instructions per pair), and P in F16 keeps 11 significant bits where
// BF16 keeps 8 (P is in [0, 1]; weights under 2^-14 of the row maximum
// lose bits, under 2^-24 flush to 0, as with an F16 q).
// ---------------------------------------------------------------------------
constexpr bool kFp8PvInF16 = true;

template <class T, class Cfg>
struct WarpPVFp8 {
  using Tile = Fp8KvTile<Cfg, Cfg::kBlockN>;
  using Pv = std::conditional_t<kFp8PvInF16, __half, T>;  // the product's 16-bit type
  // key0: the warp's first key of the tile (its share: kNTiles n8 tiles).
  template <__nv_fp8_interpretation_t kKind, bool kGuarded>
  __device__ static void run(float (&o)[Cfg::kMSlices][Cfg::kDTiles][4],
                             const float (&p)[Cfg::kMSlices][Cfg::kNTiles][4], uint32_t sV, int key0, int lane) {
    using P = Fp8Pairs<Pv>;
    using NF = NonFiniteV<Pv>;
    constexpr uint32_t kOnes = NF::kOne | (NF::kOne << 16);
    // The lane's ldmatrix row: key (lane & 7) + 8 ((lane >> 3) & 1), chunk
    // 2cp + (lane >> 4).
    const int key = (lane & 7) + (((lane >> 3) & 1) << 3);
    const int half = lane >> 4;
#pragma unroll
    for (int kk = 0; kk < Cfg::kNTiles / 2; ++kk) {
      uint32_t pf[Cfg::kMSlices][4], pw[Cfg::kMSlices][4];
      pack_p_step<Pv, Cfg>(p, kk, pf);
      if constexpr (kGuarded) pack_p_weights<Pv, Cfg>(p, kk, pw);
#pragma unroll
      for (int cp = 0; cp < Cfg::kHeadDim / 32; ++cp) {
        uint32_t r[4];
        ldmatrix_x4_trans(r, sV + Tile::at(key0 + 16 * kk + key, 2 * cp + half));
        // n8 tiles 4cp + {0, 1, 2, 3}: chunk 2cp even / odd dims, chunk
        // 2cp + 1 even / odd dims; b0b1 from keys 0..7, b2b3 from 8..15.
        uint32_t b[4][2];
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          b[2 * c][0] = P::template pair<kKind, 0, 2>(r[2 * c]);
          b[2 * c][1] = P::template pair<kKind, 0, 2>(r[2 * c + 1]);
          b[2 * c + 1][0] = P::template pair<kKind, 1, 3>(r[2 * c]);
          b[2 * c + 1][1] = P::template pair<kKind, 1, 3>(r[2 * c + 1]);
        }
#pragma unroll
        for (int x = 0; x < 4; ++x) {
          if constexpr (kGuarded) {
            uint32_t vs[2], vb[2];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const uint32_t bad = NF::mask(b[x][h]);
              vs[h] = b[x][h] & ~bad;  // non-finite -> 0
              vb[h] = bad & kOnes;     // non-finite -> 1, else 0
            }
#pragma unroll
            for (int ms = 0; ms < Cfg::kMSlices; ++ms) {
              float z[4] = {0.f, 0.f, 0.f, 0.f};
              MmaType<Pv>::mma(o[ms][4 * cp + x], pf[ms], vs[0], vs[1]);
              MmaType<Pv>::mma(z, pw[ms], vb[0], vb[1]);
#pragma unroll
              for (int e = 0; e < 4; ++e)
                if (z[e] != 0.f) o[ms][4 * cp + x][e] = __int_as_float(0x7fc00000);  // NaN
            }
          } else {
#pragma unroll
            for (int ms = 0; ms < Cfg::kMSlices; ++ms) MmaType<Pv>::mma(o[ms][4 * cp + x], pf[ms], b[x][0], b[x][1]);
          }
        }
      }
    }
  }

  // WarpPVFp8's dim order -> WarpPV's, once after the key loop. Lane (r, q)
  // of permuted tiles 2c / 2c+1 holds dims 16c + 4q + {0, 2} / {1, 3} (e =
  // 0, 1: rows r, r + 8 in e = 2, 3); WarpPV's tile 2c holds dims 16c + 2q
  // + {0, 1}, tile 2c+1 dims 16c + 8 + 2q + {0, 1}: lanes q / 2 and 2 + q / 2
  // of the quad hold them, at the even (q even) or odd (q odd) entries.
  __device__ static void unpermute_o(float (&o)[Cfg::kMSlices][Cfg::kDTiles][4], int lane) {
    const int q = lane & 3;
    const int src0 = (lane & ~3) | (q >> 1), src1 = src0 + 2;
    const bool odd = q & 1;
#pragma unroll
    for (int ms = 0; ms < Cfg::kMSlices; ++ms)
#pragma unroll
      for (int c = 0; c < Cfg::kDTiles / 2; ++c)
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // rows r (entries 0, 1) and r + 8 (2, 3)
          float* ta = o[ms][2 * c];
          float* tb = o[ms][2 * c + 1];
          const float a0 = ta[2 * h], a1 = ta[2 * h + 1], b0 = tb[2 * h], b1 = tb[2 * h + 1];
          const float a0s0 = __shfl_sync(0xffffffffu, a0, src0), a1s0 = __shfl_sync(0xffffffffu, a1, src0);
          const float b0s0 = __shfl_sync(0xffffffffu, b0, src0), b1s0 = __shfl_sync(0xffffffffu, b1, src0);
          const float a0s1 = __shfl_sync(0xffffffffu, a0, src1), a1s1 = __shfl_sync(0xffffffffu, a1, src1);
          const float b0s1 = __shfl_sync(0xffffffffu, b0, src1), b1s1 = __shfl_sync(0xffffffffu, b1, src1);
          ta[2 * h] = odd ? a1s0 : a0s0;
          ta[2 * h + 1] = odd ? b1s0 : b0s0;
          tb[2 * h] = odd ? a1s1 : a0s1;
          tb[2 * h + 1] = odd ? b1s1 : b0s1;
        }
  }
};

// ---------------------------------------------------------------------------
// Epilogue: O = o / l (0 for a row that saw no key), lse = m c ln2 + ln l
// (-inf for such a row). Unsplit: O goes through shared memory (the Q tile)
// so global stores are 16-byte and coalesced. Split: this split's running
// state (o unnormalized, m in natural units, l) straight from registers in
// the format of common/split_combine.h, whose combine merges the splits.
// The pieces are common/epilogue.cuh's; this is their sm80 composition.
// ---------------------------------------------------------------------------
template <class T, class Cfg>
struct Epilogue {
  using Softmax = OnlineSoftmax<Cfg::kMSlices, Cfg::kNTiles, Cfg::kDTiles>;

  // score_log2: the unit's FwdParams::score_log2 (descales folded in).
  // warp: the warp's group of rows. owner: whether this warp's o, m, l are
  // its rows' (false for key warps > 0, merged into key warp 0's: they only
  // keep the barriers and help with the coalesced store).
  template <bool kServing>
  __device__ static void run(const FwdParams& p, const BlockWork<Cfg, kServing>& w,
                             float (&o)[Cfg::kMSlices][Cfg::kDTiles][4], const Softmax& sm, float score_log2,
                             unsigned char* smem, int warp, int lane, int tid, bool owner = true) {
    const int row_local0 = warp * Cfg::kRowsPerWarp + (lane >> 2);  // the lane's first tile row
    const float lse_scale = score_log2 * kLn2;  // raw-score units of m -> natural units

    if (p.num_splits > 1) {
      if (owner)
        store_split_partials<Cfg::kMSlices, Cfg::kDTiles, Cfg::kHeadDim>(p, w, w.m0 + row_local0, o, sm.m, sm.l,
                                                                         lse_scale, lane);
      return;
    }

    float lse[Cfg::kMSlices][2];
    finalize_rows(o, sm.m, sm.l, lse_scale, lse);
    if (owner) {
      if constexpr (kServing)
        store_lse(p, w, w.epilogue_seq(p), lse, w.m0 + row_local0, lane);
      else
        store_lse(p, w, lse, w.m0 + row_local0, lane);
    }

    // Registers -> shared (the Q tile; every warp is past its last Q read).
    __syncthreads();
    if (owner) stage_fragment<T, Cfg::kPitch>(smem, o, row_local0, lane);
    __syncthreads();
    // Shared -> global, 16 bytes per thread, rows past the unit's end skipped.
    T* out = static_cast<T*>(p.o) + w.o_offset(p);
    SmemTileStore<T, Cfg::kBlockM, Cfg::kHeadDim, Cfg::kPitch, Cfg::kThreads>::run(
        smem, w.m0, w.rows(p),
        [&](int r) {
          int64_t h = w.hs;
          int i = r;
          if (p.pack != 1) w.locate(p, r, &h, &i);
          return out + h * p.o_stride[1] + static_cast<int64_t>(i) * p.o_stride[2];
        },
        tid);
  }
};

// ---------------------------------------------------------------------------
// Key warps (Cfg::kKeyWarps > 1): the key warps of one group of rows each
// hold o, m, l over their share of every key tile (the same rows and dims
// in the same fragment places), merged after the key loop as the split
// combine merges splits: m = max(m_g), o = sum 2^((m_g - m) c) o_g, l
// likewise (a state that saw no key, m_g = -inf, weighs 0). l must be
// finished (full row sums). A state goes through the raw stages (free after
// the key loop: the caller waited for every copy), one float per lane and
// value, lane-minor (no bank conflicts): key_warp_store writes one at
// `out` (buf + slot * kKeyWarpValues * 32 + lane), key_warp_take merges
// the one at `in` into the caller's.
// ---------------------------------------------------------------------------
template <class Cfg>
constexpr int kKeyWarpValues = Cfg::kMSlices * (4 + 4 * Cfg::kDTiles);  // m, l (2 rows each) and o per slice

template <class Cfg, class Softmax>
__device__ __forceinline__ void key_warp_store(const float (&o)[Cfg::kMSlices][Cfg::kDTiles][4], const Softmax& sm,
                                               float* out) {
  int i = 0;
#pragma unroll
  for (int ms = 0; ms < Cfg::kMSlices; ++ms) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      out[32 * i++] = sm.m[ms][hh];
      out[32 * i++] = sm.l[ms][hh];
    }
#pragma unroll
    for (int dt = 0; dt < Cfg::kDTiles; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) out[32 * i++] = o[ms][dt][e];
  }
}

template <class Cfg, class Softmax>
__device__ __forceinline__ void key_warp_take(float (&o)[Cfg::kMSlices][Cfg::kDTiles][4], Softmax& sm, float c,
                                              const float* in) {
#pragma unroll
  for (int ms = 0; ms < Cfg::kMSlices; ++ms) {
    const int at = ms * (4 + 4 * Cfg::kDTiles);
    float a[2], b[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float mg = in[32 * (at + 2 * hh)], lg = in[32 * (at + 2 * hh + 1)];
      const float m = fmaxf(sm.m[ms][hh], mg);
      a[hh] = sm.m[ms][hh] == kNegInf ? 0.f : exp2f(sm.m[ms][hh] * c - m * c);
      b[hh] = mg == kNegInf ? 0.f : exp2f(mg * c - m * c);
      sm.m[ms][hh] = m;
      sm.l[ms][hh] = a[hh] * sm.l[ms][hh] + b[hh] * lg;
    }
#pragma unroll
    for (int dt = 0; dt < Cfg::kDTiles; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        o[ms][dt][e] = a[e >> 1] * o[ms][dt][e] + b[e >> 1] * in[32 * (at + 4 + 4 * dt + e)];
  }
}

// merge_key_warps: key warp 0 takes the others' states in, one after
// another (kKeyWarps - 1 slots of buffer). All threads call it (two
// barriers).
template <class Cfg, class Softmax>
__device__ void merge_key_warps(float (&o)[Cfg::kMSlices][Cfg::kDTiles][4], Softmax& sm, float c, float* buf,
                                int key_warp, int lane) {
  constexpr int kValues = kKeyWarpValues<Cfg>;
  __syncthreads();  // every warp is past its last read of the stages
  if (key_warp > 0) key_warp_store<Cfg>(o, sm, buf + (key_warp - 1) * kValues * 32 + lane);
  __syncthreads();
  if (key_warp != 0) return;
#pragma unroll 1
  for (int g = 1; g < Cfg::kKeyWarps; ++g) key_warp_take<Cfg>(o, sm, c, buf + (g - 1) * kValues * 32 + lane);
}

// merge_key_warps_tree: the same merge in ceil(log2 kKeyWarps) rounds, for
// the FP8 tiles of many key warps (one CTA per SM: 8 to 16), instead of
// kKeyWarps - 1 merges one after another in key warp 0 (at 16 key warps, 15
// x 68 shared loads and the arithmetic on one warp's chain, ~1-2 us of a CTA
// that streams ~70 us). A round of n states: key warps [h, n), h = ceil(n /
// 2), store theirs (slot g - h), key warp g < n - h takes in key warp g +
// h's; then n = h, until key warp 0 holds the merged state. The order of the
// merges is fixed (not timing-dependent). floor(kKeyWarps / 2) slots of
// buffer, two barriers per round, the first round's first also "every warp
// is past its last read of the stages". All threads call it.
template <class Cfg, class Softmax>
__device__ void merge_key_warps_tree(float (&o)[Cfg::kMSlices][Cfg::kDTiles][4], Softmax& sm, float c, float* buf,
                                     int key_warp, int lane) {
  constexpr int kValues = kKeyWarpValues<Cfg>;
#pragma unroll 1
  for (int n = Cfg::kKeyWarps; n > 1; n = (n + 1) / 2) {
    const int h = (n + 1) / 2;
    __syncthreads();  // the stages' (first round) or the last round's slots' readers are done
    if (key_warp >= h && key_warp < n) key_warp_store<Cfg>(o, sm, buf + (key_warp - h) * kValues * 32 + lane);
    __syncthreads();
    if (key_warp < n - h) key_warp_take<Cfg>(o, sm, c, buf + key_warp * kValues * 32 + lane);
  }
}

// ---------------------------------------------------------------------------
// The kernel: one CTA = kBlockM query rows of one (batch, head), one key split.
// Pipeline (S = kStages): K and V of tiles t+1 .. t+S-1 are in flight while
// tile t is computed; cp.async groups are committed K, V, K, V, ... (the
// prologue those of the first S-1 tiles), so at the top of tile t the
// groups of tiles t .. t+S-2 are pending and "K of t ready" is
// wait_group(2S-3); barrier 1 publishes K[t] and frees the stage of tile
// t-1, into which K/V[t+S-1] are issued; then "V of t ready" is
// wait_group(2S-2). S = 2 (prefill, and the decode tile of the score-ops
// kernels, whose staged bias adds a group per tile): wait_group(1) and (2).
// The paged decode tile runs more, smaller stages (Sm80Tuning::NarrowPaged):
// a scattered page's address translation and DRAM latency are then covered
// by the tiles in flight behind it, not paid per tile.
//
// kFp8Kv (an FP8 KV cache, Cfg a Fp8KvTileConfig): K and V stay FP8 in
// kRawStages raw stages each (Fp8KvTile) and are converted in registers
// by WarpQKFp8 / WarpPVFp8. Groups K, V per tile, kRawStages - 1 tiles
// ahead: at the top of tile t the groups of tiles t .. t + S - 2 are in
// flight (S = kRawStages), so "K[t] landed" is wait_group(2S - 3); barrier
// 1 publishes it and frees the stage of tile t-1, into which K/V[t+S-1]
// are issued; then "V[t] landed" is wait_group(2S - 2), and barrier 2
// publishes it (and votes NonFiniteV). No conversion pass, no barrier
// besides the two a 16-bit tile has. With key warps (kOwnKeys) the two
// barriers are each warp's own (__syncwarp, a warp vote): a key warp
// copies and reads only its share of every tile.
// ---------------------------------------------------------------------------
// kMode: the operand layout this instantiation reads (launch.h: SeqMode).
// Dense problems read no metadata; ragged and seqused_k problems resolve
// their sequence; paged ones also gather K/V through the block table, in
// an instantiation of their own (its loader's registers would otherwise
// spill in the contiguous serving kernel).
// kOps: the score transforms this instantiation compiles (common/
// fwd_params.h: none, softcap alone, or softcap, bias and ALiBi, each then
// under a run-time uniform branch); the plain path carries no code for them.
// The FP8 K/V instantiations run no bias or ALiBi (sm80_supports).
// The raw FP8 stages of a kFp8Kv tile (none for a 16-bit one).
template <class Cfg, bool kFp8Kv>
struct Fp8StagesOf {
  static constexpr int value = 1;
  static constexpr uint32_t bytes = 0;
};
template <class Cfg>
struct Fp8StagesOf<Cfg, true> {
  static constexpr int value = Cfg::kRawStages;
  static constexpr uint32_t bytes = Cfg::kSmemRaw;
};

template <class T, bool kFp8Kv, class Cfg, ScoreOps kOps, SeqMode kMode>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocksPerSm)
    fwd_kernel(const __grid_constant__ FwdParams p) {
  constexpr bool kServing = kMode != SeqMode::kDense;
  constexpr bool kPaged = kMode == SeqMode::kPaged;
  constexpr bool kSoftcap = kOps == ScoreOps::kSoftcap;
  constexpr bool kAllOps = kOps == ScoreOps::kAll;
  static_assert(!(kFp8Kv && kAllOps), "the FP8 K/V kernels run no bias or ALiBi");
  static_assert(!(kAllOps && Cfg::kKeyWarps > 1), "the staged bias is per row warp, whole key tiles");
  constexpr int kS = Cfg::kStages;
  static_assert(kS == 2 || !kAllOps, "the staged bias's wait_group counts below assume two stages");
  using KvT = std::conditional_t<kFp8Kv, uint8_t, T>;  // K/V elements in global memory
  // Q K^T over FP8 K/V runs in F16; a BF16 q's rows are converted and
  // scaled first (QRowsToF16).
  constexpr bool kQkRowScaled = kFp8Kv && std::is_same<T, __nv_bfloat16>::value;
  extern __shared__ __align__(128) unsigned char smem[];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // The split combine, a programmatic dependent launch on sm_90
  // (split_combine.h), may be scheduled once every CTA of this grid has
  // triggered; it waits for the grid's end itself before reading a partial.
  // A 16-bit tile triggers at its start, so the combine's launch is done
  // when the forward ends (0.3-2.3 us less a decode call on the H200 than
  // an ordinary launch). An FP8 K/V tile triggers after its key loop: the
  // combine's CTAs, resident from the trigger on while they wait, slowed
  // its key loop (more issue work per byte than a 16-bit tile's) by 1.9-4.2
  // us, more than the early launch saved; after the loop the call is 0-2 us
  // shorter than with an ordinary launch (docs/performance.md, "Where a
  // decode call's time goes").
  if constexpr (!kFp8Kv) cudaTriggerProgrammaticLaunchCompletion();
#endif
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  // Its group of rows, and (tiles with key warps, Cfg::kKeyWarps > 1) its
  // share of each key tile: keys [key0, key0 + kKeysPerWarp).
  const int row_warp = Cfg::kKeyWarps > 1 ? warp % Cfg::kWarps : warp;
  const int key_warp = Cfg::kKeyWarps > 1 ? warp / Cfg::kWarps : 0;
  const int key0 = key_warp * Cfg::kKeysPerWarp;

  const BlockWork<Cfg, kServing> w = BlockWork<Cfg, kServing>::make(p);
  if (w.empty()) return;  // CTA-uniform, before any barrier
  const T* q = static_cast<const T*>(p.q) + w.q_offset(p);
  const KvT* k = static_cast<const KvT*>(p.k) + w.k_offset(p) + w.hk * p.k_stride[1];
  const KvT* v = static_cast<const KvT*>(p.v) + w.v_offset(p) + w.hk * p.v_stride[1];

  // Descales (fmha.h 0.3; the kFp8Kv instantiations only: in the 16-bit
  // ones at 255 registers the held factor cost 150-250 bytes of spills,
  // ptxas sm_90): the logits of the unit's (sequence, KV head) are
  // scale * q_descale * k_descale * (q.k), so the factor joins the score
  // factor: softcap's input scale, or else the softmax's raw-score -> log2
  // factor (which the lse shares; a negative factor flips the scores'
  // sign instead, so the running max stays a max). The 16-bit
  // instantiations read p.score_log2 / p.softcap_in at each use, as before.
  // A term added to the logits in natural units (bias, ALiBi) must convert
  // with this unit's factor (score_log2 here), not p.score_log2.
  float score_log2 = p.score_log2, cap_in = p.softcap_in;
  bool negate = false;
  if (kFp8Kv && (p.q_descale != nullptr || p.k_descale != nullptr)) {
    const float d = qk_descale(p, w.b, w.hk);
    if constexpr (kSoftcap) {
      cap_in *= d;
    } else {
      score_log2 *= fabsf(d);
      negate = d < 0.f;
    }
  }

  const uint32_t sQ = smem_u32(smem);
  const uint32_t sK = sQ + Cfg::kSmemQ;                     // + stage * kSmemKV
  const uint32_t sV = sK + Cfg::kStages * Cfg::kSmemKV;     // + stage * kSmemKV
  // With key warps (Cfg::kKeyWarps > 1, Cfg::kOwnKeys) each key warp
  // copies, checks and reads only its own keys of every tile, rows [key0,
  // key0 + kKeysPerWarp) of the stage, so it waits for its own copies
  // (cp.async.wait_group and __syncwarp), not the CTA's: the key warps
  // stream their shares independently, share the Q tile (read-only in the
  // key loop, published once by a CTA barrier before it) and meet again in
  // merge_key_warps. Otherwise the CTA copies each tile. A 16-bit paged key
  // warp also stages its own share's block-table entries (fetch_entries
  // over its rows, into its part of the tile's entry slot).
  constexpr bool kOwnKeys = Cfg::kOwnKeys;
  static_assert(!kOwnKeys || Cfg::kWarps == 1, "own keys: one row group, a key warp per share");
  using QLoader = TileLoader<T, Cfg, Cfg::kBlockM>;
  using KVLoader = TileLoader<T, Cfg, kOwnKeys ? Cfg::kKeysPerWarp : Cfg::kBlockN, kOwnKeys ? 32 : Cfg::kThreads>;
  // kFp8Kv: after the Q tile, the raw FP8 stages of K, then those of V
  // (byte offsets in smem, + stage * kSmemRaw each).
  using Fp8Tile = Fp8KvTile<Cfg, kOwnKeys ? Cfg::kKeysPerWarp : Cfg::kBlockN, kOwnKeys ? 32 : Cfg::kThreads>;
  const int copier = kOwnKeys ? lane : tid;  // this thread's index among a tile's copiers
  const int copy0 = kOwnKeys ? key0 : 0;     // the first key of the tile they copy
  const uint32_t copy_off = static_cast<uint32_t>(copy0 * Cfg::kHeadDim);  // its byte offset in a raw stage
  // A 16-bit key warp's share of a K or V stage starts key0 rows in (the
  // swizzle repeats every 8 rows, so the lane addresses only shift); its
  // copies (own keys) start copy0 rows in.
  [[maybe_unused]] const uint32_t key_off = static_cast<uint32_t>(key0 * Cfg::kPitch * 2);
  [[maybe_unused]] const uint32_t kv_copy_off = static_cast<uint32_t>(copy0 * Cfg::kPitch * 2);
  // The barrier of a tile's copiers (own keys: the warp, whose copies are
  // the only ones it reads; else the CTA), and their vote on top of it.
  auto copiers_sync = [] {
    if constexpr (kOwnKeys) __syncwarp();
    else __syncthreads();
  };
  auto copiers_any = [](bool x) -> bool {
    if constexpr (kOwnKeys) {
      __syncwarp();  // the warp's copies, to every lane
      return __any_sync(0xffffffffu, x);
    } else {
      return __syncthreads_or(x) != 0;
    }
  };
  constexpr int kRawStages = Fp8StagesOf<Cfg, kFp8Kv>::value;
  constexpr uint32_t kRawBytes = Fp8StagesOf<Cfg, kFp8Kv>::bytes;
  constexpr uint32_t rawK = Cfg::kSmemQ;
  constexpr uint32_t rawV = rawK + kRawStages * kRawBytes;
  static_assert(!kFp8Kv || rawV + kRawStages * kRawBytes <= Cfg::kSmemBytes, "the raw FP8 stages fit the tile");
  [[maybe_unused]] const bool e4m3 = p.kv_dtype == FMHA_DTYPE_F8E4M3;

  // K or V rows [n0, n0 + kBlockN) of the sequence into a stage; rows at or
  // past Nk(b) are zero-filled. Paged K/V (the kPaged instantiation): key j
  // sits at the page of its block table entry, clamped by core/seq_layout.h
  // (page_slot_of; the 16-bit kernels read the entry staged in shared
  // memory, the FP8 ones paged_kv_row's global read), copied with the same
  // 16-byte cp.async chunks as a contiguous tile; page sizes that give
  // aligned runs of rows (TileLoader::page_run) read the entry once per
  // run, others once per row. (Lengths are read at each use, not held in a register: the dense
  // instantiation then reads them from the constant bank as it always did.)
  // kFp8Kv: into a raw stage (dst: a byte offset in smem), Fp8KvTile's way.
  const int run = kPaged && !kFp8Kv ? KVLoader::page_run(p.layout.page_size) : 0;
  // The 16-bit paged gather reads its page ids from shared memory: the
  // entries of tile t sit in slot (t - t_begin) % (2S - 2) (KVLoader::
  // fetch_entries), past the K/V stages (TileConfig::kSmemPagedBytes). At
  // tile t those of t + S - 1 are read (its cp.asyncs go out) and those of
  // t + 2S - 2 are fetched, in K[t + S - 1]'s group: K[t + S - 1] has
  // landed when tile t + S - 1 issues t + 2S - 2. The slot they take is
  // tile t's, read S - 1 tiles ago. Key j of tile n0's rows is entry
  // div(j), slot div(j) - div(n0). Own keys: each key warp fetches and
  // reads the entries of its share, from kKeysPerWarp ints in (at most
  // one page per row), key j entry div(j) - div(n0 + copy0) there.
  constexpr uint32_t kEnt = Cfg::kSmemBytes;  // byte offset in smem
  constexpr int kEntSlots = Cfg::kPagedEntrySlots;
  static_assert(kFp8Kv || kEntSlots == 2 * kS - 2, "2S - 2 entry slots: the pipeline below");
  constexpr uint32_t kEntSlotBytes = Cfg::kBlockN * 4;
  static_assert(kFp8Kv || Cfg::kSmemBytes + kEntSlots * kEntSlotBytes == Cfg::kSmemPagedBytes,
                "the launch gives the paged kernels room for 2S - 2 entry slots of a key tile");
  auto ent_slot = [&](int n0) {  // the copier's part of tile n0's entry slot
    return kEnt + static_cast<uint32_t>((n0 / Cfg::kBlockN - w.t_begin) % kEntSlots) * kEntSlotBytes + copy0 * 4;
  };
  auto staged_row = [&](int n0, int64_t stride0, int64_t stride2) {
    const int* ent = reinterpret_cast<const int*>(smem + ent_slot(n0));
    const uint32_t first = p.page_div.div(static_cast<uint32_t>(n0 + copy0));
    return [=, &p](int j) {
      const uint32_t e = p.page_div.div(static_cast<uint32_t>(j));
      const PageSlot ps = page_slot_of(p.layout, j, e, ent[e - first]);
      return ps.page * stride0 + ps.slot * stride2;
    };
  };
  auto load_k = [&](uint32_t dst, int n0) {
    if constexpr (kFp8Kv) {
      if constexpr (kPaged)
        Fp8Tile::load_paged_rows(
            sQ + dst + copy_off, k, [&](int j) { return paged_kv_row(p, w.b, j).k; }, n0 + copy0, w.len_k(p),
            copier);
      else
        Fp8Tile::load(sQ + dst + copy_off, k, p.k_stride[2], n0 + copy0, w.len_k(p), copier);
    } else if constexpr (kPaged) {
      KVLoader::load_paged(dst + kv_copy_off, k, p.k_stride[2], staged_row(n0, p.k_stride[0], p.k_stride[2]), run,
                           n0 + copy0, w.len_k(p), copier);
    } else {
      KVLoader::load(dst + kv_copy_off, k, p.k_stride[2], n0 + copy0, w.len_k(p), copier);
    }
  };
  auto load_v = [&](uint32_t dst, int n0) {
    if constexpr (kFp8Kv) {
      if constexpr (kPaged)
        Fp8Tile::load_paged_rows(
            sQ + dst + copy_off, v, [&](int j) { return paged_kv_row(p, w.b, j).v; }, n0 + copy0, w.len_k(p),
            copier);
      else
        Fp8Tile::load(sQ + dst + copy_off, v, p.v_stride[2], n0 + copy0, w.len_k(p), copier);
    } else if constexpr (kPaged) {
      KVLoader::load_paged(dst + kv_copy_off, v, p.v_stride[2], staged_row(n0, p.v_stride[0], p.v_stride[2]), run,
                           n0 + copy0, w.len_k(p), copier);
    } else {
      KVLoader::load(dst + kv_copy_off, v, p.v_stride[2], n0 + copy0, w.len_k(p), copier);
    }
  };

  // FP8 K/V: K then V of tile t_issue (one group each) into raw stage
  // `slot` (fp8_issue). Paged K/V whose copied share of a tile (kCopyRows
  // rows from a multiple of kCopyRows: a key warp's keys, or the tile)
  // always lies in one page (one_page: page_size a multiple of kCopyRows)
  // are placed by one block-table entry per share, read a tile ahead into
  // fp8_page (fp8_page_of; the prologue reads the first S - 1 as it issues
  // them), so a tile's copies wait on no table read: the entry's L2
  // latency overlaps the tile computed in between. (Before, the entry was
  // read at the issue, by K's copies and again by V's, and a share counted
  // as one page only when the whole tile did: a 128-key tile of four
  // 32-key warps took the per-row path at page_size 64.) Other page sizes
  // read the table per row (Fp8KvTile::load_paged_rows).
  constexpr int kCopyRows = kOwnKeys ? Cfg::kKeysPerWarp : Cfg::kBlockN;
  [[maybe_unused]] const bool one_page = kPaged && kFp8Kv && p.layout.page_size % kCopyRows == 0;
  [[maybe_unused]] int32_t fp8_page = 0;  // one_page: the entry of the next issued tile's share
  // The raw entry of tile t_read's share, or 0 past the work tile or the
  // sequence (never read there: the table row covers the sequence's keys).
  [[maybe_unused]] auto fp8_page_of = [&](int t_read) -> int32_t {
    const int j = t_read * Cfg::kBlockN + copy0;
    if (t_read >= w.t_end || j >= w.len_k(p)) return 0;
    return p.layout.block_table[w.b * p.layout.block_table_stride + p.page_div.div(static_cast<uint32_t>(j))];
  };
  [[maybe_unused]] auto fp8_issue = [&](int slot, int t_issue) {
    const bool live = t_issue < w.t_end;
    const uint32_t dk = rawK + static_cast<uint32_t>(slot) * kRawBytes;
    const uint32_t dv = rawV + static_cast<uint32_t>(slot) * kRawBytes;
    if constexpr (kPaged && kFp8Kv) {
      if (one_page) {
        const int j = t_issue * Cfg::kBlockN + copy0;  // the share's first key
        const int n = w.len_k(p);
        int64_t ko = 0, vo = 0;  // rows past n are zero-filled, naming k / v
        if (live && j < n) {
          const PageSlot ps = page_slot_of(p.layout, j, p.page_div.div(static_cast<uint32_t>(j)), fp8_page);
          ko = ps.page * p.k_stride[0] + ps.slot * p.k_stride[2];
          vo = ps.page * p.v_stride[0] + ps.slot * p.v_stride[2];
        }
        if (live) Fp8Tile::load_tile(sQ + dk + copy_off, k + ko, p.k_stride[2], n - j, k, copier);
        cp_async_commit();
        if (live) Fp8Tile::load_tile(sQ + dv + copy_off, v + vo, p.v_stride[2], n - j, v, copier);
        cp_async_commit();
        return;
      }
    }
    if (live) load_k(dk, t_issue * Cfg::kBlockN);
    cp_async_commit();
    if (live) load_v(dv, t_issue * Cfg::kBlockN);
    cp_async_commit();
  };

  // The 16-bit paged decode tiles (one row warp: the one-warp tiles, and
  // the key-warp tiles, each key warp over its share) issue a tile's K and
  // V together (TileLoader::load_paged_kv): one block-table lookup per run
  // for both when their page strides agree. stage: the byte offset of the
  // stage in sK and sV; between: K's group's end (its commit).
  // (Not the score-ops kernels: ptxas, sm_90, bf16 D=128: paired, the
  // plain and softcap paged decode kernels spill 60-64 bytes instead of 84,
  // the score-ops one 120 instead of 56.)
  constexpr bool kPairedGather = kPaged && !kFp8Kv && !kAllOps && Cfg::kWarps == 1;
  [[maybe_unused]] const bool same_kv_rows = p.k_stride[0] == p.v_stride[0] && p.k_stride[2] == p.v_stride[2];
  [[maybe_unused]] auto load_kv = [&](uint32_t stage, int n0, auto&& between) {
    // (KvT is T in these kernels; the cast only lets the FP8 ones compile the unused lambda.)
    KVLoader::load_paged_kv(sK + stage + kv_copy_off, sV + stage + kv_copy_off, reinterpret_cast<const T*>(k),
                            reinterpret_cast<const T*>(v), p.k_stride[2], p.v_stride[2],
                            staged_row(n0, p.k_stride[0], p.k_stride[2]), staged_row(n0, p.v_stride[0], p.v_stride[2]),
                            same_kv_rows, run, n0 + copy0, w.len_k(p), copier, between);
  };

  // The bias staged per warp (bias_tile.cuh; kAll kernels, a bias the
  // copy can address, no softcap: its terms start Q K^T's accumulator):
  // B[t+1] goes out once B[t] is read, at the top of tile t, so the groups
  // run B[t], K[t], V[t], B[t+1], K[t+1], V[t+1], ...: "B[t] landed" is
  // wait_group(2) at the top of t, "K[t]" wait_group(2) after B[t+1]'s
  // commit and "V[t]" wait_group(3) (each one more than without). The
  // prologue commits B[t_begin] first.
  using Bias = BiasTile<Cfg>;
  const bool staged = kAllOps && !kFp8Kv && p.softcap_out == 0.f && Bias::usable(p);  // CTA-uniform
  const int row0 = w.m0 + row_warp * Cfg::kRowsPerWarp;  // the warp's first row
  // After the staged block-table entries in a paged kernel (tile_config.h).
  const uint32_t sBias = smem_u32(smem) + Cfg::bias_offset(kPaged && !kFp8Kv) + warp * Bias::kWarpBytes;
  if (staged) {
    if (w.t_begin < w.t_end) Bias::load(sBias, p, w, row0, w.t_begin * Cfg::kBlockN, lane);
    cp_async_commit();
  }

  // Prologue: {Q, K[t_begin]} as one group, V[t_begin] as the next, then
  // K and V of the next S - 2 tiles (kFp8Kv: kRawStages - 2).
  // The 16-bit paged kernels fetch the entries of t_begin .. t_begin + 2S - 3
  // first, as a group of their own, and wait for it alone before the first
  // K/V copies, with Q's copies issued but not yet committed: wait_group
  // counts committed groups only, so Q's DRAM latency overlaps the table's
  // (they were one group, waited for together: Q first, then the entries,
  // then K/V, two latencies in a row per CTA). Q then joins K[t_begin]'s
  // group as in the other kernels. From there on tile t fetches the entries
  // of t + 2S - 2.
  if constexpr (kPaged && !kFp8Kv) {
#pragma unroll 1
    for (int i = 0; i < kEntSlots; ++i) {
      const int n0 = (w.t_begin + i) * Cfg::kBlockN;
      if (w.t_begin + i < w.t_end)
        KVLoader::fetch_entries(sQ + ent_slot(n0), p, w.b, n0 + copy0, w.len_k(p), copier);
    }
    cp_async_commit();
  }
  if (p.pack == 1) {
    QLoader::load(sQ, q + w.hs * p.q_stride[1], p.q_stride[2], w.m0, w.rows(p), tid);
  } else {
    QLoader::load_rows(
        sQ, q,
        [&](int r) {
          int64_t h;
          int i;
          w.locate(p, r, &h, &i);
          return q + h * p.q_stride[1] + static_cast<int64_t>(i) * p.q_stride[2];
        },
        w.m0, w.rows(p), tid);
  }
  if constexpr (kFp8Kv) {
#pragma unroll
    for (int i = 0; i < kRawStages - 1; ++i) {
      if constexpr (kPaged)
        if (one_page) fp8_page = fp8_page_of(w.t_begin + i);
      fp8_issue(i, w.t_begin + i);
    }
    if constexpr (kPaged)
      if (one_page) fp8_page = fp8_page_of(w.t_begin + kRawStages - 1);  // the loop's first issue
  } else {
    if constexpr (kPaged) {
      cp_async_wait<0>();  // the entries (and a staged bias's first tile), not Q's uncommitted copies
      __syncthreads();
    }
#pragma unroll 1
    for (int i = 0; i < kS - 1; ++i) {
      const int t = w.t_begin + i;
      if constexpr (kPairedGather) {
        if (t < w.t_end) load_kv(i * Cfg::kSmemKV, t * Cfg::kBlockN, [] { cp_async_commit(); });
        else cp_async_commit();
      } else {
        if (t < w.t_end) load_k(sK + i * Cfg::kSmemKV, t * Cfg::kBlockN);
        cp_async_commit();
        if (t < w.t_end) load_v(sV + i * Cfg::kSmemKV, t * Cfg::kBlockN);
      }
      cp_async_commit();
    }
  }

  const LaneAddr<Cfg> addr(row_warp, lane);
  float o[Cfg::kMSlices][Cfg::kDTiles][4];
#pragma unroll
  for (int ms = 0; ms < Cfg::kMSlices; ++ms)
#pragma unroll
    for (int dt = 0; dt < Cfg::kDTiles; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[ms][dt][e] = 0.f;
  OnlineSoftmax<Cfg::kMSlices, Cfg::kNTiles, Cfg::kDTiles> sm;
  sm.init();
  // Bias / ALiBi (kAllOps only), natural-unit terms of the scaled,
  // soft-capped logit. Without softcap they are divided by the scale and
  // start the tile's Q K^T accumulator (ScoreMask::init_bias; the loads go
  // out before the wait for K), so the softmax keeps its units c; after
  // softcap (c = score_log2 = log2(e)) they are added as they are.
  const bool softcapped = kSoftcap || (kAllOps && p.softcap_out != 0.f);
  const bool biased = kAllOps && has_bias_or_alibi(p);
  const bool bias_init = biased && !softcapped;

  // Whether this warp owns a valid row (warp-uniform). An FP8 tile with
  // more warps than a decode unit has rows (Sm80Tuning::NarrowFp8Kv is one
  // warp today) lets the others only load K/V and keep the barriers.
  const bool computes = !kFp8Kv || row0 <= w.m_last;
  // A BF16 q over an FP8 cache: its rows become F16 once Q has landed (Q
  // and K[t_begin] are the first group; one more barrier per work tile),
  // each scaled by 2^-e(r) (QRowsToF16). Row r's scores then take 2^e(r)
  // times the whole score factor at once: softcap's input scale, or else
  // the softmax's raw-score -> log2 factor with a negative descale's sign
  // (which then reads 1: the scores arrive in log2 units). Not 2^e(r)
  // first: with |q| near BF16's top (2^100 rows 2^24 apart) Q K^T itself
  // passes F32's range before the descales bring it back (H200, 93daef5:
  // NaN rows at logits ~1e7). 2^e(r) times the factor is exact unless it
  // leaves F32's normal range (a row's max |q| below ~2^-100 under a score
  // factor below 1: logits ~0, a uniform row either way).
  [[maybe_unused]] float q_row_factor[Cfg::kMSlices][2];
  if constexpr (kFp8Kv && !kQkRowScaled) {
    cp_async_wait<2 * kRawStages - 3>();
    __syncthreads();  // every thread's Q chunks (the copies spread rows over warps)
  }
  if constexpr (!kFp8Kv && kOwnKeys) {  // 16-bit key warps whose key loop has warp barriers only
    cp_async_wait<2 * kS - 3>();
    __syncthreads();  // every thread's Q chunks (the CTA copied Q), before any warp reads them
  }
  if constexpr (kQkRowScaled) {
    cp_async_wait<2 * kRawStages - 3>();
    __syncthreads();  // every thread's Q chunks (the copies spread rows over warps)
    if (computes || Cfg::kKeyWarps > 1) {  // key warps: every warp (barriers inside; they all compute)
      QRowsToF16<Cfg>::run(smem, row_warp, key_warp, lane, q_row_factor);
      const float f = kSoftcap ? cap_in : negate ? -score_log2 : score_log2;
#pragma unroll
      for (int ms = 0; ms < Cfg::kMSlices; ++ms)
#pragma unroll
        for (int h = 0; h < 2; ++h) q_row_factor[ms][h] *= f;
    }
    if constexpr (kSoftcap) cap_in = 1.f;
    else score_log2 = 1.f;
  }
  // FP8 K/V: Q's (F16) rows into WarpQKFp8's A fragments, once per work tile.
  if constexpr (kFp8Kv) QFragments<Cfg>::run(smem, row_warp, key_warp, lane);
  [[maybe_unused]] int raw_stage = 0;  // kFp8Kv: (t - t_begin) % kRawStages
  int stage_i = 0;                     // 16-bit: (t - t_begin) % S
  for (int t = w.t_begin; t < w.t_end; ++t) {
    const uint32_t stage = static_cast<uint32_t>(stage_i) * Cfg::kSmemKV;
    // Tile t-1's stage, free after barrier 1: tile t + S - 1 goes there.
    [[maybe_unused]] const uint32_t ahead_stage = static_cast<uint32_t>(stage_i == 0 ? kS - 1 : stage_i - 1) *
                                                  Cfg::kSmemKV;
    float s[Cfg::kMSlices][Cfg::kNTiles][4];
    if constexpr (kFp8Kv) {
      cp_async_wait<2 * kRawStages - 3>();  // K[t] landed (this thread's part) ...
      copiers_sync();  // ... every copier's; and they are all done with tile t-1's stage
      const int ahead = t + kRawStages - 1;
      const int free_stage = raw_stage == 0 ? kRawStages - 1 : raw_stage - 1;  // tile t-1's
      fp8_issue(free_stage, ahead);
      if constexpr (kPaged)
        if (one_page) fp8_page = fp8_page_of(ahead + 1);  // used at tile t + 1
    } else {
      if (staged) {
        cp_async_wait<2>();  // B[t] landed (this lane's chunks) ...
        __syncwarp();        // ... and the warp's
        ScoreMask<Cfg::kMSlices, Cfg::kNTiles>::template staged_bias_terms<true>(
            s, p, w, w.diag_offset(p), 1.f / p.scale, row0, t * Cfg::kBlockN, lane, sBias, Bias::kPanelBytes, 0,
            false);
        __syncwarp();  // the warp has read B[t] before B[t+1] lands on it
        if (t + 1 < w.t_end) Bias::load(sBias, p, w, row0, (t + 1) * Cfg::kBlockN, lane);
        cp_async_commit();
        cp_async_wait<2>();  // K[t] landed (V[t] and B[t+1] in flight) ...
      } else {
        if (bias_init)
          ScoreMask<Cfg::kMSlices, Cfg::kNTiles>::init_bias(s, p, w, w.rows(p), w.len_k(p), w.diag_offset(p),
                                                            p.scale, row0, t * Cfg::kBlockN, lane);
        cp_async_wait<2 * kS - 3>();  // K[t] landed (this thread's part) ...
      }
      copiers_sync();  // ... every copier's; and they are all done with tile t-1's stage
      const int ahead = t + kS - 1;
      const int n_ahead = ahead * Cfg::kBlockN;
      // Paged: the entries of t + 2S - 2 into the slot of t (read when
      // K/V[t] were issued, S - 1 tiles ago), in K[t + S - 1]'s group, so
      // "K[t + S - 1] landed" also means they did.
      auto k_group_end = [&] {
        if (kPaged && ahead + kS - 1 < w.t_end)
          KVLoader::fetch_entries(sQ + ent_slot(n_ahead + (kS - 1) * Cfg::kBlockN), p, w.b,
                                  n_ahead + (kS - 1) * Cfg::kBlockN + copy0, w.len_k(p), copier);
        cp_async_commit();
      };
      if constexpr (kPairedGather) {
        if (ahead < w.t_end) load_kv(ahead_stage, n_ahead, k_group_end);
        else k_group_end();
      } else {
        if (ahead < w.t_end) load_k(sK + ahead_stage, n_ahead);
        k_group_end();
        if (ahead < w.t_end) load_v(sV + ahead_stage, n_ahead);
      }
      cp_async_commit();
    }
    // The tiles of t: the 16-bit stage, or the raw FP8 stage (addresses
    // written at each use: computed up front, the V address stayed live
    // through the scores and cost the 16-bit wide kernels spills).

    bool edge = false;
    if (computes) {
      if (!bias_init)
#pragma unroll
        for (int ms = 0; ms < Cfg::kMSlices; ++ms)
#pragma unroll
          for (int nt = 0; nt < Cfg::kNTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[ms][nt][e] = 0.f;
      if constexpr (kFp8Kv) {
        const unsigned char* sKr = smem + rawK + raw_stage * kRawBytes;
        if (e4m3)
          WarpQKFp8<Cfg>::template run<__NV_E4M3>(s, smem, sKr, row_warp, key0, lane);
        else
          WarpQKFp8<Cfg>::template run<__NV_E5M2>(s, smem, sKr, row_warp, key0, lane);
      } else {
        WarpQK<T, Cfg>::run(s, sQ, sK + stage + key_off, addr);
      }
      if constexpr (kQkRowScaled) {  // the rows' 2^e(r) times the score factor (see q_row_factor)
#pragma unroll
        for (int ms = 0; ms < Cfg::kMSlices; ++ms)
#pragma unroll
          for (int nt = 0; nt < Cfg::kNTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[ms][nt][e] *= q_row_factor[ms][e >> 1];
      } else if (negate) {  // a negative q_descale * k_descale (CTA-uniform)
#pragma unroll
        for (int ms = 0; ms < Cfg::kMSlices; ++ms)
#pragma unroll
          for (int nt = 0; nt < Cfg::kNTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[ms][nt][e] = -s[ms][nt][e];
      }

      if (softcapped)
        ScoreMask<Cfg::kMSlices, Cfg::kNTiles>::softcap(s, kFp8Kv ? cap_in : p.softcap_in, p.softcap_out);
      const int n0 = t * Cfg::kBlockN;
      edge = n0 < w.lo_max || n0 + Cfg::kBlockN > w.hi_min;  // CTA-uniform
      if (biased && softcapped)
        ScoreMask<Cfg::kMSlices, Cfg::kNTiles>::add_bias(s, p, w, w.rows(p), w.len_k(p), w.diag_offset(p), 1.f, row0,
                                                         n0, lane);
      if (edge)
        ScoreMask<Cfg::kMSlices, Cfg::kNTiles>::apply(s, p, w.len_k(p), w.diag_offset(p), row0, n0 + key0, lane);
      sm.update(s, o, kFp8Kv ? score_log2 : p.score_log2);
    }

    bool guard;
    if constexpr (kFp8Kv) {
      cp_async_wait<2 * kRawStages - 2>();  // V[t] landed (this thread's part)
      // The barrier publishes V[t] and votes NonFiniteV (edge tiles only).
      const int n0 = t * Cfg::kBlockN;
      const bool check = kGuardNonFiniteV && (n0 < w.lo_max || n0 + Cfg::kBlockN > w.hi_min);
      const bool v_bad = check && Fp8Tile::non_finite(smem + rawV + raw_stage * kRawBytes + copy_off, copier, e4m3);
      guard = copiers_any(v_bad);
    } else {
      if (staged)
        cp_async_wait<3>();  // V[t] landed (this thread's part; B[t+1] may not have)
      else
        cp_async_wait<2 * kS - 2>();  // V[t] landed (this thread's part)
      // The barrier doubles as the vote of NonFiniteV: only edge tiles look,
      // and every tile under a bias tensor (its -inf entries hide keys from
      // some rows only). Own keys: the warp's vote over its own share, the
      // only V rows it multiplies.
      const bool bad = kGuardNonFiniteV && (edge || (kAllOps && p.bias != nullptr)) &&
                       NonFiniteV<T>::template in_own_chunks<Cfg, KVLoader>(smem + (sV + stage + kv_copy_off - sQ),
                                                                            copier);
      guard = copiers_any(bad);
    }
    if (computes) {
      if constexpr (kFp8Kv) {
        using PV = WarpPVFp8<T, Cfg>;
        const uint32_t sVr = sQ + rawV + raw_stage * kRawBytes;
        if (kGuardNonFiniteV && guard)
          e4m3 ? PV::template run<__NV_E4M3, true>(o, s, sVr, key0, lane)
               : PV::template run<__NV_E5M2, true>(o, s, sVr, key0, lane);
        else
          e4m3 ? PV::template run<__NV_E4M3, false>(o, s, sVr, key0, lane)
               : PV::template run<__NV_E5M2, false>(o, s, sVr, key0, lane);
      } else {
        if (kGuardNonFiniteV && guard)
          warp_pv_guarded<T, Cfg>(o, s, sV + stage + key_off, addr);
        else
          WarpPV<T, Cfg>::run(o, s, sV + stage + key_off, addr);
      }
    }
    if constexpr (kFp8Kv) raw_stage = raw_stage == kRawStages - 1 ? 0 : raw_stage + 1;
    stage_i = stage_i == kS - 1 ? 0 : stage_i + 1;
  }
  cp_async_wait<0>();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (kFp8Kv) cudaTriggerProgrammaticLaunchCompletion();  // see the kernel's top
#endif
  if constexpr (kFp8Kv) WarpPVFp8<T, Cfg>::unpermute_o(o, lane);  // WarpPV's dim order for the epilogue
  sm.finish();
  if constexpr (Cfg::kKeyWarps > 1) {  // the key warps' states into key warp 0's
    static_assert(Cfg::kSmemQ + (Cfg::kKeyWarps - 1) * kKeyWarpValues<Cfg> * 32 * 4 <= Cfg::kSmemBytes,
                  "the key warps' states fit the K/V stages");
    // FP8 tiles of more than 4 key warps merge in rounds (merge_key_warps_tree).
    if constexpr (kFp8Kv && Cfg::kKeyWarps > 4)
      merge_key_warps_tree<Cfg>(o, sm, score_log2, reinterpret_cast<float*>(smem + Cfg::kSmemQ), key_warp, lane);
    else
      merge_key_warps<Cfg>(o, sm, score_log2, reinterpret_cast<float*>(smem + Cfg::kSmemQ), key_warp, lane);
  }
  // v_descale multiplies o (and a split's partial o, which the combine
  // sums), never lse.
  if (kFp8Kv && p.v_descale != nullptr) {
    const float vd = descale_at(p.v_descale, p, w.b, w.hk);
#pragma unroll
    for (int ms = 0; ms < Cfg::kMSlices; ++ms)
#pragma unroll
      for (int dt = 0; dt < Cfg::kDTiles; ++dt)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[ms][dt][e] *= vd;
  }
  Epilogue<T, Cfg>::run(p, w, o, sm, kFp8Kv ? score_log2 : p.score_log2, smem, row_warp, lane, tid, key_warp == 0);
}

}  // namespace fmha::cuda::sm80
