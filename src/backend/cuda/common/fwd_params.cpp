// The host side of common/fwd_params.h: the grid, the split heuristic and
// the one place a Problem becomes FwdParams.
#include "backend/cuda/common/fwd_params.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/arith.h"

namespace fmha::cuda {
namespace {

// Auto split, as FlashAttention-2 decides it: none when the unsplit grid
// fills this share of the resident CTA slots; else the fewest splits whose
// wave efficiency (CTAs / slots over its ceiling) is within kSplitSlack of
// the best split count's.
constexpr double kFillThreshold = 0.8;
constexpr double kSplitSlack = 0.85;
// ... and never when the rows are short: the partial writes and the combine
// launch cost more than they save (H200, cuda_sm80_tc, causal FP16 B=1 H=32
// N=512, 8 key tiles: 24.6 us unsplit, 28.9 us with 2 splits, 35.0 us with 4).
constexpr int64_t kMinKeyTilesToSplit = 16;
// SplitShape::uneven_keys: at least this many waves, for grids past one
// wave unsplit (H200, cuda_sm80_tc, BF16 GQA 32/8 D=128 decode, the mixed
// B=64 seqused_k batch of 512 units: 0.232 / 0.189 / 0.187 / 0.202 / 0.226
// ms at 1 / 3 / 4 / 8 / 16 splits, 75% -> 93% of copy at 4 = 5.2 waves; a
// grid that fits one wave keeps the one-wave rule: B=16 paged, 128 units,
// 0.160 ms at 3 splits against 0.177-0.217 at 4-16; docs/performance.md,
// "Paged and mixed decode").
constexpr double kUnevenMinWaves = 4.0;
// ... for grids of at least this share of a wave unsplit. The mixed batch on
// cuda_sm80_tc's 7-CTA paged tile (512 units, 924 slots: 0.55 of a wave)
// took the one-wave rules' 5 splits (2.8 waves), not 8; paged runs of
// uneven sequences gained from shorter CTAs before (32.3.4: 0.792 of
// contiguous at 4 splits, 0.834 at 8; docs/performance.md, "Paged decode
// with more tiles in flight"). B=16 paged (128 units) stays below it.
constexpr double kUnevenMinFill = 0.5;
// ... and of more CTAs than SMs: a grid of at most one CTA per SM (cuda_sm80_tc's
// one-CTA key-warp decode tile: B=16 GQA 32/8, 128 units on 132 SMs) runs
// every CTA at once; splitting it buys balance only when the lengths differ,
// and costs the split combine when they do not (4-5 us of a 125 us B=16
// call on the H200, docs/performance.md, "Where a decode call's time goes";
// the contiguous key-warp tile ran it unsplit in 122.2 us against 129.2 at
// 4 splits of the one-warp tile).

}  // namespace

FwdGrid fwd_grid(const Problem& p, int64_t pack, int64_t block_m) {
  FwdGrid g;
  g.pack = pack;
  g.rows = p.seq_q * pack;
  g.units = p.batch * p.heads_q / pack;
  g.m_tiles = ceil_div(g.rows, block_m);
  return g;
}

int choose_splits(int64_t blocks, int slots_per_sm, int64_t key_tiles, int num_sms, int requested,
                  SplitShape shape) {
  const int64_t max_splits = std::clamp(shape.max_splits, 1, kCombineMaxSplits);
  if (requested == 1) return 1;
  if (requested > 1) return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({requested, max_splits, key_tiles})));
  const double slots = static_cast<double>(std::max(num_sms, 1)) * std::max(slots_per_sm, 1);
  if (key_tiles < kMinKeyTilesToSplit || blocks <= 0) return 1;
  const int64_t cap = std::max<int64_t>(1, std::min<int64_t>(max_splits, key_tiles / 2));
  auto waves = [&](int64_t s) { return static_cast<double>(blocks * s) / slots; };
  auto efficiency = [&](int64_t s) { return waves(s) / std::ceil(waves(s)); };
  // The fewest splits in [lo, cap] whose efficiency is within kSplitSlack
  // of the best there, or 0 when lo > cap. (Each efficiency once: the plan
  // runs this on every forward, for up to kCombineMaxSplits counts.)
  auto fewest_near_best = [&](int64_t lo) {
    double eff[kCombineMaxSplits + 1];
    double best = 0;
    for (int64_t s = lo; s <= cap; ++s) best = std::max(best, eff[s] = efficiency(s));
    for (int64_t s = lo; s <= cap; ++s)
      if (eff[s] >= kSplitSlack * best) return static_cast<int>(s);
    return 0;
  };
  if (shape.uneven_keys && static_cast<double>(blocks) >= kUnevenMinFill * slots && blocks > num_sms) {
    int64_t lo = 1;
    while (lo <= cap && waves(lo) < kUnevenMinWaves) ++lo;
    if (const int s = fewest_near_best(lo)) return s;
  }
  if (static_cast<double>(blocks) >= kFillThreshold * slots) return 1;
  if (shape.stream_bound) {
    const int64_t one_wave = std::clamp<int64_t>(static_cast<int64_t>(slots) / blocks, 1, cap);
    if (waves(one_wave) >= kFillThreshold) return static_cast<int>(one_wave);
  }
  const int s = fewest_near_best(1);
  return s > 0 ? s : 1;
}

