// cuda_generic for F16 tensors: every config of kConfigs instantiated for
// __half. One translation unit per dtype keeps each compile bounded.
#include "backend/cuda/generic/generic_kernel.cuh"

namespace fmha::cuda::generic {

fmha_status launch_f16(const FwdParams& prm, const GenericPlan& plan, const LaunchContext& ctx) {
  return launch_typed<__half>(prm, plan, ctx);
}

}  // namespace fmha::cuda::generic
