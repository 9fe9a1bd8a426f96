// Registry hooks of the sm80 tensor-core family (backend/cuda/kernels.h):
// what it refuses, how much workspace a split-KV run needs, and the dispatch
// from a Problem to one instantiation (launch.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <type_traits>

#include "backend/cuda/common/env_choice.h"
#include "backend/cuda/common/fwd_params.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/sm80/instances.h"  // generated
#include "backend/cuda/sm80/launch.h"
#include "backend/cuda/sm80/tile_config.h"
#include "core/arith.h"
#include "core/error.h"
#include "core/host_profile.h"

namespace fmha::cuda {
namespace {

// GQA packing: the group's query heads share a CTA (each K/V tile then
// serves the whole group) when seq_q * group is at most kMaxPackedRows, one
// wide tile; the narrow tile runs units of at most kMaxNarrowRows rows
// (decode: 1 row x group).
constexpr int64_t kMaxPackedRows = 128;
constexpr int64_t kMaxNarrowRows = 32;

// The shape facts of one instantiation, and the tuning entry it is
// (explain names it). key_warps: warps splitting each key tile (1: none).
struct Shape {
  int block_m = 0, block_n = 0, smem = 0, blocks_per_sm = 0, stages = 0, key_warps = 1;
  const char* name = "";
};

// score_ops: the kAll kernels take the bias buffers too (tile_config.h).
// An FP8 K/V tile's stages are its raw FP8 stages (kRawStages).
template <class Cfg, class = void>
struct StagesOf {
  static constexpr int value = Cfg::kStages;
};
template <class Cfg>
struct StagesOf<Cfg, std::void_t<decltype(Cfg::kRawStages)>> {
  static constexpr int value = Cfg::kRawStages;
};
template <class Cfg>
constexpr Shape shape_of(bool score_ops, const char* name) {  // the most any layout takes
  return {Cfg::kBlockM,           Cfg::kBlockN,  Cfg::smem_bytes(true, score_ops), Cfg::kMinBlocksPerSm,
          StagesOf<Cfg>::value,   Cfg::kKeyWarps, name};
}

// The name of a 16-bit decode tile: its tuning entry, or an experiments
// build's candidate's name (tile_config.h: kDecodeTileNames).
template <int kHeadDim, class Tile>
const char* decode16_name(bool paged) {
  using Tuning = sm80::Sm80Tuning<kHeadDim>;
  if (paged && std::is_same<Tile, typename Tuning::NarrowPaged>::value) return "NarrowPaged";
  if (paged && std::is_same<Tile, typename Tuning::NarrowPagedSplit>::value) return "NarrowPagedSplit";
  if (paged && std::is_same<Tile, typename Tuning::NarrowPagedBatch>::value) return "NarrowPagedBatch";
  if (!paged && std::is_same<Tile, typename Tuning::NarrowStream>::value) return "NarrowStream";
  if (std::is_same<Tile, typename Tuning::NarrowCompact>::value) return "NarrowCompact";
#if FMHA_SM80_DECODE_EXPERIMENTS
  if (const int c = sm80::sm80_decode_tile_choice(paged); c > 0)
    return sm80::kDecodeTileNames[c - 1];
#endif
  return "Narrow";
}

// The tile a problem runs (the launch's choice, fwd_launch.cuh: the 16-bit
// decode tile by layout, score ops and the plan's decode choice,
// sm80::with_decode16_tile; the FP8 K/V decode tile,
// sm80::with_fp8kv_decode_tile). ops: the launch's (launch_ops).
template <int kHeadDim>
Shape shape_for(bool narrow, bool fp8_kv, ScoreOps ops, bool paged, sm80::Decode16Choice choice,
                sm80::Fp8KvChoice fp8_choice) {
  using Tuning = sm80::Sm80Tuning<kHeadDim>;
  const bool score_ops = ops == ScoreOps::kAll && !fp8_kv;  // the FP8 K/V kernels stage no bias
  if (fp8_kv && !narrow) return shape_of<typename Tuning::WideFp8Kv>(score_ops, "WideFp8Kv");
  if (fp8_kv) {
    auto fp8_shape = [](auto tile) {
      using Tile = decltype(tile);
      return shape_of<Tile>(false, std::is_same<Tile, sm80::Fp8KvDecodeTile<kHeadDim>>::value ? "NarrowFp8Kv"
                                   : std::is_same<Tile, typename Tuning::NarrowFp8KvOneCta>::value
                                       ? "NarrowFp8KvOneCta"
                                   : std::is_same<Tile, typename Tuning::NarrowFp8KvPagedSplit>::value
                                       ? "NarrowFp8KvPagedSplit"
                                       : "an experiment's FP8 decode tile (FMHA_SM80_FP8KV_TILE)");
    };
    if (ops != ScoreOps::kNone) return sm80::with_fp8kv_decode_tile<kHeadDim, false, false>(fp8_choice, fp8_shape);
    return paged ? sm80::with_fp8kv_decode_tile<kHeadDim, true, true>(fp8_choice, fp8_shape)
                 : sm80::with_fp8kv_decode_tile<kHeadDim, true, false>(fp8_choice, fp8_shape);
  }
  if (!narrow) return shape_of<typename Tuning::Wide>(score_ops, "Wide");
  if (score_ops) return shape_of<sm80::Decode16Tile<kHeadDim, false, true>>(true, "Narrow");
  auto shape = [paged](auto tile) {
    return shape_of<decltype(tile)>(false, decode16_name<kHeadDim, decltype(tile)>(paged));
  };
  if (ops == ScoreOps::kNone)
    return paged ? sm80::with_decode16_tile<kHeadDim, true, true>(choice, shape)
                 : sm80::with_decode16_tile<kHeadDim, false, true>(choice, shape);
  return paged ? sm80::with_decode16_tile<kHeadDim, true, false>(choice, shape)
               : sm80::with_decode16_tile<kHeadDim, false, false>(choice, shape);
}

// The one place a run-time head dim becomes a template argument: calls
// fn(std::integral_constant<int, D>{}) for an instantiated D == d (the
// generated list, instances.h, which the registry row also reads) and
// returns true, else returns false.
template <class Fn>
bool dispatch_head_dim(int64_t d, Fn&& fn) {
  switch (d) {
#define FMHA_SM80_CASE_(D) \
  case D: fn(std::integral_constant<int, D>{}); return true;
    FMHA_SM80_HEAD_DIMS(FMHA_SM80_CASE_)
#undef FMHA_SM80_CASE_
    default: return false;
  }
}

// Calls fn(T{}, std::integral_constant<int, D>{}, std::bool_constant<
// kFp8Kv>{}) (T q's element type; kFp8Kv: k/v FP8) for the instantiation
// of p's (dtype, FP8 K/V or not, head dim) and returns true, else returns
// false. Only the dtype combinations sm80_supports admits reach it.
template <class Fn>
bool dispatch_instance(const Problem& p, Fn&& fn) {
  const fmha_dtype dtype = p.dtype;
  const int64_t d = p.head_dim;
  const bool fp8_kv = is_fp8(p.kv_dtype);
#define FMHA_SM80_CASE_(E, T, D)                                          \
  if (dtype == E && d == D && !fp8_kv) {                                  \
    fn(T{}, std::integral_constant<int, D>{}, std::bool_constant<false>{}); \
    return true;                                                          \
  }
  FMHA_SM80_INSTANCES(FMHA_SM80_CASE_)
#undef FMHA_SM80_CASE_
#define FMHA_SM80_CASE_(E, T, D)                                         \
  if (dtype == E && d == D && fp8_kv) {                                  \
    fn(T{}, std::integral_constant<int, D>{}, std::bool_constant<true>{}); \
    return true;                                                         \
  }
  FMHA_SM80_FP8KV_INSTANCES(FMHA_SM80_CASE_)
#undef FMHA_SM80_CASE_
  return false;
}

bool head_dim_instantiated(int64_t d) {
  return dispatch_head_dim(d, [](auto) {});
}

bool instantiated(const Problem& p) {
  return dispatch_instance(p, [](auto, auto, auto) {});
}

// The dtype combinations of fmha.h 0.3 this family runs: q, k, v and o in
// one dtype (F16 or BF16), or an FP8 KV cache (k/v F8E4M3 or F8E5M2) under
// an F16/BF16 q with o in q's dtype. The registry row's dtype column holds
// the union (FP8 included when an FP8 K/V instantiation is built); this
// names what the column cannot: an FP8 q, o in another dtype. Descales
// run with FP8 K/V only: the 16-bit instantiations sit at 255 registers,
// where holding the factor spilled (fwd_kernel.cuh).
const char* dtype_combination_refused(const Problem& p) {
  if (is_fp8(p.dtype)) return "FP8 q is not run (q must be F16 or BF16; FP8 K/V under an F16/BF16 q is)";
  if (p.o_dtype != p.dtype) return "o in another dtype than q is not run (o must be q's dtype)";
  if (p.kv_dtype != p.dtype && !is_fp8(p.kv_dtype)) return "k/v in another 16-bit dtype than q is not run";
  if (p.has_descale() && !is_fp8(p.kv_dtype)) return "does not support descales with 16-bit K/V (only with FP8 K/V)";
  if (is_fp8(p.kv_dtype) && (p.has_bias() || p.alibi_slopes != nullptr))
    return "does not run a bias or ALiBi with FP8 K/V (cuda_generic does)";
  return nullptr;
}

// The score ops of the kernel a problem launches. Descales take no kAll
// kernel here: the FP8 K/V kernels fold them in (and only they run them),
// so the host plan picks its tile with these, not score_ops_of() (an
// experiments build's FP8 candidates are plain kernels only).
ScoreOps launch_ops(const Problem& p) {
  return p.has_bias() || p.alibi_slopes != nullptr ? ScoreOps::kAll
         : p.softcap != 0.f                        ? ScoreOps::kSoftcap
                                                   : ScoreOps::kNone;
}

// How one problem runs: tile, packing, grid, splits. supports, workspace and
// forward all read this one function, so they cannot disagree.
struct Plan {
  bool ok = false;
  Shape shape;
  bool narrow = false;
  sm80::Decode16Choice decode16 = sm80::Decode16Choice::kDefault;
  sm80::Fp8KvChoice fp8kv = sm80::Fp8KvChoice::kDefault;
  FwdGrid grid;
};

// The grid of tile `shape` over p, GQA-packed by `pack`, with its splits.
FwdGrid grid_for(const Problem& p, const DeviceInfo& dev, int64_t pack, bool narrow, const Shape& shape) {
  FwdGrid g = fwd_grid(p, pack, shape.block_m);
  // The decode tile streams K/V; with per-sequence key counts its CTAs
  // differ in length (choose_splits' SplitShape). Its slots are its CTAs
  // per SM (the D=128 key-warp tile: one, so B=1 GQA 32/8 takes the one
  // wave of 8 units x 16 splits = 128 CTAs on the H200's 132 SMs, and B=16
  // Nk=8192, 128 units, runs unsplit). The 16-bit decode tiles split up to
  // what the combine merges (kCombineMaxSplits), so that a few units fill
  // the slots of a many-CTA tile (B=1 on the one-warp 4-CTA tile: 8 units
  // x 66 = 528 of 528, where kMaxFwdSplits = 64 left 512; one unit, MQA:
  // 128 CTAs instead of 64).
  SplitShape split_shape;
  split_shape.stream_bound = narrow;
  split_shape.uneven_keys = narrow && (p.layout.seqused_k != nullptr || p.layout.ragged_k() || p.layout.paged());
  if (narrow && !is_fp8(p.kv_dtype)) split_shape.max_splits = kCombineMaxSplits;
  g.splits = choose_splits(g.blocks(), shape.blocks_per_sm, ceil_div(p.seq_k, shape.block_n), dev.num_sms,
                           p.num_splits, split_shape);
  return g;
}

// The 16-bit decode tile of the plain and softcap kernels: NarrowStream /
// NarrowPaged, unless the device allows a block less shared memory than
// that tile needs (the D=128 key-warp tile's 198 KB: A100 163 KB, sm_86 /
// sm_89 / sm_120 99 KB), then NarrowCompact (tile_config.h).
template <int kHeadDim>
sm80::Decode16Choice decode16_choice(const Problem& p, const DeviceInfo& dev) {
  using Tuning = sm80::Sm80Tuning<kHeadDim>;
  // What sm80_supports checks: the tile's shape (shape_of: the most any layout takes).
  const int need = p.layout.paged() ? Tuning::NarrowPaged::smem_bytes(true, false)
                                    : Tuning::NarrowStream::smem_bytes(true, false);
  return dev.smem_per_block_optin < static_cast<size_t>(need) ? sm80::Decode16Choice::kCompact
                                                             : sm80::Decode16Choice::kDefault;
}

// The plain paged kernel's 16-bit decode tile for the grid `g` that
// NarrowPaged (`shape`) would run (tile_config.h: NarrowPagedSplit,
// NarrowPagedBatch): more units than its slots (a multi-wave batch) take
// NarrowPagedBatch, fewer units split over their keys NarrowPagedSplit, a
// grid it fills unsplit in one wave keeps it. The split count of `g` is the
// caller's when it forced one.
sm80::Decode16Choice paged_decode16_choice(const FwdGrid& g, const Shape& shape, const DeviceInfo& dev) {
  const int64_t unsplit = g.blocks() / g.splits;
  if (unsplit >= static_cast<int64_t>(dev.num_sms) * shape.blocks_per_sm) return sm80::Decode16Choice::kPagedBatch;
  return g.splits > 1 ? sm80::Decode16Choice::kPagedSplit : sm80::Decode16Choice::kDefault;
}

// The plain FP8 decode kernel's tile (tile_config.h): NarrowFp8KvOneCta
// when the unsplit grid fits one CTA per SM, and over paged K/V
// NarrowFp8KvPagedSplit where that one-CTA grid would split (few units over
// long keys); else NarrowFp8Kv.
template <int kD>
sm80::Fp8KvChoice fp8kv_choice(const Problem& p, const DeviceInfo& dev, int64_t pack) {
  if (fwd_grid(p, pack, sm80::Fp8KvDecodeTile<kD>::kBlockM).blocks() > static_cast<int64_t>(dev.num_sms))
    return sm80::Fp8KvChoice::kDefault;
  if (!p.layout.paged()) return sm80::Fp8KvChoice::kOneCta;
  const Shape one_cta = shape_for<kD>(true, true, ScoreOps::kNone, true, sm80::Decode16Choice::kDefault,
                                      sm80::Fp8KvChoice::kOneCta);
  return grid_for(p, dev, pack, true, one_cta).splits > 1 ? sm80::Fp8KvChoice::kPagedSplit
                                                          : sm80::Fp8KvChoice::kOneCta;
}

// Whether the split combine is launched as a programmatic dependent of the
// forward on sm_90 (split_combine.h): yes, unless the environment variable
// FMHA_COMBINE_PDL is 0 (read once; an A/B switch of measurements).
bool combine_pdl_allowed() {
  static const bool allowed = env_int("FMHA_COMBINE_PDL", 1) != 0;
  return allowed;
}

Plan make_plan(const Problem& p, const DeviceInfo& dev) {
  Plan plan;
  const int64_t group = p.group_size();
  const int64_t pack = group > 1 && p.seq_q * group <= kMaxPackedRows ? group : 1;
  plan.narrow = p.seq_q * pack <= kMaxNarrowRows;
  const bool fp8_kv = is_fp8(p.kv_dtype);
  const ScoreOps ops = launch_ops(p);
  const bool instantiated = dispatch_head_dim(p.head_dim, [&](auto head_dim) {
    constexpr int kD = decltype(head_dim)::value;
    if (plan.narrow && fp8_kv && ops == ScoreOps::kNone) plan.fp8kv = fp8kv_choice<kD>(p, dev, pack);
    if (plan.narrow && !fp8_kv && ops != ScoreOps::kAll) plan.decode16 = decode16_choice<kD>(p, dev);
    plan.shape = shape_for<kD>(plan.narrow, fp8_kv, ops, p.layout.paged(), plan.decode16, plan.fp8kv);
    // The plain paged kernel's tile per grid, at head dims with tiles of
    // their own for it (tile_config.h: D=128), from NarrowPaged's grid.
    using Tuning = sm80::Sm80Tuning<kD>;
    constexpr bool kPerGridTiles = !std::is_same<typename Tuning::NarrowPagedSplit, typename Tuning::NarrowPaged>::value ||
                                   !std::is_same<typename Tuning::NarrowPagedBatch, typename Tuning::NarrowPaged>::value;
    if constexpr (kPerGridTiles) {
      if (plan.narrow && !fp8_kv && ops == ScoreOps::kNone && p.layout.paged() &&
          plan.decode16 == sm80::Decode16Choice::kDefault) {
        plan.decode16 = paged_decode16_choice(grid_for(p, dev, pack, true, plan.shape), plan.shape, dev);
        plan.shape = shape_for<kD>(true, false, ops, true, plan.decode16, plan.fp8kv);
      }
    }
  });
  if (!instantiated) return plan;
  plan.grid = grid_for(p, dev, pack, plan.narrow, plan.shape);
  plan.ok = true;
  return plan;
}

}  // namespace

const char* sm80_supports(const Problem& p, const DeviceInfo& dev) {
  if (!head_dim_instantiated(p.head_dim))
    return "head_dim not instantiated (this build of the sm80 family runs " FMHA_SM80_HEAD_DIM_TEXT ")";
  if (const char* r = dtype_combination_refused(p)) return r;
  if (!instantiated(p))
    return is_fp8(p.kv_dtype) ? "FP8 K/V at this (q dtype, head_dim) is not instantiated in this build"
                              : "this (dtype, head_dim) pair is not instantiated in this build";
  if (p.seq_q > kMaxFwdSeq || p.seq_k > kMaxFwdSeq) return "sequence too long for int32 positions";
  const Plan plan = make_plan(p, dev);
  if (dev.smem_per_block_optin < static_cast<size_t>(plan.shape.smem))
    return "device allows less shared memory per block than the tile needs";
  const FwdGrid& g = plan.grid;
  if (g.units > 0 && g.m_tiles > INT32_MAX / g.units) return "grid too large (query tiles x batch x heads x splits >= 2^31)";
  if (g.units > 0 && g.m_tiles > 0 && g.m_tiles * g.units > INT32_MAX / g.splits)
    return "grid too large (query tiles x batch x heads x splits >= 2^31)";
  return nullptr;
}

const char* sm80_describe(const Problem& p, const DeviceInfo& dev, char* buf, size_t len) {
  const Plan plan = make_plan(p, dev);
  if (!plan.ok || len == 0) return nullptr;
  const FwdGrid& g = plan.grid;
  char warps[64] = "";
  if (plan.shape.key_warps > 1)
    std::snprintf(warps, sizeof warps, " (%d key warps of %d)", plan.shape.key_warps,
                  plan.shape.block_n / plan.shape.key_warps);
  std::snprintf(buf, len,
                "%s tile %s: %d rows x %d keys%s, %d stages, %d CTAs per SM; %lld units of %lld rows (GQA pack %lld), "
                "%lld query blocks, %d key splits, %lld CTAs on %d SMs",
                plan.narrow ? "decode" : "prefill", plan.shape.name, plan.shape.block_m, plan.shape.block_n, warps,
                plan.shape.stages, plan.shape.blocks_per_sm, static_cast<long long>(g.units),
                static_cast<long long>(g.rows), static_cast<long long>(g.pack), static_cast<long long>(g.m_tiles),
                g.splits, static_cast<long long>(g.blocks()), dev.num_sms);
  return buf;
}

size_t sm80_workspace_bytes(const Problem& p, const DeviceInfo& dev) {
  const Plan plan = make_plan(p, dev);
  return plan.ok ? fwd_partials_bytes(p, plan.grid) : 0;
}

fmha_status sm80_forward(const Problem& p, const LaunchContext& ctx) {
  const DeviceInfo& dev = *ctx.device;
  const Plan plan = make_plan(p, dev);
  if (!plan.ok)
    return fail(FMHA_ERROR_INTERNAL, "cuda_sm80_tc: head_dim=%lld not instantiated",
                static_cast<long long>(p.head_dim));
  if (!instantiated(p))
    return fail(FMHA_ERROR_INTERNAL, "cuda_sm80_tc: dtype %s, k/v dtype %s, head_dim=%lld not instantiated",
                dtype_name(p.dtype), dtype_name(p.kv_dtype), static_cast<long long>(p.head_dim));
  const size_t need = fwd_partials_bytes(p, plan.grid);
  if (ctx.workspace_bytes < need)
    return fail(FMHA_ERROR_WORKSPACE_TOO_SMALL, "cuda_sm80_tc needs %zu bytes of workspace", need);
  FMHA_PROFILE_STAGE(kFwdDispatch);

  const FwdParams f = make_fwd_params(p, plan.grid, ctx.workspace);

  sm80::LaunchArgs a;
  a.blocks = plan.grid.blocks();
  a.narrow = plan.narrow;
  a.decode16 = plan.decode16;
  a.fp8kv = plan.fp8kv;
  a.ops = launch_ops(p);
  a.mode = seq_mode(p.layout);
  if (a.blocks == 0) return FMHA_SUCCESS;  // no sequence or no query row: nothing to write
  a.device = dev.ordinal;
  a.dependent_combine = dev.sm >= 90 && combine_pdl_allowed();
  a.stream = static_cast<cudaStream_t>(ctx.stream);
  FMHA_PROFILE_STAGE(kFwdParams);

  fmha_status status = FMHA_ERROR_INTERNAL;
  dispatch_instance(p, [&](auto type, auto head_dim, auto fp8_kv) {
    status = sm80::launch_fwd<decltype(type), decltype(head_dim)::value, decltype(fp8_kv)::value>(f, a);
  });
  FMHA_PROFILE_STAGE(kFwdLaunch);
  return status;  // instantiated() above already refused pairs without an instantiation
}

}  // namespace fmha::cuda
