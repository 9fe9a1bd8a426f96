// sm90 family instantiation: BF16, head dim 256.
#include "backend/cuda/sm90/fwd_launch.cuh"

namespace fmha::cuda::sm90 {
template fmha_status launch_fwd<__nv_bfloat16, 256>(const FwdParams&, const LaunchArgs&);
}  // namespace fmha::cuda::sm90
