// Tensor maps for the copy engine (TMA), built on the host per call and
// passed to kernels by value as __grid_constant__ parameters, so a captured
// CUDA graph keeps working. cuTensorMapEncodeTiled is a driver function; it
// is looked up at run time through the runtime's driver entry point, so
// libfmha gains no link-time dependency on libcuda.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "fmha/fmha.h"

namespace fmha::cuda::sm90 {

// A strided 4-D view [d3][d2][d1][d0] of 2-byte (or, fp8, 1-byte) elements
// (d0 contiguous): for attention [batch][head][seq][head_dim] (an FP8 V
// stored transposed: [batch][head][head_dim][seq]); a matrix is
// [1][1][rows][cols].
struct Tensor4d {
  const void* data = nullptr;
  int64_t dims[4] = {1, 1, 1, 1};     // innermost first: {d0, d1, d2, d3}
  int64_t strides[3] = {0, 0, 0};     // elements, of d1, d2, d3
  bool bf16 = false;
  bool fp8 = false;  // 1-byte elements (the copy engine moves bytes; a box row is 128 of them)
};

// Encodes `t` for loads (and stores) of boxes {64, box_rows, 1, 1} (FP8:
// {128, box_rows, 1, 1}, one 128-byte row either way) into the
// 128-byte-swizzled panel layout of wgmma.cuh; elements past the end read
// as zero. Needs: data 16-byte aligned, strides in bytes multiples of 16
// below 2^40, dims below 2^32, box_rows <= 256. On failure returns an
// error status with the driver's code in the thread's message.
// box_bytes 64: boxes of 64-byte rows in the 64-byte swizzle (an FP8 V^T
// tile's last 64 keys).
fmha_status make_panel_map(const Tensor4d& t, int box_rows, CUtensorMap* out, int box_bytes = 128);

// What make_panel_map needs of an operand, as a registry reason (null = ok).
const char* panel_map_unsupported(const Tensor4d& t);

}  // namespace fmha::cuda::sm90
