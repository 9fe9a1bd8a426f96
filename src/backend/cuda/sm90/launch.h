// Host-side entry of one sm90 instantiation (dtype x head dim). Each
// fwd_<dtype>_d<D>.cu instantiates launch_fwd for its key, so sm90_forward.cu
// dispatches without compiling any kernel itself (and without sm_90a flags).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/common/fwd_params.h"
#include "fmha/fmha.h"

namespace fmha::cuda::sm90 {

struct LaunchArgs {
  const Problem* problem;  // for the tensor maps
  int64_t blocks;          // work tiles (< 2^31)
  int num_sms;             // the persistent grid's size
  int* tile_counter;       // persistent grids: the work counter (workspace)
  bool softcap;
  int device;              // the current device ordinal
  cudaStream_t stream;
};

template <class T, int kHeadDim>
fmha_status launch_fwd(const FwdParams& p, const LaunchArgs& a);

#define FMHA_SM90_DECLARE(T, D) extern template fmha_status launch_fwd<T, D>(const FwdParams&, const LaunchArgs&);
FMHA_SM90_DECLARE(__half, 64)
FMHA_SM90_DECLARE(__half, 128)
FMHA_SM90_DECLARE(__half, 256)
FMHA_SM90_DECLARE(__nv_bfloat16, 64)
FMHA_SM90_DECLARE(__nv_bfloat16, 128)
FMHA_SM90_DECLARE(__nv_bfloat16, 256)
#undef FMHA_SM90_DECLARE


}  // namespace fmha::cuda::sm90
