#include "core/validate.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstring>
#include <iterator>

#include "core/error.h"

namespace fmha {
namespace {

constexpr fmha_status kInvalid = FMHA_ERROR_INVALID_ARGUMENT;

// Every struct_size fmha has shipped. Append, never remove.
constexpr uint32_t kShippedParamSizes[] = {FMHA_FORWARD_PARAMS_SIZE_V1};

bool valid_dtype(fmha_dtype t) { return dtype_size(t) != 0; }

// [first, last] byte addresses a tensor touches.
struct ByteRange {
  uintptr_t first;
  uintptr_t last;
};

fmha_status check_tensor(const char* name, const fmha_tensor& t, ByteRange* range) {
  if (t.data == nullptr) return fail(kInvalid, "%s.data is NULL", name);
  if (!valid_dtype(t.dtype))
    return fail(kInvalid, "%s.dtype=%d is not an fmha_dtype (F16=1, BF16=2, F32=3)", name,
                static_cast<int>(t.dtype));
  static const char* const kDimNames[4] = {"batch", "heads", "seq", "head_dim"};
  for (int d = 0; d < 4; ++d) {
    if (t.dims[d] <= 0)
      return fail(kInvalid, "%s.dims[%d]=%" PRId64 " (%s) must be positive", name, d, t.dims[d],
                  kDimNames[d]);
    if (t.strides[d] < 0)
      return fail(kInvalid, "%s.strides[%d]=%" PRId64 " must be non-negative", name, d,
                  t.strides[d]);
  }
  // Largest element offset sum((dims-1)*strides), then bytes, in int64.
  const int64_t esize = dtype_size(t.dtype);
  int64_t last = 0;
  for (int d = 0; d < 4; ++d) {
    int64_t term;
    if (__builtin_mul_overflow(t.dims[d] - 1, t.strides[d], &term) ||
        __builtin_add_overflow(last, term, &last))
      return fail(kInvalid, "%s: dims x strides overflows int64 (dims[%d]=%" PRId64
                  ", strides[%d]=%" PRId64 ")", name, d, t.dims[d], d, t.strides[d]);
  }
  int64_t last_byte;
  if (__builtin_mul_overflow(last + 1, esize, &last_byte))
    return fail(kInvalid, "%s: extent of %" PRId64 " elements overflows int64 bytes", name, last + 1);
  const uintptr_t base = reinterpret_cast<uintptr_t>(t.data);
  if (base + static_cast<uintptr_t>(last_byte) - 1 < base)
    return fail(kInvalid, "%s: extent of %" PRId64 " bytes wraps the address space", name, last_byte);
  *range = {base, base + static_cast<uintptr_t>(last_byte) - 1};
  return FMHA_SUCCESS;
}

// o must not alias itself: with dims ordered by stride, each stride must
// reach past the extent of the smaller ones (torch's non-overlapping check).
fmha_status check_no_self_overlap(const char* name, const fmha_tensor& t) {
  int order[4] = {0, 1, 2, 3};
  std::sort(order, order + 4, [&](int a, int b) { return t.strides[a] < t.strides[b]; });
  int64_t extent = 1;  // elements spanned by the dims already placed
  for (int i = 0; i < 4; ++i) {
    const int d = order[i];
    if (t.dims[d] == 1) continue;
    if (t.strides[d] < extent)
      return fail(kInvalid, "%s.strides[%d]=%" PRId64 " makes %s overlap itself (needs >= %" PRId64 ")",
                  name, d, t.strides[d], name, extent);
    extent = t.strides[d] * (t.dims[d] - 1) + extent;
  }
  return FMHA_SUCCESS;
}

bool overlaps(const ByteRange& a, const ByteRange& b) { return a.first <= b.last && b.first <= a.last; }

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
                size, FMHA_FORWARD_PARAMS_SIZE_V1);
  // Read only what the caller's size covers; newer fields keep defaults.
  fmha_forward_params prm;
  fmha_forward_params_init(&prm);
  std::memcpy(&prm, user, std::min<size_t>(size, sizeof prm));

  ByteRange rq, rk, rv, ro;
  fmha_status s;
  if ((s = check_tensor("q", prm.q, &rq)) || (s = check_tensor("k", prm.k, &rk)) ||
      (s = check_tensor("v", prm.v, &rv)) || (s = check_tensor("o", prm.o, &ro)))
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
  if (prm.num_splits < 0) return fail(kInvalid, "num_splits=%d must be >= 0", prm.num_splits);
  if (prm.reserved_ != 0) return fail(kInvalid, "reserved_=%d must be 0", prm.reserved_);

  if ((s = check_no_self_overlap("o", o))) return s;
  const struct {
    const char* name;
    const ByteRange* r;
  } inputs[] = {{"q", &rq}, {"k", &rk}, {"v", &rv}};
  for (const auto& in : inputs)
    if (overlaps(ro, *in.r))
      return fail(kInvalid, "o (bytes %p..%p) overlaps %s (bytes %p..%p)",
                  reinterpret_cast<void*>(ro.first), reinterpret_cast<void*>(ro.last), in.name,
                  reinterpret_cast<void*>(in.r->first), reinterpret_cast<void*>(in.r->last));
  if (prm.lse != nullptr) {
    const uintptr_t first = reinterpret_cast<uintptr_t>(prm.lse);
    if (first % alignof(float) != 0)
      return fail(kInvalid, "lse=%p is not 4-byte aligned", static_cast<void*>(prm.lse));
    const int64_t rows = q.dims[0] * q.dims[1] * q.dims[2];  // each < extent, no overflow
    const ByteRange rl{first, first + static_cast<uintptr_t>(rows) * sizeof(float) - 1};
    const struct {
      const char* name;
      const ByteRange* r;
    } all[] = {{"q", &rq}, {"k", &rk}, {"v", &rv}, {"o", &ro}};
    for (const auto& x : all)
      if (overlaps(rl, *x.r)) return fail(kInvalid, "lse overlaps %s", x.name);
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
