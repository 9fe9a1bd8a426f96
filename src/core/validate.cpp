#include "core/validate.h"

#include <algorithm>
#include <cinttypes>
#include <cstddef>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <iterator>

#include "core/error.h"
#include "core/overlap.h"

namespace fmha {
namespace {

constexpr fmha_status kInvalid = FMHA_ERROR_INVALID_ARGUMENT;

// Every struct_size fmha has shipped. Append, never remove.
constexpr uint32_t kShippedParamSizes[] = {FMHA_FORWARD_PARAMS_SIZE_V1, FMHA_FORWARD_PARAMS_SIZE_V2,
                                           FMHA_FORWARD_PARAMS_SIZE_V3};
static_assert(offsetof(fmha_forward_params, num_seqs) == FMHA_FORWARD_PARAMS_SIZE_V1,
              "FMHA_FORWARD_PARAMS_SIZE_V1 is 0.1's size: fields only grow at the end");
static_assert(offsetof(fmha_forward_params, q_descale) == FMHA_FORWARD_PARAMS_SIZE_V2,
              "FMHA_FORWARD_PARAMS_SIZE_V2 is 0.2's size: fields only grow at the end");
static_assert(sizeof(fmha_forward_params) == FMHA_FORWARD_PARAMS_SIZE_V3, "FMHA_FORWARD_PARAMS_SIZE_V3 is the 0.3 size");

// A tensor with no element (batch or seq 0): nothing is read or written
// through it, so it overlaps nothing and its data may be NULL.
bool is_empty(const fmha_tensor& t) { return t.dims[0] == 0 || t.dims[2] == 0; }

}  // namespace

fmha_status check_tensor(const char* name, const fmha_tensor& t) {
  // The caller may have stored any int in the enum field: read it as one.
  const int32_t dtype = enum_bits(t.dtype);
  const int64_t esize = dtype_size_bits(dtype);
  if (esize == 0)
    return fail(kInvalid, "%s.dtype=%d is not an fmha_dtype (F16=1, BF16=2, F32=3, F8E4M3=4, F8E5M2=5)", name,
                dtype);
  static const char* const kDimNames[4] = {"batch", "heads", "seq", "head_dim"};
  for (int d = 0; d < 4; ++d) {
    const bool may_be_empty = d == 0 || d == 2;
    if (t.dims[d] < 0 || (t.dims[d] == 0 && !may_be_empty))
      return fail(kInvalid, "%s.dims[%d]=%" PRId64 " (%s) must be %s", name, d, t.dims[d], kDimNames[d],
                  may_be_empty ? "non-negative" : "positive");
    if (t.dims[d] > FMHA_MAX_DIM)
      return fail(kInvalid, "%s.dims[%d]=%" PRId64 " (%s) exceeds FMHA_MAX_DIM=2^62", name, d,
                  t.dims[d], kDimNames[d]);
    if (t.strides[d] < 0)
      return fail(kInvalid, "%s.strides[%d]=%" PRId64 " must be non-negative", name, d,
                  t.strides[d]);
  }
  if (is_empty(t)) return FMHA_SUCCESS;  // no element: no pointer, alignment or extent to check
  if (t.data == nullptr) return fail(kInvalid, "%s.data is NULL", name);
  const uintptr_t base = reinterpret_cast<uintptr_t>(t.data);
  if (base % static_cast<uintptr_t>(esize) != 0)
    return fail(kInvalid, "%s.data=%p is not %d-byte aligned (%s elements)", name, t.data,
                static_cast<int>(esize), dtype_name(t.dtype));
  // Largest element offset sum((dims-1)*strides), then the byte count
  // (last + 1) * esize, all checked in int64.
  int64_t last = 0;
  for (int d = 0; d < 4; ++d) {
    int64_t term;
    if (__builtin_mul_overflow(t.dims[d] - 1, t.strides[d], &term) ||
        __builtin_add_overflow(last, term, &last))
      return fail(kInvalid, "%s: dims x strides overflows int64 (dims[%d]=%" PRId64
                  ", strides[%d]=%" PRId64 ")", name, d, t.dims[d], d, t.strides[d]);
  }
  int64_t elements, bytes;
  if (__builtin_add_overflow(last, 1, &elements) || __builtin_mul_overflow(elements, esize, &bytes))
    return fail(kInvalid, "%s: extent of %" PRId64 " + 1 elements of %d bytes overflows int64", name,
                last, static_cast<int>(esize));
  uintptr_t end;  // the last byte
  if (__builtin_add_overflow(base, static_cast<uintptr_t>(bytes) - 1, &end))
    return fail(kInvalid, "%s: extent of %" PRId64 " bytes wraps the address space", name, bytes);
  return FMHA_SUCCESS;
}

// The bytes of a tensor; an empty tensor is a view of no dimension.
StridedBytes tensor_view(const fmha_tensor& t) {
  if (is_empty(t)) return StridedBytes{};
  return tensor_bytes(t.data, t.dims, t.strides, dtype_size(t.dtype));
}

// The same for an Operand of the given dims.
StridedBytes operand_view(const Operand& op, const int64_t dims[4], fmha_dtype dtype) {
  if (dims[0] == 0 || dims[2] == 0) return StridedBytes{};
  return tensor_bytes(op.data, dims, op.stride, dtype_size(dtype));
}

// A write target (o, lse, the workspace) must not share a byte with another
// operand. The test is exact (core/overlap.h); a layout too irregular for
// it to decide within its budget is refused as a possible overlap.
fmha_status check_disjoint(const char* out_name, const StridedBytes& out, const char* in_name,
                           const StridedBytes& in) {
  if (out.dims == 0 || in.dims == 0) return FMHA_SUCCESS;  // an empty view
  switch (views_overlap(out, in)) {
    case Overlap::kDisjoint:
      return FMHA_SUCCESS;
    case Overlap::kOverlap:
      return fail(kInvalid, "%s overlaps %s (%s=%p, %s=%p)", out_name, in_name, out_name,
                  reinterpret_cast<void*>(out.base), in_name, reinterpret_cast<void*>(in.base));
    default:
      return fail(kInvalid, "%s may overlap %s (%s=%p, %s=%p): strides too irregular to prove them disjoint",
                  out_name, in_name, out_name, reinterpret_cast<void*>(out.base), in_name,
                  reinterpret_cast<void*>(in.base));
  }
}

// o must not alias itself: no two of its elements may share a byte.
fmha_status check_no_self_overlap(const char* name, const fmha_tensor& t) {
  if (is_empty(t)) return FMHA_SUCCESS;
  switch (view_overlaps_itself(tensor_view(t))) {
    case Overlap::kDisjoint:
      return FMHA_SUCCESS;
    case Overlap::kOverlap:
      return fail(kInvalid, "%s.strides={%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                  "} makes %s overlap itself", name, t.strides[0], t.strides[1], t.strides[2],
                  t.strides[3], name);
    default:
      return fail(kInvalid, "%s.strides={%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                  "} may make %s overlap itself (too irregular to prove otherwise)", name,
                  t.strides[0], t.strides[1], t.strides[2], t.strides[3], name);
  }
}

