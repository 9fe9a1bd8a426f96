// What one forward launch of a CUDA kernel family receives: plain data,
// filled once on the host from a Problem and the family's grid
// (make_fwd_params below) and read by the kernels (sm80/, generic/, and the
// parts in this folder). Offsets are 64-bit; sequence positions fit int32
// (every family refuses sequences longer than kMaxFwdSeq).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/common/fast_div.h"
#include "backend/cuda/common/split_combine.h"
#include "core/host_device.h"
#include "core/problem.h"
#include "core/seq_layout.h"

namespace fmha::cuda {

struct FwdParams {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  // Element strides [batch, head, seq, dim]. Families whose registry row has
  // an alignment contract (align_bytes > 0) run only dim stride 1 and
  // ignore [3].
  int64_t q_stride[4], k_stride[4], v_stride[4], o_stride[4];
  float* lse;            // [batch*heads_q, seq_q] or null
  // Rows of a unit. `pack` query heads that share a KV head (1, or the whole
  // GQA group for decode-like problems) are stacked into one unit of
  // rows = seq_q * pack rows: row r of unit u is query i = r / pack of head
  // h = (u % (heads_q / pack)) * pack + r % pack, batch u / (heads_q / pack).
  // Key ranges stay non-decreasing in r, and each K/V tile serves the group.
  int pack;
  int rows;              // seq_q * pack
  int64_t units;         // batch * heads_q / pack
  // Split-KV partials (common/split_combine.h): per split, the unnormalized
  // o [splits][units][rows][D], the exponent base m in natural units and the
  // row sum l [splits][units][rows], all FP32. Null when num_splits == 1.
  float* o_partial;
  float* m_partial;
  float* l_partial;
  int64_t heads_q;
  int64_t group;         // heads_q / heads_kv
  int seq_q, seq_k;
  int head_dim;
  // The mask band of Problem (see core/mask.h).
  int64_t diag_offset, window_left, window_right;
  // The Problem's scale, for kernels that keep scores in natural units.
  float scale;
  // Raw score -> log2 units of the softmax exponent: exp(x) = 2^(x*score_log2).
  // With softcap the raw score is first replaced by
  //   softcap_out * tanh(raw * softcap_in)   (softcap_in = scale / cap, softcap_out = cap)
  // and score_log2 = log2(e). Without softcap both are 0.
  float score_log2;
  float softcap_in, softcap_out;
  int num_m_tiles;       // query blocks per unit
  // The work order's bands (common/tile_scheduler.h): units per band, whose
  // K/V fit in L2 together; 0 (make_fwd_params) = one band of every unit.
  int64_t unit_band;
  int num_splits;        // 1 = write o (and lse) directly
  // Serving layouts (core/seq_layout.h; Problem::layout): with layout.any(),
  // batch b is sequence b, seq_q / seq_k / rows are the host-known bounds
  // (max_seqlen_q/k), and each work tile resolves its sequence with
  // fwd_seq() below; the kernels read no metadata when !layout.any().
  SeqLayout layout;
  FastDiv page_div;      // layout.page_size, for paged K/V
  // Inference numerics (fmha.h 0.3; Problem's fields, see core/problem.h).
  // Kernels whose registry row does not declare the matching feature bit
  // never see them set. Element dtypes: q is `dtype`, k and v `kv_dtype`, o
  // `o_dtype` (fmha_dtype values).
  int dtype, kv_dtype, o_dtype;
  // [batch, heads_kv] FP32, null = 1. The logits are
  // scale * q_descale * k_descale * (q.k) (fold them into the score factor of
  // the (b, kv head) a unit reads); v_descale multiplies o (and the split
  // partials' o, before the combine), never lse.
  const float* q_descale;
  const float* k_descale;
  const float* v_descale;
  // Additive bias, null = none: element (b, h, i, j) at
  // bias + b*bias_stride[0] + h*bias_stride[1] + i*bias_stride[2] +
  // j*bias_stride[3] (0 on broadcast dims), dtype bias_dtype (F16, BF16 or
  // F32), may hold -inf. i and j are the sequence's local positions (ragged
  // and paged batches included). Added in natural units to the scaled (and
  // soft-capped) logit, before the mask band.
  const void* bias;
  int64_t bias_stride[4];
  int bias_dtype;
  // ALiBi, null = none: slope of (b, h) at alibi_slopes[b*alibi_stride + h];
  // adds -slope * |d(i) - j| (d(i) = i + the sequence's diag_offset) to the
  // same logit as the bias.
  const float* alibi_slopes;
  int64_t alibi_stride;
};

// Which score transforms an instantiation compiles (the tensor-core
// families instantiate one kernel per value and pick it per problem):
// none; softcap alone (its own kernel, as before 0.3: the tanh needs
// registers the plain kernel keeps for Q); or every transform of fmha.h
// 0.3 (softcap, bias, ALiBi, descales, each under a run-time uniform
// branch), whose bias loads cost registers a softcap-only problem should
// not pay for.
enum class ScoreOps { kNone, kSoftcap, kAll };

inline ScoreOps score_ops_of(const Problem& p) {
  if (p.has_bias() || p.alibi_slopes != nullptr || p.has_descale()) return ScoreOps::kAll;
  return p.softcap != 0.f ? ScoreOps::kSoftcap : ScoreOps::kNone;
}

// Which operand layout a launch reads, for families that instantiate a
// kernel per layout (the dense one then reads no metadata at all).
enum class SeqMode {
  kDense,       // no serving layout (SeqLayout::any() false)
  kContiguous,  // ragged q/k or seqused_k, contiguous K/V rows
  kPaged,       // a block table (with or without ragged queries)
};

inline SeqMode seq_mode(const SeqLayout& L) {
  return L.paged() ? SeqMode::kPaged : L.any() ? SeqMode::kContiguous : SeqMode::kDense;
}

// One sequence of a work tile (core/seq_layout.h's seq_extent, clamped),
// narrowed for the kernels: every length is at most the int32 bound of
// FwdParams. Offsets are in elements.
struct FwdSeq {
  int len_q;            // Nq(b)
  int len_k;            // Nk(b)
  int rows;             // Nq(b) * pack: the unit's valid rows
  int64_t diag_offset;  // this sequence's d(i) = i + diag_offset
  int64_t q_offset;     // query 0 of sequence b in q (head 0, dim 0)
  int64_t o_offset;     // the same in o
  int64_t k_offset;     // key 0 in k (contiguous K/V; unused when paged)
  int64_t v_offset;     // key 0 in v
  int64_t lse_row0;     // lse index of (head 0, query 0); head h adds h * lse_head
  int64_t lse_head;
};

// Sequence b of p. Dense: the batch strides position it, lengths are the
// Problem's. Ragged queries start at row q_begin of the batch-1 q/o and the
// lse is [Hq, total_q]; ragged keys at row k_begin of the batch-1 k/v.
// fwd_seq_dense is the dense case alone (what a kernel instantiated for
// dense problems calls, so it compiles no metadata reads).
FMHA_HOST_DEVICE FwdSeq fwd_seq_dense(const FwdParams& p, int64_t b) {
  FwdSeq s;
  s.len_q = p.seq_q;
  s.len_k = p.seq_k;
  s.rows = p.rows;
  s.diag_offset = p.diag_offset;
  s.q_offset = b * p.q_stride[0];
  s.o_offset = b * p.o_stride[0];
  s.k_offset = b * p.k_stride[0];
  s.v_offset = b * p.v_stride[0];
  s.lse_row0 = b * p.heads_q * p.seq_q;
  s.lse_head = p.seq_q;
  return s;
}

FMHA_HOST_DEVICE FwdSeq fwd_seq(const FwdParams& p, int64_t b) {
  if (!p.layout.any()) return fwd_seq_dense(p, b);
  FwdSeq s;
  const SeqExtent e = seq_extent(p.layout, b);
  s.len_q = static_cast<int>(e.len_q);
  s.len_k = static_cast<int>(e.len_k);
  s.rows = s.len_q * p.pack;
  s.diag_offset = e.diag_offset;
  if (p.layout.ragged_q()) {
    s.q_offset = e.q_begin * p.q_stride[2];
    s.o_offset = e.q_begin * p.o_stride[2];
    s.lse_row0 = e.q_begin;
    s.lse_head = p.layout.total_q;
  } else {
    s.q_offset = b * p.q_stride[0];
    s.o_offset = b * p.o_stride[0];
    s.lse_row0 = b * p.heads_q * p.seq_q;
    s.lse_head = p.seq_q;
  }
  if (p.layout.ragged_k()) {
    s.k_offset = e.k_begin * p.k_stride[2];
    s.v_offset = e.k_begin * p.v_stride[2];
  } else {
    s.k_offset = p.layout.paged() ? 0 : b * p.k_stride[0];
    s.v_offset = p.layout.paged() ? 0 : b * p.v_stride[0];
  }
  return s;
}

// The element offsets, relative to head 0 of k and v, of key j (0 <= j <
// Nk(b)) of paged sequence b: core/seq_layout.h's page_slot, its quotient
// j / page_size taken by FwdParams::page_div.
struct KvRow {
  int64_t k, v;
};

FMHA_HOST_DEVICE KvRow paged_kv_row(const FwdParams& p, int64_t b, int j) {
  const uint32_t entry = p.page_div.div(static_cast<uint32_t>(j));
  const PageSlot ps = page_slot(p.layout, b, j, entry);
  return {ps.page * p.k_stride[0] + ps.slot * p.k_stride[2], ps.page * p.v_stride[0] + ps.slot * p.v_stride[2]};
}

// Sequence positions are int32 inside the kernels, with a tile of headroom.
constexpr int64_t kMaxFwdSeq = INT32_MAX - 1024;
// Splits above this buy nothing: the combine reads every split per row.
constexpr int kMaxFwdSplits = 64;
static_assert(kMaxFwdSplits <= kCombineMaxSplits, "the shared combine merges at most kCombineMaxSplits");

// How a family tiles one problem: `units` (batch, head slot) units of `rows`
// rows each, cut into `m_tiles` query blocks, times `splits` key splits.
struct FwdGrid {
  int64_t pack = 1;     // query heads per unit
  int64_t rows = 0;     // rows per unit = seq_q * pack
  int64_t units = 0;    // batch * heads_q / pack
  int64_t m_tiles = 0;  // query blocks per unit
  int splits = 1;       // key splits (1 = no combine pass)

