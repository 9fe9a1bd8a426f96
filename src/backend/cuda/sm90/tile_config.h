// Tile shapes of the Hopper family (cuda_sm90_ws): tuning is data, read by
// the kernel (fwd_kernel.cuh) and the host side (sm90_forward.cu).
#pragma once

#include "backend/cuda/sm90/instances.h"  // generated: the instantiations

namespace fmha::cuda::sm90 {

// Whether a producer warpgroup of producer_regs and `consumers` warpgroups
// of consumer_regs registers per thread fit what a CTA of `threads` got at
// launch: setmaxnreg moves registers within that pool, 64K / threads per
// thread rounded down to a multiple of 8. Asking for more than it holds
// makes the consumers' setmaxnreg.inc wait forever (seen on the H200 with a
// 32-register producer beside two 240-register consumers: 65536 > 168 x 384
// = 64512). The 16-bit and the FP8 tile configs both assert it.
constexpr bool register_split_fits(int threads, int producer_regs, int consumers, int consumer_regs) {
  return 128 * producer_regs + 128 * consumers * consumer_regs <= 65536 / threads / 8 * 8 * threads;
}

// A CTA owns kBlockM = 64 * kConsumers query rows of one (batch, head):
// warpgroup 0 produces (one thread issues the copy engine's loads), each of
// the 2 or 3 consumer warpgroups owns 64 rows and runs wgmma m64nNk16. K/V tiles of
// kBlockN keys stream through kStages shared-memory stages. Every operand
// tile is a run of 128-byte-swizzled [rows][64] panels (wgmma.cuh).
template <int kHeadDim_, int kBlockN_, int kStages_, int kConsumers_ = 2, bool kQInRegs_ = false,
          bool kPingPong_ = true>
struct TileConfig {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kConsumers = kConsumers_;
  // Q K^T with A = Q from registers (loaded once per tile with ldmatrix)
  // instead of from shared memory: each k16 step then reads only K's 4 KB
  // from shared memory, not Q's 2 KB too, and Q's buffer is free as soon as
  // the consumers hold it. Costs D / 4 registers per thread: the softcap
  // kernels, which need more for the tanh, keep Q in shared memory
  // (fwd_kernel.cuh).
  static constexpr bool kQInRegs = kQInRegs_;
  static constexpr int kBlockM = 64 * kConsumers;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;
  // The two consumers alternate their GEMMs (named barriers), so one's
  // softmax overlaps the other's tensor-core work (FA3's ping-pong). H200,
  // causal FP16 D=128 N=16384: 541-544 TFLOP/s with, 487-490 without.
  static constexpr bool kPingPong = kPingPong_;
  // A persistent grid (one CTA per SM; after its first tile a CTA takes the
  // next from an atomic counter in the workspace) overlaps a tile's epilogue
  // with the next tile's loads. A static walk (tiles blockIdx.x + k
  // gridDim.x) lost the hardware's dynamic balancing of uneven causal tiles:
  // 510-513 TFLOP/s against 541-544 with one CTA per tile (same shape). The
  // dynamic one, against one CTA per tile in the same run (bench_cuda, FP16
  // D=128 causal N=4096 / 8192 / 16384, non-causal 8192, D=64 causal 8192):
  // 464-473 / 491-492 / 506-507 / 509 / 360 TFLOP/s against 444-450 /
  // 483-486 / 501-508 / 501 / 344-349.
  static constexpr bool kPersistent = true;
  // Keep a NaN / inf in V from reaching rows that mask its key (fwd_kernel.cuh).
  // Its cost, against a build without it (H200, FP16 D=128, bench_cuda,
  // same run): causal N=8192 496 vs 512 TFLOP/s, N=16384 518 vs 522,
  // non-causal N=8192 516 vs 521.
  static constexpr bool kGuardNonFiniteV = true;
  // (Measured and removed, docs/performance.md, "Issue 8: cuda_sm90_ws's
  // plain 16-bit kernel toward cuDNN": the softmax row sums on the tensor
  // core, a wgmma of P against a ones tile per k16 step of P V, and the
  // wgmma descriptors advanced by 32-bit adds; both within the run's noise
  // of this kernel on the H200.)
  static constexpr int kThreads = 128 * (kConsumers + 1);
  static constexpr int kPanels = kHeadDim / 64;  // 64-column panels of a Q/K/V/O row

