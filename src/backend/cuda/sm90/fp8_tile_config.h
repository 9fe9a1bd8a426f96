// Tile shapes of the Hopper family's FP8 kernel (fwd_fp8_kernel.cuh: q, k,
// v all e4m3 or e5m2 on wgmma m64nNk32, o F16 or BF16), read by the kernel
// and the host side (sm90_forward.cu), as tile_config.h is for 16-bit.
#pragma once

namespace fmha::cuda::sm90 {

// The FP8 wgmma reads both operands K-major: Q [rows][d] and K [keys][d] as
// stored, and for O = P V the transposed V^T [d][keys], which the caller
// stores (v.strides[2] = 1) and the copy engine loads as is. Every operand
// tile is one 128-byte-swizzled panel: a row of Q or K is kHeadDim = 128
// bytes, a row of V^T is kBlockN = 128 keys. O is staged in 16-bit [rows][64]
// panels (kHeadDim / 64 of them) for the copy engine's store.
// Warpgroup 0 produces, two consumers own 64 query rows each (ping-pong, a
// persistent grid: tile_config.h has the measurements behind both).
template <int kHeadDim_, int kBlockN_, int kStages_>
struct Fp8TileConfig {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kConsumers = 2;
  static constexpr int kBlockM = 64 * kConsumers;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;
  static constexpr bool kPingPong = true;
  static constexpr bool kPersistent = true;
  static constexpr int kThreads = 128 * (kConsumers + 1);

  static constexpr int kQBytes = kBlockM * kHeadDim;   // 1-byte elements
  static constexpr int kKVBytes = kBlockN * kHeadDim;  // one K or one V^T stage
  static constexpr int kOBytes = kBlockM * kHeadDim * 2;
  static constexpr int kOPanels = kHeadDim / 64;
  static constexpr int kBarrierBytes = 8 * (2 + 4 * kStages) + 8;  // + the tile slot
  static constexpr int kSmemMax = 227 * 1024;
  static constexpr int kSmemBytes = 1024 + kQBytes + 2 * kStages * kKVBytes + kOBytes + kBarrierBytes;

  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = 240;

  static_assert(kHeadDim == 128 && kBlockN == 128,
                "one 128-byte panel per row of Q, K and V^T (other widths need 64-byte swizzles or more panels)");
  static_assert(kSmemBytes <= kSmemMax, "shared memory per block");
  static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
  static_assert(128 * kProducerRegs + 128 * kConsumers * kConsumerRegs <= kLaunchRegs * kThreads,
                "setmaxnreg cannot hand out more registers than the launch allocated");
};

// Per head dim (H200). D=128: 128 x 128 tiles (as 16-bit), 3 stages of K
// and V^T (16 KB each): 16 + 96 + 32 (O) KB.
template <int kHeadDim>
struct Sm90Fp8Tuning;
template <>
struct Sm90Fp8Tuning<128> {
  using Config = Fp8TileConfig<128, 128, 3>;
};

}  // namespace fmha::cuda::sm90
