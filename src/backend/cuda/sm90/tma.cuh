// Device side of the copy engine: a panel box of a 4-D tensor map into
// shared memory, completing on an mbarrier (sm_90).
#pragma once

#include <cuda.h>
#include <cuda/ptx>

#include <cstdint>

namespace fmha::cuda::sm90 {

// Box {64 columns from col, box rows from row} of (d2, d3) = (head, batch)
// into `dst` (1024-byte aligned); `bar` receives the bytes.
__device__ __forceinline__ void tma_load_panel(void* dst, const CUtensorMap* map, int col, int row, int head,
                                               int batch, uint64_t* bar) {
  const int32_t coords[4] = {col, row, head, batch};
  ::cuda::ptx::cp_async_bulk_tensor(::cuda::ptx::space_cluster, ::cuda::ptx::space_global, dst, map, coords, bar);
}

// The same box into L2 only (no shared memory, no barrier): a hint that
// brings a later load's bytes close (CCCL's cuda::ptx has no wrapper).
__device__ __forceinline__ void tma_prefetch_panel(const CUtensorMap* map, int col, int row, int head, int batch) {
  asm volatile("cp.async.bulk.prefetch.tensor.4d.L2.global.tile [%0, {%1, %2, %3, %4}];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(col), "r"(row), "r"(head), "r"(batch)
               : "memory");
}

// Fetches the tensor map's 128-byte descriptor into the constant cache
// ahead of its first use.
__device__ __forceinline__ void tma_prefetch(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

}  // namespace fmha::cuda::sm90

namespace fmha::cuda::sm90 {

// Box {64 columns from col, box rows from row} of (head, batch) from `src`
// (panel layout) to global memory; rows and columns past the tensor's end
// are not written. Completes in the thread's bulk group.
__device__ __forceinline__ void tma_store_panel(const CUtensorMap* map, const void* src, int col, int row, int head,
                                                int batch) {
  const int32_t coords[4] = {col, row, head, batch};
  ::cuda::ptx::cp_async_bulk_tensor(::cuda::ptx::space_global, ::cuda::ptx::space_shared, map, coords, src);
}

// Commits the thread's bulk stores and waits until their shared-memory
// sources have been read (the CTA may then exit or reuse them).
__device__ __forceinline__ void tma_store_commit_and_wait() {
  ::cuda::ptx::cp_async_bulk_commit_group();
  ::cuda::ptx::cp_async_bulk_wait_group_read(::cuda::ptx::n32_t<0>{});
}

}  // namespace fmha::cuda::sm90
