// The definition of launch_fwd (launch.h), included only by the
// per-instantiation translation units fwd_<dtype>_d<D>.cu.
#pragma once

#include "backend/cuda/common/kernel_launch.h"
#include "backend/cuda/common/smem_opt_in.h"
#include "backend/cuda/common/split_combine.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/sm80/fwd_kernel.cuh"
#include "backend/cuda/sm80/launch.h"
#include "core/error.h"

namespace fmha::cuda::sm80 {

template <class T, bool kFp8Kv, class Cfg, ScoreOps kOps, SeqMode kMode>
fmha_status launch_fwd_tile(const FwdParams& p, const LaunchArgs& a) {
  const void* kernel = reinterpret_cast<const void*>(fwd_kernel<T, kFp8Kv, Cfg, kOps, kMode>);
  static SmemOptIn opt_in;          // one per instantiation, i.e. per kernel
  static KernelLauncher launcher;   // likewise
  // The paged entries and the score-ops kernels' bias buffers follow the
  // K/V stages (tile_config.h).
  constexpr bool kPagedEntries = kMode == SeqMode::kPaged && !kFp8Kv;
  constexpr int kSmem = Cfg::smem_bytes(kPagedEntries, kOps == ScoreOps::kAll && !kFp8Kv);
  const fmha_status s = opt_in.ensure(kernel, kSmem, a.device, "cuda_sm80_tc forward");
  if (s != FMHA_SUCCESS) return s;
  void* args[] = {const_cast<FwdParams*>(&p)};
  return launcher.launch(kernel, dim3(static_cast<unsigned>(a.blocks)), dim3(Cfg::kThreads), kSmem, a.stream, args,
                         "cuda_sm80_tc forward");
}

// The tile a kernel runs: Cfg, except that the 16-bit decode tile
// (Sm80Tuning::Narrow) becomes its layout's and score ops' own
// (tile_config.h: with_decode16_tile and Decode16Tile, which the host plan
// reads too), and the FP8 K/V decode tile with_fp8kv_decode_tile's.
template <class T, bool kFp8Kv, class Cfg, ScoreOps kOps, SeqMode kMode>
fmha_status launch_fwd_kernel(const FwdParams& p, const LaunchArgs& a) {
  constexpr int kD = Cfg::kHeadDim;
  constexpr bool kPaged = kMode == SeqMode::kPaged;
  if constexpr (kFp8Kv && std::is_same<Cfg, Fp8KvDecodeTile<kD>>::value) {
    return with_fp8kv_decode_tile<kD, kOps == ScoreOps::kNone, kPaged>(
        a.fp8kv, [&](auto tile) { return launch_fwd_tile<T, kFp8Kv, decltype(tile), kOps, kMode>(p, a); });
  } else if constexpr (kFp8Kv || !std::is_same<Cfg, typename Sm80Tuning<kD>::Narrow>::value) {
    return launch_fwd_tile<T, kFp8Kv, Cfg, kOps, kMode>(p, a);
  } else if constexpr (kOps == ScoreOps::kAll) {
    return launch_fwd_tile<T, kFp8Kv, Decode16Tile<kD, kPaged, true>, kOps, kMode>(p, a);
  } else {
    return with_decode16_tile<kD, kPaged, kOps == ScoreOps::kNone>(
        a.decode16, [&](auto tile) { return launch_fwd_tile<T, kFp8Kv, decltype(tile), kOps, kMode>(p, a); });
  }
}

template <class T, bool kFp8Kv, class Cfg, SeqMode kMode>
fmha_status launch_fwd_mode(const FwdParams& p, const LaunchArgs& a) {
  switch (a.ops) {
    case ScoreOps::kNone: return launch_fwd_kernel<T, kFp8Kv, Cfg, ScoreOps::kNone, kMode>(p, a);
    case ScoreOps::kSoftcap: return launch_fwd_kernel<T, kFp8Kv, Cfg, ScoreOps::kSoftcap, kMode>(p, a);
    case ScoreOps::kAll:
      // One kAll kernel per gather: a dense batch takes the contiguous one
      // (without metadata its BlockWork resolves the same extents). The FP8
      // K/V kernels have none (sm80_supports refuses their bias / ALiBi).
      if constexpr (kFp8Kv) {
        break;
      } else {
        constexpr SeqMode kAllMode = kMode == SeqMode::kPaged ? SeqMode::kPaged : SeqMode::kContiguous;
        return launch_fwd_kernel<T, kFp8Kv, Cfg, ScoreOps::kAll, kAllMode>(p, a);
      }
  }
  return fail(FMHA_ERROR_INTERNAL, "cuda_sm80_tc: no kernel for score ops %d", static_cast<int>(a.ops));
}

// One kernel per (score ops, layout): dense problems run the instantiation
// that reads no sequence metadata, paged ones the one with the gather. A
// tile without a dense instantiation (kDenseKernel false; instances.h:
// FMHA_SM80_DENSE_WIDE / _NARROW) runs dense problems in its contiguous
// one, which resolves the same extents without metadata (as kAll does).
template <class T, bool kFp8Kv, class Cfg, bool kDenseKernel>
fmha_status launch_fwd_config(const FwdParams& p, const LaunchArgs& a) {
  switch (a.mode) {
    case SeqMode::kDense:
      if constexpr (kDenseKernel)
        return launch_fwd_mode<T, kFp8Kv, Cfg, SeqMode::kDense>(p, a);
      else
        return launch_fwd_mode<T, kFp8Kv, Cfg, SeqMode::kContiguous>(p, a);
    case SeqMode::kContiguous: return launch_fwd_mode<T, kFp8Kv, Cfg, SeqMode::kContiguous>(p, a);
    case SeqMode::kPaged: return launch_fwd_mode<T, kFp8Kv, Cfg, SeqMode::kPaged>(p, a);
    default: return fail(FMHA_ERROR_INTERNAL, "cuda_sm80_tc: unknown operand layout %d", static_cast<int>(a.mode));
  }
}

// An FP8 KV cache runs its own tiles, Fp8KvDecodeTile (decode) and
// Sm80Tuning::WideFp8Kv (prefill).
template <class T, int kHeadDim, bool kFp8Kv>
fmha_status launch_fwd(const FwdParams& p, const LaunchArgs& a) {
  using Tuning = Sm80Tuning<kHeadDim>;
  using Narrow = std::conditional_t<kFp8Kv, Fp8KvDecodeTile<kHeadDim>, typename Tuning::Narrow>;
  using Wide = std::conditional_t<kFp8Kv, typename Tuning::WideFp8Kv, typename Tuning::Wide>;
  // Dense instantiations: the build's choice per tile (FMHA_SM80_DENSE_KERNELS);
  // the FP8 K/V units keep theirs.
  constexpr bool kDenseWide = kFp8Kv || FMHA_SM80_DENSE_WIDE;
  constexpr bool kDenseNarrow = kFp8Kv || FMHA_SM80_DENSE_NARROW;
  const fmha_status s = a.narrow ? launch_fwd_config<T, kFp8Kv, Narrow, kDenseNarrow>(p, a)
                                 : launch_fwd_config<T, kFp8Kv, Wide, kDenseWide>(p, a);
  if (s != FMHA_SUCCESS || p.num_splits == 1) return s;
  SplitCombineParams c = fwd_combine_params(p);
  c.dependent_launch = a.dependent_combine;
  return launch_split_combine<T>(c, a.stream);
}

}  // namespace fmha::cuda::sm80
