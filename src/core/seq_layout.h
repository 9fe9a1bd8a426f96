// Where each sequence of a batch lives: one definition for every backend
// (host and device code), so all kernels agree on ragged, KV-cache and
// paged layouts to the element, and all clamp garbage metadata the same
// way.
//
// The metadata arrays (cu_seqlens_q/k, seqused_k, block_table) are device
// memory on CUDA and are never validated by the host; a kernel reads them
// only through the functions below, which clamp every value to the extents
// the caller declared in the tensors (total rows, page count, capacity).
// Garbage metadata therefore gives a wrong answer, never an out-of-bounds
// access: row and key positions stay in [0, extent), page ids in
// [0, num_pages).
#pragma once

#include <cstdint>

#include "core/mask.h"  // FMHA_HOST_DEVICE

namespace fmha {

struct SeqLayout {
  const int32_t* cu_seqlens_q = nullptr;  // [batch + 1] or null (dense queries)
  const int32_t* cu_seqlens_k = nullptr;  // [batch + 1] or null
  const int32_t* seqused_k = nullptr;     // [batch] or null
  const int32_t* block_table = nullptr;   // [batch, block_table_stride] or null
  int64_t block_table_stride = 0;
  int64_t total_q = 0;    // rows of the packed q/o seq axis (q.dims[2])
  int64_t total_k = 0;    // rows of the packed k/v seq axis (k.dims[2])
  int64_t max_seq_q = 0;  // bound on every Nq(b) (Problem::seq_q)
  int64_t max_seq_k = 0;  // bound on every Nk(b) (Problem::seq_k)
  int64_t page_size = 0;  // k.dims[2] of a paged layout
  int64_t num_pages = 0;  // k.dims[0] of a paged layout
  bool top_left = false;  // FMHA_MASK_CAUSAL_TOP_LEFT: d(i) = i

  FMHA_HOST_DEVICE bool ragged_q() const { return cu_seqlens_q != nullptr; }
  FMHA_HOST_DEVICE bool ragged_k() const { return cu_seqlens_k != nullptr; }
  FMHA_HOST_DEVICE bool paged() const { return block_table != nullptr; }
  // Any serving layout: kernels without support must not see one.
  FMHA_HOST_DEVICE bool any() const {
    return cu_seqlens_q != nullptr || cu_seqlens_k != nullptr || seqused_k != nullptr ||
           block_table != nullptr;
  }
};

// One sequence of the batch, clamped.
struct SeqExtent {
  int64_t q_begin;  // first row on the packed q/o/lse seq axis (0 for dense)
  int64_t len_q;    // Nq(b), in [0, max_seq_q]
  int64_t k_begin;  // first row on the packed k/v seq axis (0 for dense and paged)
  int64_t len_k;    // Nk(b), in [0, max_seq_k]
  int64_t diag_offset;  // d(i) = i + diag_offset for this sequence
};

FMHA_HOST_DEVICE int64_t clamp_i64(int64_t x, int64_t lo, int64_t hi) {
  return x < lo ? lo : x > hi ? hi : x;
}

// Sequence b (0 <= b < batch). For dense operands the batch stride of the
// tensors positions sequence b; q_begin and k_begin are 0 then.
FMHA_HOST_DEVICE SeqExtent seq_extent(const SeqLayout& L, int64_t b) {
  SeqExtent e{0, L.max_seq_q, 0, L.max_seq_k, 0};
  if (L.cu_seqlens_q != nullptr) {
    const int64_t s = clamp_i64(L.cu_seqlens_q[b], 0, L.total_q);
    const int64_t t = clamp_i64(L.cu_seqlens_q[b + 1], s, L.total_q);
    e.q_begin = s;
    e.len_q = t - s < L.max_seq_q ? t - s : L.max_seq_q;
  }
  if (L.cu_seqlens_k != nullptr) {
    const int64_t s = clamp_i64(L.cu_seqlens_k[b], 0, L.total_k);
    const int64_t t = clamp_i64(L.cu_seqlens_k[b + 1], s, L.total_k);
    e.k_begin = s;
    e.len_k = t - s < L.max_seq_k ? t - s : L.max_seq_k;
  }
  if (L.seqused_k != nullptr) e.len_k = clamp_i64(L.seqused_k[b], 0, e.len_k);
  e.diag_offset = L.top_left ? 0 : e.len_k - e.len_q;
  return e;
}

// The page holding key j (0 <= j < len_k of sequence b) of a paged layout,
// clamped to [0, num_pages), and the key's slot in it. j < len_k <=
// block_table_stride * page_size keeps the table index inside row b.
// The four-argument form takes entry = j / page_size from the caller (a
// kernel with a faster divider); it must be exactly that quotient.
struct PageSlot {
  int64_t page;
  int64_t slot;
};

// The form for a kernel that has already read the table: `page` is
// block_table[b][entry] as read (clamped here, like every other read).
FMHA_HOST_DEVICE PageSlot page_slot_of(const SeqLayout& L, int64_t j, int64_t entry, int64_t page) {
  return {clamp_i64(page, 0, L.num_pages - 1), j - entry * L.page_size};
}

FMHA_HOST_DEVICE PageSlot page_slot(const SeqLayout& L, int64_t b, int64_t j, int64_t entry) {
  return page_slot_of(L, j, entry, L.block_table[b * L.block_table_stride + entry]);
}

FMHA_HOST_DEVICE PageSlot page_slot(const SeqLayout& L, int64_t b, int64_t j) {
  return page_slot(L, b, j, j / L.page_size);
}

}  // namespace fmha
