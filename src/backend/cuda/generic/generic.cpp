// cuda_generic's registry hooks: what it supports, the workspace it needs
// and the launch. All three read make_plan(), so the workspace a caller is
// told to allocate is exactly what the launch uses.
#include <cstdint>

#include "backend/cuda/common/fwd_params.h"
#include "backend/cuda/common/split_combine.h"
#include "backend/cuda/generic/generic_config.h"
#include "backend/cuda/kernels.h"
#include "core/arith.h"
#include "core/error.h"

namespace fmha::cuda {
namespace generic {

GenericPlan make_plan(const Problem& p, const DeviceInfo& dev) {
  GenericPlan plan;
  for (int i = 0; i < kConfigCount; ++i) {
    if (p.head_dim <= kConfigs[i].head_dim_max && smem_bytes(kConfigs[i]) <= dev.smem_per_block_optin) {
      plan.config = i;
      break;
    }
  }
  if (plan.config < 0) return plan;
  const GenericConfig& c = kConfigs[plan.config];
  const int64_t block_m = static_cast<int64_t>(c.rows_per_warp) * c.warps;
  const int64_t block_n = static_cast<int64_t>(c.keys_per_lane) * kThreadsPerWarp;
  plan.grid = fwd_grid(p, 1, block_m);
  // Keys one query block can see: a window bounds them, else all of seq_k.
  int64_t span = p.seq_k;
  if (p.window_left >= 0 && p.window_right >= 0) {
    const int64_t band = p.window_left + p.window_right + block_m;
    if (band < span) span = band;
  }
  plan.grid.splits = choose_splits(plan.grid.blocks(), kCtasPerSm, ceil_div(span, block_n), dev.num_sms, p.num_splits);
  plan.workspace = fwd_partials_bytes(p, plan.grid);
  const int64_t base = plan.grid.m_tiles * plan.grid.units;
  // Unsplit when the partials would not fit size_t or the work count
  // (base x splits) would not fit int64.
  if (plan.workspace == SIZE_MAX || (plan.grid.splits > 1 && base > INT64_MAX / plan.grid.splits)) {
    plan.grid.splits = 1;
    plan.workspace = 0;
  }
  return plan;
}

}  // namespace generic

const char* generic_supports(const Problem& p, const DeviceInfo& dev) {
  constexpr int kMaxHeadDim = generic::kConfigs[generic::kConfigCount - 1].head_dim_max;
  if (p.head_dim > kMaxHeadDim) return "head_dim above 256";
  if (p.seq_q > kMaxFwdSeq || p.seq_k > kMaxFwdSeq) return "sequence too long for int32 positions";
  if (generic::make_plan(p, dev).config < 0)
    return "no tile config fits the device's shared memory per block";
  return nullptr;
}

size_t generic_workspace_bytes(const Problem& p, const DeviceInfo& dev) {
  return generic::make_plan(p, dev).workspace;
}

fmha_status generic_forward(const Problem& p, const LaunchContext& ctx) {
  const generic::GenericPlan plan = generic::make_plan(p, *ctx.device);
  if (plan.config < 0) return fail(FMHA_ERROR_UNSUPPORTED, "cuda_generic: no tile config fits this device");
  if (ctx.workspace_bytes < plan.workspace)
    return fail(FMHA_ERROR_WORKSPACE_TOO_SMALL, "cuda_generic needs %zu workspace bytes, got %zu",
                plan.workspace, ctx.workspace_bytes);

  if (p.o_dtype != FMHA_DTYPE_F16 && p.o_dtype != FMHA_DTYPE_BF16 && p.o_dtype != FMHA_DTYPE_F32)
    return fail(FMHA_ERROR_UNSUPPORTED, "cuda_generic: o dtype %s", dtype_name(p.o_dtype));
  if (plan.grid.blocks() == 0) return FMHA_SUCCESS;  // no sequence or no query row: nothing to write
  const FwdParams prm = make_fwd_params(p, plan.grid, ctx.workspace);
  // The instance is q's dtype; an FP8 q (all-FP8 problems) runs on the F16
  // instance, which decodes every operand (FP8 -> F16 is exact).
  fmha_status s;
  switch (p.dtype) {
    case FMHA_DTYPE_F16:
    case FMHA_DTYPE_F8E4M3:
    case FMHA_DTYPE_F8E5M2: s = generic::launch_f16(prm, plan, ctx); break;
    case FMHA_DTYPE_BF16: s = generic::launch_bf16(prm, plan, ctx); break;
    case FMHA_DTYPE_F32: s = generic::launch_f32(prm, plan, ctx); break;
    default: return fail(FMHA_ERROR_UNSUPPORTED, "cuda_generic: dtype %d", static_cast<int>(p.dtype));
  }
  if (s != FMHA_SUCCESS || prm.num_splits == 1) return s;
  // The split combine writes o, so it is instantiated by o's dtype.
  const cudaStream_t stream = static_cast<cudaStream_t>(ctx.stream);
  switch (p.o_dtype) {
    case FMHA_DTYPE_F16: return launch_split_combine<__half>(fwd_combine_params(prm), stream);
    case FMHA_DTYPE_BF16: return launch_split_combine<__nv_bfloat16>(fwd_combine_params(prm), stream);
    case FMHA_DTYPE_F32: return launch_split_combine<float>(fwd_combine_params(prm), stream);
    default: return fail(FMHA_ERROR_INTERNAL, "cuda_generic: o dtype %s", dtype_name(p.o_dtype));
  }
}

}  // namespace fmha::cuda
