// cuda_generic for BF16 tensors: every config of kConfigs instantiated for
// __nv_bfloat16. One translation unit per dtype keeps each compile bounded.
#include "backend/cuda/generic/generic_kernel.cuh"

namespace fmha::cuda::generic {

fmha_status launch_bf16(const FwdParams& prm, const GenericPlan& plan, const LaunchContext& ctx) {
  return launch_typed<__nv_bfloat16>(prm, plan, ctx);
}

}  // namespace fmha::cuda::generic
