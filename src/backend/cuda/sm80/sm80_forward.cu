// Registry hooks of the sm80 tensor-core family (backend/cuda/kernels.h):
// what it refuses, how much workspace a split-KV run needs, and the dispatch
// from a Problem to one instantiation (launch.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/common/split_combine.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/sm80/launch.h"
#include "backend/cuda/sm80/tile_config.h"
#include "core/error.h"

namespace fmha::cuda {
namespace {

using sm80::FwdParams;

// Sequence positions are int32 inside the kernel, with a tile of headroom.
constexpr int64_t kMaxSeq = INT32_MAX - 1024;
// Splits above this buy nothing: the combine reads every split per row.
constexpr int kMaxSplits = 64;
static_assert(kMaxSplits <= kCombineMaxSplits, "the shared combine merges at most kCombineMaxSplits");
// Auto split, as FlashAttention-2 decides it: none when the unsplit grid
// fills this share of the resident CTA slots; else the fewest splits whose
// wave efficiency (CTAs / slots over its ceiling) is within kSplitSlack of
// the best split count's.
constexpr double kFillThreshold = 0.8;
constexpr double kSplitSlack = 0.85;
// ... and never when the rows are short: the partial writes and the combine
// launch cost more than they save (H200, causal FP16 B=1 H=32 N=512, 8 key
// tiles: 24.6 us unsplit, 28.9 us with 2 splits, 35.0 us with 4).
constexpr int64_t kMinKeyTilesToSplit = 16;
// GQA packing: the group's query heads share a CTA (each K/V tile then
// serves the whole group) when seq_q * group is at most kMaxPackedRows, one
// wide tile; the narrow tile runs units of at most kMaxNarrowRows rows
// (decode: 1 row x group).
constexpr int64_t kMaxPackedRows = 128;
constexpr int64_t kMaxNarrowRows = 32;

// The shape facts of one instantiation.
struct Shape {
  int block_m = 0, block_n = 0, smem = 0, blocks_per_sm = 0;
};

template <class Cfg>
constexpr Shape shape_of() {
  return {Cfg::kBlockM, Cfg::kBlockN, Cfg::kSmemBytes, Cfg::kMinBlocksPerSm};
}

template <int kHeadDim>
Shape shape_for(bool narrow) {
  using Tuning = sm80::Sm80Tuning<kHeadDim>;
  return narrow ? shape_of<typename Tuning::Narrow>() : shape_of<typename Tuning::Wide>();
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The one place a run-time head dim becomes a template argument: calls
// fn(std::integral_constant<int, D>{}) for the instantiated D == d and
// returns true, else returns false. The registry row lists the same dims.
template <class Fn>
bool dispatch_head_dim(int64_t d, Fn&& fn) {
  switch (d) {
    case 32: fn(std::integral_constant<int, 32>{}); return true;
    case 64: fn(std::integral_constant<int, 64>{}); return true;
    case 96: fn(std::integral_constant<int, 96>{}); return true;
    case 128: fn(std::integral_constant<int, 128>{}); return true;
    case 256: fn(std::integral_constant<int, 256>{}); return true;
    default: return false;
  }
}

bool head_dim_instantiated(int64_t d) {
  return dispatch_head_dim(d, [](auto) {});
}

// How one problem runs: tile, packing, grid, splits. supports, workspace and
// forward all read this one function, so they cannot disagree.
struct Plan {
  bool ok = false;
  Shape shape;
  bool narrow = false;
  int64_t pack = 1;    // query heads per unit
  int64_t rows = 0;    // rows per unit = seq_q * pack
  int64_t units = 0;   // batch * heads_q / pack
  int64_t m_tiles = 0;
  int splits = 1;
};

int choose_splits(const Problem& p, const DeviceInfo& dev, const Plan& plan) {
  const int64_t key_tiles = ceil_div(p.seq_k, plan.shape.block_n);
  if (p.num_splits == 1) return 1;
  if (p.num_splits > 1) return static_cast<int>(std::min<int64_t>({p.num_splits, kMaxSplits, key_tiles}));
  const int64_t blocks = plan.m_tiles * plan.units;
  const double slots = static_cast<double>(std::max(dev.num_sms, 1)) * plan.shape.blocks_per_sm;
  if (static_cast<double>(blocks) >= kFillThreshold * slots || key_tiles < kMinKeyTilesToSplit) return 1;
  const int64_t cap = std::max<int64_t>(1, std::min<int64_t>(kMaxSplits, key_tiles / 2));
  auto efficiency = [&](int64_t s) {
    const double waves = static_cast<double>(blocks * s) / slots;
    return waves / std::ceil(waves);
  };
  double best = 0;
  for (int64_t s = 1; s <= cap; ++s) best = std::max(best, efficiency(s));
  for (int64_t s = 1; s <= cap; ++s)
    if (efficiency(s) >= kSplitSlack * best) return static_cast<int>(s);
  return 1;
}

Plan make_plan(const Problem& p, const DeviceInfo& dev) {
  Plan plan;
  const int64_t group = p.group_size();
  plan.pack = group > 1 && p.seq_q * group <= kMaxPackedRows ? group : 1;
  plan.rows = p.seq_q * plan.pack;
  plan.units = p.batch * p.heads_q / plan.pack;
  plan.narrow = plan.rows <= kMaxNarrowRows;
  const bool instantiated = dispatch_head_dim(p.head_dim, [&](auto head_dim) {
    plan.shape = shape_for<decltype(head_dim)::value>(plan.narrow);
  });
  if (!instantiated) return plan;
  plan.m_tiles = ceil_div(plan.rows, plan.shape.block_m);
  plan.splits = choose_splits(p, dev, plan);
  plan.ok = true;
  return plan;
}

// The split-KV partials of common/split_combine.h for every (unit, row); the
// o part keeps the workspace's 16-byte alignment that the kernel's float2
// stores need. SIZE_MAX (never allocatable) on overflow.
size_t partial_bytes(const Problem& p, const Plan& plan) {
  if (plan.splits <= 1) return 0;
  size_t bytes;
  return split_partials_bytes(plan.splits, plan.units * plan.rows, p.head_dim, &bytes) ? bytes : SIZE_MAX;
}

}  // namespace

const char* sm80_supports(const Problem& p, const DeviceInfo& dev) {
  if (!head_dim_instantiated(p.head_dim))
    return "head_dim not instantiated (sm80 family runs 32, 64, 96, 128, 256)";
  if (p.seq_q > kMaxSeq || p.seq_k > kMaxSeq) return "sequence too long for int32 positions";
  const Plan plan = make_plan(p, dev);
  if (dev.smem_per_block_optin < static_cast<size_t>(plan.shape.smem))
    return "device allows less shared memory per block than the tile needs";
  if (plan.m_tiles > INT32_MAX / plan.units || plan.m_tiles * plan.units > INT32_MAX / plan.splits)
    return "grid too large (query tiles x batch x heads x splits >= 2^31)";
  return nullptr;
}

size_t sm80_workspace_bytes(const Problem& p, const DeviceInfo& dev) {
  const Plan plan = make_plan(p, dev);
  return plan.ok ? partial_bytes(p, plan) : 0;
}

fmha_status sm80_forward(const Problem& p, const LaunchContext& ctx) {
  const DeviceInfo& dev = *ctx.device;
  const Plan plan = make_plan(p, dev);
  if (!plan.ok)
    return fail(FMHA_ERROR_INTERNAL, "cuda_sm80_tc: head_dim=%lld not instantiated",
                static_cast<long long>(p.head_dim));
  if (p.dtype != FMHA_DTYPE_F16 && p.dtype != FMHA_DTYPE_BF16)
    return fail(FMHA_ERROR_INTERNAL, "cuda_sm80_tc: dtype %s not instantiated", dtype_name(p.dtype));
  if (ctx.workspace_bytes < partial_bytes(p, plan))
    return fail(FMHA_ERROR_WORKSPACE_TOO_SMALL, "cuda_sm80_tc needs %zu bytes of workspace",
                partial_bytes(p, plan));

  FwdParams f{};
  f.q = p.q.data;
  f.k = p.k.data;
  f.v = p.v.data;
  f.o = p.o.data;
  for (int d = 0; d < 3; ++d) {
    f.q_stride[d] = p.q.stride[d];
    f.k_stride[d] = p.k.stride[d];
    f.v_stride[d] = p.v.stride[d];
    f.o_stride[d] = p.o.stride[d];
  }
  f.lse = p.lse;
  f.heads_q = p.heads_q;
  f.group = p.group_size();
  f.pack = static_cast<int>(plan.pack);
  f.rows = static_cast<int>(plan.rows);
  f.units = plan.units;
  f.seq_q = static_cast<int>(p.seq_q);
  f.seq_k = static_cast<int>(p.seq_k);
  f.diag_offset = p.diag_offset;
  f.window_left = p.window_left;
  f.window_right = p.window_right;
  constexpr float kLog2e = 1.4426950408889634f;
  if (p.softcap != 0.f) {
    f.softcap_in = p.scale / p.softcap;
    f.softcap_out = p.softcap;
    f.score_log2 = kLog2e;
  } else {
    f.score_log2 = p.scale * kLog2e;
  }
  f.num_m_tiles = static_cast<int>(plan.m_tiles);
  f.num_splits = plan.splits;
  if (plan.splits > 1) {
    const SplitPartials part = split_partials_in(ctx.workspace, plan.splits, plan.units * plan.rows, p.head_dim);
    f.o_partial = part.o;
    f.m_partial = part.m;
    f.l_partial = part.l;
  }

  sm80::LaunchArgs a;
  a.blocks = plan.m_tiles * plan.units * plan.splits;
  a.narrow = plan.narrow;
  a.softcap = p.softcap != 0.f;
  a.device = dev.ordinal;
  a.stream = static_cast<cudaStream_t>(ctx.stream);

  const bool bf16 = p.dtype == FMHA_DTYPE_BF16;
  fmha_status status = FMHA_ERROR_INTERNAL;
  dispatch_head_dim(p.head_dim, [&](auto head_dim) {
    constexpr int kHeadDim = decltype(head_dim)::value;
    status = bf16 ? sm80::launch_fwd<__nv_bfloat16, kHeadDim>(f, a) : sm80::launch_fwd<__half, kHeadDim>(f, a);
  });
  return status;  // make_plan above already refused head dims without an instantiation
}

}  // namespace fmha::cuda
