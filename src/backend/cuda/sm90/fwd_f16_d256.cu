// sm90 family instantiation: F16, head dim 256.
#include "backend/cuda/sm90/fwd_launch.cuh"

namespace fmha::cuda::sm90 {
template fmha_status launch_fwd<__half, 256>(const FwdParams&, const LaunchArgs&);
}  // namespace fmha::cuda::sm90
