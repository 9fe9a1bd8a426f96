// Host-side entry of one sm80 instantiation (dtype x head dim x FP8 K/V,
// the lists of the generated instances.h). Each generated fwd_<dtype>_d<D>.cu explicitly
// instantiates launch_fwd for its key, so sm80_forward.cu dispatches without
// compiling any kernel itself.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/common/fwd_params.h"
#include "backend/cuda/sm80/instances.h"  // generated
#include "backend/cuda/sm80/tile_config.h"
#include "fmha/fmha.h"

namespace fmha::cuda::sm80 {

struct LaunchArgs {
  int64_t blocks;        // num_m_tiles * units * num_splits (< 2^31)
  bool narrow;           // Sm80Tuning<D>::Narrow instead of ::Wide
  Decode16Choice decode16;  // narrow, plain or softcap: Decode16Tile, NarrowCompact or a plain paged kernel's per-grid tile
  Fp8KvChoice fp8kv;     // narrow FP8 K/V, plain: Fp8KvDecodeTile, NarrowFp8KvOneCta or (paged) NarrowFp8KvPagedSplit
  ScoreOps ops;          // the score transforms' instantiation (common/fwd_params.h)
  SeqMode mode;          // the operand layout (seq_mode of FwdParams::layout)
  int device;            // the current device ordinal
  bool dependent_combine;  // launch the split combine as a programmatic dependent (sm_90+)
  cudaStream_t stream;
};

// Launches the forward kernel (and, for num_splits > 1, the combine kernel).
// T: q's and o's element type. kFp8Kv: k and v are FP8 (p.kv_dtype,
// F8E4M3 or F8E5M2), kept FP8 in shared memory and converted to T in
// registers (tile_config.h: Fp8KvDecodeTile, Sm80Tuning::WideFp8Kv); else
// they are T.
template <class T, int kHeadDim, bool kFp8Kv>
fmha_status launch_fwd(const FwdParams& p, const LaunchArgs& a);

// The instantiations (one generated translation unit each; instances.h).
#define FMHA_SM80_EXTERN_(dtype, T, D) \
  extern template fmha_status launch_fwd<T, D, false>(const FwdParams&, const LaunchArgs&);
FMHA_SM80_INSTANCES(FMHA_SM80_EXTERN_)
#undef FMHA_SM80_EXTERN_
#define FMHA_SM80_EXTERN_(dtype, T, D) \
  extern template fmha_status launch_fwd<T, D, true>(const FwdParams&, const LaunchArgs&);
FMHA_SM80_FP8KV_INSTANCES(FMHA_SM80_EXTERN_)
#undef FMHA_SM80_EXTERN_

}  // namespace fmha::cuda::sm80
