// The definition of launch_fwd (launch.h), included only by the
// per-instantiation translation units fwd_<dtype>_d<D>.cu.
#pragma once

#include "backend/cuda/common/smem_opt_in.h"
#include "backend/cuda/common/split_combine.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/sm80/fwd_kernel.cuh"
#include "backend/cuda/sm80/launch.h"
#include "core/error.h"

namespace fmha::cuda::sm80 {

template <class T, class Cfg, bool kSoftcap>
fmha_status launch_fwd_kernel(const FwdParams& p, const LaunchArgs& a) {
  const auto kernel = fwd_kernel<T, Cfg, kSoftcap>;
  static SmemOptIn opt_in;  // one per instantiation, i.e. per kernel
  const fmha_status s =
      opt_in.ensure(reinterpret_cast<const void*>(kernel), Cfg::kSmemBytes, a.device, "cuda_sm80_tc forward");
  if (s != FMHA_SUCCESS) return s;
  kernel<<<static_cast<unsigned>(a.blocks), Cfg::kThreads, Cfg::kSmemBytes, a.stream>>>(p);
  return check_launch("cuda_sm80_tc forward");
}

template <class T, class Cfg>
fmha_status launch_fwd_config(const FwdParams& p, const LaunchArgs& a) {
  return a.softcap ? launch_fwd_kernel<T, Cfg, true>(p, a) : launch_fwd_kernel<T, Cfg, false>(p, a);
}

template <class T, int kHeadDim>
fmha_status launch_fwd(const FwdParams& p, const LaunchArgs& a) {
  using Tuning = Sm80Tuning<kHeadDim>;
  const fmha_status s = a.narrow ? launch_fwd_config<T, typename Tuning::Narrow>(p, a)
                                 : launch_fwd_config<T, typename Tuning::Wide>(p, a);
  if (s != FMHA_SUCCESS || p.num_splits == 1) return s;
  // The partials' rows are the units' rows in order: pack-interleaved.
  SplitCombineParams c{};
  c.part.o = p.o_partial;
  c.part.m = p.m_partial;
  c.part.l = p.l_partial;
  c.o = p.o;
  for (int d = 0; d < 3; ++d) c.o_stride[d] = p.o_stride[d];
  c.o_stride[3] = 1;
  c.lse = p.lse;
  c.heads_q = p.heads_q;
  c.seq_q = p.seq_q;
  c.rows = p.units * p.rows;
  c.pack = p.pack;
  c.head_dim = kHeadDim;
  c.splits = p.num_splits;
  return launch_split_combine<T>(c, a.stream);
}

}  // namespace fmha::cuda::sm80
