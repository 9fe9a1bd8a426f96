// cuda_sm80_tc's bias staging: each warp copies the bias elements of its own
// rows for the next key tile into a buffer of its own with cp.async, one
// tile ahead, and reads its fragment elements from shared memory
// (common/score_mask.cuh, staged_bias_terms), instead of loading them from
// global memory just before the tile's Q K^T needs them. The buffer is
// private to the warp, so only __syncwarp orders its reads and writes.
#pragma once

#include <cstdint>

#include "backend/cuda/common/fwd_params.h"
#include "fmha/fmha.h"

namespace fmha::cuda::sm80 {

template <class Cfg>
struct BiasTile {
  // A warp's rows x the tile's keys, in 64-key panels of 128-byte rows with
  // the 16-byte chunks swizzled by the row (chunk c of row r at c ^ r % 8):
  // staged_bias_terms' layout, whose fragment reads are free of bank
  // conflicts. A tile of fewer than 64 keys uses the front of each row.
  static constexpr int kRows = Cfg::kRowsPerWarp;
  static constexpr int kChunksPerRow = Cfg::kBlockN / 8;  // 8 keys per 16-byte chunk
  static constexpr int kPanels = (Cfg::kBlockN + 63) / 64;
  static constexpr int kPanelBytes = kRows * 128;
  static constexpr int kWarpBytes = kPanels * kPanelBytes;
  static constexpr int kBytes = Cfg::kWarps * kWarpBytes;  // after the Q and K/V stages
  static constexpr int kPerLane = kRows * kChunksPerRow / 32;
  static_assert(kRows * kChunksPerRow % 32 == 0, "whole chunks per lane");
  static_assert(kBytes == Cfg::kSmemBias, "tile_config.h reserves the warps' buffers");

  // Whether the bias can be copied in 16-byte chunks: 16-bit elements,
  // keys contiguous, base and strides 16-byte aligned (stride 0, a
  // broadcast, included). Otherwise the kernel loads the elements from
  // global memory (ScoreMask::init_bias).
  __device__ __forceinline__ static bool usable(const FwdParams& p) {
    if (p.bias == nullptr || p.bias_stride[3] != 1) return false;
    if (p.bias_dtype != FMHA_DTYPE_F16 && p.bias_dtype != FMHA_DTYPE_BF16) return false;
    const uint64_t bits = reinterpret_cast<uintptr_t>(p.bias) |
                          static_cast<uint64_t>(p.bias_stride[0] | p.bias_stride[1] | p.bias_stride[2]) * 2u;
    return bits % 16 == 0;
  }

  // Issues (does not commit) this lane's chunks of the bias of unit rows
  // [row0, row0 + kRows) and keys [n0, n0 + kBlockN) into `dst` (the warp's
  // buffer, a shared address). Rows past the unit and keys past the
  // sequence are zero-filled, never read (a chunk that straddles the
  // sequence end copies its valid keys).
  template <class W>
  __device__ __forceinline__ static void load(uint32_t dst, const FwdParams& p, const W& w, int row0, int n0,
                                              int lane) {
    const unsigned short* bias = static_cast<const unsigned short*>(p.bias);
    const int rows = w.rows(p), len_k = w.len_k(p);
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int idx = lane + 32 * k;
      const int rr = idx / kChunksPerRow, c = idx % kChunksPerRow;
      const int r = row0 + rr, j0 = n0 + 8 * c;
      const unsigned short* src = bias;
      uint32_t bytes = 0;
      if (r < rows && j0 < len_k) {
        int64_t h;
        int i;
        w.locate(p, r, &h, &i);
        src = bias + w.b * p.bias_stride[0] + h * p.bias_stride[1] + static_cast<int64_t>(i) * p.bias_stride[2] + j0;
        bytes = static_cast<uint32_t>(min(len_k - j0, 8)) * 2u;
      }
      const uint32_t at = dst + (c / 8) * kPanelBytes + rr * 128 + (((c % 8) ^ (rr % 8)) << 4);
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(at), "l"(src), "r"(bytes));
    }
  }
};

}  // namespace fmha::cuda::sm80
