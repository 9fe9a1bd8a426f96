// The definition of launch_fwd (launch.h), included only by the
// per-instantiation translation units fwd_<dtype>_d<D>.cu (sm_90a).
#pragma once

#include "backend/cuda/common/smem_opt_in.h"
#include "backend/cuda/common/split_combine.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/sm90/fwd_kernel.cuh"
#include "backend/cuda/sm90/launch.h"
#include "backend/cuda/sm90/tma.h"
#include "core/error.h"

namespace fmha::cuda::sm90 {

// The panel map of operand `op` of extents {d, seq, heads, batch}. Extents
// of 1 get a benign stride (the copy engine never steps them).
inline fmha_status operand_map(const Problem& p, const Operand& op, int64_t seq, int64_t heads, int box_rows,
                               CUtensorMap* out) {
  Tensor4d t;
  t.data = op.data;
  t.dims[0] = p.head_dim;
  t.dims[1] = seq;
  t.dims[2] = heads;
  t.dims[3] = p.batch;
  int64_t reach = p.head_dim;
  for (int i = 0; i < 3; ++i) {
    const int64_t s = op.stride[2 - i];
    t.strides[i] = t.dims[i + 1] == 1 ? (reach + 7) / 8 * 8 : s;
    reach = t.strides[i] * t.dims[i + 1];
  }
  t.bf16 = p.dtype == FMHA_DTYPE_BF16;
  return make_panel_map(t, box_rows, out);
}

template <class T, class Cfg, bool kScoreOps>
fmha_status launch_fwd_kernel(const FwdParams& f, const LaunchArgs& a) {
  const Problem& p = *a.problem;
  FwdMaps maps;
  fmha_status s = operand_map(p, p.q, p.seq_q, p.heads_q, Cfg::kBlockM, &maps.q);
  if (s == FMHA_SUCCESS) s = operand_map(p, p.k, p.seq_k, p.heads_kv, Cfg::kBlockN, &maps.k);
  if (s == FMHA_SUCCESS) s = operand_map(p, p.v, p.seq_k, p.heads_kv, Cfg::kBlockN, &maps.v);
  if (s == FMHA_SUCCESS) s = operand_map(p, p.o, p.seq_q, p.heads_q, 64, &maps.o);
  if (s != FMHA_SUCCESS) return s;
  const auto kernel = fwd_kernel<T, Cfg, kScoreOps>;
  static SmemOptIn opt_in;  // one per instantiation, i.e. per kernel
  s = opt_in.ensure(reinterpret_cast<const void*>(kernel), Cfg::kSmemBytes, a.device, "cuda_sm90_ws forward");
  if (s != FMHA_SUCCESS) return s;
  // One CTA per work tile, or a persistent grid of one CTA per SM whose
  // CTAs take tiles past the first from a counter (tile_config.h says which
  // is faster); the counter starts at 0 in the stream's order (graph-safe).
  const int64_t grid = Cfg::kPersistent && a.blocks > a.num_sms ? a.num_sms : a.blocks;
  if (Cfg::kPersistent && cudaMemsetAsync(a.tile_counter, 0, sizeof(int), a.stream) != cudaSuccess)
    return check_launch("cuda_sm90_ws tile counter reset");
  kernel<<<static_cast<unsigned>(grid), Cfg::kThreads, Cfg::kSmemBytes, a.stream>>>(f, maps, a.tile_counter);
  return check_launch("cuda_sm90_ws forward");
}

template <class T, int kHeadDim>
fmha_status launch_fwd(const FwdParams& f, const LaunchArgs& a) {
  using Cfg = typename Sm90Tuning<kHeadDim>::Config;
  const fmha_status s =
      a.score_ops ? launch_fwd_kernel<T, Cfg, true>(f, a) : launch_fwd_kernel<T, Cfg, false>(f, a);
  if (s != FMHA_SUCCESS || f.num_splits == 1) return s;
  return launch_split_combine<T>(fwd_combine_params(f), a.stream);
}

}  // namespace fmha::cuda::sm90
