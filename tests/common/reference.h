// The float64 oracle: one attention forward computed naively, straight from
// the contract in include/fmha/fmha.h, on host tensors.
//
// Independent of the library on purpose: it re-derives the mask from the
// header's prose (no src/ header is included), holds the whole score row,
// and does every step in double, so an error in the library's shared mask
// helper or its online softmax cannot hide in the oracle too.
#pragma once

#include <cstdint>
#include <vector>

#include "fmha/fmha.h"

namespace fmha_test {

// The visibility rule of the public header for query i of seq_q and key j
// of seq_k under mask_flags and the windows (-1 = unbounded).
bool key_visible(int64_t i, int64_t j, int64_t seq_q, int64_t seq_k, uint32_t mask_flags,
                 int32_t window_left, int32_t window_right);

struct ReferenceResult {
  int64_t batch = 0, heads_q = 0, seq_q = 0, head_dim = 0;
  // O, [batch, heads_q, seq_q, head_dim] contiguous.
  std::vector<double> o;
  // Natural-log log-sum-exp of the scaled, soft-capped logits of each row,
  // [batch, heads_q, seq_q] contiguous; -inf for a row that sees no key.
  std::vector<double> lse;
  // Keys each row sees (0 = a fully masked row: O = 0, lse = -inf).
  std::vector<int64_t> visible_keys;
  // max |logit| over visible (scaled, soft-capped) logits; shows how hard a
  // case pushes the exponentials.
  double max_abs_logit = 0.0;
  // The scale actually used (params.scale, or 1/sqrt(D) when that is 0).
  double scale = 0.0;

  int64_t rows() const { return batch * heads_q * seq_q; }
};

// Computes O and lse for params.q, params.k, params.v, which must point at
// host memory (any strides, any fmha_dtype; elements are read as their exact
// values). Reads mask_flags, window_left/right, scale and softcap; ignores
// o, lse, kernel and num_splits. Semantics, all in double:
//   s_ij = q_i . k_j * scale            (scale 0 -> 1/sqrt(D))
//   s_ij = softcap * tanh(s_ij / softcap)   when softcap != 0
//   only keys with key_visible(i, j) take part; query head h reads kv
//   head h / (Hq / Hk); O_i = sum_j softmax(s_i)_j v_j; lse_i = log sum_j
//   exp(s_ij); a row with no visible key has O_i = 0 and lse_i = -inf.
// With any 0.3 field set (descales, bias, ALiBi) it returns
// reference_forward_serving's result, which implements them.
// Throws std::invalid_argument when the shapes disagree.
ReferenceResult reference_forward(const fmha_forward_params& params);

// ---- serving layouts (fmha.h 0.2) --------------------------------------

// The reference of a forward with the 0.2 serving fields: o and lse are
// shaped like q ([q.dims[0], Hq, q.dims[2], D] and [q.dims[0], Hq,
// q.dims[2]] contiguous: [1, Hq, total_q, ...] for packed queries), so a
// row index means the same thing as in ReferenceResult.
struct ServingReference : ReferenceResult {
  // Per row: 1 when the row belongs to a sequence (the library writes it),
  // 0 for rows of a packed q outside every sequence (left untouched).
  std::vector<uint8_t> owned;
  // Per sequence, as the header's prose defines them: Nq(b), Nk(b) and the
  // first row of sequence b on the packed q axis (0 for dense queries).
  int64_t num_seqs = 0;
  std::vector<int64_t> len_q, len_k, q_begin;
};

// Computes O and lse for params with any mix of the serving fields
// (cu_seqlens_q, cu_seqlens_k, seqused_k, block_table with
// block_table_stride, num_seqs, max_seqlen_q/k), all read as host arrays,
// from the header's definitions alone:
//   B = num_seqs when cu_seqlens_q or cu_seqlens_k is set, else q.dims[0];
//   Nq(b) = cu_seqlens_q[b+1] - cu_seqlens_q[b] (packed; rows start at
//     cu_seqlens_q[b] of batch 0), else q.dims[2];
//   the keys of sequence b: packed rows cu_seqlens_k[b] .. of batch 0, or
//     batch b of a dense k, or, paged, key j = slot j % page_size of page
//     block_table[b * block_table_stride + j / page_size] (k.dims[2] =
//     page_size); Nk(b) = their count, capped by seqused_k[b] when given
//     (paged: Nk(b) = seqused_k[b]);
//   masks use each sequence's own Nq(b) and Nk(b) (key_visible).
// The 0.3 inference numerics (when struct_size covers them), from the
// header's prose: any q/k/v dtypes (FP8 decoded by numeric_types.h, from
// the formats' definitions); s_ij = scale * q_descale[b, hk] *
// k_descale[b, hk] * (q_i . k_j), soft-capped, plus bias[b, h, i, j] (local
// positions, a bias dim of 1 broadcasting) minus slope(b, h) * |d(i) - j|,
// then masked; o scaled by v_descale[b, hk]; a row whose visible logits are
// all -inf counts as seeing no key (visible_keys 0, O = 0, lse = -inf).
// Every page this reads is gathered here, not through the library. Without
// serving fields it equals reference_forward. Throws std::invalid_argument
// for metadata the header calls invalid (cu_seqlens not non-decreasing from
// 0 or past the tensors, a length above max_seqlen_q/k, a page id out of
// range, a sequence longer than its block-table row): the reference
// computes only well-defined answers.
ServingReference reference_forward_serving(const fmha_forward_params& params);

}  // namespace fmha_test
