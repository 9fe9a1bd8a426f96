// The definition of launch_fwd (launch.h), included only by the
// per-instantiation translation units fwd_<dtype>_d<D>.cu.
#pragma once

#include <mutex>

#include "backend/cuda/cuda_device.h"
#include "backend/cuda/sm80/fwd_kernel.cuh"
#include "backend/cuda/sm80/launch.h"
#include "core/error.h"

namespace fmha::cuda::sm80 {

// cudaFuncSetAttribute(MaxDynamicSharedMemorySize) once per (kernel, device),
// thread-safe; devices past kMaxDevices just set it on every launch.
class SmemOptIn {
 public:
  cudaError_t ensure(const void* kernel, int bytes, int device) {
    if (device < 0 || device >= kMaxDevices) return set(kernel, bytes);
    std::call_once(once_[device], [&] { err_[device] = set(kernel, bytes); });
    return err_[device];
  }

 private:
  static cudaError_t set(const void* kernel, int bytes) {
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  }
  static constexpr int kMaxDevices = 64;
  std::once_flag once_[kMaxDevices];
  cudaError_t err_[kMaxDevices] = {};
};

template <class T, class Cfg, bool kSoftcap>
fmha_status launch_fwd_kernel(const FwdParams& p, const LaunchArgs& a) {
  const auto kernel = fwd_kernel<T, Cfg, kSoftcap>;
  static SmemOptIn opt_in;
  if (Cfg::kSmemBytes > 48 * 1024) {
    const cudaError_t err =
        opt_in.ensure(reinterpret_cast<const void*>(kernel), Cfg::kSmemBytes, a.device);
    if (err != cudaSuccess)
      return fail(FMHA_ERROR_DEVICE, "cudaFuncSetAttribute(%d bytes of shared memory): %s",
                  Cfg::kSmemBytes, cudaGetErrorString(err));
  }
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
  // One warp per output row; a grid-stride loop covers any row count.
  constexpr int kRowsPerBlock = 4;
  const int64_t rows = p.units * p.rows;
  const int64_t want = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  const unsigned blocks = static_cast<unsigned>(want < (1 << 20) ? want : (1 << 20));
  combine_kernel<T, kHeadDim><<<blocks, 32 * kRowsPerBlock, 0, a.stream>>>(p);
  return check_launch("cuda_sm80_tc split-KV combine");
}

}  // namespace fmha::cuda::sm80
