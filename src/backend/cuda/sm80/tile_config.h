// Tile shapes of the sm80 family: tuning is data. One TileConfig per head
// dim; the kernel (fwd_kernel.cuh) and the host side (sm80_forward.cu: grid,
// shared memory, split heuristic) both read it, so they cannot disagree.
#pragma once

#include "backend/cuda/sm80/instances.h"  // generated: the instantiated head dims

namespace fmha::cuda::sm80 {

// A CTA owns kBlockM query rows of one (batch, head); kWarps warps each own
// kBlockM / kWarps consecutive rows as m16 slices of mma.sync m16n8k16. K/V
// tiles of kBlockN keys stream through kStages shared-memory stages.
template <int kHeadDim_, int kBlockM_, int kBlockN_, int kWarps_, int kMinBlocksPerSm_>
struct TileConfig {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kWarps = kWarps_;
  static constexpr int kMinBlocksPerSm = kMinBlocksPerSm_;  // __launch_bounds__ register cap
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kStages = 2;

  static constexpr int kRowsPerWarp = kBlockM / kWarps;
  static constexpr int kMSlices = kRowsPerWarp / 16;  // m16 slices per warp
  static constexpr int kNTiles = kBlockN / 8;         // n8 tiles of S per slice
  static constexpr int kDTiles = kHeadDim / 8;        // n8 tiles of O per slice
  // Shared-memory row pitch in elements: the swizzle permutes 8 chunks of
  // 16 bytes, so rows are whole multiples of 64 elements; D = 32 and 96 leave
  // the tail of each row unused.
  static constexpr int kPitch = (kHeadDim + 63) / 64 * 64;

  // Shared memory: Q tile (reused for the O tile in the epilogue), then
  // kStages K tiles, then kStages V tiles; 2-byte elements.
  static constexpr int kSmemQ = kBlockM * kPitch * 2;
  static constexpr int kSmemKV = kBlockN * kPitch * 2;
  static constexpr int kSmemBytes = kSmemQ + 2 * kStages * kSmemKV;
  // The score-ops kernels (ScoreOps::kAll) stage a 16-bit bias after them:
  // each warp its rows x the key tile, in 64-key panels of 128-byte rows
  // (bias_tile.cuh). At most 32 KB (D <= 64: 128 x 128 keys), so the wide
  // tiles keep 2 CTAs per SM in 228 KB (80 + 32 KB at D=64, 96 + 16 KB at
  // D=128) and the narrow ones 3.
  static constexpr int kSmemBias = kBlockM * ((kBlockN + 63) / 64) * 128;
  static constexpr int kSmemBytesBias = kSmemBytes + kSmemBias;

