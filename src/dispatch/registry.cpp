#include "dispatch/registry.h"

#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "backend/cpu/cpu_attention.h"
#include "core/error.h"
#if FMHA_WITH_CUDA
#include "backend/cuda/kernels.h"
#include "backend/cuda/sm80/instances.h"  // generated: cuda_sm80_tc's instantiations
#include "backend/cuda/sm90/instances.h"  // generated: cuda_sm90_ws's instantiations
#endif

namespace fmha {
namespace {

#if FMHA_WITH_CUDA
// cuda_sm80_tc's dtypes and head dims: the build's instantiation list.
#define FMHA_SM80_DTYPE_BIT_(E) | dtype_bit(E)
constexpr uint32_t kSm80Dtypes = 0u FMHA_SM80_DTYPES(FMHA_SM80_DTYPE_BIT_);
#undef FMHA_SM80_DTYPE_BIT_
#define FMHA_SM90_DTYPE_BIT_(E) | dtype_bit(E)
constexpr uint32_t kSm90Dtypes = 0u FMHA_SM90_DTYPES(FMHA_SM90_DTYPE_BIT_);
#undef FMHA_SM90_DTYPE_BIT_
static_assert(FMHA_SM90_HEAD_DIM_COUNT <= sizeof(HeadDims::only) / sizeof(int),
              "more sm90 head dims than the registry row's head-dim column holds");
static_assert(FMHA_SM80_HEAD_DIM_COUNT <= sizeof(HeadDims::only) / sizeof(int),
              "more sm80 head dims than the registry row's head-dim column holds");
#endif

// The kernel table. Lower rank runs first when several entries support a
// problem. Columns: name, summary, device, sm range, dtypes, head dims
// {max, multiple, only}, features, alignment, rank, supports, workspace, run,
// declines, the lowest sm for FP8 K/V problems, describe.
const KernelEntry kKernels[] = {
#if FMHA_WITH_CUDA
    {"cuda_sm90_ws",
     "Hopper family: wgmma + TMA, warp-specialized producer and consumer warpgroups (sm_90a); ragged, seqused_k "
     "and paged K/V (page_size a multiple of 8 dividing or divided by the key tile); descales, bias and ALiBi; "
     "FP8 q, k and v (one FP8 dtype, V transposed: v.strides[2] = 1; o F16 or BF16; dense, head_dim 128) on "
     "wgmma FP8",
     FMHA_DEVICE_CUDA, 90, 90, kSm90Dtypes, HeadDims{0, 1, {FMHA_SM90_HEAD_DIM_LIST}},
     kFeatureServing | kFeatureMixedDtypes | kFeatureDescale | kFeatureBias | kFeatureAlibi | kFeatureTransposedV,
     16, 5,
     cuda::sm90_supports, cuda::sm90_workspace_bytes, cuda::sm90_forward, cuda::sm90_declines},
    {"cuda_sm80_tc",
     "tensor-core mma.sync family, cp.async K/V pipeline, causal tile skipping; ragged, seqused_k and "
     "paged K/V (fast page_size: 16, 32, 64 or a multiple of the key tile, 64 keys at head_dim 128 and 256, "
     "128 at 32 and 64, not 16 at head_dim 32 nor any at 96: one block-table read per page and key tile; every "
     "other page_size runs, reading the table once per key); bias and ALiBi; an FP8 K/V cache (F8E4M3 or "
     "F8E5M2 under an F16/BF16 q, o in q's dtype) read as FP8 and converted in registers, with q/k/v descales, "
     "from the lowest of the build's FP8 K/V architectures (sm_89 and newer) up; cuda_generic runs it below",
     FMHA_DEVICE_CUDA, 80, 999, kSm80Dtypes, HeadDims{0, 1, {FMHA_SM80_HEAD_DIM_LIST}},
     kFeatureServing | kFeatureMixedDtypes | kFeatureDescale | kFeatureBias | kFeatureAlibi, 16, 10,
     cuda::sm80_supports, cuda::sm80_workspace_bytes, cuda::sm80_forward, nullptr, FMHA_SM80_FP8KV_SM_MIN,
     cuda::sm80_describe},
    {"cuda_generic",
     "general CUDA fallback: any head_dim <= 256, any strides, F32 too, every serving layout; FP8 inputs, "
     "descales, mixed dtypes, bias and ALiBi",
     FMHA_DEVICE_CUDA, 80, 999, kAllDtypes | kFp8Dtypes, HeadDims{256, 1, {}},
     kFeatureServing | kFeatureMixedDtypes | kFeatureDescale | kFeatureBias | kFeatureAlibi | kFeatureTransposedV, 0,
     50,
     cuda::generic_supports, cuda::generic_workspace_bytes, cuda::generic_forward},
#endif
    {"cpu_tiled",
     "exact CPU online-softmax, K/V tiles streamed, threads over (batch, head, q tile) or, decode, "
     "(batch, kv head, key split); every serving layout (packed q/k, seqused_k, paged K/V, any page size); "
     "FP8 inputs, descales, mixed dtypes, bias and ALiBi",
     FMHA_DEVICE_CPU, 0, 0, kAllDtypes | kFp8Dtypes, HeadDims{512, 1, {}}, kFeatureAll, 0, 100, nullptr,
     cpu::workspace_bytes, cpu::forward},
};

constexpr int kKernelCount = static_cast<int>(sizeof kKernels / sizeof kKernels[0]);

bool head_dim_ok(const HeadDims& h, int64_t d) {
  if (h.only[0] != 0) {
    for (int x : h.only)
      if (x == d) return true;
    return false;
  }
  return d <= h.max && d % h.multiple == 0;
}

uint32_t required_features(const Problem& p) {
  uint32_t f = 0;
  if (p.causal) f |= kFeatureCausal;
  if (p.has_window()) f |= kFeatureWindow;
  if (p.softcap != 0.f) f |= kFeatureSoftcap;
  if (p.lse != nullptr) f |= kFeatureLse;
  if (p.heads_q != p.heads_kv) f |= kFeatureGqa;
  if (p.layout.ragged_q() || p.layout.ragged_k()) f |= kFeatureRagged;
  if (p.layout.seqused_k != nullptr) f |= kFeatureSeqUsedK;
  if (p.layout.paged()) f |= kFeaturePaged;
  if (p.mixed_dtypes()) f |= kFeatureMixedDtypes;
  if (p.has_descale()) f |= kFeatureDescale;
  if (p.has_bias()) f |= kFeatureBias;
  if (p.alibi_slopes != nullptr) f |= kFeatureAlibi;
  if (p.v.stride[3] != 1 && p.v.stride[2] == 1) f |= kFeatureTransposedV;
  return f;
}

// A reason with its values, formatted into buf; or, when no one will read
// it (buf null: automatic dispatch without explain, i.e. every forward), the
// static `brief` form, so passing over a kernel formats nothing.
const char* reason(char* buf, size_t len, const char* brief, const char* format, ...) FMHA_PRINTF_LIKE(4, 5);
const char* reason(char* buf, size_t len, const char* brief, const char* format, ...) {
  if (buf == nullptr) return brief;
  va_list args;
  va_start(args, format);
  std::vsnprintf(buf, len, format, args);
  va_end(args);
  return buf;
}

const char* feature_name(uint32_t bit) {
  switch (bit) {
    case kFeatureCausal: return "causal masks";
    case kFeatureWindow: return "sliding windows";
    case kFeatureSoftcap: return "softcap";
    case kFeatureLse: return "lse output";
    case kFeatureGqa: return "GQA/MQA";
    case kFeatureRagged: return "ragged (cu_seqlens) batches";
    case kFeatureSeqUsedK: return "seqused_k";
    case kFeaturePaged: return "paged K/V (block_table)";
    case kFeatureMixedDtypes: return "mixed dtypes (q, k/v and o not one dtype)";
    case kFeatureDescale: return "descales (q_descale, k_descale, v_descale)";
    case kFeatureBias: return "an additive bias";
    case kFeatureAlibi: return "ALiBi slopes";
    case kFeatureTransposedV: return "a transposed V (v.strides[2]=1)";
    default: return "an unknown feature";
  }
}

// "does not support <feature>", formatted only when someone reads it.
const char* unsupported_feature(uint32_t bit, char* buf, size_t len) {
  return reason(buf, len, "does not support a feature of the problem", "does not support %s", feature_name(bit));
}

// The alignment reason for one operand, or null. unit: the dim whose stride
// must be 1 (3, head_dim; 2, seq, for a transposed V).
const char* misaligned(const char* name, const Operand& op, int64_t elem, int align, char* buf, size_t len,
                       int unit = 3) {
  if (op.stride[unit] != 1)
    return reason(buf, len, "needs head_dim stride 1", "needs %s.strides[%d]=1, got %" PRId64, name, unit,
                  op.stride[unit]);
  if (reinterpret_cast<uintptr_t>(op.data) % align != 0)
    return reason(buf, len, "needs aligned data", "needs %s.data %d-byte aligned", name, align);
  for (int d = 0; d < 4; ++d)
    if (d != unit && (op.stride[d] * elem) % align != 0)
      return reason(buf, len, "needs aligned strides",
                    "needs %s.strides[%d]*%d bytes to be a multiple of %d, got %" PRId64, name, d,
                    static_cast<int>(elem), align, op.stride[d]);
  return nullptr;
}

// explain's "plan:" line of the chosen entry (its describe hook).
void describe_plan(const KernelEntry& e, const Problem& p, const DeviceInfo& dev, std::string* explain) {
  char buf[320];
  if (e.describe != nullptr && e.describe(p, dev, buf, sizeof buf) != nullptr)
    *explain += std::string("plan: ") + buf + "\n";
}

}  // namespace

int kernel_count() { return kKernelCount; }

const KernelEntry& kernel_at(int index) { return kKernels[index]; }

const KernelEntry* find_kernel(const char* name) {
  for (const KernelEntry& e : kKernels)
    if (std::strcmp(e.name, name) == 0) return &e;
  return nullptr;
}

const char* why_not(const KernelEntry& e, const Problem& p, const DeviceInfo& dev, char* buf, size_t len,
                    bool format_reason) {
  // The reasons below format (into buf) only when someone will read them.
  char* const out = format_reason ? buf : nullptr;
  if (e.device != dev.kind) return e.device == FMHA_DEVICE_CPU ? "runs on CPU handles" : "runs on CUDA handles";
  if (e.device == FMHA_DEVICE_CUDA && (dev.sm < e.sm_min || dev.sm > e.sm_max))
    return reason(out, len, "needs another compute capability", "needs sm_%d..sm_%d, device is sm_%d", e.sm_min,
                  e.sm_max, dev.sm);
  if (e.device == FMHA_DEVICE_CUDA && is_fp8(p.kv_dtype) && dev.sm < e.fp8_kv_sm_min)
    return reason(out, len, "needs another compute capability for FP8 K/V",
                  "needs sm_%d or newer for FP8 K/V (k/v %s), device is sm_%d", e.fp8_kv_sm_min,
                  dtype_name(p.kv_dtype), dev.sm);
  for (const fmha_dtype t : {p.dtype, p.kv_dtype, p.o_dtype})
    if (!(e.dtypes & dtype_bit(t)))
      return reason(out, len, "does not run this dtype", "does not run dtype %s", dtype_name(t));
  if (!head_dim_ok(e.head_dims, p.head_dim))
    return reason(out, len, "does not run this head_dim", "does not run head_dim=%" PRId64, p.head_dim);
  const uint32_t missing = required_features(p) & ~e.features;
  constexpr uint32_t kServing = kFeatureRagged | kFeatureSeqUsedK | kFeaturePaged;
  if ((missing & kServing) && out == nullptr) return "does not run serving layouts";
  if (missing & kServing) {
    // Every serving feature it lacks, so a paged problem names the paging
    // (explain only: dispatch passes over it without formatting).
    char names[96] = "";
    for (uint32_t bit : {kFeatureRagged, kFeatureSeqUsedK, kFeaturePaged})
      if (missing & bit) {
        const size_t used = std::strlen(names);
        std::snprintf(names + used, sizeof names - used, "%s%s", used ? ", " : "", feature_name(bit));
      }
    return reason(out, len, "does not run serving layouts", "does not run serving layouts (this problem has %s)",
                  names);
  }
  if (missing) return unsupported_feature(missing & (~missing + 1), out, len);
  if (e.align_bytes > 0) {
    const struct {
      const char* name;
      const Operand* op;
      fmha_dtype dtype;  // each operand's own (FP8 K/V are 1-byte elements)
    } ops[] = {{"q", &p.q, p.dtype}, {"k", &p.k, p.kv_dtype}, {"v", &p.v, p.kv_dtype}, {"o", &p.o, p.o_dtype}};
    const bool v_transposed = required_features(p) & kFeatureTransposedV;
    for (const auto& x : ops)
      if (const char* r = misaligned(x.name, *x.op, dtype_size(x.dtype), e.align_bytes, out, len,
                                     v_transposed && x.op == &p.v ? 2 : 3))
        return r;
  }
  if (e.supports) return e.supports(p, dev);
  return nullptr;
}

fmha_status select_kernel(const Problem& p, const DeviceInfo& dev, const KernelEntry** out,
                          std::string* explain) {
  char buf[256];
  *out = nullptr;
  if (p.forced_kernel != nullptr) {
    const KernelEntry* e = find_kernel(p.forced_kernel);
    if (e == nullptr)
      return fail(FMHA_ERROR_INVALID_ARGUMENT, "kernel=\"%s\" is not a registered kernel",
                  p.forced_kernel);
    if (const char* reason = why_not(*e, p, dev, buf, sizeof buf)) {
      if (explain) *explain += std::string("forced kernel ") + e->name + " cannot run: " + reason + "\n";
      return fail(FMHA_ERROR_UNSUPPORTED, "kernel=\"%s\" cannot run this problem: %s", e->name, reason);
    }
    if (explain) *explain += std::string("chosen: ") + e->name + " (forced by params.kernel)\n";
    if (explain) describe_plan(*e, p, dev, explain);
    *out = e;
    return FMHA_SUCCESS;
  }
  // Walk in rank order (the table is small; a selection pass each time).
  bool used[kKernelCount] = {};
  for (int n = 0; n < kKernelCount; ++n) {
    int best = -1;
    for (int i = 0; i < kKernelCount; ++i)
      if (!used[i] && (best < 0 || kKernels[i].rank < kKernels[best].rank)) best = i;
    used[best] = true;
    const KernelEntry& e = kKernels[best];
    if (e.device != dev.kind) continue;  // other device's kernels are not candidates
    // The reason is formatted only for explain: a forward formats nothing.
    if (const char* reason = why_not(e, p, dev, buf, sizeof buf, explain != nullptr)) {
      if (explain) *explain += std::string("passed over ") + e.name + ": " + reason + "\n";
      continue;
    }
    if (const char* reason = e.declines ? e.declines(p, dev) : nullptr) {
      if (explain) *explain += std::string("passed over ") + e.name + " (it could run): " + reason + "\n";
      continue;
    }
    if (explain) *explain += std::string("chosen: ") + e.name + " (" + e.summary + ")\n";
    if (explain) describe_plan(e, p, dev, explain);
    *out = &e;
    return FMHA_SUCCESS;
  }
  if (explain) *explain += "no registered kernel supports this problem\n";
  return fail(FMHA_ERROR_UNSUPPORTED,
              "no kernel supports dtype=%s head_dim=%" PRId64 " on this %s device (see fmha_forward_explain)",
              dtype_name(p.dtype), p.head_dim, dev.kind == FMHA_DEVICE_CUDA ? "CUDA" : "CPU");
}

}  // namespace fmha
