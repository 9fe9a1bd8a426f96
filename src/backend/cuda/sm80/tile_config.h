// Tile shapes of the sm80 family: tuning is data. One TileConfig per head
// dim; the kernel (fwd_kernel.cuh) and the host side (sm80_forward.cu: grid,
// shared memory, split heuristic) both read it, so they cannot disagree.
#pragma once

#include <type_traits>

#include "backend/cuda/common/env_choice.h"
#include "backend/cuda/sm80/instances.h"  // generated: the instantiated head dims

namespace fmha::cuda::sm80 {

// A CTA owns kBlockM query rows of one (batch, head); kWarps warps each own
// kBlockM / kWarps consecutive rows as m16 slices of mma.sync m16n8k16. K/V
// tiles of kBlockN keys stream through kStages shared-memory stages: while
// tile t is computed, tiles t+1 .. t+kStages-1 are in flight.
template <int kHeadDim_, int kBlockM_, int kBlockN_, int kWarps_, int kMinBlocksPerSm_, int kStages_ = 2>
struct TileConfig {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kWarps = kWarps_;
  static constexpr int kMinBlocksPerSm = kMinBlocksPerSm_;  // __launch_bounds__ register cap
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kStages = kStages_;
  // Warps that split each key tile among themselves (Fp8KvTileConfig,
  // KeyWarpTileConfig), and whether each copies its own keys (kOwnKeys;
  // fwd_kernel.cuh).
  static constexpr int kKeyWarps = 1;
  static constexpr int kKeysPerWarp = kBlockN;
  static constexpr bool kOwnKeys = false;

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
  // The 16-bit paged kernels also stage the block-table entries of key
  // tiles past the K/V stages, one int32 per key and tile: those of tile
  // t + 2 kStages - 2 are fetched at tile t, with K[t + kStages - 1], and
  // read when that tile's K/V are issued, kStages - 1 tiles later
  // (fwd_kernel.cuh); the prologue fetches the first 2 kStages - 2 at once.
  static constexpr int kPagedEntrySlots = 2 * kStages - 2;
  static constexpr int kSmemPagedBytes = kSmemBytes + kPagedEntrySlots * kBlockN * 4;
  // The 16-bit score-ops kernels (ScoreOps::kAll) stage a 16-bit bias after
  // those (after the paged entries in a paged kernel): each warp its rows x
  // the key tile, in 64-key panels of 128-byte rows (bias_tile.cuh). At most
  // 32 KB (D <= 64: 128 x 128 keys), so the wide tiles keep 2 CTAs per SM in
  // 228 KB (80 + 32 KB at D=64, 96 + 16 KB at D=128; a paged one at D=64
  // needs 1.5 KB more and then runs 1) and the narrow ones 3.
  static constexpr int kSmemBias = kBlockM * ((kBlockN + 63) / 64) * 128;
  // Host and device: the kernel places its buffers with them, the launcher
  // sizes the shared memory.
  __host__ __device__ static constexpr int bias_offset(bool paged_entries) {
    return paged_entries ? kSmemPagedBytes : kSmemBytes;
  }
  __host__ __device__ static constexpr int smem_bytes(bool paged_entries, bool bias) {
    return bias_offset(paged_entries) + (bias ? kSmemBias : 0);
  }

