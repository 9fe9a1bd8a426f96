// cuda_generic for F32 tensors: every config of kConfigs instantiated for
// float. One translation unit per dtype keeps each compile bounded.
#include "backend/cuda/generic/generic_kernel.cuh"

namespace fmha::cuda::generic {

fmha_status launch_f32(const FwdParams& prm, const GenericPlan& plan, const LaunchContext& ctx) {
  return launch_typed<float>(prm, plan, ctx);
}

}  // namespace fmha::cuda::generic
