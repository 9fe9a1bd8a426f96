// cuda_generic's registry hooks: what it supports, the workspace it needs
// and the launch. All three read make_plan(), so the workspace a caller is
// told to allocate is exactly what the launch uses.
#include <cmath>
#include <cstdint>

#include "backend/cuda/common/split_combine.h"
#include "backend/cuda/generic/generic_config.h"
#include "backend/cuda/kernels.h"
#include "core/error.h"

namespace fmha::cuda {
namespace generic {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Automatic splits: only when the grid would not fill the device (then the
// rows are few and the workspace small), as many as keep the grid within one
// wave of two CTAs a multiprocessor (what the configs' shared memory allows
// on sm_90; a second, partial wave doubled the time of a decode step), and
// never so many that a split gets fewer than kMinTilesPerSplit tiles.
int auto_splits(int64_t base_ctas, int64_t key_tiles, int num_sms) {
  if (base_ctas >= num_sms) return 1;
  int64_t s = 2 * static_cast<int64_t>(num_sms) / base_ctas;
  const int64_t by_keys = key_tiles / kMinTilesPerSplit;
  if (s > by_keys) s = by_keys;
  if (s > kMaxSplits) s = kMaxSplits;
  return s < 1 ? 1 : static_cast<int>(s);
}

}  // namespace

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
  plan.q_blocks = ceil_div(p.seq_q, block_m);
  const int64_t base = plan.q_blocks * p.batch * p.heads_q;
  // Keys one query block can see: a window bounds them, else all of seq_k.
  int64_t span = p.seq_k;
  if (p.window_left >= 0 && p.window_right >= 0) {
    const int64_t band = p.window_left + p.window_right + block_m;
    if (band < span) span = band;
  }
  const int64_t key_tiles = ceil_div(span, block_n);
  int64_t splits = 1;
  if (p.num_splits > 1) {
    splits = p.num_splits;
    if (splits > key_tiles) splits = key_tiles;
    if (splits > kMaxSplits) splits = kMaxSplits;
  } else if (p.num_splits == 0) {
    splits = auto_splits(base, key_tiles, dev.num_sms);
  }
  const int64_t rows = p.batch * p.heads_q * p.seq_q;
  if (splits > 1 && !split_partials_bytes(splits, rows, p.head_dim, &plan.workspace)) splits = 1;
  if (splits > 1 && base > INT64_MAX / splits) splits = 1;  // work = base * splits must fit
  if (splits <= 1) {
    splits = 1;
    plan.workspace = 0;
  }
  plan.splits = static_cast<int>(splits);
  plan.work = base * splits;
  return plan;
}

}  // namespace generic

const char* generic_supports(const Problem& p, const DeviceInfo& dev) {
  constexpr int kMaxHeadDim = generic::kConfigs[generic::kConfigCount - 1].head_dim_max;
  if (p.head_dim > kMaxHeadDim) return "head_dim above 256";
  if (generic::make_plan(p, dev).config < 0)
    return "no tile config fits the device's shared memory per block";
  return nullptr;
}

size_t generic_workspace_bytes(const Problem& p, const DeviceInfo& dev) {
  return generic::make_plan(p, dev).workspace;
}

fmha_status generic_forward(const Problem& p, const LaunchContext& ctx) {
  using generic::GenericParams;
  const generic::GenericPlan plan = generic::make_plan(p, *ctx.device);
  if (plan.config < 0) return fail(FMHA_ERROR_UNSUPPORTED, "cuda_generic: no tile config fits this device");
  if (ctx.workspace_bytes < plan.workspace)
    return fail(FMHA_ERROR_WORKSPACE_TOO_SMALL, "cuda_generic needs %zu workspace bytes, got %zu",
                plan.workspace, ctx.workspace_bytes);

  GenericParams prm{};
  prm.q = p.q.data;
  prm.k = p.k.data;
  prm.v = p.v.data;
  prm.o = p.o.data;
  for (int d = 0; d < 4; ++d) {
    prm.q_stride[d] = p.q.stride[d];
    prm.k_stride[d] = p.k.stride[d];
    prm.v_stride[d] = p.v.stride[d];
    prm.o_stride[d] = p.o.stride[d];
  }
  prm.lse = p.lse;
  prm.batch = p.batch;
  prm.heads_q = p.heads_q;
  prm.seq_q = p.seq_q;
  prm.seq_k = p.seq_k;
  prm.group = p.group_size();
  prm.diag_offset = p.diag_offset;
  prm.window_left = p.window_left;
  prm.window_right = p.window_right;
  prm.q_blocks = plan.q_blocks;
  prm.work = plan.work;
  prm.rows = p.batch * p.heads_q * p.seq_q;
  prm.head_dim = static_cast<int>(p.head_dim);
  prm.splits = plan.splits;
  if (plan.splits > 1) prm.ws = split_partials_in(ctx.workspace, plan.splits, prm.rows, p.head_dim);
  prm.q_scale = p.scale;
  if (p.softcap != 0.f) {
    prm.softcap = p.softcap;
    prm.inv_softcap = static_cast<float>(1.0 / p.softcap);
  }

  switch (p.dtype) {
    case FMHA_DTYPE_F16: return generic::launch_f16(prm, plan, ctx);
    case FMHA_DTYPE_BF16: return generic::launch_bf16(prm, plan, ctx);
    case FMHA_DTYPE_F32: return generic::launch_f32(prm, plan, ctx);
    default: return fail(FMHA_ERROR_UNSUPPORTED, "cuda_generic: dtype %d", static_cast<int>(p.dtype));
  }
}

}  // namespace fmha::cuda
