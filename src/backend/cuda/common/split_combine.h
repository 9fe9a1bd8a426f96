// Split-KV partial results and their combine, shared by the CUDA kernel
// families (cuda_sm80_tc, cuda_generic).
//
// With split-KV, S CTAs handle disjoint key ranges of the same query rows.
// Each writes the running state of the seed's section 4 for its range, as it
// stands after its last key tile, to the caller's workspace:
//
//   o_s  [S][rows][head_dim]  FP32, unnormalized: sum_j e^(s_j - m_s) v_j
//   m_s  [S][rows]            FP32, the exponent base of o_s and l_s, in
//                             natural units (logits as softmax sees them,
//                             after scale and softcap); -inf if the split
//                             saw no key of the row
//   l_s  [S][rows]            FP32, sum_j e^(s_j - m_s); 0 if no key
//
// m_s need not be the split's exact row max (a kernel may rescale lazily)
// as long as o_s and l_s use the same base. launch_split_combine<T> then
// merges the splits (split_combine.cu) into o (element type T, any 64-bit
// strides) and, optionally, lse.
//
// Rows are numbered in the order of a GQA-packed launch: `pack` query heads
// that share a KV head are interleaved, i.e. row
//   x = ((b * (heads_q / pack) + h / pack) * seq_q + i) * pack + h % pack
// holds query i of head h in batch b. pack = 1 is the plain [B, Hq, Nq]
// order (the order of lse). With a serving layout (SplitCombineParams::
// layout) seq_q is the bound max_seqlen_q and rows past a sequence's Nq(b)
// are skipped.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/seq_layout.h"
#include "fmha/fmha.h"

namespace fmha::cuda {

// Limits of the combine: one warp merges a row, lane t holding the weights
// of splits t + 32 k (k < kCombineMaxSplits / 32) and accumulating head dims
// t + 32 c (c < kCombineMaxHeadDim / 32), all in registers.
constexpr int kCombineMaxSplits = 128;
constexpr int kCombineMaxHeadDim = 256;

// The partials' places in a workspace (see the layout above).
struct SplitPartials {
  float* o = nullptr;
  float* m = nullptr;
  float* l = nullptr;
};

// Workspace bytes for `splits` splits of `rows` rows of `head_dim` dims, or
// false on size_t overflow. Every family sizes its workspace with this and
// places the partials with split_partials_in, so the workspace query and the
// forward agree.
inline bool split_partials_bytes(int64_t splits, int64_t rows, int64_t head_dim, size_t* bytes) {
  uint64_t n;
  if (splits < 0 || rows < 0 || head_dim < 0 ||
      __builtin_mul_overflow(static_cast<uint64_t>(splits), static_cast<uint64_t>(rows), &n) ||
      __builtin_mul_overflow(n, (static_cast<uint64_t>(head_dim) + 2) * sizeof(float), &n) || n > SIZE_MAX)
    return false;
  *bytes = static_cast<size_t>(n);
  return true;
}

// o first (so it keeps the workspace's 16-byte alignment), then m, then l.
inline SplitPartials split_partials_in(void* workspace, int64_t splits, int64_t rows, int64_t head_dim) {
  SplitPartials w;
  const int64_t slots = splits * rows;
  w.o = static_cast<float*>(workspace);
  w.m = w.o + slots * head_dim;
  w.l = w.m + slots;
  return w;
}

struct SplitCombineParams {
  SplitPartials part;   // read
  void* o;              // [batch, heads_q, seq_q, head_dim] elements of T
  int64_t o_stride[4];  // element strides of o (batch, head, query, dim)
  float* lse;           // [batch, heads_q, seq_q] contiguous, or null
  int64_t heads_q;
  int64_t seq_q;
  int64_t rows;         // batch * heads_q * seq_q
  int64_t pack;         // row order (see above); divides heads_q
  int head_dim;         // 1 .. kCombineMaxHeadDim
  int splits;           // 2 .. kCombineMaxSplits
  // A serving layout (core/seq_layout.h) of the forward, or none
  // (layout.any() false). With one, batch b is sequence b, seq_q is the
  // bound max_seqlen_q, and row x = query i of sequence b is merged only
  // when i < Nq(b) (the other rows were never written): o at row
  // q_begin + i of the batch-1 o and lse at [h, q_begin + i] of [Hq,
  // total_q] for ragged queries, else at batch b as above.
  SeqLayout layout;
  // Launch as a programmatic dependent of the forward kernel just enqueued
  // on the stream (sm_90 and newer only; the caller checks the device): the
  // combine's CTAs are scheduled once every forward CTA has started (the
  // forward kernels trigger at their start), and wait in
  // cudaGridDependencySynchronize until the forward grid has finished and
  // its partials are visible. Saves the launch gap between the two kernels
  // (decode: a few us of a ~0.1 ms step). Without it, or when the
  // combine's code for the device predates sm_90 (a build without sm_90
  // code), an ordinary launch.
  bool dependent_launch = false;
};

// Enqueues the combine on `stream`. Instantiated for __half, __nv_bfloat16
// and float in split_combine.cu only.
template <class T>
fmha_status launch_split_combine(const SplitCombineParams& p, cudaStream_t stream);

extern template fmha_status launch_split_combine<__half>(const SplitCombineParams&, cudaStream_t);
extern template fmha_status launch_split_combine<__nv_bfloat16>(const SplitCombineParams&, cudaStream_t);
extern template fmha_status launch_split_combine<float>(const SplitCombineParams&, cudaStream_t);

}  // namespace fmha::cuda
