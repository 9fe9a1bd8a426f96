// Hopper synchronization for the warp-specialized kernels (sm_90): mbarrier
// pipelines through CCCL's cuda::ptx, named barriers, and register
// reallocation (setmaxnreg, sm_90a).
#pragma once

#include <cuda/ptx>

#include <cstdint>

namespace fmha::cuda::sm90 {

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  ::cuda::ptx::mbarrier_init(bar, count);
}

// Makes initialized barriers visible to the copy engine (async proxy);
// call in the initializing thread, then __syncthreads().
__device__ __forceinline__ void mbar_init_fence() {
  ::cuda::ptx::fence_mbarrier_init(::cuda::ptx::sem_release, ::cuda::ptx::scope_cluster);
}

// Producer side of a "full" barrier: this thread's arrival plus the bytes
// the copy engine will deliver before the phase completes.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  ::cuda::ptx::mbarrier_arrive_expect_tx(::cuda::ptx::sem_release, ::cuda::ptx::scope_cta,
                                         ::cuda::ptx::space_shared, bar, bytes);
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  (void)::cuda::ptx::mbarrier_arrive(bar);
}

// Blocks until the phase of parity `phase` has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t phase) {
  while (!::cuda::ptx::mbarrier_try_wait_parity(bar, phase)) {
  }
}

// A position in a ring of kStages barrier-guarded buffers: the stage index
// and the parity of its current phase, which flips at every wrap.
template <int kStages>
struct PipeState {
  int stage = 0;
  uint32_t phase = 0;
  __device__ void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1u;
    }
  }
};

// Named barrier `id` (1..15; 0 is __syncthreads) over `threads` threads, a
// multiple of 32.
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// Named barrier `id` over `threads` threads that also tells each of them
// whether x holds in any of them (bar.red.or).
__device__ __forceinline__ bool named_any(int id, int threads, bool x) {
  int any;
  asm volatile(
      "{\n.reg .pred p, q;\n"
      "setp.ne.u32 q, %1, 0;\n"
      "bar.red.or.pred p, %2, %3, q;\n"
      "selp.s32 %0, 1, 0, p;\n}\n"
      : "=r"(any)
      : "r"(static_cast<uint32_t>(x)), "r"(id), "r"(threads)
      : "memory");
  return any != 0;
}

// Register reallocation between warpgroups (sm_90a; needs a register cap at
// entry: __launch_bounds__(threads, 1)).
template <int kRegs>
__device__ __forceinline__ void regs_release() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void regs_acquire() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

}  // namespace fmha::cuda::sm90