namespace {

fmha_status check_finite_nonneg(const char* name, float value) {
  if (std::isnan(value) || std::isinf(value) || value < 0.f)
    return fail(kInvalid, "%s=%g must be finite and >= 0", name, static_cast<double>(value));
  return FMHA_SUCCESS;
}

// The 0.2 serving fields (all 0 in a 0.1-sized struct): which apply, their
// host-known values, and the tensor dims they imply. Fills the layout (less
// top_left) and the Problem's batch and bounds: batch = the sequence count,
// seq_q / seq_k = the bounds every sequence's Nq(b) / Nk(b) stays within.
fmha_status check_layout(const fmha_forward_params& prm, SeqLayout* L, int64_t* batch, int64_t* seq_q,
                         int64_t* seq_k) {
  const fmha_tensor& q = prm.q;
  const fmha_tensor& k = prm.k;
  const bool ragged_q = prm.cu_seqlens_q != nullptr;
  const bool ragged_k = prm.cu_seqlens_k != nullptr;
  const bool paged = prm.block_table != nullptr;
  if (prm.reserved2_ != 0) return fail(kInvalid, "reserved2_=%d must be 0", prm.reserved2_);
  if (ragged_k && paged)
    return fail(kInvalid, "cu_seqlens_k=%p and block_table=%p are exclusive (paged keys are not packed)",
                static_cast<const void*>(prm.cu_seqlens_k), static_cast<const void*>(prm.block_table));
  if (paged && prm.seqused_k == nullptr)
    return fail(kInvalid, "block_table=%p needs seqused_k (each sequence's key count)",
                static_cast<const void*>(prm.block_table));

  // The batch: num_seqs with packed queries or keys, else q.dims[0].
  int64_t B = q.dims[0];
  if (ragged_q || ragged_k) {
    if (prm.num_seqs < 0) return fail(kInvalid, "num_seqs=%d must be >= 0", prm.num_seqs);
    B = prm.num_seqs;
  } else if (prm.num_seqs != 0) {
    return fail(kInvalid, "num_seqs=%d must be 0 without cu_seqlens_q or cu_seqlens_k", prm.num_seqs);
  }

  // Queries.
  int64_t nq = q.dims[2];
  if (ragged_q) {
    if (q.dims[0] != 1)
      return fail(kInvalid, "q.dims[0]=%" PRId64 " must be 1 with cu_seqlens_q (packed queries)", q.dims[0]);
    if (prm.max_seqlen_q < 0 || prm.max_seqlen_q > q.dims[2])
      return fail(kInvalid, "max_seqlen_q=%d must be in [0, q.dims[2]=%" PRId64 "] with cu_seqlens_q",
                  prm.max_seqlen_q, q.dims[2]);
    nq = prm.max_seqlen_q;
  } else {
    if (prm.max_seqlen_q != 0)
      return fail(kInvalid, "max_seqlen_q=%d must be 0 without cu_seqlens_q", prm.max_seqlen_q);
    if (q.dims[0] != B)
      return fail(kInvalid, "q.dims[0]=%" PRId64 " (batch) differs from num_seqs=%d (dense queries with cu_seqlens_k)",
                  q.dims[0], prm.num_seqs);
  }

  // Keys: packed, paged or dense (with or without seqused_k).
  int64_t nk = k.dims[2];
  if (ragged_k) {
    if (k.dims[0] != 1)
      return fail(kInvalid, "k.dims[0]=%" PRId64 " must be 1 with cu_seqlens_k (packed keys)", k.dims[0]);
    if (prm.max_seqlen_k < 0 || prm.max_seqlen_k > k.dims[2])
      return fail(kInvalid, "max_seqlen_k=%d must be in [0, k.dims[2]=%" PRId64 "] with cu_seqlens_k",
                  prm.max_seqlen_k, k.dims[2]);
    nk = prm.max_seqlen_k;
  } else if (paged) {
    if (k.dims[0] < 1)
      return fail(kInvalid, "k.dims[0]=%" PRId64 " (num_pages) must be >= 1 with a block_table", k.dims[0]);
    if (k.dims[2] < 1)
      return fail(kInvalid, "k.dims[2]=%" PRId64 " (page_size) must be >= 1 with a block_table", k.dims[2]);
    if (prm.block_table_stride < 1)
      return fail(kInvalid, "block_table_stride=%" PRId64 " must be >= 1 with a block_table",
                  prm.block_table_stride);
    // The most keys a sequence can hold, and the table's entry count: both
    // index arithmetic of the kernels, so both must fit.
    int64_t capacity, entries;
    if (__builtin_mul_overflow(prm.block_table_stride, k.dims[2], &capacity) || capacity > FMHA_MAX_DIM)
      return fail(kInvalid, "block_table_stride=%" PRId64 " x page_size k.dims[2]=%" PRId64
                  " exceeds FMHA_MAX_DIM=2^62 keys", prm.block_table_stride, k.dims[2]);
    if (__builtin_mul_overflow(B, prm.block_table_stride, &entries))
      return fail(kInvalid, "block_table: %" PRId64 " sequences x block_table_stride=%" PRId64 " overflows int64",
                  B, prm.block_table_stride);
    if (prm.max_seqlen_k < 0 || prm.max_seqlen_k > capacity)
      return fail(kInvalid, "max_seqlen_k=%d must be in [0, block_table_stride x page_size = %" PRId64
                  "] with a block_table", prm.max_seqlen_k, capacity);
    nk = prm.max_seqlen_k != 0 ? prm.max_seqlen_k : capacity;
  } else {
    if (prm.max_seqlen_k != 0)
      return fail(kInvalid, "max_seqlen_k=%d must be 0 with dense keys (no cu_seqlens_k, no block_table)",
                  prm.max_seqlen_k);
    if (k.dims[0] != B) {
      if (ragged_q)
        return fail(kInvalid, "k.dims[0]=%" PRId64 " (batch) differs from num_seqs=%d (dense keys with cu_seqlens_q)",
                    k.dims[0], prm.num_seqs);
      return fail(kInvalid, "k.dims[0]=%" PRId64 " (batch) differs from q.dims[0]=%" PRId64, k.dims[0], q.dims[0]);
    }
  }
  if (!paged && prm.block_table_stride != 0)
    return fail(kInvalid, "block_table_stride=%" PRId64 " must be 0 without a block_table", prm.block_table_stride);

  L->cu_seqlens_q = prm.cu_seqlens_q;
  L->cu_seqlens_k = prm.cu_seqlens_k;
  L->seqused_k = prm.seqused_k;
  L->block_table = prm.block_table;
  L->block_table_stride = paged ? prm.block_table_stride : 0;
  L->total_q = q.dims[2];
  L->total_k = k.dims[2];
  L->max_seq_q = nq;
  L->max_seq_k = nk;
  L->page_size = paged ? k.dims[2] : 0;
  L->num_pages = paged ? k.dims[0] : 0;
  *batch = B;
  *seq_q = nq;
  *seq_k = nk;
  return FMHA_SUCCESS;
}

// The dtype rules of fmha.h 0.3: k and v share a dtype; q shares it too
// unless k/v are FP8 (then q is F16, BF16 or FP8); o is F16, BF16 or F32.
fmha_status check_dtypes(fmha_dtype q, fmha_dtype k, fmha_dtype v, fmha_dtype o) {
  if (v != k)
    return fail(kInvalid, "v.dtype=%s differs from k.dtype=%s (k and v share a dtype)", dtype_name(v),
                dtype_name(k));
  if (is_fp8(o))
    return fail(kInvalid, "o.dtype=%s must be F16, BF16 or F32 (FP8 is for inputs only)", dtype_name(o));
  if (is_fp8(k)) {
    if (q == FMHA_DTYPE_F32)
      return fail(kInvalid, "q.dtype=F32 with k.dtype=%s: with FP8 K/V, q must be F16, BF16 or FP8",
                  dtype_name(k));
  } else if (k != q) {
    return fail(kInvalid, "k.dtype=%s differs from q.dtype=%s (only FP8 K/V may differ from q%s)", dtype_name(k),
                dtype_name(q), is_fp8(q) ? "; an FP8 q needs FP8 K/V" : "");
  }
  return FMHA_SUCCESS;
}

// `count` FP32 values at ptr: 4-byte aligned, their extent fits; *view
// receives their bytes (empty when count is 0).
fmha_status check_float_array(const char* name, const float* ptr, int64_t count, StridedBytes* view) {
  *view = StridedBytes{};
  if (reinterpret_cast<uintptr_t>(ptr) % alignof(float) != 0)
    return fail(kInvalid, "%s=%p is not 4-byte aligned", name, static_cast<const void*>(ptr));
  if (count <= 0) return FMHA_SUCCESS;
  int64_t bytes;
  uintptr_t end;
  if (__builtin_mul_overflow(count, static_cast<int64_t>(sizeof(float)), &bytes) ||
      __builtin_add_overflow(reinterpret_cast<uintptr_t>(ptr), static_cast<uintptr_t>(bytes) - 1, &end))
    return fail(kInvalid, "%s=%p: %" PRId64 " floats overflow the address space", name,
                static_cast<const void*>(ptr), count);
  *view = contiguous_bytes(ptr, static_cast<uint64_t>(bytes));
  return FMHA_SUCCESS;
}

// The bias tensor against the problem's [B, Hq, Nq, Nk]: dtype, dims (each
// the problem's or 1), strides, alignment and extent. *strides receives the
// element strides the kernels use (0 on a broadcast dim of 1), *view its
// bytes (empty when the problem has no element).
fmha_status check_bias(const fmha_tensor& t, const int64_t full[4], int64_t strides[4], StridedBytes* view) {
  *view = StridedBytes{};
  const int32_t dtype = enum_bits(t.dtype);
  if (dtype != FMHA_DTYPE_F16 && dtype != FMHA_DTYPE_BF16 && dtype != FMHA_DTYPE_F32)
    return fail(kInvalid, "bias.dtype=%d must be F16 (1), BF16 (2) or F32 (3)", dtype);
  static const char* const kNames[4] = {"batch", "heads_q", "Nq", "Nk"};
  for (int d = 0; d < 4; ++d) {
    if (t.dims[d] != full[d] && t.dims[d] != 1)
      return fail(kInvalid, "bias.dims[%d]=%" PRId64 " must be %" PRId64 " (%s) or 1 (broadcast)", d, t.dims[d],
                  full[d], kNames[d]);
    if (t.strides[d] < 0)
      return fail(kInvalid, "bias.strides[%d]=%" PRId64 " must be non-negative", d, t.strides[d]);
    strides[d] = t.dims[d] == 1 ? 0 : t.strides[d];
  }
  const int64_t esize = dtype_size_bits(dtype);
  if (reinterpret_cast<uintptr_t>(t.data) % static_cast<uintptr_t>(esize) != 0)
    return fail(kInvalid, "bias.data=%p is not %d-byte aligned (%s elements)", t.data, static_cast<int>(esize),
                dtype_name(t.dtype));
  // The view is the tensor as declared (a broadcast dim of 1 holds its one
  // element even when the problem reads none), so o and lse must keep clear
  // of it whether or not the problem reads it; a bias with no element at all
  // has no bytes.
  for (int d = 0; d < 4; ++d)
    if (t.dims[d] == 0) return FMHA_SUCCESS;
  int64_t last = 0;
  for (int d = 0; d < 4; ++d) {
    int64_t term;
    if (__builtin_mul_overflow(t.dims[d] - 1, strides[d], &term) || __builtin_add_overflow(last, term, &last))
      return fail(kInvalid, "bias: dims x strides overflows int64 (dims[%d]=%" PRId64 ", strides[%d]=%" PRId64 ")",
                  d, t.dims[d], d, t.strides[d]);
  }
  int64_t bytes;
  uintptr_t end;
  if (__builtin_add_overflow(last, 1, &bytes) || __builtin_mul_overflow(bytes, esize, &bytes) ||
      __builtin_add_overflow(reinterpret_cast<uintptr_t>(t.data), static_cast<uintptr_t>(bytes) - 1, &end))
    return fail(kInvalid, "bias: extent of %" PRId64 " + 1 elements overflows the address space", last);
  *view = tensor_bytes(t.data, t.dims, strides, static_cast<int>(esize));
  return FMHA_SUCCESS;
}

}  // namespace