  // Work items (CTAs of a one-item-per-CTA grid).
  int64_t blocks() const { return m_tiles * units * splits; }
};

// The grid of `p` for units of `pack` query heads (pack divides the GQA
// group) and query blocks of `block_m` rows; splits = 1.
FwdGrid fwd_grid(const Problem& p, int64_t pack, int64_t block_m);

// The split count, one heuristic for every family. `requested` is the
// Problem's num_splits: 1 = never split; > 1 = that many, capped by
// kMaxFwdSplits (SplitShape::max_splits) and `key_tiles`; 0 = automatic, as FlashAttention-2 decides:
// no split when the unsplit grid of `blocks` CTAs fills most of the
// `num_sms * slots_per_sm` resident CTA slots or when the rows see few key
// tiles, else the fewest splits whose wave efficiency is close to the best.
// `key_tiles` is the most key tiles a query block visits.
//
// `shape` refines the automatic choice for decode-like tiles:
// - stream_bound: the tile streams K/V at the memory's pace (decode), so a
//   grid under kFillThreshold of the slots takes the most splits that still
//   fit one wave when that wave fills kFillThreshold of the slots (every
//   slot streaming, no second wave), not the fewest close to the best.
// - uneven_keys: the sequences' key counts are per sequence and unknown to
//   the host (seqused_k, ragged or paged K/V), so CTAs of one split count
//   differ in length and whole waves mean little; a grid of at least half a
//   wave unsplit (kUnevenMinFill) and of more CTAs than SMs is split into at least kUnevenMinWaves waves (the
//   fewest splits whose wave efficiency is close to the best of those), so
//   short CTAs fill in behind long ones. Smaller grids, or grids that
//   cannot reach that many waves, take the rules above.
// - max_splits: the cap in place of kMaxFwdSplits (requested and automatic
//   counts alike; at most kCombineMaxSplits): a decode tile of many small
//   CTAs per SM needs more splits of a few units to fill its slots
//   (cuda_sm80_tc's one-warp 16-key paged tile of 7 CTAs per SM: 924
//   slots on the H200, 8 units).
struct SplitShape {
  bool stream_bound = false;
  bool uneven_keys = false;
  int max_splits = kMaxFwdSplits;
};
int choose_splits(int64_t blocks, int slots_per_sm, int64_t key_tiles, int num_sms, int requested,
                  SplitShape shape = {});

// Workspace bytes of the split partials of `g` (0 when unsplit; SIZE_MAX,
// never allocatable, on overflow). The o part comes first, so it keeps the
// workspace's 16-byte alignment.
size_t fwd_partials_bytes(const Problem& p, const FwdGrid& g);

// The params of `p` on grid `g`; for g.splits > 1 the partials are placed in
// `workspace` (at least fwd_partials_bytes(p, g) bytes). Positions are
// narrowed to int: the caller has refused seq_q, seq_k > kMaxFwdSeq and
// grids whose rows or query blocks exceed int32.
FwdParams make_fwd_params(const Problem& p, const FwdGrid& g, void* workspace);

// The combine of the split partials of `p` (p.num_splits > 1) into p.o and
// p.lse; launch with launch_split_combine<T>.
SplitCombineParams fwd_combine_params(const FwdParams& p);

}  // namespace fmha::cuda
