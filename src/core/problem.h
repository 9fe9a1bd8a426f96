// The validated, normalized description of one attention forward.
//
// fmha_forward_params is what the caller wrote; Problem is what every kernel
// reads: dims resolved, scale resolved, the mask reduced to one contiguous
// key range per query row (see mask.h), strides in elements. A kernel never
// sees an invalid Problem: validate.cpp builds it or fails.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/seq_layout.h"
#include "fmha/fmha.h"

namespace fmha {

// The int a caller stored in an enum-typed argument or field. A C caller
// may store any int there, but in C++ loading a value outside the enum's
// range as the enum type is undefined, so the C boundary reads the bytes.
template <class Enum>
int32_t enum_bits(const Enum& e) {
  static_assert(sizeof(Enum) == sizeof(int32_t), "fmha's enums are 32 bits (the _MAX_ENUM_ sentinels)");
  int32_t v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

// Bytes per element of a dtype given as an int (0 for values outside fmha_dtype).
constexpr int dtype_size_bits(int32_t t) {
  return t == FMHA_DTYPE_F16 || t == FMHA_DTYPE_BF16 ? 2
         : t == FMHA_DTYPE_F32                       ? 4
         : t == FMHA_DTYPE_F8E4M3 || t == FMHA_DTYPE_F8E5M2 ? 1
                                                     : 0;
}

// Bytes per element of a dtype (0 for values outside fmha_dtype).
constexpr int dtype_size(fmha_dtype t) { return dtype_size_bits(static_cast<int32_t>(t)); }

constexpr bool is_fp8(fmha_dtype t) { return t == FMHA_DTYPE_F8E4M3 || t == FMHA_DTYPE_F8E5M2; }

constexpr const char* dtype_name(fmha_dtype t) {
  return t == FMHA_DTYPE_F16      ? "F16"
         : t == FMHA_DTYPE_BF16   ? "BF16"
         : t == FMHA_DTYPE_F32    ? "F32"
         : t == FMHA_DTYPE_F8E4M3 ? "F8E4M3"
         : t == FMHA_DTYPE_F8E5M2 ? "F8E5M2"
                                  : "?";
}

// One operand: base pointer and element strides in [batch, head, seq, dim]
// order. Its dims are the Problem's.
struct Operand {
  void* data = nullptr;
  int64_t stride[4] = {0, 0, 0, 0};
};

struct Problem {
  // q's dtype; k and v share kv_dtype, o has o_dtype (fmha.h 0.3: FP8 K/V
  // or inputs, another o dtype). All three equal before 0.3; a kernel that
  // reads only `dtype` must not declare kFeatureMixedDtypes.
  fmha_dtype dtype = FMHA_DTYPE_F16;
  fmha_dtype kv_dtype = FMHA_DTYPE_F16;
  fmha_dtype o_dtype = FMHA_DTYPE_F16;
  int64_t batch = 0;
  int64_t heads_q = 0;
  int64_t heads_kv = 0;
  int64_t seq_q = 0;
  int64_t seq_k = 0;
  int64_t head_dim = 0;

  Operand q, k, v, o;
  float* lse = nullptr;  // [batch, heads_q, seq_q] contiguous, or null

  float scale = 0.f;    // resolved: never 0
  float softcap = 0.f;  // 0 = off

  // The mask as a band around the diagonal d(i) = i + diag_offset:
  // key j is visible to query i iff d(i) - window_left <= j <= d(i) +
  // window_right, each bound dropped when negative (-1 = unbounded). A
  // causal mask is window_right = 0. See mask.h for the key range.
  bool causal = false;         // set by a causal flag (window_right == 0)
  int64_t diag_offset = 0;     // seq_k - seq_q (bottom-right) or 0 (top-left)
  int64_t window_left = -1;
  int64_t window_right = -1;

  // Serving layouts (fmha.h 0.2); layout.any() is false for a dense batch.
  // With a ragged, KV-cache or paged layout, batch = the sequence count,
  // seq_q and seq_k are upper bounds on every sequence's Nq(b) and Nk(b)
  // (max_seqlen_q/k), diag_offset is unused (each sequence's comes from
  // seq_extent), the q/o/lse rows of sequence b start at its q_begin on a
  // batch-1 packed axis when ragged, and k/v are [num_pages, Hk, page_size,
  // D] when paged (their dims are in layout, their strides in k/v here).
  // lse is [heads_q, total_q] for ragged queries.
  SeqLayout layout;

  // Inference numerics (fmha.h 0.3). Descales: [batch, heads_kv] FP32
  // contiguous, null = 1. bias: [batch, heads_q, seq_q, seq_k] element
  // strides (0 on broadcast dims, a dim of 1 included), indexed by the
  // sequence's local query and key positions; bias.data null = none.
  // ALiBi: slope of (b, h) at alibi_slopes[b * alibi_stride + h].
  const float* q_descale = nullptr;
  const float* k_descale = nullptr;
  const float* v_descale = nullptr;
  Operand bias;
  fmha_dtype bias_dtype = FMHA_DTYPE_F32;
  const float* alibi_slopes = nullptr;
  int64_t alibi_stride = 0;

  int32_t num_splits = 0;        // 0 = automatic
  const char* forced_kernel = nullptr;

  int64_t group_size() const { return heads_q / heads_kv; }
  // The dims of the q (and o) and the k (and v) tensors as the caller
  // described them: [batch, heads, seq, head_dim] for a dense batch,
  // [1, heads, total rows, head_dim] when packed, [num_pages, heads_kv,
  // page_size, head_dim] when paged.
  void q_dims(int64_t d[4]) const {
    d[0] = layout.ragged_q() ? 1 : batch;
    d[1] = heads_q;
    d[2] = layout.ragged_q() ? layout.total_q : seq_q;
    d[3] = head_dim;
  }
  void kv_dims(int64_t d[4]) const {
    d[0] = layout.ragged_k() ? 1 : layout.paged() ? layout.num_pages : batch;
    d[1] = heads_kv;
    d[2] = layout.ragged_k() ? layout.total_k : layout.paged() ? layout.page_size : seq_k;
    d[3] = head_dim;
  }
  // Rows of lse: [batch, heads_q, seq_q], or [heads_q, total_q] when packed.
  int64_t lse_rows() const { return heads_q * (layout.ragged_q() ? layout.total_q : batch * seq_q); }
  // Empty work: no query row belongs to a sequence, so nothing is read or
  // written (fmha_forward returns before any kernel).
  bool no_rows() const { return batch == 0 || seq_q == 0; }
  bool mixed_dtypes() const { return kv_dtype != dtype || o_dtype != dtype; }
  bool has_descale() const { return q_descale != nullptr || k_descale != nullptr || v_descale != nullptr; }
  bool has_bias() const { return bias.data != nullptr; }
  bool has_mask() const { return window_left >= 0 || window_right >= 0; }
  bool has_window() const { return window_left >= 0 || (window_right >= 0 && !causal); }
};

}  // namespace fmha