fmha_status build_problem(const fmha_forward_params* user, Problem* out) {
  if (user == nullptr) return fail(kInvalid, "params is NULL");
  const uint32_t size = user->struct_size;
  if (std::find(std::begin(kShippedParamSizes), std::end(kShippedParamSizes), size) ==
      std::end(kShippedParamSizes))
    return fail(kInvalid,
                "params->struct_size=%u is not a size fmha has shipped (0.1: %u, 0.2: %u, 0.3: %u); "
                "call fmha_forward_params_init()",
                size, FMHA_FORWARD_PARAMS_SIZE_V1, FMHA_FORWARD_PARAMS_SIZE_V2, FMHA_FORWARD_PARAMS_SIZE_V3);
  // Read only what the caller's size covers; newer fields keep defaults.
  fmha_forward_params prm;
  fmha_forward_params_init(&prm);
  std::memcpy(&prm, user, std::min<size_t>(size, sizeof prm));

  fmha_status s;
  if ((s = check_tensor("q", prm.q)) || (s = check_tensor("k", prm.k)) || (s = check_tensor("v", prm.v)) ||
      (s = check_tensor("o", prm.o)))
    return s;

  const fmha_tensor& q = prm.q;
  const fmha_tensor& k = prm.k;
  const fmha_tensor& v = prm.v;
  const fmha_tensor& o = prm.o;
  if ((s = check_dtypes(q.dtype, k.dtype, v.dtype, o.dtype))) return s;

  if (k.dims[3] != q.dims[3])
    return fail(kInvalid, "k.dims[3]=%" PRId64 " (head_dim) differs from q.dims[3]=%" PRId64,
                k.dims[3], q.dims[3]);
  for (int d = 0; d < 4; ++d)
    if (v.dims[d] != k.dims[d])
      return fail(kInvalid, "v.dims[%d]=%" PRId64 " differs from k.dims[%d]=%" PRId64, d, v.dims[d],
                  d, k.dims[d]);
  if (q.dims[1] % k.dims[1] != 0)
    return fail(kInvalid, "k.dims[1]=%" PRId64 " does not divide q.dims[1]=%" PRId64, k.dims[1],
                q.dims[1]);
  for (int d = 0; d < 4; ++d)
    if (o.dims[d] != q.dims[d])
      return fail(kInvalid, "o.dims[%d]=%" PRId64 " differs from q.dims[%d]=%" PRId64, d, o.dims[d],
                  d, q.dims[d]);

  const uint32_t known = FMHA_MASK_CAUSAL | FMHA_MASK_CAUSAL_TOP_LEFT;
  if (prm.mask_flags & ~known)
    return fail(kInvalid, "mask_flags=0x%x has unknown bits 0x%x", prm.mask_flags,
                prm.mask_flags & ~known);
  if ((prm.mask_flags & known) == known)
    return fail(kInvalid, "mask_flags=0x%x sets both FMHA_MASK_CAUSAL and FMHA_MASK_CAUSAL_TOP_LEFT",
                prm.mask_flags);
  const bool causal = prm.mask_flags != 0;
  if (prm.window_left < -1)
    return fail(kInvalid, "window_left=%d must be -1 (unbounded) or >= 0", prm.window_left);
  if (prm.window_right < -1)
    return fail(kInvalid, "window_right=%d must be -1 (unbounded) or >= 0", prm.window_right);
  if (causal && prm.window_right > 0)
    return fail(kInvalid, "window_right=%d conflicts with the causal mask (use -1 or 0)",
                prm.window_right);

  if ((s = check_finite_nonneg("scale", prm.scale)) || (s = check_finite_nonneg("softcap", prm.softcap)))
    return s;
  // Kernels divide by softcap (or multiply by its reciprocal, with the
  // scale folded in): both must stay finite, or a zero logit becomes 0 * inf.
  const double resolved_scale =
      prm.scale != 0.f ? prm.scale : 1.0 / std::sqrt(static_cast<double>(prm.q.dims[3]));
  if (prm.softcap != 0.f &&
      (prm.softcap < FLT_MIN || resolved_scale / prm.softcap > static_cast<double>(FLT_MAX)))
    return fail(kInvalid, "softcap=%g must be 0 or at least %g (FLT_MIN), and scale/softcap=%g finite in FP32",
                static_cast<double>(prm.softcap), static_cast<double>(FLT_MIN),
                resolved_scale / static_cast<double>(prm.softcap));
  if (prm.num_splits < 0) return fail(kInvalid, "num_splits=%d must be >= 0", prm.num_splits);
  if (prm.reserved_ != 0) return fail(kInvalid, "reserved_=%d must be 0", prm.reserved_);
  SeqLayout layout;
  int64_t batch = 0, seq_q = 0, seq_k = 0;
  if ((s = check_layout(prm, &layout, &batch, &seq_q, &seq_k))) return s;

  if ((s = check_no_self_overlap("o", o))) return s;
  const StridedBytes vq = tensor_view(q), vk = tensor_view(k), vv = tensor_view(v), vo = tensor_view(o);
  if ((s = check_disjoint("o", vo, "q", vq)) || (s = check_disjoint("o", vo, "k", vk)) ||
      (s = check_disjoint("o", vo, "v", vv)))
    return s;
  StridedBytes vl;  // lse's bytes (empty without lse)
  if (prm.lse != nullptr) {
    const uintptr_t first = reinterpret_cast<uintptr_t>(prm.lse);
    if (first % alignof(float) != 0)
      return fail(kInvalid, "lse=%p is not 4-byte aligned", static_cast<void*>(prm.lse));
    // rows <= the element count of o, which fits int64 (o does not overlap
    // itself and its extent fits); the byte count may still not. Packed
    // queries: [Hq, total_q], the same product with q.dims[0] = 1.
    const int64_t rows = q.dims[0] * q.dims[1] * q.dims[2];
    int64_t bytes;
    if (__builtin_mul_overflow(rows, static_cast<int64_t>(sizeof(float)), &bytes))
      return fail(kInvalid, "lse: %" PRId64 " rows of 4 bytes overflow int64", rows);
    uintptr_t end;
    if (rows > 0 && __builtin_add_overflow(first, static_cast<uintptr_t>(bytes) - 1, &end))
      return fail(kInvalid, "lse=%p: %" PRId64 " bytes wrap the address space", static_cast<void*>(prm.lse),
                  bytes);
    vl = rows == 0 ? StridedBytes{} : contiguous_bytes(prm.lse, static_cast<uint64_t>(bytes));
    if ((s = check_disjoint("lse", vl, "q", vq)) || (s = check_disjoint("lse", vl, "k", vk)) ||
        (s = check_disjoint("lse", vl, "v", vv)) || (s = check_disjoint("lse", vl, "o", vo)))
      return s;
  }

  // 0.3: descales [B, Hk], the bias [B, Hq, Nq, Nk], ALiBi slopes [Hq] or
  // [B, Hq]; o and lse share no byte with any of them.
  int64_t bias_strides[4] = {0, 0, 0, 0};
  {
    const int64_t hq = q.dims[1], hk = k.dims[1];
    StridedBytes views[5];
    const char* names[5] = {"q_descale", "k_descale", "v_descale", "bias", "alibi_slopes"};
    const float* descales[3] = {prm.q_descale, prm.k_descale, prm.v_descale};
    // B * Hk fits int64 whenever there is work (o's elements do); an empty
    // problem (seq 0) may declare any dims.
    int64_t factors = 0;
    if (__builtin_mul_overflow(batch, hk, &factors)) factors = INT64_MAX;
    for (int i = 0; i < 3; ++i)
      if (descales[i] != nullptr && (s = check_float_array(names[i], descales[i], factors, &views[i]))) return s;
    if (prm.bias.data != nullptr) {
      const int64_t full[4] = {batch, hq, seq_q, seq_k};
      if ((s = check_bias(prm.bias, full, bias_strides, &views[3]))) return s;
    }
    if (prm.alibi_slopes == nullptr) {
      if (prm.alibi_slopes_stride != 0)
        return fail(kInvalid, "alibi_slopes_stride=%" PRId64 " must be 0 without alibi_slopes",
                    prm.alibi_slopes_stride);
    } else {
      const int64_t st = prm.alibi_slopes_stride;
      if (st != 0 && st < hq)
        return fail(kInvalid, "alibi_slopes_stride=%" PRId64 " must be 0 ([Hq] slopes) or >= q.dims[1]=%" PRId64
                    " ([B, Hq] slopes)", st, hq);
      int64_t count = 0;
      if (batch > 0 && (__builtin_mul_overflow(batch - 1, st, &count) || __builtin_add_overflow(count, hq, &count)))
        return fail(kInvalid, "alibi_slopes: %" PRId64 " rows of stride alibi_slopes_stride=%" PRId64
                    " overflow int64", batch, st);
      if ((s = check_float_array("alibi_slopes", prm.alibi_slopes, count, &views[4]))) return s;
    }
    for (int i = 0; i < 5; ++i)
      if ((s = check_disjoint("o", vo, names[i], views[i])) || (s = check_disjoint("lse", vl, names[i], views[i])))
        return s;
  }

  Problem p;
  p.dtype = q.dtype;
  p.kv_dtype = k.dtype;
  p.o_dtype = o.dtype;
  p.q_descale = prm.q_descale;
  p.k_descale = prm.k_descale;
  p.v_descale = prm.v_descale;
  if (prm.bias.data != nullptr) {
    p.bias.data = prm.bias.data;
    std::copy(bias_strides, bias_strides + 4, p.bias.stride);
    p.bias_dtype = prm.bias.dtype;
  }
  p.alibi_slopes = prm.alibi_slopes;
  p.alibi_stride = prm.alibi_slopes_stride;
  p.batch = batch;
  p.heads_q = q.dims[1];
  p.heads_kv = k.dims[1];
  p.seq_q = seq_q;
  p.seq_k = seq_k;
  p.head_dim = q.dims[3];
  const struct {
    Operand* dst;
    const fmha_tensor* src;
  } ops[] = {{&p.q, &q}, {&p.k, &k}, {&p.v, &v}, {&p.o, &o}};
  for (const auto& op : ops) {
    op.dst->data = op.src->data;
    std::copy(op.src->strides, op.src->strides + 4, op.dst->stride);
  }
  p.lse = prm.lse;
  p.scale = prm.scale != 0.f ? prm.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.head_dim)));
  p.softcap = prm.softcap;
  p.causal = causal;
  p.diag_offset = (prm.mask_flags & FMHA_MASK_CAUSAL_TOP_LEFT) ? 0 : p.seq_k - p.seq_q;
  p.window_left = prm.window_left;
  p.window_right = causal ? 0 : prm.window_right;
  p.num_splits = prm.num_splits;
  p.forced_kernel = prm.kernel;
  layout.top_left = (prm.mask_flags & FMHA_MASK_CAUSAL_TOP_LEFT) != 0;
  p.layout = layout;
  *out = p;
  return FMHA_SUCCESS;
}

