// Host-side entry of one sm90 instantiation (dtype x head dim). Each
// generated fwd_<dtype>_d<D>.cu (sm90/fwd_instance.cu.in, one per entry of
// FMHA_SM90_INSTANCES) instantiates launch_fwd for its key, so
// sm90_forward.cu dispatches without compiling any kernel itself (and
// without sm_90a flags).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/common/env_choice.h"
#include "backend/cuda/common/fwd_params.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/sm90/instances.h"  // generated: the instantiations
#include "fmha/fmha.h"

namespace fmha::cuda::sm90 {

struct LaunchArgs {
  const Problem* problem;  // for the tensor maps
  int64_t blocks;          // work tiles (< 2^31)
  int num_sms;             // the persistent grid's size
  int* tile_counter;       // persistent grids: the work counter (workspace)
  ScoreOps ops;            // the score transforms' instantiation (common/fwd_params.h)
  int device;              // the current device ordinal
  cudaStream_t stream;
};

// The grid of a launch: one CTA per work tile, or (persistent) one CTA per
// SM whose CTAs take tiles past the first from a counter (tile_config.h says
// which is faster); the counter is reset to 0 in the stream's order
// (graph-safe).
inline fmha_status work_grid(bool persistent, const LaunchArgs& a, unsigned* grid) {
  *grid = static_cast<unsigned>(persistent && a.blocks > a.num_sms ? a.num_sms : a.blocks);
  if (persistent && cudaMemsetAsync(a.tile_counter, 0, sizeof(int), a.stream) != cudaSuccess)
    return check_launch("cuda_sm90_ws tile counter reset");
  return FMHA_SUCCESS;
}

template <class T, int kHeadDim>
fmha_status launch_fwd(const FwdParams& p, const LaunchArgs& a);

// q, k and v all of FP8 type T (V transposed), o F16 or BF16.
template <class T, int kHeadDim>
fmha_status launch_fwd_fp8(const FwdParams& p, const LaunchArgs& a);

#define FMHA_SM90_EXTERN_(dtype, T, D) extern template fmha_status launch_fwd<T, D>(const FwdParams&, const LaunchArgs&);
FMHA_SM90_INSTANCES(FMHA_SM90_EXTERN_)
#undef FMHA_SM90_EXTERN_
#define FMHA_SM90_FP8_EXTERN_(dtype, T, D) \
  extern template fmha_status launch_fwd_fp8<T, D>(const FwdParams&, const LaunchArgs&);
FMHA_SM90_FP8_INSTANCES(FMHA_SM90_FP8_EXTERN_)
#undef FMHA_SM90_FP8_EXTERN_


// The L2 budget of the work order's bands (common/tile_scheduler.h,
// unit_band), in MiB: FMHA_SM90_L2_BAND_MIB (CMake, 16); the environment
// variable of the same name, read once, overrides it (experiments). H200
// (60 MB L2), 2 interleaved rounds, the same kernel with one band: causal
// FP16 D=128 N=8192 / 16384 +2 / +8%, non-causal 8192 +7%, BF16 8192 +6%,
// D=64 +3.5%, batched GQA B8 H32/8 N2048 +4%; 32 MiB: within noise of 16.
// The 16-bit and the FP8 launches both read it (elements of 2 and 1 bytes).
inline int64_t l2_band_mib() {
  static const int64_t mib = env_int("FMHA_SM90_L2_BAND_MIB", FMHA_SM90_L2_BAND_MIB);
  return mib;
}

// How many key tiles past the next one the producer prefetches a staged
// bias into L2 (fwd_kernel.cuh, load_bias): FMHA_SM90_BIAS_PREFETCH, read
// once, default 1 (0: none; docs/performance.md, branch issue14-bias3).
inline int bias_prefetch_tiles() {
  static const int tiles = static_cast<int>(env_int("FMHA_SM90_BIAS_PREFETCH", 1));
  return tiles;
}

}  // namespace fmha::cuda::sm90
