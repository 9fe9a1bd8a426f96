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
constexpr uint32_t kShippedParamSizes[] = {FMHA_FORWARD_PARAMS_SIZE_V1, FMHA_FORWARD_PARAMS_SIZE_V2};
static_assert(offsetof(fmha_forward_params, num_seqs) == FMHA_FORWARD_PARAMS_SIZE_V1,
              "FMHA_FORWARD_PARAMS_SIZE_V1 is 0.1's size: fields only grow at the end");
static_assert(sizeof(fmha_forward_params) == FMHA_FORWARD_PARAMS_SIZE_V2, "FMHA_FORWARD_PARAMS_SIZE_V2 is the 0.2 size");

// Pointer, dtype, dims, strides and the extent of one tensor.
fmha_status check_tensor(const char* name, const fmha_tensor& t) {
  if (t.data == nullptr) return fail(kInvalid, "%s.data is NULL", name);
  // The caller may have stored any int in the enum field: read it as one.
  const int32_t dtype = enum_bits(t.dtype);
  const int64_t esize = dtype_size_bits(dtype);
  if (esize == 0)
    return fail(kInvalid, "%s.dtype=%d is not an fmha_dtype (F16=1, BF16=2, F32=3)", name, dtype);
  static const char* const kDimNames[4] = {"batch", "heads", "seq", "head_dim"};
  for (int d = 0; d < 4; ++d) {
    if (t.dims[d] <= 0)
      return fail(kInvalid, "%s.dims[%d]=%" PRId64 " (%s) must be positive", name, d, t.dims[d],
                  kDimNames[d]);
    if (t.dims[d] > FMHA_MAX_DIM)
      return fail(kInvalid, "%s.dims[%d]=%" PRId64 " (%s) exceeds FMHA_MAX_DIM=2^62", name, d,
                  t.dims[d], kDimNames[d]);
    if (t.strides[d] < 0)
      return fail(kInvalid, "%s.strides[%d]=%" PRId64 " must be non-negative", name, d,
                  t.strides[d]);
  }
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

}  // namespace

StridedBytes tensor_view(const fmha_tensor& t) {
  return tensor_bytes(t.data, t.dims, t.strides, dtype_size(t.dtype));
}

// A write target (o, lse, the workspace) must not share a byte with another
// operand. The test is exact (core/overlap.h); a layout too irregular for
// it to decide within its budget is refused as a possible overlap.
fmha_status check_disjoint(const char* out_name, const StridedBytes& out, const char* in_name,
                           const StridedBytes& in) {
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

}  // namespace

fmha_status build_problem(const fmha_forward_params* user, Problem* out) {
  if (user == nullptr) return fail(kInvalid, "params is NULL");
  const uint32_t size = user->struct_size;
  if (std::find(std::begin(kShippedParamSizes), std::end(kShippedParamSizes), size) ==
      std::end(kShippedParamSizes))
    return fail(kInvalid,
                "params->struct_size=%u is not a size fmha has shipped (this build: %u); "
                "call fmha_forward_params_init()",
                size, FMHA_FORWARD_PARAMS_SIZE_V2);
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
  const struct {
    const char* name;
    const fmha_tensor* t;
  } others[] = {{"k", &k}, {"v", &v}, {"o", &o}};
  for (const auto& x : others)
    if (x.t->dtype != q.dtype)
      return fail(kInvalid, "%s.dtype=%s differs from q.dtype=%s", x.name, dtype_name(x.t->dtype),
                  dtype_name(q.dtype));

  if (k.dims[0] != q.dims[0])
    return fail(kInvalid, "k.dims[0]=%" PRId64 " (batch) differs from q.dims[0]=%" PRId64, k.dims[0],
                q.dims[0]);
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

  if ((s = check_no_self_overlap("o", o))) return s;
  const StridedBytes vq = tensor_view(q), vk = tensor_view(k), vv = tensor_view(v), vo = tensor_view(o);
  if ((s = check_disjoint("o", vo, "q", vq)) || (s = check_disjoint("o", vo, "k", vk)) ||
      (s = check_disjoint("o", vo, "v", vv)))
    return s;
  if (prm.lse != nullptr) {
    const uintptr_t first = reinterpret_cast<uintptr_t>(prm.lse);
    if (first % alignof(float) != 0)
      return fail(kInvalid, "lse=%p is not 4-byte aligned", static_cast<void*>(prm.lse));
    // rows <= the element count of o, which fits int64 (o does not overlap
    // itself and its extent fits); the byte count may still not.
    const int64_t rows = q.dims[0] * q.dims[1] * q.dims[2];
    int64_t bytes;
    if (__builtin_mul_overflow(rows, static_cast<int64_t>(sizeof(float)), &bytes))
      return fail(kInvalid, "lse: %" PRId64 " rows of 4 bytes overflow int64", rows);
    uintptr_t end;
    if (__builtin_add_overflow(first, static_cast<uintptr_t>(bytes) - 1, &end))
      return fail(kInvalid, "lse=%p: %" PRId64 " bytes wrap the address space", static_cast<void*>(prm.lse),
                  bytes);
    const StridedBytes vl = contiguous_bytes(prm.lse, static_cast<uint64_t>(bytes));
    if ((s = check_disjoint("lse", vl, "q", vq)) || (s = check_disjoint("lse", vl, "k", vk)) ||
        (s = check_disjoint("lse", vl, "v", vv)) || (s = check_disjoint("lse", vl, "o", vo)))
      return s;
  }

  Problem p;
  p.dtype = q.dtype;
  p.batch = q.dims[0];
  p.heads_q = q.dims[1];
  p.heads_kv = k.dims[1];
  p.seq_q = q.dims[2];
  p.seq_k = k.dims[2];
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
  const int64_t q_dims[4] = {p.batch, p.heads_q, p.seq_q, p.head_dim};
  const int64_t kv_dims[4] = {p.batch, p.heads_kv, p.seq_k, p.head_dim};
  const int elem = dtype_size(p.dtype);
  const struct {
    const char* name;
    const Operand* op;
    const int64_t* dims;
  } all[] = {{"q", &p.q, q_dims}, {"k", &p.k, kv_dims}, {"v", &p.v, kv_dims}, {"o", &p.o, q_dims}};
  fmha_status s;
  for (const auto& x : all)
    if ((s = check_disjoint("workspace", ws, x.name, tensor_bytes(x.op->data, x.dims, x.op->stride, elem))))
      return s;
  if (p.lse != nullptr &&
      (s = check_disjoint("workspace", ws, "lse",
                          contiguous_bytes(p.lse, static_cast<uint64_t>(p.batch * p.heads_q * p.seq_q) * 4))))
    return s;
  return FMHA_SUCCESS;
}

fmha_status check_memory_location(const Problem& p, const DeviceInfo& dev, PointerKindQuery pointer_kind) {
  if (pointer_kind == nullptr) return FMHA_SUCCESS;
  const struct {
    const char* name;
    const void* ptr;
  } all[] = {{"q.data", p.q.data}, {"k.data", p.k.data}, {"v.data", p.v.data},
             {"o.data", p.o.data}, {"lse", p.lse}};
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