fmha_status check_workspace(const Problem& p, const void* workspace, size_t bytes) {
  if (bytes == 0) return FMHA_SUCCESS;
  const uintptr_t first = reinterpret_cast<uintptr_t>(workspace);
  uintptr_t end;
  if (bytes > static_cast<size_t>(INT64_MAX) || __builtin_add_overflow(first, bytes - 1, &end))
    return fail(kInvalid, "workspace=%p: %zu bytes wrap the address space", workspace, bytes);
  const StridedBytes ws = contiguous_bytes(workspace, bytes);
  int64_t q_dims[4], kv_dims[4];
  p.q_dims(q_dims);
  p.kv_dims(kv_dims);
  const struct {
    const char* name;
    const Operand* op;
    const int64_t* dims;
    fmha_dtype dtype;
  } all[] = {{"q", &p.q, q_dims, p.dtype},
             {"k", &p.k, kv_dims, p.kv_dtype},
             {"v", &p.v, kv_dims, p.kv_dtype},
             {"o", &p.o, q_dims, p.o_dtype}};
  fmha_status s;
  for (const auto& x : all)
    if ((s = check_disjoint("workspace", ws, x.name, operand_view(*x.op, x.dims, x.dtype)))) return s;
  // 0.3's inputs: the workspace must not clobber them either.
  const int64_t floats = p.batch * p.heads_kv;
  const struct {
    const char* name;
    const float* ptr;
    int64_t count;
  } arrays[] = {{"q_descale", p.q_descale, floats},
                {"k_descale", p.k_descale, floats},
                {"v_descale", p.v_descale, floats},
                {"alibi_slopes", p.alibi_slopes, p.batch > 0 ? (p.batch - 1) * p.alibi_stride + p.heads_q : 0}};
  for (const auto& x : arrays)
    if (x.ptr != nullptr && x.count > 0 &&
        (s = check_disjoint("workspace", ws, x.name, contiguous_bytes(x.ptr, static_cast<uint64_t>(x.count) * 4))))
      return s;
  if (p.has_bias() && !p.no_rows() && p.seq_k > 0) {
    const int64_t bias_dims[4] = {p.batch, p.heads_q, p.seq_q, p.seq_k};
    if ((s = check_disjoint("workspace", ws, "bias",
                            tensor_bytes(p.bias.data, bias_dims, p.bias.stride, dtype_size(p.bias_dtype)))))
      return s;
  }
  const int64_t lse_rows = p.lse_rows();
  if (p.lse != nullptr && lse_rows > 0 &&
      (s = check_disjoint("workspace", ws, "lse", contiguous_bytes(p.lse, static_cast<uint64_t>(lse_rows) * 4))))
    return s;
  return FMHA_SUCCESS;
}

