// The shared-memory tile layout the CUDA families stage 16-bit tiles in: a
// tile is [rows][kPitch] elements (kPitch a multiple of 64) whose 16-byte
// chunk c of row r is stored at chunk c ^ (r & 7). Eight consecutive rows
// read at one chunk (an ldmatrix 8x8), or eight consecutive chunks of one
// row (a quarter warp of 16-byte copies), then touch 8 distinct 16-byte bank
// groups: no bank conflicts, no padding.
#pragma once

#include <cstdint>

namespace fmha::cuda {

// Byte offset of (row, 16-byte chunk) in a swizzled tile of kPitch 2-byte
// elements per row (chunk ^ (row & 7) stays inside the row).
template <int kPitch>
__device__ __forceinline__ uint32_t swizzle(int row, int chunk) {
  static_assert(kPitch % 64 == 0, "8 chunks per swizzle group");
  return static_cast<uint32_t>(row * kPitch * 2 + ((chunk ^ (row & 7)) << 4));
}

}  // namespace fmha::cuda
