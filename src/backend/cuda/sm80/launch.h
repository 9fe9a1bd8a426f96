// Host-side entry of one sm80 instantiation (dtype x head dim, the list of
// the generated instances.h). Each generated fwd_<dtype>_d<D>.cu explicitly
// instantiates launch_fwd for its key, so sm80_forward.cu dispatches without
// compiling any kernel itself.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/common/fwd_params.h"
#include "backend/cuda/sm80/instances.h"  // generated
#include "fmha/fmha.h"

namespace fmha::cuda::sm80 {

struct LaunchArgs {
  int64_t blocks;        // num_m_tiles * units * num_splits (< 2^31)
  bool narrow;           // Sm80Tuning<D>::Narrow instead of ::Wide
  bool score_ops;         // softcap, bias or ALiBi: the kScoreOps kernel
  SeqMode mode;          // the operand layout (seq_mode of FwdParams::layout)
  int device;            // the current device ordinal
  cudaStream_t stream;
};

// Launches the forward kernel (and, for num_splits > 1, the combine kernel).
template <class T, int kHeadDim>
fmha_status launch_fwd(const FwdParams& p, const LaunchArgs& a);

// The instantiations (one generated translation unit each; instances.h).
#define FMHA_SM80_EXTERN_(dtype, T, D) extern template fmha_status launch_fwd<T, D>(const FwdParams&, const LaunchArgs&);
FMHA_SM80_INSTANCES(FMHA_SM80_EXTERN_)
#undef FMHA_SM80_EXTERN_

}  // namespace fmha::cuda::sm80