  static_assert(kStages >= 2, "a stage in flight while one is read");
  static_assert(kBlockM % (16 * kWarps) == 0, "each warp owns whole m16 slices");
  static_assert(kBlockN % 16 == 0, "K/V tiles are whole k16 steps of P V");
  static_assert(kHeadDim % 16 == 0, "whole k16 steps of Q K^T and n8 pairs of P V");
};

// Key warps (kKeyWarps > 1; Fp8KvTileConfig, KeyWarpTileConfig): kKeyWarps
// warps share a tile's one group of rows and split every key tile, warp g
// taking keys [g kKeysPerWarp, (g + 1) kKeysPerWarp) of it, each with its
// own running max / sum and O (kNTiles is then a warp's share), merged
// through shared memory after the key loop (fwd_kernel.cuh:
// merge_key_warps). kOwnKeys: each key warp also copies its own share of
// every K and V tile.
template <class Base, int kKeyWarps_, bool kOwnKeys_>
struct WithKeyWarps : Base {
  static constexpr int kKeyWarps = kKeyWarps_;
  static constexpr bool kOwnKeys = kOwnKeys_ && kKeyWarps > 1;
  static constexpr int kThreads = Base::kWarps * kKeyWarps * 32;
  static constexpr int kKeysPerWarp = Base::kBlockN / kKeyWarps;
  static constexpr int kNTiles = kKeysPerWarp / 8;  // n8 tiles of S per slice and warp
  static_assert(kKeyWarps == 1 || Base::kWarps == 1, "key warps split the tile of a one-warp row group");
  static_assert(kKeysPerWarp % 16 == 0, "each key warp takes whole k16 steps of P V");
};

// A tile of an FP8 KV cache (the kFp8Kv instantiations): K and V stay FP8
// in shared memory, kRawStages raw stages of kBlockN x kHeadDim bytes each
// (half a 16-bit stage, so more of them fit), converted in registers after
// each fragment load (fwd_kernel.cuh: WarpQKFp8, WarpPVFp8). Only the Q
// tile is 16-bit.
//
// kKeyWarps > 1 (the tuned decode tiles: 2): key warps (WithKeyWarps),
// each copying its own keys of every tile and waiting for its own copies
// only (fwd_kernel.cuh: kOwnKeys), so the CTA holds several independent
// streams with no barrier in the key loop.
template <int kHeadDim_, int kBlockM_, int kBlockN_, int kWarps_, int kMinBlocksPerSm_, int kRawStages_,
          int kKeyWarps_ = 1>
struct Fp8KvTileConfig
    : WithKeyWarps<TileConfig<kHeadDim_, kBlockM_, kBlockN_, kWarps_, kMinBlocksPerSm_>, kKeyWarps_, true> {
  using Base = TileConfig<kHeadDim_, kBlockM_, kBlockN_, kWarps_, kMinBlocksPerSm_>;
  static constexpr int kRawStages = kRawStages_;
  static constexpr int kSmemRaw = kBlockN_ * kHeadDim_;  // bytes of one raw K or V stage
  static constexpr int kSmemBytes = Base::kSmemQ + 2 * kRawStages * kSmemRaw;
  // No block-table entries (the FP8 gather reads the table itself) and no
  // bias buffer (a bias over FP8 K/V is refused): the raw stages are all.
  static constexpr int kSmemPagedBytes = kSmemBytes;
  __host__ __device__ static constexpr int bias_offset(bool) { return kSmemBytes; }
  __host__ __device__ static constexpr int smem_bytes(bool, bool) { return kSmemBytes; }

  static_assert(kRawStages >= 2, "a raw stage in flight while one is read");
  static_assert(kHeadDim_ % 32 == 0, "whole 32-byte (k32) blocks of an FP8 key row");
};

// A 16-bit decode tile of kKeyWarps key warps (WithKeyWarps) over one
// group of 16 rows. kOwnKeys (the default): each key warp also copies its
// own share of every K and V tile (and, paged, stages its share's
// block-table entries) and waits for its own copies only, with warp
// barriers (the FP8 tiles' streams); else the CTA copies each tile and
// keeps the 16-bit tiles' barrier pair (the tile measured first,
// 128.1.3.4c). With one CTA per SM a B=16 GQA 32/8 decode (128 units) fills the
// H200 unsplit, as cuDNN's decode kernel does, instead of 4 splits of
// one-warp CTAs and a combine (docs/performance.md, "Where a decode call's
// time goes", "Session 2026-12-02").
template <int kHeadDim_, int kBlockN_, int kMinBlocksPerSm_, int kStages_, int kKeyWarps_, bool kOwnKeys_ = true>
struct KeyWarpTileConfig
    : WithKeyWarps<TileConfig<kHeadDim_, 16, kBlockN_, 1, kMinBlocksPerSm_, kStages_>, kKeyWarps_, kOwnKeys_> {};

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
// NarrowStream, NarrowPaged: the decode tile of the plain and softcap
//   kernels over contiguous / dense and over paged K/V (Decode16Tile; the
//   score-ops kernels keep Narrow). D=128 from 2026-12-02: KeyWarpTileConfig
//   128 keys x 3 stages, 4 key warps of 32 keys, own keys, one CTA per SM
//   (196 KB + 2 KB of paged entries). H200, BF16 GQA 32/8 Nq=1, with the
//   CTA's shared copies (docs/performance.md, "Session 2026-12-02"): call
//   span B=16 Nk=8192 129.2 -> 122.2 us (unsplit: no combine), B=1
//   Nk=131072 131.6 -> 127.3 (16 splits), F16 B=1 Nk=32768 43.8 -> 41.0,
//   against the one-warp 32 x 3 x 4 below; 64 keys x 2 key warps x 2 CTAs
//   between the two. Own keys and the paged tile: docs/performance.md,
//   "Key-warp decode tiles by default" (prediction before the H200 run).
//   D=64 and D=32: 128 keys x 2 stages, 4 key warps, 3 CTAs per SM (66 KB:
//   it fits the 99 KB of sm_86 / sm_89 / sm_120 too); D=256: 32 keys x 2
//   stages, 2 key warps of 16 keys, 3 CTAs per SM (72 KB); not measured,
//   chosen by the D=128 evidence (a CTA's key warps stream like as many
//   one-warp CTAs, without the splits and the combine) and the FP8 tiles'
//   (two key warps: D=64 / D=256 +18-32% of copy over one). D=96 keeps
//   Narrow (12 chunks a row: no warp-sized copy pass; not measured).
// NarrowCompact: the decode tile the plan takes instead on a device with
//   less shared memory per block than NarrowStream / NarrowPaged need
//   (sm80_forward.cu; A100 163 KB, sm_86 / sm_89 / sm_120 99 KB); the same
//   tile where those fit every device. D=128: the one-warp tile of
//   2026-12-01, 32 keys x 3 stages x 4 CTAs per SM (54 KB), BF16 GQA 32/8
//   Nq=1 on the H200 (docs/performance.md, "Paged decode with more tiles in
//   flight"): paged / contiguous 0.950 / 0.969 at B=1 Nk=131072 (page_size
//   16 / 64), 0.958 / 0.965 at B=16 Nk=8192, 0.846 / 0.899 for a mixed B=64
//   batch, where Narrow had 0.82 / 0.88, 0.81 / 0.88, 0.68 / 0.74;
//   contiguous 0.958 / 0.986 / 0.940 of copy against 0.941 / 0.978 / 0.936.
//   What counted there was warps (CTAs) per SM, not bytes in flight.
// NarrowPagedSplit, NarrowPagedBatch: the plain paged kernel's tile per
//   grid (sm80_forward.cu: paged_decode16_choice), D=128 only (elsewhere
//   NarrowPaged): few units split over long keys take 8 key warps of 16
//   keys (128.1.3.8), more units than NarrowPaged's one slot per SM take
//   64 keys over 4 key warps at 2 CTAs per SM (64.2.3.4); a grid that
//   NarrowPaged fills in one wave unsplit (B=16 GQA 32/8: 128 units) keeps
//   it. H200, BF16 GQA 32/8 Nq=1, paged / NarrowStream's contiguous time,
//   page_size 16 / 64 (docs/performance.md, "Session 2026-12-02 (H200):
//   the three checkpoints", one round each): B=1 Nk=131072 0.966 / 0.975
//   on 128.1.3.8 against NarrowPaged's 0.933 / 0.941; a mixed B=64 batch
//   of Nk <= 4096 0.963 / 0.963 on 64.2.3.4 against 0.883 / 0.897; B=16
//   Nk=8192 NarrowPaged 0.947 / 0.953, 128.1.3.8 0.920 / 0.946, 64.2.3.4
//   0.905 / 0.923.
// Until 2026-12-02 the D=128 plain paged kernel also had NarrowPagedMany,
//   16 keys x 3 stages x 7 CTAs per SM (one warp each), which the plan took
//   for grids it filled better (B=16 Nk=8192 paged / contiguous 0.963-0.965
//   / 0.971-0.972, the mixed batch 0.968 against 0.834 / 0.905; B=1 kept 32
//   x 3 x 4: docs/performance.md, "Paged decode, a tile per shape"); the
//   key-warp tile runs B=16 paged unsplit instead. It stays an experiment
//   candidate (16.7.3).
// NarrowFp8Kv: the decode tile of an FP8 KV cache (the kFp8Kv
//   instantiations, units of <= 32 rows). 16 rows with the K/V stages kept
//   FP8 and converted in registers after each fragment load, three raw
//   stages (half the bytes of a 16-bit stage), four CTAs per SM, and two
//   key warps splitting each key tile (kKeyWarps = 2: two independent
//   chains per tile, merged after the key loop). H200, 2026-12-01 morning,
//   BF16 GQA 32/8 D=128 Nq=1 (docs/performance.md, "FP8 KV decode, third
//   pass"), 64 keys x 3 stages x 4 CTAs, one key warp against two, of
//   copy: B=1 Nk=131072 BF16 q e4m3 0.667 -> 0.760, e5m2 0.710 -> 0.768,
//   F16 q e4m3 0.710 -> 0.750; B=16 Nk=8192 0.723 -> 0.798; paged ps=64
//   0.507 -> 0.655 (B=1), 0.535 -> 0.702 (B=16). D=64 and D=256 take two
//   key warps too (not measured before; tools/device/fp8dec3.sh's "kw1").
//   Before key warps (one warp x 16 rows): H200, GQA 32/8, D=128, Nq=1, K+V bytes
//   against the copy bandwidth (docs/performance.md, 2026-12-01): BF16 q
//   e4m3 0.50 (B=1 Nk=131072) / 0.61 (B=16 Nk=8192), F16 q e5m2 0.70 /
//   0.84; the previous FP8 tile (4 warps converting each raw tile into a
//   16-bit one in shared memory, two stages) 0.41 / 0.46. Other D=128
//   tiles in the same run (kBlockN, CTAs per SM, raw stages): 32, 7, 3
//   0.50 / 0.73 for BF16 e4m3 but 0.58 / 0.83 for F16 e5m2; 64, 5, 2
//   0.46 / 0.55; 128, 2, 3 0.25 / 0.28.
//   A BF16 q runs the same tile: its Q K^T runs in F16 too (fwd_kernel.cuh:
//   QRowsToF16), so its K conversion is an F16 q's. Until 2026-12-01 a
//   BF16 q converted K on to BF16 (three more instructions per FP8 pair)
//   and took the 32-key, 7-CTA tile at D=128, whose extra warps hid more
//   of it (BF16 q e4m3 0.50 / 0.73 against 0.50 / 0.61 on 64, 4, 3).
// NarrowFp8KvOneCta: the plain FP8 decode kernel's tile when the unsplit
//   grid fits one CTA per SM (sm80_forward.cu; B=1 and B=16 GQA 32/8 on
//   132 SMs: 8 and 128 units), D=128 only (elsewhere NarrowFp8Kv): 256
//   keys over 8 key warps of 32, 3 raw stages, one CTA per SM (the
//   16-bit key-warp tile's shape: B=16 runs unsplit, B=1 in 16 splits
//   instead of 64). H200, BF16 q e4m3 GQA 32/8 D=128 Nq=1, of copy
//   (docs/performance.md, "Session 2026-12-02 (H200): the three
//   checkpoints", two rounds): B=1 Nk=131072 0.882 / 0.883 against
//   NarrowFp8Kv's 0.869 / 0.867, B=16 Nk=8192 0.923 / 0.926 against 0.882
//   / 0.876, paged ps64 B=1 0.809 against 0.786, B=16 (unsplit) 0.918
//   against 0.797. Grids past one wave (many units) keep NarrowFp8Kv's four
//   CTAs per SM (not measured on this tile).
// NarrowFp8KvPagedSplit: the plain paged FP8 kernel's tile when that
//   one-CTA grid would split (few units over long keys; B=1 GQA 32/8),
//   D=128 only: 128 keys over 4 key warps of 32, 2 raw stages, 3 CTAs per
//   SM (128.3.2.4). H200, BF16 q e4m3, B=1 Nk=131072 paged ps64, of copy,
//   one run (docs/performance.md, "FP8 decode tiles in one run"): 0.842 /
//   0.844 against NarrowFp8KvOneCta's 0.806 / 0.812; unsplit B=16 paged
//   keeps NarrowFp8KvOneCta (0.914 against 0.836).
// WideFp8Kv: prefill over an FP8 cache (units of > 32 rows): the same
//   warp (16 rows, in-register conversion), four of them sharing each K/V
//   tile, two CTAs per SM. Run on the decode tile, an FP8 prefill (BF16 q,
//   causal N=4096, GQA 32/8, D=128) made 99.6 TFLOP/s, 0.30x BF16 K/V on
//   the 16-bit wide tile. Not yet measured.
template <int kHeadDim>
struct Sm80Tuning;

template <>
struct Sm80Tuning<32> {
  using Wide = TileConfig<32, 128, 128, 4, 2>;
  using Narrow = TileConfig<32, 16, 128, 1, 3>;
  using NarrowStream = KeyWarpTileConfig<32, 128, 3, 2, 4>;
  using NarrowPaged = NarrowStream;
  using NarrowPagedSplit = NarrowPaged;
  using NarrowPagedBatch = NarrowPaged;
  using NarrowCompact = NarrowStream;  // fits every device
  using NarrowFp8Kv = Fp8KvTileConfig<32, 16, 128, 1, 4, 3, 2>;
  using NarrowFp8KvOneCta = NarrowFp8Kv;
  using NarrowFp8KvPagedSplit = NarrowFp8Kv;
  using WideFp8Kv = Fp8KvTileConfig<32, 64, 128, 4, 2, 3>;
};

template <>
struct Sm80Tuning<64> {
  using Wide = TileConfig<64, 128, 128, 4, 2>;
  using Narrow = TileConfig<64, 16, 128, 1, 3>;
  using NarrowStream = KeyWarpTileConfig<64, 128, 3, 2, 4>;
  using NarrowPaged = NarrowStream;
  using NarrowPagedSplit = NarrowPaged;
  using NarrowPagedBatch = NarrowPaged;
  using NarrowCompact = NarrowStream;  // fits every device
  using NarrowFp8Kv = Fp8KvTileConfig<64, 16, 128, 1, 4, 3, 2>;
  using NarrowFp8KvOneCta = NarrowFp8Kv;
  using NarrowFp8KvPagedSplit = NarrowFp8Kv;
  using WideFp8Kv = Fp8KvTileConfig<64, 64, 128, 4, 2, 3>;
};

template <>
struct Sm80Tuning<96> {
  using Wide = TileConfig<96, 128, 64, 4, 2>;
  using Narrow = TileConfig<96, 16, 64, 1, 3>;
  using NarrowStream = Narrow;
  using NarrowPaged = Narrow;
  using NarrowPagedSplit = Narrow;
  using NarrowPagedBatch = Narrow;
  using NarrowCompact = Narrow;
  // Unused: no FP8 K/V instantiation at D=96 (Fp8KvTile's swizzle).
  using NarrowFp8Kv = Fp8KvTileConfig<96, 16, 64, 1, 4, 3>;
  using NarrowFp8KvOneCta = NarrowFp8Kv;
  using NarrowFp8KvPagedSplit = NarrowFp8Kv;
  using WideFp8Kv = Fp8KvTileConfig<96, 64, 64, 4, 2, 3>;
};

// An experiment's D=128 FP8 tile: FMHA_SM80_FP8KV_TILE_D128 (a CMake cache
// variable, empty by default) = "kBlockN,kMinBlocksPerSm,kRawStages[,kKeyWarps]"
// of a 16-row tile, compiled into the FP8 units and the host plan alike
// (tools/device/fp8dec3.sh compares a few against the default).
template <int kBlockN, int kMinBlocksPerSm, int kRawStages, int kKeyWarps = 1>
using Fp8KvTileD128 = Fp8KvTileConfig<128, 16, kBlockN, 1, kMinBlocksPerSm, kRawStages, kKeyWarps>;

// A one-warp 16-row D=128 decode tile: kBlockN keys, kMinBlocksPerSm
// CTAs per SM (shared memory: 4 KB of Q + kStages x 2 x kBlockN x 256
// bytes of K/V + the paged entries), kStages stages.
template <int kBlockN, int kMinBlocksPerSm, int kStages>
using DecodeTileD128 = TileConfig<128, 16, kBlockN, 1, kMinBlocksPerSm, kStages>;

// A D=128 key-warp decode tile (KeyWarpTileConfig): kBlockN keys over
// kKeyWarps warps, kMinBlocksPerSm CTAs per SM, kStages stages; kOwnKeys
// false: the CTA copies each tile.
template <int kBlockN, int kMinBlocksPerSm, int kStages, int kKeyWarps, bool kOwnKeys = true>
using KeyWarpTileD128 = KeyWarpTileConfig<128, kBlockN, kMinBlocksPerSm, kStages, kKeyWarps, kOwnKeys>;

template <>
struct Sm80Tuning<128> {
  using Wide = TileConfig<128, 128, 64, 4, 2>;
  using Narrow = TileConfig<128, 16, 64, 1, 3>;
  using NarrowStream = KeyWarpTileD128<128, 1, 3, 4>;
  using NarrowPaged = NarrowStream;
  using NarrowPagedSplit = KeyWarpTileD128<128, 1, 3, 8>;
  using NarrowPagedBatch = KeyWarpTileD128<64, 2, 3, 4>;
  using NarrowCompact = DecodeTileD128<32, 4, 3>;
#ifdef FMHA_SM80_FP8KV_D128_N
  using NarrowFp8Kv = Fp8KvTileD128<FMHA_SM80_FP8KV_D128_N, FMHA_SM80_FP8KV_D128_CTAS, FMHA_SM80_FP8KV_D128_STAGES,
                                    FMHA_SM80_FP8KV_D128_KEY_WARPS>;
#else
  using NarrowFp8Kv = Fp8KvTileD128<64, 4, 3, 2>;
#endif
  using NarrowFp8KvOneCta = Fp8KvTileD128<256, 1, 3, 8>;
  using NarrowFp8KvPagedSplit = Fp8KvTileD128<128, 3, 2, 4>;
  using WideFp8Kv = Fp8KvTileConfig<128, 64, 64, 4, 2, 3>;
};

template <>
struct Sm80Tuning<256> {
  using Wide = TileConfig<256, 128, 64, 8, 1>;
  using Narrow = TileConfig<256, 16, 32, 1, 3>;
  using NarrowStream = KeyWarpTileConfig<256, 32, 3, 2, 2>;
  using NarrowPaged = NarrowStream;
  using NarrowPagedSplit = NarrowPaged;
  using NarrowPagedBatch = NarrowPaged;
  using NarrowCompact = NarrowStream;  // fits every device
  using NarrowFp8Kv = Fp8KvTileConfig<256, 16, 32, 1, 4, 3, 2>;
  using NarrowFp8KvOneCta = NarrowFp8Kv;
  using NarrowFp8KvPagedSplit = NarrowFp8Kv;
  using WideFp8Kv = Fp8KvTileConfig<256, 64, 32, 4, 2, 3>;
};

// The 16-bit decode tile (narrow: units of <= 32 rows) of a kernel: the
// plain and softcap kernels stream K/V through NarrowPaged (a block table)
// or NarrowStream (contiguous or dense rows); the score-ops kernels (kAll:
// bias, ALiBi) keep Narrow, whose staged bias assumes two stages and one
// warp. The host plan (sm80_forward.cu) and the launch (fwd_launch.cuh)
// both read this. The plan may take NarrowCompact instead (Decode16Choice,
// with_decode16_tile).
template <int kHeadDim, bool kPaged, bool kScoreOps>
using Decode16Tile =
    std::conditional_t<kScoreOps, typename Sm80Tuning<kHeadDim>::Narrow,
                       std::conditional_t<kPaged, typename Sm80Tuning<kHeadDim>::NarrowPaged,
                                          typename Sm80Tuning<kHeadDim>::NarrowStream>>;

// Which decode tile a plain or softcap kernel runs: the host plan's choice
// (sm80_forward.cu), carried to the launch in LaunchArgs.
enum class Decode16Choice : unsigned char {
  kDefault,     // Decode16Tile: Sm80Tuning::NarrowStream / NarrowPaged
  kCompact,     // Sm80Tuning::NarrowCompact: the device has less shared memory per block than those need
  kPagedSplit,  // the plain paged kernel, few units split over long keys: Sm80Tuning::NarrowPagedSplit
  kPagedBatch,  // the plain paged kernel, more units than the default's slots: Sm80Tuning::NarrowPagedBatch
};

// Experiments (a build with FMHA_SM80_DECODE_EXPERIMENTS=ON, CMake): the
// D=128 plain kernels can be forced onto a decode tile by name,
// "kBlockN.kMinBlocksPerSm.kStages" (one-warp tiles) or
// "kBlockN.kMinBlocksPerSm.kStages.kKeyWarps" (key-warp tiles, own keys;
// a trailing "c": the CTA copies each tile): FMHA_SM80_PAGED_TILE (the
// paged one) and FMHA_SM80_STREAM_TILE (the contiguous / dense one), read
// once per process by the host plan and the launch alike; unset or
// unknown: the plan's choice. tools/device/keywarp2.sh times them. The
// candidates: the default key-warp tile with shared copies (128.1.3.4c,
// the tile of the 2026-12-02 run), 8 key warps of 16 keys (128.1.3.8), 64
// keys over 4 (64.2.3.4) and 2 (64.2.3.2) key warps at 2 CTAs per SM, and
// the one-warp tiles before them, 32.4.3 (NarrowCompact) and 16.7.3 (the
// former NarrowPagedMany); 128.1.3.4 forces NarrowStream / NarrowPaged
// itself on every grid (the plan takes NarrowPagedSplit = 128.1.3.8 and
// NarrowPagedBatch = 64.2.3.4 by grid). (64.2.4.2 would need 132 KB: not 2 CTAs per SM
// in 228 KB.) At every head dim, "narrow" forces the head dim's Narrow tile
// (one warp; the decode tile of D=32, 64 and 256 before 2026-12-02) on the
// plain kernels. The earlier sweeps (64.3.2, 32.3.4, 16.3.8, 16.6.4, 64.2.3,
// 32.6.2: docs/performance.md, "Paged decode with more tiles in flight",
// "Paged decode, a tile per shape") lost to 32.4.3 and 16.7.3.
#if FMHA_SM80_DECODE_EXPERIMENTS
constexpr const char* kDecodeTileNames[] = {"32.4.3",   "16.7.3",   "128.1.3.4c", "128.1.3.8",
                                            "64.2.3.4", "64.2.3.2", "128.1.3.4",  "narrow"};
inline int sm80_decode_tile_choice(bool paged) {
  static const int paged_choice = env_choice("FMHA_SM80_PAGED_TILE", kDecodeTileNames);
  static const int stream_choice = env_choice("FMHA_SM80_STREAM_TILE", kDecodeTileNames);
  return paged ? paged_choice : stream_choice;
}
#endif

// fn(Cfg{}) with the 16-bit decode tile of a plain or softcap kernel
// (kScoreOps false) of head dim kHeadDim, paged K/V or not: Decode16Tile,
// or NarrowCompact when `choice` says so, or for a plain paged kernel
// (kPlain, kPaged) NarrowPagedSplit / NarrowPagedBatch when `choice` says
// so, or in an experiments build a plain kernel's candidate named by the
// environment.
template <int kHeadDim, bool kPaged, bool kPlain, class Fn>
auto with_decode16_tile(Decode16Choice choice, Fn&& fn) {
#if FMHA_SM80_DECODE_EXPERIMENTS
  if constexpr (kHeadDim == 128 && kPlain) {
    switch (sm80_decode_tile_choice(kPaged)) {
      case 1: return fn(DecodeTileD128<32, 4, 3>{});
      case 2: return fn(DecodeTileD128<16, 7, 3>{});
      case 3: return fn(KeyWarpTileD128<128, 1, 3, 4, false>{});
      case 4: return fn(KeyWarpTileD128<128, 1, 3, 8>{});
      case 5: return fn(KeyWarpTileD128<64, 2, 3, 4>{});
      case 6: return fn(KeyWarpTileD128<64, 2, 3, 2>{});
      case 7: return fn(KeyWarpTileD128<128, 1, 3, 4>{});  // NarrowStream / NarrowPaged, whatever the grid
      default: break;
    }
  }
  if constexpr (kPlain) {
    if (sm80_decode_tile_choice(kPaged) == 8) return fn(typename Sm80Tuning<kHeadDim>::Narrow{});
  }
#endif
  using Tuning = Sm80Tuning<kHeadDim>;
  using Default = Decode16Tile<kHeadDim, kPaged, false>;
  if constexpr (!std::is_same<typename Tuning::NarrowCompact, Default>::value) {
    if (choice == Decode16Choice::kCompact) return fn(typename Tuning::NarrowCompact{});
  }
  if constexpr (kPaged && kPlain && !std::is_same<typename Tuning::NarrowPagedSplit, Default>::value) {
    if (choice == Decode16Choice::kPagedSplit) return fn(typename Tuning::NarrowPagedSplit{});
  }
  if constexpr (kPaged && kPlain && !std::is_same<typename Tuning::NarrowPagedBatch, Default>::value) {
    if (choice == Decode16Choice::kPagedBatch) return fn(typename Tuning::NarrowPagedBatch{});
  }
  return fn(Default{});
}

// The FP8 K/V decode tile of head dim D (either q dtype).
template <int kHeadDim>
using Fp8KvDecodeTile = typename Sm80Tuning<kHeadDim>::NarrowFp8Kv;

// Experiments (a build with FMHA_SM80_FP8KV_EXPERIMENTS=ON, CMake): the
// FP8 K/V units' plain kernels (ScoreOps::kNone) at D=128 also compile the
// candidate decode tiles below, and FMHA_SM80_FP8KV_TILE (read once per
// process, by the host plan and the launch alike) picks one by name,
// "kBlockN.kMinBlocksPerSm.kRawStages.kKeyWarps" (every layout: dense,
// contiguous and paged). Unset or unknown: Fp8KvDecodeTile. Other head dims
// keep theirs. tools/device/fp8dec4.sh times them.
//   64.3.4.4, 128.3.2.4  the best two of fp8dec3's checkpoint (+4% / +3%
//                        over the default at B=1, -5% / -24% paged ps64
//                        then; both 168 registers), the in-run references
//   256.1.3.8            one CTA per SM of 8 key warps x 32 keys (the
//                        default's warps and registers, 255): B=16 GQA 32/8
//                        (128 units) runs unsplit, B=1 in 16 splits instead
//                        of 64, as the 16-bit key-warp tile 128.1.3.4 did
//   192.1.4.12           one CTA per SM of 12 key warps x 16 keys (168
//                        registers: 64.3.4.4's warps per SM), 4 raw stages
//   256.1.3.16           one CTA per SM of 16 key warps x 16 keys (128
//                        registers)
//   128.2.3.4            two CTAs per SM of 4 key warps x 32 keys (255
//                        registers): the default's warps per SM in half the
//                        CTAs, B=16 in 2 splits
//   default              NarrowFp8Kv on every grid (the plan's choice
//                        otherwise takes NarrowFp8KvOneCta, 256.1.3.8, for
//                        grids that fit one CTA per SM)
// fp8dec3's other candidates (kw1, cta, 64.4.3.4, 32.7.3.2, 128.2.3.2) lost
// on the H200 (docs/performance.md, "FP8 KV decode, third pass") and are
// gone.
#if FMHA_SM80_FP8KV_EXPERIMENTS
constexpr const char* kFp8KvTileNames[] = {"64.3.4.4",   "128.3.2.4",  "256.1.3.8", "192.1.4.12",
                                           "256.1.3.16", "128.2.3.4",  "default"};
inline int sm80_fp8kv_tile_choice() {
  static const int choice = env_choice("FMHA_SM80_FP8KV_TILE", kFp8KvTileNames);
  return choice;
}
#endif

// Which FP8 K/V decode tile a plain kernel runs: the host plan's choice
// (sm80_forward.cu), carried to the launch in LaunchArgs.
enum class Fp8KvChoice : unsigned char {
  kDefault,  // Fp8KvDecodeTile: Sm80Tuning::NarrowFp8Kv
  kOneCta,       // Sm80Tuning::NarrowFp8KvOneCta: the unsplit grid fits one CTA per SM
  kPagedSplit,   // Sm80Tuning::NarrowFp8KvPagedSplit: paged K/V, few units split over their keys
};

// fn(Cfg{}) with the FP8 K/V decode tile of head dim kHeadDim for a plain
// kernel (kPlain) or not, over paged K/V (kPaged) or not: Fp8KvDecodeTile,
// or a plain kernel's NarrowFp8KvOneCta / a plain paged kernel's
// NarrowFp8KvPagedSplit when `choice` says so, or in an experiments build a
// plain D=128 kernel's candidate.
template <int kHeadDim, bool kPlain, bool kPaged, class Fn>
auto with_fp8kv_decode_tile(Fp8KvChoice choice, Fn&& fn) {
  using Tile = Fp8KvDecodeTile<kHeadDim>;
#if FMHA_SM80_FP8KV_EXPERIMENTS
  if constexpr (kPlain && kHeadDim == 128) {
    switch (sm80_fp8kv_tile_choice()) {
      case 1: return fn(Fp8KvTileD128<64, 3, 4, 4>{});
      case 2: return fn(Fp8KvTileD128<128, 3, 2, 4>{});
      case 3: return fn(Fp8KvTileD128<256, 1, 3, 8>{});
      case 4: return fn(Fp8KvTileD128<192, 1, 4, 12>{});
      case 5: return fn(Fp8KvTileD128<256, 1, 3, 16>{});
      case 6: return fn(Fp8KvTileD128<128, 2, 3, 4>{});
      case 7: return fn(Tile{});  // NarrowFp8Kv, whatever the grid
      default: break;
    }
  }
#endif
  using OneCta = typename Sm80Tuning<kHeadDim>::NarrowFp8KvOneCta;
  if constexpr (kPlain && !std::is_same<OneCta, Tile>::value) {
    if (choice == Fp8KvChoice::kOneCta) return fn(OneCta{});
  }
  using PagedSplit = typename Sm80Tuning<kHeadDim>::NarrowFp8KvPagedSplit;
  if constexpr (kPlain && kPaged && !std::is_same<PagedSplit, Tile>::value) {
    if (choice == Fp8KvChoice::kPagedSplit) return fn(PagedSplit{});
  }
  return fn(Tile{});
}

// Every instantiated head dim (the build's list, FMHA_SM80_INSTANCES) has
// its tuning, keyed by the right head dim.
#define FMHA_SM80_TUNED_(D)                                                                        \
  static_assert(Sm80Tuning<D>::Wide::kHeadDim == D && Sm80Tuning<D>::Narrow::kHeadDim == D &&   \
                    Sm80Tuning<D>::NarrowStream::kHeadDim == D && Sm80Tuning<D>::NarrowPaged::kHeadDim == D && \
                    Sm80Tuning<D>::NarrowCompact::kHeadDim == D &&                            \
                    Sm80Tuning<D>::NarrowPagedSplit::kHeadDim == D &&                         \
                    Sm80Tuning<D>::NarrowPagedBatch::kHeadDim == D &&                         \
                    Sm80Tuning<D>::NarrowFp8Kv::kHeadDim == D &&                                \
                    Sm80Tuning<D>::NarrowFp8KvOneCta::kHeadDim == D &&                          \
                    Sm80Tuning<D>::NarrowFp8KvPagedSplit::kHeadDim == D &&                      \
                    Sm80Tuning<D>::WideFp8Kv::kHeadDim == D, \
                "Sm80Tuning<" #D "> is missing or mis-keyed");
FMHA_SM80_HEAD_DIMS(FMHA_SM80_TUNED_)
#undef FMHA_SM80_TUNED_

}  // namespace fmha::cuda::sm80