  static constexpr int kQBytes = kBlockM * kHeadDim * 2;
  static constexpr int kKVBytes = kBlockN * kHeadDim * 2;  // one K or V stage
  // Q, then kStages K stages, then kStages V stages, then the O staging tile
  // when it fits beside them (else O is staged in the Q tile and the next
  // tile's Q waits for the store), then the mbarriers; plus 1024 bytes to
  // align the base to a swizzle atom.
  // The barriers: Q's full / empty, K's and V's per stage, the bias ring's
  // per stage and consumer (room for kMaxBiasStages), the tile slot, then
  // the work tile as the producer derived it (fwd_kernel.cuh, TileWork).
  static constexpr int kMaxBiasStages = 2;
  static constexpr int kTileWorkBytes = 128;
  static constexpr int kBarrierBytes = 8 * (2 + 4 * kStages + 2 * kMaxBiasStages * kConsumers) + 8 + kTileWorkBytes;
  static constexpr int kSmemMax = 227 * 1024;
  static constexpr bool kSeparateO = 1024 + 2 * kQBytes + 2 * kStages * kKVBytes + kBarrierBytes <= kSmemMax;
  static constexpr int kSmemBytes = 1024 + kQBytes * (kSeparateO ? 2 : 1) + 2 * kStages * kKVBytes + kBarrierBytes;

  // The score-transform kernel (ScoreOps::kAll) stages a 16-bit bias tensor
  // through the copy engine (fwd_kernel.cuh): per stage, one [64 rows]
  // [kBlockN keys] tile per consumer, as kBlockN / 64 128-byte-swizzled
  // panels (the layout wgmma.cuh gives Q and K), after the barriers at the
  // next 1024-byte boundary, in as many stages (up to kMaxBiasStages) as fit
  // beside the rest. D=64: 2 stages of 48 KB; D=128: 1 stage of 32 KB (the
  // K/V ring, Q and O take 192 KB); D=256: 2 stages of 16 KB. The plain
  // kernels ask for kSmemBytes alone.
  static constexpr int kBiasBytes = 64 * kBlockN * 2;  // one consumer's tile
  static constexpr int kBiasStageBytes = kConsumers * kBiasBytes;
  static constexpr int kBiasOffset = (kSmemBytes - 1024 + 1023) / 1024 * 1024;
  static constexpr int kBiasStages = 1024 + kBiasOffset + 2 * kBiasStageBytes <= kSmemMax ? 2
                                     : 1024 + kBiasOffset + kBiasStageBytes <= kSmemMax   ? 1
                                                                                          : 0;
  static constexpr int kSmemBytesBias = 1024 + kBiasOffset + kBiasStages * kBiasStageBytes;

  // Register split (setmaxnreg): 128 * kProducerRegs + 128 * kConsumers *
  // kConsumerRegs <= 64K registers.
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = kConsumers == 2 ? 240 : 160;

  static_assert(kConsumers == 2 || kConsumers == 3, "ping-pong ring of 2 or 3 consumers");
  static_assert(!kQInRegs || kSeparateO, "an early Q release needs O staged outside Q's buffer");
  static_assert(kHeadDim % 64 == 0, "whole 128-byte panels");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "k16 steps of P V; one copy box of rows");
  static_assert(register_split_fits(kThreads, kProducerRegs, kConsumers, kConsumerRegs),
                "setmaxnreg cannot hand out more registers than the launch allocated");
};

