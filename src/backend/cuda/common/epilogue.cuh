// The end of a forward work tile, shared by the tensor-core families: the
// finalize (O = o / l, lse), the stores of lse and of the split-KV partials
// straight from registers, and a registers -> shared -> global path for O
// with 16-byte coalesced global stores.
//
// Register fragments are in the m16n8 accumulator layout (common/softmax.cuh):
// kMSlices slices of 16 rows per warp, kDTiles n8 tiles of head dims. The
// lane's rows are lane_row + 16 ms + 8 hh (hh = 0, 1), where the caller
// passes lane_row = (the first row of its warp's first slice) + lane / 4,
// in unit rows (FwdParams::pack) for global stores or tile rows for shared
// memory; the lane's columns of n8 tile dt are 8 dt + 2 (lane % 4) + {0, 1}.
// Nothing here assumes a CTA shape, so a kernel with another warp-to-row
// assignment (a wgmma warpgroup: warp w of the group at row 16 w) calls the
// same functions.
#pragma once

#include <cstdint>

#include "backend/cuda/common/device_math.cuh"
#include "backend/cuda/common/fwd_params.h"
#include "backend/cuda/common/swizzle.cuh"
#include "backend/cuda/common/tile_scheduler.h"

namespace fmha::cuda {

// O = o / l for each of the lane's rows (0 for a row that saw no key, l = 0)
// and lse = m * lse_scale + ln l in natural units (-inf for such a row; NaN
// for a row whose l is NaN, fmha.h's rule for a NaN logit).
// m, l: the OnlineSoftmax state after finish(); lse_scale = score_log2 * ln 2
// turns m (raw-score units) into natural units.
template <int kMSlices, int kDTiles>
__device__ __forceinline__ void finalize_rows(float (&o)[kMSlices][kDTiles][4], const float (&m)[kMSlices][2],
                                              const float (&l)[kMSlices][2], float lse_scale,
                                              float (&lse)[kMSlices][2]) {
#pragma unroll
  for (int ms = 0; ms < kMSlices; ++ms)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      // l = 0: no key (O = 0, lse = -inf); l NaN: a NaN logit (O, lse NaN).
      const float sum = l[ms][hh];
      const bool none = sum == 0.f;
      const float inv = none ? 0.f : 1.f / sum;
      lse[ms][hh] = none ? kNegInf : m[ms][hh] * lse_scale + logf(sum);
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
        o[ms][dt][2 * hh] *= inv;
        o[ms][dt][2 * hh + 1] *= inv;
      }
    }
}

// lse of the lane's rows of work tile w to p.lse (when p.lse is set); one
// lane of each quad writes, rows at or past p.rows are skipped.
// With a sequence `seq` (common/fwd_params.h: FwdSeq), rows at or past
// seq.rows are skipped and the lse sits where seq says (a ragged batch's
// [Hq, total_q]).
template <int kMSlices>
__device__ __forceinline__ void store_lse(const FwdParams& p, const WorkTile& w, const FwdSeq& seq,
                                          const float (&lse)[kMSlices][2], int lane_row, int lane) {
  if (p.lse == nullptr || (lane & 3) != 0) return;
#pragma unroll
  for (int ms = 0; ms < kMSlices; ++ms)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = lane_row + ms * 16 + 8 * hh;
      if (r >= seq.rows) continue;
      int64_t h;
      int i;
      w.locate(p, r, &h, &i);
      p.lse[seq.lse_row0 + h * seq.lse_head + i] = lse[ms][hh];
    }
}

template <int kMSlices>
__device__ __forceinline__ void store_lse(const FwdParams& p, const WorkTile& w, const float (&lse)[kMSlices][2],
                                          int lane_row, int lane) {
  if (p.lse == nullptr || (lane & 3) != 0) return;
#pragma unroll
  for (int ms = 0; ms < kMSlices; ++ms)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = lane_row + ms * 16 + 8 * hh;
      if (r >= p.rows) continue;
      int64_t h;
      int i;
      w.locate(p, r, &h, &i);
      p.lse[(w.b * p.heads_q + h) * p.seq_q + i] = lse[ms][hh];
    }
}

