// Registry hooks of the Hopper family cuda_sm90_ws (backend/cuda/kernels.h):
// what it refuses, when it steps aside for cuda_sm80_tc in automatic
// dispatch, its workspace and the dispatch to one instantiation (launch.h).
// This file has no kernels, so it builds with the library's ordinary
// architecture flags; the kernels are sm_90a objects (fwd_<dtype>_d<D>.cu).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <type_traits>

#include "backend/cuda/common/fwd_params.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/sm90/fp8_tile_config.h"
#include "backend/cuda/sm90/launch.h"
#include "backend/cuda/sm90/tile_config.h"
#include "backend/cuda/sm90/tma.h"
#include "core/arith.h"
#include "core/error.h"

namespace fmha::cuda {
namespace {

// Automatic dispatch leaves decode-like problems to cuda_sm80_tc (forcing
// cuda_sm90_ws by name still runs them): when the query rows of a KV head's
// group fit one sm80 tile, sm80 packs the group into one unit and splits the
// keys, and its narrow tile wastes less of the MMA on a few rows (H200,
// Hq=32 Hk=8 Nq=1 Nk=32768: sm80 0.047 ms, sm90 0.105 ms). From one sm90
// query block up, sm90 is faster even at N=512 (0.013 vs 0.023 ms causal
// FP16 D=128; docs/performance.md).
constexpr int64_t kMaxPackedRowsForSm80 = 128;

// The one place a run-time head dim becomes a template argument (the
// generated list, instances.h, which the registry row also reads).
template <class Fn>
bool dispatch_head_dim(int64_t d, Fn&& fn) {
  switch (d) {
#define FMHA_SM90_CASE_(D) \
  case D: fn(std::integral_constant<int, D>{}); return true;
    FMHA_SM90_HEAD_DIMS(FMHA_SM90_CASE_)
#undef FMHA_SM90_CASE_
    default: return false;
  }
}

// Calls fn(T{}, std::integral_constant<int, D>{}) for the instantiated pair
// (dtype, d) and returns true, else returns false.
template <class Fn>
bool dispatch_instance(fmha_dtype dtype, int64_t d, Fn&& fn) {
#define FMHA_SM90_CASE_(E, T, D)               \
  if (dtype == E && d == D) {                  \
    fn(T{}, std::integral_constant<int, D>{}); \
    return true;                               \
  }
  FMHA_SM90_INSTANCES(FMHA_SM90_CASE_)
#undef FMHA_SM90_CASE_
  return false;
}

// The same for the FP8 list (q, k and v of dtype E; fwd_fp8_kernel.cuh).
template <class Fn>
bool dispatch_fp8_instance(fmha_dtype dtype, int64_t d, Fn&& fn) {
#define FMHA_SM90_CASE_(E, T, D)               \
  if (dtype == E && d == D) {                  \
    fn(T{}, std::integral_constant<int, D>{}); \
    return true;                               \
  }
  FMHA_SM90_FP8_INSTANCES(FMHA_SM90_CASE_)
#undef FMHA_SM90_CASE_
  (void)dtype;
  (void)d;
  return false;
}

bool instantiated(const Problem& p) {
  return dispatch_instance(p.dtype, p.head_dim, [](auto, auto) {}) ||
         dispatch_fp8_instance(p.dtype, p.head_dim, [](auto, auto) {});
}

// Whether p runs the 16-bit score-ops kernel: every problem with a score
// transform, softcap alone included (fwd_launch.cuh's launch_fwd).
bool runs_score_ops_kernel(const Problem& p) { return score_ops_of(p) != ScoreOps::kNone; }

// Calls fn(Cfg{}) with the tile config of p's kernel: FP8 q (all FP8 q/k/v,
// sm90_supports) reads Sm90Fp8Tuning, 16-bit Sm90Tuning (the score-ops
// kernel Sm90ScoreOpsTuning, the plain serving kernel Sm90ServingTuning;
// fwd_launch.cuh's launch_fwd picks the same).
template <class Fn>
bool dispatch_config(const Problem& p, Fn&& fn) {
  if (is_fp8(p.dtype))
    return dispatch_fp8_instance(p.dtype, p.head_dim, [&](auto, auto head_dim) {
      sm90::with_fp8_config<decltype(head_dim)::value>(fn);
    });
  return dispatch_head_dim(p.head_dim, [&](auto head_dim) {
    constexpr int kD = decltype(head_dim)::value;
    if (runs_score_ops_kernel(p))
      fn(typename sm90::Sm90ScoreOpsTuning<kD>::Config{});
    else if (p.layout.any())
      fn(typename sm90::Sm90ServingTuning<kD>::Config{});
    else
      fn(typename sm90::Sm90Tuning<kD>::Config{});
  });
}

struct Plan {
  bool ok = false;
  int smem = 0;
  int block_n = 0;
  bool persistent = false;  // the grid walks tiles through a counter in the workspace
  FwdGrid grid;
};

// The workspace: the split partials (common/fwd_params.h), then, for a
// persistent grid, the tile counter, 16-byte aligned. SIZE_MAX on overflow.
constexpr size_t kCounterBytes = 16;
size_t counter_offset(const Problem& p, const Plan& plan) {
  const size_t partials = fwd_partials_bytes(p, plan.grid);
  return partials == SIZE_MAX ? SIZE_MAX : (partials + 15) / 16 * 16;
}
size_t workspace_bytes(const Problem& p, const Plan& plan) {
  if (!plan.persistent) return fwd_partials_bytes(p, plan.grid);
  const size_t off = counter_offset(p, plan);
  return off > SIZE_MAX - kCounterBytes ? SIZE_MAX : off + kCounterBytes;
}

Plan make_plan(const Problem& p, const DeviceInfo& dev) {
  Plan plan;
  int block_m = 0;
  plan.ok = dispatch_config(p, [&](auto cfg) {
    using Cfg = decltype(cfg);
    // The score-transform kernel adds its bias ring (tile_config.h; the FP8
    // configs have none: kSmemBytesBias = kSmemBytes).
    plan.smem = runs_score_ops_kernel(p) ? Cfg::kSmemBytesBias : Cfg::kSmemBytes;
    plan.block_n = Cfg::kBlockN;
    plan.persistent = Cfg::kPersistent;
    block_m = Cfg::kBlockM;
  });
  if (!plan.ok) return plan;
  plan.grid = fwd_grid(p, 1, block_m);
  plan.grid.splits = choose_splits(plan.grid.blocks(), 1, ceil_div(p.seq_k, plan.block_n), dev.num_sms, p.num_splits);
  return plan;
}

// dims: [batch, heads, seq, head_dim] as Problem::q_dims / kv_dims give them.
// transposed: the copy engine reads the operand as [batch, heads, head_dim,
// seq] (an FP8 V: seq contiguous); fp8: 1-byte elements.
const char* operand_unsupported(const Operand& op, const int64_t (&dims)[4], bool fp8 = false,
                                bool transposed = false) {
  sm90::Tensor4d t;
  t.data = op.data;
  t.fp8 = fp8;
  const int row = transposed ? 3 : 2, col = transposed ? 2 : 3;
  const int index[3] = {row, 1, 0};
  for (int i = 0; i < 3; ++i) {
    const int64_t extent = dims[index[i]];
    t.dims[i + 1] = extent;
    // Extents of 1 are never stepped (fwd_launch.cuh gives them a benign stride).
    t.strides[i] = extent == 1 ? 16 : op.stride[index[i]];
    if (extent > 1 && op.stride[index[i]] == 0) return "the copy engine cannot broadcast (a stride of 0)";
  }
  t.dims[0] = dims[col];
  return sm90::panel_map_unsupported(t);
}

// What the FP8 kernel (q, k and v all FP8) cannot run, beyond the 16-bit
// kernel's limits; null for a 16-bit problem it passes on.
const char* fp8_unsupported(const Problem& p) {
  // (The registry's own wording where a reason is the same kind, so a
  // reason reads alike from every kernel.)
  if (!is_fp8(p.dtype) && !is_fp8(p.kv_dtype)) {
    if (p.mixed_dtypes())
      return "does not support mixed dtypes (q, k/v and o not one dtype) other than FP8 q, k and v with an F16 or "
             "BF16 o";
    if (p.v.stride[3] != 1) return "does not support a transposed V (v.strides[2]=1) with 16-bit inputs";
    return nullptr;
  }
  if (p.dtype != p.kv_dtype)
    return "does not run dtype FP8 for only some of q, k, v (FP8 needs q, k and v of one FP8 dtype; cuda_sm80_tc "
           "runs an FP8 K/V cache under a 16-bit q)";
  if (p.o_dtype != FMHA_DTYPE_F16 && p.o_dtype != FMHA_DTYPE_BF16) return "FP8 q/k/v need o in F16 or BF16";
  if (p.layout.any()) return "FP8 q/k/v: dense batches only (cuda_generic runs the serving layouts)";
  if (p.has_bias() || p.alibi_slopes != nullptr) return "FP8 q/k/v: no bias or ALiBi (cuda_generic runs them)";
  if (p.seq_k > 1 && p.v.stride[2] != 1)
    return "FP8 V must be transposed (seq stride 1: v.strides[2] = 1, [B, Hk, D, Nk] in memory) for the FP8 MMA";
  return nullptr;
}

}  // namespace

const char* sm90_supports(const Problem& p, const DeviceInfo& dev) {
  if (const char* why = fp8_unsupported(p)) return why;
  if (!instantiated(p))
    return "(dtype, head_dim) not instantiated (this build of the sm90 family runs head dims " FMHA_SM90_HEAD_DIM_TEXT
           "; FP8 q/k/v: head_dim 128)";
  if (p.seq_q > kMaxFwdSeq || p.seq_k > kMaxFwdSeq) return "sequence too long for int32 positions";
  // A tensor map cannot describe an empty k/v; the other families write
  // O = 0, lse = -inf for such rows.
  if (p.seq_k == 0) return "no keys (Nk = 0): the copy engine cannot map an empty K/V";
  // Serving layouts: ragged and seqused_k batches load whole key tiles at
  // each sequence's first row; a block table loads a tile per page, so a
  // page must be a whole number of 8-row swizzle atoms and tile a key tile
  // or be tiled by it.
  if (p.layout.paged()) {
    const int64_t ps = p.layout.page_size, bn = make_plan(p, dev).block_n;
    if (ps % 8 != 0 || (ps % bn != 0 && bn % ps != 0))
      return "page_size must be a multiple of 8 that divides or is divided by the key tile (64 keys at head_dim "
             "256, else 128; cuda_sm80_tc runs any page_size)";
  }
  int64_t q_dims[4], kv_dims[4];
  p.q_dims(q_dims);
  p.kv_dims(kv_dims);
  const struct {
    const Operand* op;
    const int64_t (&dims)[4];
  } ops[] = {{&p.q, q_dims}, {&p.k, kv_dims}, {&p.v, kv_dims}, {&p.o, q_dims}};
  const bool fp8 = is_fp8(p.dtype);
  for (const auto& x : ops) {
    const bool fp8_input = fp8 && x.op != &p.o;
    if (const char* why = operand_unsupported(*x.op, x.dims, fp8_input, fp8_input && x.op == &p.v)) return why;
  }
  const Plan plan = make_plan(p, dev);
  if (dev.smem_per_block_optin < static_cast<size_t>(plan.smem))
    return "device allows less shared memory per block than the tile needs";
  const FwdGrid& g = plan.grid;
  if (g.m_tiles > INT32_MAX / g.units || g.m_tiles * g.units > INT32_MAX / g.splits)
    return "grid too large (query tiles x batch x heads x splits >= 2^31)";
  return nullptr;
}

const char* sm90_declines(const Problem& p, const DeviceInfo& dev) {
  (void)dev;
  // Nothing else runs FP8 q/k/v on tensor cores.
  if (is_fp8(p.dtype)) return nullptr;
  // cuda_sm80_tc's row does not declare descales: such problems stay here.
  if (p.has_descale()) return nullptr;
  if (p.seq_q * p.group_size() <= kMaxPackedRowsForSm80)
    return "decode-like (seq_q x GQA group <= 128 rows): cuda_sm80_tc packs the group and is faster";
  return nullptr;
}

size_t sm90_workspace_bytes(const Problem& p, const DeviceInfo& dev) {
  const Plan plan = make_plan(p, dev);
  return plan.ok ? workspace_bytes(p, plan) : 0;
}

fmha_status sm90_forward(const Problem& p, const LaunchContext& ctx) {
  const DeviceInfo& dev = *ctx.device;
  const Plan plan = make_plan(p, dev);
  if (!plan.ok)
    return fail(FMHA_ERROR_INTERNAL, "cuda_sm90_ws: head_dim=%lld not instantiated", static_cast<long long>(p.head_dim));
  if (!instantiated(p))
    return fail(FMHA_ERROR_INTERNAL, "cuda_sm90_ws: dtype %s head_dim=%lld not instantiated", dtype_name(p.dtype),
                static_cast<long long>(p.head_dim));
  const size_t need = workspace_bytes(p, plan);
  if (ctx.workspace_bytes < need)
    return fail(FMHA_ERROR_WORKSPACE_TOO_SMALL, "cuda_sm90_ws needs %zu bytes of workspace", need);

  const FwdParams f = make_fwd_params(p, plan.grid, ctx.workspace);
  sm90::LaunchArgs a;
  a.problem = &p;
  a.blocks = plan.grid.blocks();
  a.num_sms = dev.num_sms > 0 ? dev.num_sms : 1;
  a.tile_counter =
      plan.persistent ? reinterpret_cast<int*>(static_cast<unsigned char*>(ctx.workspace) + counter_offset(p, plan))
                      : nullptr;
  a.ops = score_ops_of(p);
  a.device = dev.ordinal;
  a.stream = static_cast<cudaStream_t>(ctx.stream);
  fmha_status status = FMHA_ERROR_INTERNAL;
  dispatch_instance(p.dtype, p.head_dim, [&](auto t, auto head_dim) {
    status = sm90::launch_fwd<decltype(t), decltype(head_dim)::value>(f, a);
  });
  dispatch_fp8_instance(p.dtype, p.head_dim, [&](auto t, auto head_dim) {
    status = sm90::launch_fwd_fp8<decltype(t), decltype(head_dim)::value>(f, a);
  });
  return status;
}

}  // namespace fmha::cuda