fmha_status check_memory_location(const Problem& p, const DeviceInfo& dev, PointerKindQuery pointer_kind) {
  if (pointer_kind == nullptr) return FMHA_SUCCESS;
  const struct {
    const char* name;
    const void* ptr;
  } all[] = {{"q.data", p.q.data},
             {"k.data", p.k.data},
             {"v.data", p.v.data},
             {"o.data", p.o.data},
             {"lse", p.lse},
             {"cu_seqlens_q", p.layout.cu_seqlens_q},
             {"cu_seqlens_k", p.layout.cu_seqlens_k},
             {"seqused_k", p.layout.seqused_k},
             {"block_table", p.layout.block_table},
             {"q_descale", p.q_descale},
             {"k_descale", p.k_descale},
             {"v_descale", p.v_descale},
             {"bias.data", p.bias.data},
             {"alibi_slopes", p.alibi_slopes}};
  for (const auto& x : all) {
    if (x.ptr == nullptr) continue;
    int owner = -1;
    const PointerKind kind = pointer_kind(x.ptr, &owner);
    if (dev.kind == FMHA_DEVICE_CUDA && kind == PointerKind::kHost)
      return fail(kInvalid, "%s=%p is host memory but the handle is CUDA device %d", x.name, x.ptr,
                  dev.ordinal);
    if (dev.kind == FMHA_DEVICE_CUDA && kind == PointerKind::kDevice && owner != dev.ordinal)
      return fail(kInvalid, "%s=%p lives on CUDA device %d but the handle is CUDA device %d", x.name,
                  x.ptr, owner, dev.ordinal);
    if (dev.kind == FMHA_DEVICE_CPU && kind == PointerKind::kDevice)
      return fail(kInvalid, "%s=%p is CUDA device memory but the handle is CPU", x.name, x.ptr);
  }
  return FMHA_SUCCESS;
}

}  // namespace fmha
