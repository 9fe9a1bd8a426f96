// Host-side entry of one sm80 instantiation (dtype x head dim: 32, 64, 96,
// 128, 256). Each fwd_<dtype>_d<D>.cu explicitly instantiates launch_fwd for its key, so
// sm80_forward.cu dispatches without compiling any kernel itself.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/common/fwd_params.h"
#include "fmha/fmha.h"

namespace fmha::cuda::sm80 {

struct LaunchArgs {
  int64_t blocks;        // num_m_tiles * units * num_splits (< 2^31)
  bool narrow;           // Sm80Tuning<D>::Narrow instead of ::Wide
  bool softcap;
  int device;            // the current device ordinal
  cudaStream_t stream;
};

// Launches the forward kernel (and, for num_splits > 1, the combine kernel).
template <class T, int kHeadDim>
fmha_status launch_fwd(const FwdParams& p, const LaunchArgs& a);

extern template fmha_status launch_fwd<__half, 32>(const FwdParams&, const LaunchArgs&);
extern template fmha_status launch_fwd<__half, 64>(const FwdParams&, const LaunchArgs&);
extern template fmha_status launch_fwd<__half, 96>(const FwdParams&, const LaunchArgs&);
extern template fmha_status launch_fwd<__half, 128>(const FwdParams&, const LaunchArgs&);
extern template fmha_status launch_fwd<__half, 256>(const FwdParams&, const LaunchArgs&);
extern template fmha_status launch_fwd<__nv_bfloat16, 32>(const FwdParams&, const LaunchArgs&);
extern template fmha_status launch_fwd<__nv_bfloat16, 64>(const FwdParams&, const LaunchArgs&);
extern template fmha_status launch_fwd<__nv_bfloat16, 96>(const FwdParams&, const LaunchArgs&);
extern template fmha_status launch_fwd<__nv_bfloat16, 128>(const FwdParams&, const LaunchArgs&);
extern template fmha_status launch_fwd<__nv_bfloat16, 256>(const FwdParams&, const LaunchArgs&);

}  // namespace fmha::cuda::sm80
