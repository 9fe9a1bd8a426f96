// Tile shapes of the Hopper family's FP8 kernel (fwd_fp8_kernel.cuh: q, k,
// v all e4m3 or e5m2 on wgmma m64nNk32, o F16 or BF16), read by the kernel
// and the host side (sm90_forward.cu), as tile_config.h is for 16-bit.
#pragma once

#include <cstdlib>
#include <cstring>

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
// kRowSumMma: the softmax's row sums come from the P V MMA instead of one
// FADD per probability: each V^T panel is followed by an 8-row atom whose
// first row is ones (written once per CTA, never by the copy engine), so
// P V's N = kHeadDim + 8 and O's column kHeadDim is the row sum of the very
// FP8 P that P V used (the softmax is issue-bound: docs/performance.md).
template <int kHeadDim_, int kBlockN_, int kStages_, bool kQInRegs_ = false, bool kRowSumMma_ = false>
struct Fp8TileConfig {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kConsumers = 2;
  static constexpr int kBlockM = 64 * kConsumers;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;
  static constexpr bool kQInRegs = kQInRegs_;
  static constexpr bool kRowSumMma = kRowSumMma_;
  static constexpr bool kPingPong = true;
  static constexpr bool kPersistent = true;
  static constexpr int kThreads = 128 * (kConsumers + 1);

  static constexpr int kQBytes = kBlockM * kHeadDim;   // 1-byte elements
  static constexpr int kKVBytes = kBlockN * kHeadDim;  // one K stage; the bytes the copy engine writes per V^T stage
  static constexpr int kVFullPanels = kBlockN / 128;   // V^T panels of 128 keys
  static constexpr int kVTailKeys = kBlockN % 128;     // 0, or 64 keys in the 64-byte swizzle
  static constexpr int kOnesRows = kRowSumMma ? 8 : 0;  // the ones atom after each V^T panel
  static constexpr int kPvN = kHeadDim + kOnesRows;     // N of the P V MMA
  static constexpr int kVPanelBytes = kPvN * 128;       // a 128-key panel (and its ones atom)
  static constexpr int kVTailBytes = kPvN * 64;         // the 64-key panel (and its ones atom)
  static constexpr int kVBytes =                        // one V^T stage, 1024-aligned
      (kVFullPanels * kVPanelBytes + (kVTailKeys ? kVTailBytes : 0) + 1023) / 1024 * 1024;
  static constexpr int kOBytes = kBlockM * kHeadDim * 2;
  static constexpr int kOPanels = kHeadDim / 64;
  static constexpr int kBarrierBytes = 8 * (2 + 4 * kStages) + 8;  // + the tile slot
  static constexpr int kSmemMax = 227 * 1024;
  static constexpr int kSmemBytes = 1024 + kQBytes + kStages * (kKVBytes + kVBytes) + kOBytes + kBarrierBytes;

  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = 240;

  static_assert(kHeadDim == 128, "one 128-byte panel per row of Q and K (other widths need other swizzles)");
  static_assert(kBlockN % 64 == 0 && kBlockN <= 256 && (kVTailKeys == 0 || kVTailKeys == 64),
                "V^T tiles of 128-key panels and at most one 64-key panel; one copy box of K rows");
  static_assert(kSmemBytes <= kSmemMax, "shared memory per block");
  static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
  static_assert(128 * kProducerRegs + 128 * kConsumers * kConsumerRegs <= kLaunchRegs * kThreads,
                "setmaxnreg cannot hand out more registers than the launch allocated");
};

// Per head dim (H200). D=128: 128 x 192 tiles, 3 stages of K (24 KB) and
// V^T (26 KB with the ones atoms): 16 + 150 + 32 (O) KB (FA3 picks 128 x 192
// for FP8 with V stored column-major: fewer, longer key tiles amortize the
// per-tile softmax reductions, barriers and waits), row sums on the MMA.
// The first device run compares it with Alt1 (the same without the row-sum
// MMA) and Alt2 (128 x 128, Q in registers): FMHA_SM90_FP8_TILE=192s or 128
// picks them (an experiment knob for the benchmark, read once per process
// by the host plan and the launch alike).
template <int kHeadDim>
struct Sm90Fp8Tuning;
template <>
struct Sm90Fp8Tuning<128> {
  using Config = Fp8TileConfig<128, 192, 3, false, true>;
  using Alt1 = Fp8TileConfig<128, 192, 3>;
  using Alt2 = Fp8TileConfig<128, 128, 3, true>;
};

// 0: Config, 1: Alt1, 2: Alt2.
inline int sm90_fp8_tile_choice() {
  static const int choice = [] {
    const char* v = std::getenv("FMHA_SM90_FP8_TILE");
    if (v == nullptr) return 0;
    return std::strcmp(v, "192s") == 0 ? 1 : std::strcmp(v, "128") == 0 ? 2 : 0;
  }();
  return choice;
}

}  // namespace fmha::cuda::sm90
