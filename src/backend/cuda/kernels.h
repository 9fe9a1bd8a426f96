// The CUDA kernel families and their registry hooks (see
// dispatch/registry.cpp for the rows that use them). Each family provides
// supports (null = runs, else a reason), workspace bytes and run.
#pragma once

#include <cstddef>

#include "core/device_info.h"
#include "core/problem.h"

namespace fmha::cuda {

// Tensor-core family for sm_80 and newer: mma.sync m16n8k16, ldmatrix,
// cp.async multi-stage K/V pipeline (backend/cuda/sm80/).
const char* sm80_supports(const Problem& p, const DeviceInfo& dev);
size_t sm80_workspace_bytes(const Problem& p, const DeviceInfo& dev);
// explain's line on the plan: the tile (its tuning entry's name), units,
// key splits, CTAs.
const char* sm80_describe(const Problem& p, const DeviceInfo& dev, char* buf, size_t len);
fmha_status sm80_forward(const Problem& p, const LaunchContext& ctx);

// Hopper family for compute capability 9.0 exactly (sm_90a machine code):
// wgmma, TMA, warp-specialized producer/consumer warpgroups
// (backend/cuda/sm90/). declines: problems where cuda_sm80_tc is faster.
const char* sm90_supports(const Problem& p, const DeviceInfo& dev);
const char* sm90_declines(const Problem& p, const DeviceInfo& dev);
size_t sm90_workspace_bytes(const Problem& p, const DeviceInfo& dev);
fmha_status sm90_forward(const Problem& p, const LaunchContext& ctx);

// General fallback: exact, slower; any head dim up to 256, any strides and
// alignment, F16/BF16/F32 (backend/cuda/generic/).
const char* generic_supports(const Problem& p, const DeviceInfo& dev);
size_t generic_workspace_bytes(const Problem& p, const DeviceInfo& dev);
fmha_status generic_forward(const Problem& p, const LaunchContext& ctx);

}  // namespace fmha::cuda
