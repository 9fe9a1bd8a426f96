// Tile shapes of the Hopper family's FP8 kernel (fwd_fp8_kernel.cuh: q, k,
// v all e4m3 or e5m2 on wgmma m64nNk32, o F16 or BF16), read by the kernel
// and the host side (sm90_forward.cu), as tile_config.h is for 16-bit.
#pragma once

#include "backend/cuda/common/env_choice.h"
#include "backend/cuda/sm90/instances.h"  // generated: FMHA_SM90_FP8_EXPERIMENTS
#include "backend/cuda/sm90/tile_config.h"  // register_split_fits

namespace fmha::cuda::sm90 {

// The FP8 wgmma reads both operands K-major: Q [rows][d] and K [keys][d] as
// stored, and for O = P V the transposed V^T [d][keys], which the caller
// stores (v.strides[2] = 1) and the copy engine loads as is. A row of Q or
// K is kHeadDim = 128 bytes: one 128-byte-swizzled panel. A V^T tile is
// kBlockN / 128 such panels of 128 keys, then, for kBlockN % 128 = 64, one
// panel of 64 keys in the 64-byte swizzle. O is staged in 16-bit [rows][64]
// panels (kHeadDim / 64 of them) for the copy engine's store.
// Warpgroup 0 produces, two consumers own 64 query rows each (ping-pong, a
// persistent grid: tile_config.h has the measurements behind both).
// kQInRegs: Q K^T with A = Q from registers (16 per thread at D=128; Q's
// buffer goes back to the producer as soon as the consumers hold it).
template <int kHeadDim_, int kBlockN_, int kStages_, bool kQInRegs_ = false>
struct Fp8TileConfig {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kConsumers = 2;
  static constexpr int kBlockM = 64 * kConsumers;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;
  static constexpr bool kQInRegs = kQInRegs_;
  static constexpr bool kPingPong = true;
  static constexpr bool kPersistent = true;
  static constexpr int kThreads = 128 * (kConsumers + 1);

  static constexpr int kQBytes = kBlockM * kHeadDim;   // 1-byte elements
  static constexpr int kKVBytes = kBlockN * kHeadDim;  // one K stage; the bytes the copy engine writes per V^T stage
  static constexpr int kVFullPanels = kBlockN / 128;   // V^T panels of 128 keys
  static constexpr int kVTailKeys = kBlockN % 128;     // 0, or 64 keys in the 64-byte swizzle
  static constexpr int kVPanelBytes = kHeadDim * 128;  // a 128-key panel
  static constexpr int kVTailBytes = kHeadDim * 64;    // the 64-key panel
  static constexpr int kVBytes =                       // one V^T stage, 1024-aligned
      (kVFullPanels * kVPanelBytes + (kVTailKeys ? kVTailBytes : 0) + 1023) / 1024 * 1024;
  static constexpr int kOBytes = kBlockM * kHeadDim * 2;
  static constexpr int kOPanels = kHeadDim / 64;
  static constexpr int kBarrierBytes = 8 * (2 + 4 * kStages) + 8;  // + the tile slot
  static constexpr int kSmemMax = 227 * 1024;
  static constexpr int kSmemBytes = 1024 + kQBytes + kStages * (kKVBytes + kVBytes) + kOBytes + kBarrierBytes;
  static constexpr int kSmemBytesBias = kSmemBytes;  // no bias ring: FP8 inputs with a bias are refused

  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = 240;

  static_assert(kHeadDim == 128, "one 128-byte panel per row of Q and K (other widths need other swizzles)");
  static_assert(kBlockN % 64 == 0 && kBlockN <= 256 && (kVTailKeys == 0 || kVTailKeys == 64),
                "V^T tiles of 128-key panels and at most one 64-key panel; one copy box of K rows");
  static_assert(kSmemBytes <= kSmemMax, "shared memory per block");
  static_assert(register_split_fits(kThreads, kProducerRegs, kConsumers, kConsumerRegs),
                "setmaxnreg cannot hand out more registers than the launch allocated");
};

// Per head dim (H200). D=128: 128 x 128 tiles, 3 stages of K and V^T (16 KB
// each): 16 + 96 + 32 (O) KB, Q K^T from shared memory, row sums in the
// softmax: the shape the first device run checked (docs/performance.md:
// 697 TFLOP/s causal N=8192, 1.23x BF16). A build with
// FMHA_SM90_FP8_EXPERIMENTS=ON (CMake) also compiles the candidates below
// and FMHA_SM90_FP8_TILE (read once per process, by the host plan and the
// launch alike) picks one: 128q (Q in registers), 192 (128 x 192: FA3's
// shape for column-major V); both within 1-4% of the default on the H200.
// (Row sums on the P V MMA, 128r / 192r, measured wrong, rel-L2 up to 0.15,
// and were removed: docs/performance.md.)
template <int kHeadDim>
struct Sm90Fp8Tuning;
template <>
struct Sm90Fp8Tuning<128> {
  using Config = Fp8TileConfig<128, 128, 3>;
  using Q128 = Fp8TileConfig<128, 128, 3, true>;
  using N192 = Fp8TileConfig<128, 192, 3>;
};

#if FMHA_SM90_FP8_EXPERIMENTS
// 0: Config; 1, 2: 128q, 192.
inline int sm90_fp8_tile_choice() {
  static constexpr const char* kNames[] = {"128q", "192"};
  static const int choice = env_choice("FMHA_SM90_FP8_TILE", kNames);
  return choice;
}
#endif

// fn(Cfg{}) with the tile config of an FP8 problem of head dim kHeadDim:
// the one list the host plan (sm90_forward.cu) and the launch
// (fwd_fp8_launch.cuh) both read.
template <int kHeadDim, class Fn>
auto with_fp8_config(Fn&& fn) {
  using Tuning = Sm90Fp8Tuning<kHeadDim>;
#if FMHA_SM90_FP8_EXPERIMENTS
  switch (sm90_fp8_tile_choice()) {
    case 1: return fn(typename Tuning::Q128{});
    case 2: return fn(typename Tuning::N192{});
    default: break;
  }
#endif
  return fn(typename Tuning::Config{});
}

}  // namespace fmha::cuda::sm90