// Per head dim (H200, 132 SMs, 227 KB shared memory per block); the
// measurements behind each choice are in docs/performance.md.
//   D=64:  192 x 128, 2 stages, 3 consumers (FA3's shape): 24 + 64 KB.
//          Causal N=8192: 380-381 TFLOP/s against 352-358 with 128 x 128
//          and 2 consumers (the softmax, not the GEMMs, bounds D=64, and a
//          third warpgroup has one more softmax to overlap).
//   D=128: 128 x 128, 2 stages: 32 + 128 KB (FA3's causal shape), Q in
//          registers: +0.5-2% (3 interleaved rounds, causal N=4096-16384,
//          BF16, non-causal, batched GQA). Tried
//          and not taken (same run): 3 stages with O staged in Q (-2 to -3%),
//          128 x 176 key tiles for unmasked problems (equal: 513 vs 516).
//   D=256: 128 x 80, 2 stages: 64 + 160 KB, O staged in Q's buffer (O: 128
//          accumulator registers; FA3's D=256 shape). Against 128 x 64
//          (3 interleaved rounds, causal FP16): N=8192 +3.8% (588 vs 567
//          TFLOP/s), 2048 -1.8% (within the rounds' spread). 3 stages of 64
//          keys and tiles of 96 keys need 256 KB and do not fit.
template <int kHeadDim>
struct Sm90Tuning;
template <>
struct Sm90Tuning<64> {
  using Config = TileConfig<64, 128, 2, 3>;
};
template <>
struct Sm90Tuning<128> {
  using Config = TileConfig<128, 128, 2, 2, true>;
};
template <>
struct Sm90Tuning<256> {
  using Config = TileConfig<256, 80, 2>;
};

// The score-ops kernel's tile (ScoreOps::kAll: bias, ALiBi, softcap,
// descales), where it differs from the plain kernel's. D=64: 2 consumers of
// 240 registers, not 3 of 160: with the bias, ALiBi and softcap code the
// 3-consumer kernel spilled 11.8 KB (ptxas, f16, sm_90a; 2 consumers: 0.46
// KB, against 1.8 KB at D=128). D=256: 64-key tiles whatever the plain
// kernel's (its bias tiles are whole 64-key panels, and a bias stage must
// fit beside Q and the K/V ring).
template <int kHeadDim>
struct Sm90ScoreOpsTuning {
  using Config = typename Sm90Tuning<kHeadDim>::Config;
};
template <>
struct Sm90ScoreOpsTuning<64> {
  using Config = TileConfig<64, 128, 2, 2>;
};
template <>
struct Sm90ScoreOpsTuning<256> {
  using Config = TileConfig<256, 64, 2>;
};

// The plain serving kernel's tile (ragged, seqused_k and paged layouts),
// where it differs from the dense one's: D=256 keeps 64-key tiles, since a
// block table's pages must tile a key tile or be tiled by it (sm90_forward.cu)
// and the page sizes in use (16 to 256, powers of 2) do not tile 80 keys.
template <int kHeadDim>
struct Sm90ServingTuning {
  using Config = typename Sm90Tuning<kHeadDim>::Config;
};
template <>
struct Sm90ServingTuning<256> {
  using Config = TileConfig<256, 64, 2>;
};

// Every instantiated head dim (the build's list, FMHA_SM90_INSTANCES) has
// its tuning, keyed by the right head dim.
#define FMHA_SM90_TUNED_(D)                                                                                    \
  static_assert(Sm90Tuning<D>::Config::kHeadDim == D, "Sm90Tuning<" #D "> is missing or mis-keyed");           \
  static_assert(Sm90ScoreOpsTuning<D>::Config::kHeadDim == D, "Sm90ScoreOpsTuning<" #D "> is mis-keyed");      \
  static_assert(Sm90ServingTuning<D>::Config::kHeadDim == D, "Sm90ServingTuning<" #D "> is mis-keyed");        \
  static_assert(Sm90ScoreOpsTuning<D>::Config::kBiasStages >= 1, "a bias stage must fit beside Q, K/V and O"); \
  static_assert(Sm90ScoreOpsTuning<D>::Config::kBlockN % 64 == 0, "whole 64-key panels of a bias tile");
FMHA_SM90_HEAD_DIMS(FMHA_SM90_TUNED_)
#undef FMHA_SM90_TUNED_

}  // namespace fmha::cuda::sm90