// This split's running state of the lane's rows, straight from registers,
// in the format of common/split_combine.h: o unnormalized (head dims
// [col0, col0 + 8 kDTiles) of rows of kHeadDim floats), m in natural units
// (m * lse_scale; -inf stays -inf for a row without keys) and l. One lane of
// each quad writes m and l; rows at or past p.rows are skipped. The float2
// stores need the workspace's 16-byte alignment.
template <int kMSlices, int kDTiles, int kHeadDim>
__device__ __forceinline__ void store_split_partials(const FwdParams& p, const WorkTile& w, int lane_row,
                                                     const float (&o)[kMSlices][kDTiles][4],
                                                     const float (&m)[kMSlices][2], const float (&l)[kMSlices][2],
                                                     float lse_scale, int lane, int col0 = 0) {
  static_assert(8 * kDTiles <= kHeadDim, "the fragment's head dims lie inside the row");
  const int64_t part = (static_cast<int64_t>(w.split) * p.units + w.unit) * p.rows;
#pragma unroll
  for (int ms = 0; ms < kMSlices; ++ms)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = lane_row + ms * 16 + 8 * hh;
      if (r >= p.rows) continue;
      float* orow = p.o_partial + (part + r) * kHeadDim + col0 + (lane & 3) * 2;
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt)
        *reinterpret_cast<float2*>(orow + dt * 8) = make_float2(o[ms][dt][2 * hh], o[ms][dt][2 * hh + 1]);
      if ((lane & 3) == 0) {
        p.m_partial[part + r] = m[ms][hh] * lse_scale;
        p.l_partial[part + r] = l[ms][hh];
      }
    }
}

// Registers -> shared: the lane's fragment, packed to T pairs, into a
// swizzled tile of kPitch-element rows (common/swizzle.cuh); lane_row is
// the lane's tile row (see above), n8 tile dt is 16-byte chunk dt.
template <class T, int kPitch, int kMSlices, int kDTiles>
__device__ __forceinline__ void stage_fragment(unsigned char* smem, const float (&o)[kMSlices][kDTiles][4],
                                               int lane_row, int lane) {
  static_assert(sizeof(T) == 2, "16-bit elements: 8 per 16-byte chunk");
#pragma unroll
  for (int ms = 0; ms < kMSlices; ++ms)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = lane_row + ms * 16 + 8 * hh;
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt)
        *reinterpret_cast<uint32_t*>(smem + swizzle<kPitch>(r, dt) + (lane & 3) * 4) =
            pack2<T>(o[ms][dt][2 * hh], o[ms][dt][2 * hh + 1]);
    }
}

// Shared -> global for a swizzled tile of kRows rows of kHeadDim 16-bit
// elements, by kThreads threads: thread t copies the 16-byte chunks
// t + pass * kThreads (row = index / chunks per row), so consecutive threads
// write consecutive 16 bytes of a row (coalesced). Tile row r is global row
// row0 + r, stored at row_ptr(row0 + r) (a T*, 16-byte aligned); rows at or
// past row_end are skipped. Call after a barrier that publishes the tile.
template <class T, int kRows, int kHeadDim, int kPitch, int kThreads>
struct SmemTileStore {
  static_assert(sizeof(T) == 2, "16-bit elements: 8 per 16-byte chunk");
  static constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks per row
  static constexpr int kTotal = kRows * kChunks;
  static constexpr int kPasses = (kTotal + kThreads - 1) / kThreads;

  template <class RowPtr>
  __device__ __forceinline__ static void run(const unsigned char* smem, int row0, int row_end, RowPtr row_ptr,
                                             int tid) {
#pragma unroll
    for (int pass = 0; pass < kPasses; ++pass) {
      const int idx = tid + pass * kThreads;
      const int r = idx / kChunks;
      const int c = idx % kChunks;
      if (kTotal % kThreads != 0 && idx >= kTotal) break;
      if (row0 + r >= row_end) continue;
      *reinterpret_cast<uint4*>(row_ptr(row0 + r) + c * 8) =
          *reinterpret_cast<const uint4*>(smem + swizzle<kPitch>(r, c));
    }
  }
};

}  // namespace fmha::cuda
