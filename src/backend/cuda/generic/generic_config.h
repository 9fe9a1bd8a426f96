// The general CUDA fallback's tuning table and launch plan.
//
// Tuning is data: each GenericConfig names a head-dim bucket and the shape of
// one CTA's work; the host plan (supports, workspace, launch) and the kernel
// read the same constexpr values, so they cannot disagree on a tile size or
// on the shared memory a CTA takes.
//
// One CTA = kWarps warps over a block of kRowsPerWarp * kWarps query rows of
// one (batch, query head). Each warp owns kRowsPerWarp rows; a lane owns keys
// lane + 32 t (t < kKeysPerLane) of the K/V tile in Q.K^T and head dims
// lane + 32 c (c < kHeadDimMax / 32) of the output in P.V.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/common/fwd_params.h"
#include "backend/cuda/common/split_combine.h"
#include "core/device_info.h"
#include "core/problem.h"

namespace fmha::cuda::generic {

struct GenericConfig {
  int head_dim_max;   // bucket: runs head_dim <= this (multiple of 32)
  int rows_per_warp;  // query rows one warp owns
  int keys_per_lane;  // keys of the tile one lane scores; tile = 32 * this
  int warps;          // warps per CTA
};

constexpr int kThreadsPerWarp = 32;

// Shared memory of one CTA, in bytes (all tiles held as float):
//   Q   [rows][head_dim_max]                         pre-scaled queries
//   K   [head_dim_max / 4][keys + 1] float4          transposed, 4 dims a slot,
//                                                    one float4 of padding a
//                                                    row so staging stores are
//                                                    conflict-free
//   V   [keys][head_dim_max]
//   P   [warps][rows_per_warp][keys]                 probabilities of a tile
constexpr size_t smem_bytes(const GenericConfig& c) {
  const size_t rows = static_cast<size_t>(c.rows_per_warp) * c.warps;
  const size_t keys = static_cast<size_t>(c.keys_per_lane) * kThreadsPerWarp;
  const size_t d = static_cast<size_t>(c.head_dim_max);
  return sizeof(float) * (rows * d + (d / 4) * (keys + 1) * 4 + keys * d + rows * keys);
}

// The table, best first within a bucket; a smaller variant follows each
// large one for devices with less shared memory per block (sm_86/sm_89 opt
// in to 99 KiB, sm_80 to 163 KiB, sm_90 to 227 KiB). Shared-memory traffic
// per FMA in Q.K^T is about 1/keys_per_lane + 4/rows_per_warp of the FMA
// issue rate (a broadcast Q float4 serves keys_per_lane * 4 FMAs, a K float4
// slot rows_per_warp * 4), so rows and keys are as large as registers
// (rows * head_dim_max / 32 accumulators) and shared memory allow.
//
// Measured on an H200 (docs/performance.md): {128, 16, 2, 4} runs causal
// B1 H32 N4096 D128 F16 in 10.7 ms, 12.8 TFLOP/s of the 67 FP32 peak, two
// CTAs (8 warps) a multiprocessor.
constexpr GenericConfig kConfigs[] = {
    {64, 16, 2, 4},   // 64.3 KiB
    {128, 16, 2, 4},  // 112.5 KiB: two CTAs a multiprocessor on sm_90
    {128, 8, 2, 4},   // 88.5 KiB
    {256, 8, 1, 4},   // 101 KiB
    {256, 4, 1, 4},   // 83 KiB
};
constexpr int kConfigCount = static_cast<int>(sizeof kConfigs / sizeof kConfigs[0]);

// Every bucket has a config within the 99 KiB a block of sm_86/sm_89 may opt
// in to, so cuda_generic runs on every sm_80+ device.
constexpr size_t kSmemSm86 = 99 * 1024;
static_assert(smem_bytes(kConfigs[0]) <= kSmemSm86 && smem_bytes(kConfigs[2]) <= kSmemSm86 &&
                  smem_bytes(kConfigs[4]) <= kSmemSm86,
              "a bucket lost its config for 99 KiB devices");

// Resident CTAs a multiprocessor, for the split heuristic (common/
// fwd_params.h): what the configs' shared memory allows on sm_90 (a second,
// partial wave of CTAs doubled the time of a decode step).
constexpr int kCtasPerSm = 2;
static_assert(kConfigs[kConfigCount - 1].head_dim_max <= kCombineMaxHeadDim, "the shared combine's head dims");
// Largest grid launched; work items beyond it are taken by a grid-stride
// loop, so no problem size can overflow a grid dimension.
constexpr int64_t kMaxGrid = int64_t{1} << 30;

// What one forward will launch: units are (batch, query head) pairs (no GQA
// packing: pack = 1), query blocks of rows_per_warp * warps rows.
struct GenericPlan {
  int config = -1;       // index into kConfigs, -1 = none fits
  FwdGrid grid;          // units, query blocks, key splits
  size_t workspace = 0;  // bytes: the split partials (common/split_combine.h)
};

// The plan for p on dev. plan.config == -1 when no config's shared memory
// fits the device.
GenericPlan make_plan(const Problem& p, const DeviceInfo& dev);

// Enqueue plan's attention kernel (not the split combine) on ctx.stream for
// one instance type (one translation unit each: generic_f16.cu,
// generic_bf16.cu, generic_f32.cu); each reads q, k/v and o in the dtypes
// prm names (FP8 decoded), so launch_f16 also serves all-FP8 problems.
fmha_status launch_f16(const FwdParams& prm, const GenericPlan& plan, const LaunchContext& ctx);
fmha_status launch_bf16(const FwdParams& prm, const GenericPlan& plan, const LaunchContext& ctx);
fmha_status launch_f32(const FwdParams& prm, const GenericPlan& plan, const LaunchContext& ctx);

}  // namespace fmha::cuda::generic
