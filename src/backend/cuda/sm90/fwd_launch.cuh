// The definition of launch_fwd (launch.h), included only by the
// per-instantiation translation units fwd_<dtype>_d<D>.cu (sm_90a).
#pragma once

#include <cstdint>
#include <cstdlib>

#include "backend/cuda/common/smem_opt_in.h"
#include "backend/cuda/common/split_combine.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/sm90/fwd_kernel.cuh"
#include "backend/cuda/sm90/launch.h"
#include "backend/cuda/sm90/tma.h"
#include "core/error.h"

namespace fmha::cuda::sm90 {

// The panel map of operand `op` of dims [batch, heads, seq, head_dim] (the
// caller's: Problem::q_dims / kv_dims, so a ragged batch's packed axis is
// one batch-1 map). Extents of 1 get a benign stride (the copy engine never
// steps them).
inline fmha_status operand_map(const Problem& p, const Operand& op, const int64_t (&dims)[4], int box_rows,
                               CUtensorMap* out) {
  Tensor4d t;
  t.data = op.data;
  for (int i = 0; i < 4; ++i) t.dims[i] = dims[3 - i];
  int64_t reach = p.head_dim;
  for (int i = 0; i < 3; ++i) {
    const int64_t s = op.stride[2 - i];
    t.strides[i] = t.dims[i + 1] == 1 ? (reach + 7) / 8 * 8 : s;
    reach = t.strides[i] * t.dims[i + 1];
  }
  t.bf16 = p.dtype == FMHA_DTYPE_BF16;
  return make_panel_map(t, box_rows, out);
}

// The bias's tensor map (FwdMaps::bias) when the copy engine can stage its
// tiles: 16-bit elements, keys contiguous, a base and strides it can
// address (tma.h; a broadcast head or batch dim, stride 0, is a map extent
// of 1, and a bias broadcast over queries a one-row map). Otherwise returns
// 0 and the kernel loads the elements from global memory.
inline int bias_map(const Problem& p, CUtensorMap* out) {
  if (!p.has_bias() || (p.bias_dtype != FMHA_DTYPE_F16 && p.bias_dtype != FMHA_DTYPE_BF16)) return 0;
  const int64_t* st = p.bias.stride;
  if (st[3] != 1 || p.seq_k < 1 || p.seq_q < 1) return 0;
  const int64_t full[4] = {p.batch, p.heads_q, p.seq_q, p.seq_k};
  Tensor4d t;
  t.data = p.bias.data;
  t.bf16 = p.bias_dtype == FMHA_DTYPE_BF16;
  t.dims[0] = p.seq_k;
  int64_t reach = p.seq_k;
  for (int i = 0; i < 3; ++i) {
    const int64_t s = st[2 - i];
    t.dims[i + 1] = s == 0 ? 1 : full[2 - i];
    t.strides[i] = t.dims[i + 1] == 1 ? (reach + 7) / 8 * 8 : s;  // extents of 1 are never stepped
    reach = t.strides[i] * t.dims[i + 1];
  }
  if (panel_map_unsupported(t) != nullptr) return 0;
  const int rows = st[2] == 0 ? 1 : 64;
  return make_panel_map(t, rows, out) == FMHA_SUCCESS ? rows : 0;
}

template <class T, class Cfg, ScoreOps kOps, bool kServing>
fmha_status launch_fwd_kernel(const FwdParams& params, const LaunchArgs& a) {
  FwdParams f = params;
  f.unit_band = unit_band(f, static_cast<int>(sizeof(T)), l2_band_mib() << 20);
  const Problem& p = *a.problem;
  FwdMaps maps;
  int64_t q_dims[4], kv_dims[4];
  p.q_dims(q_dims);
  p.kv_dims(kv_dims);
  fmha_status s = operand_map(p, p.q, q_dims, Cfg::kBlockM, &maps.q);
  // A paged K/V is loaded a page at a time when pages are shorter than a key tile.
  const int kv_box = p.layout.paged() && p.layout.page_size < Cfg::kBlockN ? static_cast<int>(p.layout.page_size)
                                                                           : Cfg::kBlockN;
  if (s == FMHA_SUCCESS) s = operand_map(p, p.k, kv_dims, kv_box, &maps.k);
  if (s == FMHA_SUCCESS) s = operand_map(p, p.v, kv_dims, kv_box, &maps.v);
  if (s == FMHA_SUCCESS) s = operand_map(p, p.o, q_dims, 64, &maps.o);
  if (s != FMHA_SUCCESS) return s;
  maps.bias_rows = kOps == ScoreOps::kAll ? bias_map(p, &maps.bias) : 0;
  maps.bias_ahead = bias_prefetch_tiles();
  const auto kernel = fwd_kernel<T, Cfg, kOps, kServing>;
  // The score-transform kernel's bias ring lies past the rest (tile_config.h).
  constexpr int kSmem = kOps == ScoreOps::kAll ? Cfg::kSmemBytesBias : Cfg::kSmemBytes;
  static SmemOptIn opt_in;  // one per instantiation, i.e. per kernel
  s = opt_in.ensure(reinterpret_cast<const void*>(kernel), kSmem, a.device, "cuda_sm90_ws forward");
  if (s != FMHA_SUCCESS) return s;
  unsigned grid = 0;
  if ((s = work_grid(Cfg::kPersistent, a, &grid)) != FMHA_SUCCESS) return s;
  kernel<<<grid, Cfg::kThreads, kSmem, a.stream>>>(f, maps, a.tile_counter);
  return check_launch("cuda_sm90_ws forward");
}

template <class T, int kHeadDim>
fmha_status launch_fwd(const FwdParams& f, const LaunchArgs& a) {
  using Cfg = typename Sm90Tuning<kHeadDim>::Config;
  using ServingCfg = typename Sm90ServingTuning<kHeadDim>::Config;
  using OpsCfg = typename Sm90ScoreOpsTuning<kHeadDim>::Config;
  // The plain kernels, one per layout (the dense one reads no metadata and
  // runs no score transform), and one kAll kernel for every problem with a
  // score transform: the serving one, since without metadata its TileWork
  // resolves a dense batch to the same extents (core/seq_layout.h). A
  // softcap-only kernel of its own measured no faster (H200, FP16 D=128
  // N=8192, softcap / none 1.50 / 1.44 against 1.53 / 1.55 in kAll).
  const fmha_status s =
      a.ops != ScoreOps::kNone ? launch_fwd_kernel<T, OpsCfg, ScoreOps::kAll, true>(f, a)
      : f.layout.any()         ? launch_fwd_kernel<T, ServingCfg, ScoreOps::kNone, true>(f, a)
                               : launch_fwd_kernel<T, Cfg, ScoreOps::kNone, false>(f, a);
  if (s != FMHA_SUCCESS || f.num_splits == 1) return s;
  return launch_split_combine<T>(fwd_combine_params(f), a.stream);
}

}  // namespace fmha::cuda::sm90
