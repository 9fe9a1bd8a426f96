// What one sm80-family launch receives: plain data, built on the host from a
// Problem (sm80_forward.cu) and read by the kernel (fwd_kernel.cuh). Offsets are 64-bit; sequence positions fit int32
// (sm80_supports refuses longer sequences).
#pragma once

#include <cstdint>

namespace fmha::cuda::sm80 {

struct FwdParams {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  // Element strides [batch, head, seq]; the head_dim stride is 1.
  int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3];
  float* lse;            // [batch*heads_q, seq_q] or null
  // Rows of a CTA. `pack` query heads that share a KV head (1, or the whole
  // GQA group for decode-like problems) are stacked into one unit of
  // rows = seq_q * pack rows: row r of unit u is query i = r / pack of head
  // h = (u % (heads_q / pack)) * pack + r % pack, batch u / (heads_q / pack).
  // Key ranges stay non-decreasing in r, and each K/V tile serves the group.
  int pack;
  int rows;              // seq_q * pack
  int64_t units;         // batch * heads_q / pack
  // Split-KV partials (common/split_combine.h): per split, the unnormalized
  // o [splits][units][rows][D], the exponent base m in natural units and the
  // row sum l [splits][units][rows], all FP32.
  float* o_partial;
  float* m_partial;
  float* l_partial;
  int64_t heads_q;
  int64_t group;         // heads_q / heads_kv
  int seq_q, seq_k;
  // The mask band of Problem (see core/mask.h).
  int64_t diag_offset, window_left, window_right;
  // Raw score -> log2 units of the softmax exponent: exp(x) = 2^(x*score_log2).
  // With softcap the raw score is first replaced by
  //   softcap_out * tanh(raw * softcap_in)   (softcap_in = scale / cap, softcap_out = cap)
  // and score_log2 = log2(e).
  float score_log2;
  float softcap_in, softcap_out;
  int num_m_tiles;
  int num_splits;        // 1 = write o (and lse) directly
};

}  // namespace fmha::cuda::sm80
