// The definition of launch_fwd_fp8 (launch.h), included only by the
// generated FP8 translation units fwd_<e4m3|e5m2>_d<D>.cu (sm_90a).
#pragma once

#include "backend/cuda/common/smem_opt_in.h"
#include "backend/cuda/common/split_combine.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/sm90/fwd_fp8_kernel.cuh"
#include "backend/cuda/sm90/launch.h"
#include "backend/cuda/sm90/tma.h"
#include "core/error.h"

namespace fmha::cuda::sm90 {

// The map of a [batch, heads, rows, cols] view of `op` whose cols are
// contiguous: `row` and the outer dims name op's stride indices (V^T: rows
// are d, stride index 3, cols are keys). Extents of 1 get a benign stride.
inline fmha_status fp8_operand_map(const Operand& op, const int64_t (&dims)[4], int row_stride, bool fp8,
                                   bool bf16, int box_rows, CUtensorMap* out, int box_bytes = 128) {
  Tensor4d t;
  t.data = op.data;
  t.fp8 = fp8;
  t.bf16 = bf16;
  for (int i = 0; i < 4; ++i) t.dims[i] = dims[3 - i];
  const int64_t strides[3] = {op.stride[row_stride], op.stride[1], op.stride[0]};
  int64_t reach = dims[3];
  for (int i = 0; i < 3; ++i) {
    t.strides[i] = t.dims[i + 1] == 1 ? (reach * (fp8 ? 1 : 2) + 15) / 16 * 16 / (fp8 ? 1 : 2) : strides[i];
    reach = t.strides[i] * t.dims[i + 1];
  }
  return make_panel_map(t, box_rows, out, box_bytes);
}

template <class T, class To, class Cfg>
fmha_status launch_fwd_fp8_kernel(const FwdParams& params, const LaunchArgs& a) {
  FwdParams f = params;
  f.unit_band = unit_band(f, 1, l2_band_mib() << 20);  // K/V of one byte per element
  const Problem& p = *a.problem;
  Fp8Maps maps;
  int64_t q_dims[4], kv_dims[4];
  p.q_dims(q_dims);
  p.kv_dims(kv_dims);
  const int64_t vt_dims[4] = {kv_dims[0], kv_dims[1], kv_dims[3], kv_dims[2]};  // [B, Hk, D, Nk]
  fmha_status s = fp8_operand_map(p.q, q_dims, 2, true, false, Cfg::kBlockM, &maps.q);
  if (s == FMHA_SUCCESS) s = fp8_operand_map(p.k, kv_dims, 2, true, false, Cfg::kBlockN, &maps.k);
  if (s == FMHA_SUCCESS) s = fp8_operand_map(p.v, vt_dims, 3, true, false, Cfg::kHeadDim, &maps.v);
  if (s == FMHA_SUCCESS && Cfg::kVTailKeys > 0)
    s = fp8_operand_map(p.v, vt_dims, 3, true, false, Cfg::kHeadDim, &maps.v_tail, Cfg::kVTailKeys);
  if (s == FMHA_SUCCESS)
    s = fp8_operand_map(p.o, q_dims, 2, false, std::is_same<To, __nv_bfloat16>::value, 64, &maps.o);
  if (s != FMHA_SUCCESS) return s;
  const auto kernel = fwd_fp8_kernel<T, To, Cfg>;
  static SmemOptIn opt_in;  // one per instantiation, i.e. per kernel
  s = opt_in.ensure(reinterpret_cast<const void*>(kernel), Cfg::kSmemBytes, a.device, "cuda_sm90_ws FP8 forward");
  if (s != FMHA_SUCCESS) return s;
  unsigned grid = 0;
  if ((s = work_grid(Cfg::kPersistent, a, &grid)) != FMHA_SUCCESS) return s;
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, a.stream>>>(f, maps, a.tile_counter);
  return check_launch("cuda_sm90_ws FP8 forward");
}

// One kernel per o dtype (F16, BF16: sm90_supports refuses others) and
// tile config (fp8_tile_config.h: one, unless FMHA_SM90_FP8_EXPERIMENTS).
template <class T, int kHeadDim>
fmha_status launch_fwd_fp8(const FwdParams& f, const LaunchArgs& a) {
  const bool bf16 = f.o_dtype == FMHA_DTYPE_BF16;
  const fmha_status s = with_fp8_config<kHeadDim>([&](auto cfg) {
    using Cfg = decltype(cfg);
    return bf16 ? launch_fwd_fp8_kernel<T, __nv_bfloat16, Cfg>(f, a) : launch_fwd_fp8_kernel<T, __half, Cfg>(f, a);
  });
  if (s != FMHA_SUCCESS || f.num_splits == 1) return s;
  return bf16 ? launch_split_combine<__nv_bfloat16>(fwd_combine_params(f), a.stream)
              : launch_split_combine<__half>(fwd_combine_params(f), a.stream);
}

}  // namespace fmha::cuda::sm90