  static_assert(kBlockM % (16 * kWarps) == 0, "each warp owns whole m16 slices");
  static_assert(kBlockN % 16 == 0, "K/V tiles are whole k16 steps of P V");
  static_assert(kHeadDim % 16 == 0, "whole k16 steps of Q K^T and n8 pairs of P V");
};

// Per head dim, for sm_80 and newer (one build serves sm_80 and sm_90; the
// numbers are from the lent H200, sm_90, 132 SMs, 228 KB shared memory per
// SM, 2026-11-29; docs/performance.md, "CUDA sm80 family on the H200", has
// the tables). Causal FP16 B=1 H=32, bench_cuda medians.
//
// Wide: prefill. 128 query rows, 4 warps x 32 rows (two m16 slices per warp:
//   each K/V fragment read from shared memory feeds two mma), two CTAs per SM.
//   D=128: 128x64 -> 96 KB shared memory, 255 registers. N=8192: 1.57-1.63 ms
//     = 336-350 TFLOP/s (FlashAttention-2 in the same run: 1.80 ms); 128x32
//     measured 1-2% slower (1.626/1.629 vs 1.595/1.613 ms, N=2048 +1%).
//   D=64: 128x128 -> 80 KB. N=8192: 0.87-0.89 ms (FA2 1.00); 128x64 measured
//     3% slower at N=8192 (0.910/0.913 vs 0.880/0.891 ms), equal at N=2048.
//   D=256: 8 warps x 16 rows (32 rows would need 256 accumulator registers
//     for O alone), 128x64 -> 192 KB, one CTA per SM (FA2's D=256 shape):
//     N=8192 3.46-3.49 ms = 315 TFLOP/s. Not tuned further.
//   D=32, D=96: the D=64 / D=128 shapes on a 64 / 128-element row pitch:
//     N=8192 0.58 ms (238 TFLOP/s) / 1.37-1.41 ms (293-300). Not tuned further.
// Narrow: decode and other problems of <= 32 rows per (batch, KV head) after
//   GQA packing: one warp x 16 rows, so a 4-row decode wastes 4x, not 32x, of
//   the mma work; three CTAs per SM; split-KV supplies the parallelism.
//   Decode FP16 Hq=32 Hk=8 D=128: Nk=4096 16.7 us, 32768 47 us, 131072
//   0.137-0.140 ms (FA2 18, 47-59 us, 0.151 ms; 131072 streams K/V at
//   91-93% of the measured 4.2 TB/s copy bandwidth).
// NarrowFp8Kv: the narrow tile of an FP8 KV cache (the kFp8Kv
//   instantiations). Converting FP8 to 16 bits costs about 36 instructions
//   per 16-byte chunk (BF16 q), too many for one warp per CTA to keep pace
//   with the copy rate; so four warps share the loads and conversions of
//   each key tile, and only warps that own a valid row run the MMAs and the
//   softmax (a decode unit of <= 32 rows: warps 0-1). The same kBlockN, two
//   CTAs per SM. Not yet measured (prediction in docs/performance.md);
//   `using NarrowFp8Kv = Narrow;` restores the one-warp tile.
template <int kHeadDim>
struct Sm80Tuning;

template <>
struct Sm80Tuning<32> {
  using Wide = TileConfig<32, 128, 128, 4, 2>;
  using Narrow = TileConfig<32, 16, 128, 1, 3>;
  using NarrowFp8Kv = TileConfig<32, 64, 128, 4, 2>;
};

template <>
struct Sm80Tuning<64> {
  using Wide = TileConfig<64, 128, 128, 4, 2>;
  using Narrow = TileConfig<64, 16, 128, 1, 3>;
  using NarrowFp8Kv = TileConfig<64, 64, 128, 4, 2>;
};

template <>
struct Sm80Tuning<96> {
  using Wide = TileConfig<96, 128, 64, 4, 2>;
  using Narrow = TileConfig<96, 16, 64, 1, 3>;
  using NarrowFp8Kv = Narrow;  // no FP8 K/V instantiation: 96-byte rows are not whole 16-byte chunk passes
};

template <>
struct Sm80Tuning<128> {
  using Wide = TileConfig<128, 128, 64, 4, 2>;
  using Narrow = TileConfig<128, 16, 64, 1, 3>;
  using NarrowFp8Kv = TileConfig<128, 64, 64, 4, 2>;
};

template <>
struct Sm80Tuning<256> {
  using Wide = TileConfig<256, 128, 64, 8, 1>;
  using Narrow = TileConfig<256, 16, 32, 1, 3>;
  using NarrowFp8Kv = TileConfig<256, 64, 32, 4, 2>;
};

// Every instantiated head dim (the build's list, FMHA_SM80_INSTANCES) has
// its tuning, keyed by the right head dim.
#define FMHA_SM80_TUNED_(D)                                                                        \
  static_assert(Sm80Tuning<D>::Wide::kHeadDim == D && Sm80Tuning<D>::Narrow::kHeadDim == D &&   \
                    Sm80Tuning<D>::NarrowFp8Kv::kHeadDim == D,                                  \
                "Sm80Tuning<" #D "> is missing or mis-keyed");
FMHA_SM80_HEAD_DIMS(FMHA_SM80_TUNED_)
#undef FMHA_SM80_TUNED_

}  // namespace fmha::cuda::sm80