size_t fwd_partials_bytes(const Problem& p, const FwdGrid& g) {
  if (g.splits <= 1) return 0;
  size_t bytes;
  return split_partials_bytes(g.splits, g.units * g.rows, p.head_dim, &bytes) ? bytes : SIZE_MAX;
}

FwdParams make_fwd_params(const Problem& p, const FwdGrid& g, void* workspace) {
  FwdParams f{};
  f.q = p.q.data;
  f.k = p.k.data;
  f.v = p.v.data;
  f.o = p.o.data;
  for (int d = 0; d < 4; ++d) {
    f.q_stride[d] = p.q.stride[d];
    f.k_stride[d] = p.k.stride[d];
    f.v_stride[d] = p.v.stride[d];
    f.o_stride[d] = p.o.stride[d];
  }
  f.lse = p.lse;
  f.heads_q = p.heads_q;
  f.group = p.group_size();
  f.pack = static_cast<int>(g.pack);
  f.rows = static_cast<int>(g.rows);
  f.units = g.units;
  f.seq_q = static_cast<int>(p.seq_q);
  f.seq_k = static_cast<int>(p.seq_k);
  f.head_dim = static_cast<int>(p.head_dim);
  f.diag_offset = p.diag_offset;
  f.window_left = p.window_left;
  f.window_right = p.window_right;
  f.scale = p.scale;
  if (p.softcap != 0.f) {
    f.softcap_in = p.scale / p.softcap;
    f.softcap_out = p.softcap;
    f.score_log2 = kLog2e;
  } else {
    f.score_log2 = p.scale * kLog2e;
  }
  f.layout = p.layout;
  if (p.layout.paged()) f.page_div = FastDiv(p.layout.page_size);
  f.dtype = p.dtype;
  f.kv_dtype = p.kv_dtype;
  f.o_dtype = p.o_dtype;
  f.q_descale = p.q_descale;
  f.k_descale = p.k_descale;
  f.v_descale = p.v_descale;
  f.bias = p.bias.data;
  for (int d = 0; d < 4; ++d) f.bias_stride[d] = p.bias.stride[d];
  f.bias_dtype = p.bias_dtype;
  f.alibi_slopes = p.alibi_slopes;
  f.alibi_stride = p.alibi_stride;
  f.num_m_tiles = static_cast<int>(g.m_tiles);
  f.num_splits = g.splits;
  if (g.splits > 1) {
    const SplitPartials part = split_partials_in(workspace, g.splits, g.units * g.rows, p.head_dim);
    f.o_partial = part.o;
    f.m_partial = part.m;
    f.l_partial = part.l;
  }
  return f;
}

SplitCombineParams fwd_combine_params(const FwdParams& p) {
  // The partials' rows are the units' rows in order: pack-interleaved.
  SplitCombineParams c{};
  c.part.o = p.o_partial;
  c.part.m = p.m_partial;
  c.part.l = p.l_partial;
  c.o = p.o;
  for (int d = 0; d < 4; ++d) c.o_stride[d] = p.o_stride[d];
  c.lse = p.lse;
  c.heads_q = p.heads_q;
  c.seq_q = p.seq_q;
  c.rows = p.units * p.rows;
  c.pack = p.pack;
  c.head_dim = p.head_dim;
  c.splits = p.num_splits;
  c.layout = p.layout;
  return c;
}

}  // namespace fmha::cuda
