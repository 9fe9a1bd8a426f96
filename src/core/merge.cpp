#include "core/merge.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "core/error.h"
#include "core/overlap.h"
#include "core/validate.h"

static_assert(sizeof(fmha_merge_params) == FMHA_MERGE_PARAMS_SIZE_V1, "FMHA_MERGE_PARAMS_SIZE_V1 is the 0.2 size: fields only grow at the end");

namespace fmha {
namespace {

constexpr fmha_status kInvalid = FMHA_ERROR_INVALID_ARGUMENT;

// Longest name of an operand ("lse_parts[2147483647]") plus its NUL.
constexpr int kNameBytes = 32;

struct Name {
  char text[kNameBytes];
  Name(const char* array, int index) { std::snprintf(text, sizeof text, "%s[%d]", array, index); }
  explicit Name(const char* plain) { std::snprintf(text, sizeof text, "%s", plain); }
};

// The dtypes fmha_merge reads and writes: what a forward writes to o.
bool is_merge_dtype(fmha_dtype t) {
  return t == FMHA_DTYPE_F16 || t == FMHA_DTYPE_BF16 || t == FMHA_DTYPE_F32;
}

// An lse array of `bytes` (> 0) bytes: aligned, and not wrapping.
fmha_status check_lse(const char* name, const float* lse, int64_t bytes) {
  if (lse == nullptr) return fail(kInvalid, "%s is NULL", name);
  const uintptr_t first = reinterpret_cast<uintptr_t>(lse);
  if (first % alignof(float) != 0)
    return fail(kInvalid, "%s=%p is not 4-byte aligned", name, static_cast<const void*>(lse));
  uintptr_t end;
  if (__builtin_add_overflow(first, static_cast<uintptr_t>(bytes) - 1, &end))
    return fail(kInvalid, "%s=%p: %" PRId64 " bytes wrap the address space", name,
                static_cast<const void*>(lse), bytes);
  return FMHA_SUCCESS;
}

// o is o_parts[0] itself: the same elements at the same addresses (strides
// of a dimension of size 1 name no other element).
bool same_view(const fmha_tensor& a, const fmha_tensor& b) {
  if (a.data != b.data || enum_bits(a.dtype) != enum_bits(b.dtype)) return false;
  for (int d = 0; d < 4; ++d)
    if (a.dims[d] != b.dims[d] || (a.dims[d] > 1 && a.strides[d] != b.strides[d])) return false;
  return true;
}

}  // namespace

fmha_status build_merge_problem(const fmha_merge_params* prm, MergeProblem* out) {
  if (prm == nullptr) return fail(kInvalid, "params is NULL");
  if (prm->struct_size != FMHA_MERGE_PARAMS_SIZE_V1)
    return fail(kInvalid,
                "params->struct_size=%u is not a size fmha has shipped (this build: %u); "
                "call fmha_merge_params_init()",
                prm->struct_size, FMHA_MERGE_PARAMS_SIZE_V1);
  const int32_t n = prm->num_parts;
  if (n < 1) return fail(kInvalid, "num_parts=%d must be >= 1", n);
  if (prm->o_parts == nullptr) return fail(kInvalid, "o_parts is NULL (num_parts=%d)", n);
  if (prm->lse_parts == nullptr) return fail(kInvalid, "lse_parts is NULL (num_parts=%d)", n);

  fmha_status s;
  const fmha_tensor* parts = prm->o_parts;
  const fmha_tensor& first = parts[0];
  for (int32_t i = 0; i < n; ++i)
    if ((s = check_tensor(Name("o_parts", i).text, parts[i]))) return s;
  for (int32_t i = 1; i < n; ++i) {
    if (parts[i].dtype != first.dtype)
      return fail(kInvalid, "o_parts[%d].dtype=%s differs from o_parts[0].dtype=%s", i, dtype_name(parts[i].dtype),
                  dtype_name(first.dtype));
    for (int d = 0; d < 4; ++d)
      if (parts[i].dims[d] != first.dims[d])
        return fail(kInvalid, "o_parts[%d].dims[%d]=%" PRId64 " differs from o_parts[0].dims[%d]=%" PRId64, i, d,
                    parts[i].dims[d], d, first.dims[d]);
  }
  if (!is_merge_dtype(first.dtype))
    return fail(kInvalid, "o_parts[0].dtype=%s: fmha_merge takes F16, BF16 or F32 partial outputs",
                dtype_name(first.dtype));
  const fmha_tensor& o = prm->o;
  if ((s = check_tensor("o", o))) return s;
  if (!is_merge_dtype(o.dtype))
    return fail(kInvalid, "o.dtype=%s: fmha_merge writes F16, BF16 or F32", dtype_name(o.dtype));
  for (int d = 0; d < 4; ++d)
    if (o.dims[d] != first.dims[d])
      return fail(kInvalid, "o.dims[%d]=%" PRId64 " differs from o_parts[0].dims[%d]=%" PRId64, d, o.dims[d], d,
                  first.dims[d]);

  MergeProblem p;
  p.batch = first.dims[0];
  p.heads = first.dims[1];
  p.seq = first.dims[2];
  p.head_dim = first.dims[3];
  p.num_parts = n;
  p.parts = parts;
  p.lse_parts = prm->lse_parts;
  p.parts_dtype = first.dtype;
  p.o = o.data;
  p.o_dtype = o.dtype;
  std::copy(o.strides, o.strides + 4, p.o_stride);
  p.lse = prm->lse;
  if (p.empty()) {  // nothing is read or written: only the views' own checks apply
    *out = p;
    return FMHA_SUCCESS;
  }

  // rows <= the element count of o_parts[0], which fits int64; its FP32
  // byte count may still not.
  int64_t lse_bytes;
  if (__builtin_mul_overflow(p.rows(), static_cast<int64_t>(sizeof(float)), &lse_bytes))
    return fail(kInvalid, "lse: %" PRId64 " rows of 4 bytes overflow int64", p.rows());
  for (int32_t i = 0; i < n; ++i)
    if ((s = check_lse(Name("lse_parts", i).text, prm->lse_parts[i], lse_bytes))) return s;
  if (p.lse != nullptr && (s = check_lse("lse", p.lse, lse_bytes))) return s;

  // Overlap. o is written: it must not alias itself, and shares no byte
  // with a part (but may be o_parts[0] itself) or an lse array. lse is
  // written: it shares no byte with a part, with o, or with an lse array
  // (but may be lse_parts[0] itself). The parts may overlap each other.
  if ((s = check_no_self_overlap("o", o))) return s;
  const StridedBytes vo = tensor_view(o);
  const bool o_in_place = same_view(o, first);
  for (int32_t i = o_in_place ? 1 : 0; i < n; ++i)
    if ((s = check_disjoint("o", vo, Name("o_parts", i).text, tensor_view(parts[i])))) return s;
  for (int32_t i = 0; i < n; ++i)
    if ((s = check_disjoint("o", vo, Name("lse_parts", i).text,
                            contiguous_bytes(prm->lse_parts[i], static_cast<uint64_t>(lse_bytes)))))
      return s;
  if (p.lse != nullptr) {
    const StridedBytes vl = contiguous_bytes(p.lse, static_cast<uint64_t>(lse_bytes));
    if ((s = check_disjoint("lse", vl, "o", vo))) return s;
    for (int32_t i = 0; i < n; ++i)
      if ((s = check_disjoint("lse", vl, Name("o_parts", i).text, tensor_view(parts[i])))) return s;
    for (int32_t i = p.lse == prm->lse_parts[0] ? 1 : 0; i < n; ++i)
      if ((s = check_disjoint("lse", vl, Name("lse_parts", i).text,
                              contiguous_bytes(prm->lse_parts[i], static_cast<uint64_t>(lse_bytes)))))
        return s;
  }
  *out = p;
  return FMHA_SUCCESS;
}

fmha_status check_merge_memory_location(const MergeProblem& p, const DeviceInfo& dev,
                                        PointerKindQuery pointer_kind) {
  if (pointer_kind == nullptr || p.empty()) return FMHA_SUCCESS;
  auto check = [&](const char* name, const void* ptr) -> fmha_status {
    if (ptr == nullptr) return FMHA_SUCCESS;
    int owner = -1;
    const PointerKind kind = pointer_kind(ptr, &owner);
    if (dev.kind == FMHA_DEVICE_CUDA && kind == PointerKind::kHost)
      return fail(kInvalid, "%s=%p is host memory but the handle is CUDA device %d", name, ptr, dev.ordinal);
    if (dev.kind == FMHA_DEVICE_CUDA && kind == PointerKind::kDevice && owner != dev.ordinal)
      return fail(kInvalid, "%s=%p lives on CUDA device %d but the handle is CUDA device %d", name, ptr, owner,
                  dev.ordinal);
    if (dev.kind == FMHA_DEVICE_CPU && kind == PointerKind::kDevice)
      return fail(kInvalid, "%s=%p is CUDA device memory but the handle is CPU", name, ptr);
    return FMHA_SUCCESS;
  };
  fmha_status s;
  for (int32_t i = 0; i < p.num_parts; ++i) {
    char name[kNameBytes + 8];
    std::snprintf(name, sizeof name, "o_parts[%d].data", i);
    if ((s = check(name, p.parts[i].data))) return s;
    if ((s = check(Name("lse_parts", i).text, p.lse_parts[i]))) return s;
  }
  if ((s = check("o.data", p.o)) || (s = check("lse", p.lse))) return s;
  return FMHA_SUCCESS;
}

}  // namespace fmha
