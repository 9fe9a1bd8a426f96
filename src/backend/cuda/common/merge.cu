// The merge kernel (merge.h). For a row with parts' lse values lse_k:
//
//   M = max_k lse_k,   w_k = e^(lse_k - M),   S = sum_k w_k,
//   lse = M + ln S,    o = sum_k (w_k / S) o_k
//
// in FP32: the section-4 rescale of the seed applied to normalized parts
// (each o_k is already divided by its own sum, which lse_k carries). A part
// with lse_k = -inf has w_k = 0 and is skipped, whatever its o_k holds; a
// row whose parts are all -inf gets o = 0 and lse = -inf; a NaN lse_k (or
// +inf, where e^(inf - inf) is NaN) makes the row's o and lse NaN.
//
// One warp per row, no shared memory: lane t holds lse_t and lse_(t+32),
// the warp reduces M and S, and each lane then accumulates dims t + 32 c
// over the parts in order, their weights shuffled from the lane that holds
// them. Any strides and any of the three dtypes for the parts and for o
// (template parameters TP and TO). In place is safe: lane t reads element d
// of every part before it writes element d of o, and lane 0 writes the lse
// after the warp has read every lse_k.
#include "backend/cuda/common/merge.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "backend/cuda/common/device_math.cuh"
#include "backend/cuda/cuda_device.h"
#include "core/error.h"

namespace fmha::cuda {
namespace {

constexpr int kMergeWarps = 4;  // rows per block
constexpr int kPartsPerLane = kMergeMaxParts / kWarpSize;
constexpr int64_t kMaxBlocks = int64_t{1} << 20;  // a grid-stride loop takes the rest
static_assert(kMergeMaxParts % kWarpSize == 0, "whole lanes");

struct MergePart {
  const void* o;
  const float* lse;
  int64_t stride[4];
};

// One launch: up to kMergeMaxParts parts. With `carry`, part 0 is the
// running result of the previous round: o itself (element type TO) and lse.
struct MergeLaunch {
  MergePart part[kMergeMaxParts];
  void* o;
  int64_t o_stride[4];
  float* lse;
  int64_t heads;
  int64_t seq;
  int64_t rows;
  int64_t head_dim;
  int num_parts;
  bool carry;
};
static_assert(sizeof(MergeLaunch) <= 4096, "kernel parameters fit the classic 4 KiB limit");

template <class TP, class TO>
__global__ void __launch_bounds__(kMergeWarps * kWarpSize) merge_kernel(const __grid_constant__ MergeLaunch p) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int n = p.num_parts;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kMergeWarps + warp; row < p.rows;
       row += static_cast<int64_t>(gridDim.x) * kMergeWarps) {
    const int64_t i = row % p.seq;
    const int64_t h = row / p.seq % p.heads;
    const int64_t b = row / p.seq / p.heads;

    float x[kPartsPerLane];
    float mx = kNegInf;
    bool nan = false;
#pragma unroll
    for (int k = 0; k < kPartsPerLane; ++k) {
      const int part = lane + kWarpSize * k;
      x[k] = part < n ? p.part[part].lse[row] : kNegInf;
      nan |= isnan(x[k]);
      mx = fmaxf(mx, x[k]);
    }
    nan = __any_sync(0xffffffffu, nan);
    mx = warp_max(mx);
    TO* out = static_cast<TO*>(p.o) + b * p.o_stride[0] + h * p.o_stride[1] + i * p.o_stride[2];
    if (nan || isinf(mx)) {
      // NaN (a NaN or +inf lse_k), or no part saw a key.
      const bool empty = !nan && mx < 0.f;
      const float fill = empty ? 0.f : __int_as_float(0x7fc00000);
      for (int64_t d = lane; d < p.head_dim; d += kWarpSize) out[d * p.o_stride[3]] = from_float<TO>(fill);
      if (p.lse != nullptr && lane == 0) p.lse[row] = empty ? kNegInf : fill;
      continue;
    }
    float w[kPartsPerLane];
    float sum = 0.f;
#pragma unroll
    for (int k = 0; k < kPartsPerLane; ++k) {
      w[k] = expf(x[k] - mx);  // 0 for -inf and for lanes past n
      sum += w[k];
    }
    sum = warp_sum(sum);
    const float inv = 1.f / sum;  // sum >= 1: the part at the max has w = 1

    // The column loop runs warp-uniformly (the shuffle below needs every
    // lane, and head_dim need not be a multiple of 32): lanes past head_dim
    // take part in the shuffles and skip the loads and the store.
    for (int64_t d0 = 0; d0 < p.head_dim; d0 += kWarpSize) {
      const int64_t d = d0 + lane;
      const bool active = d < p.head_dim;
      float acc = 0.f;
      for (int part = 0; part < n; ++part) {
        static_assert(kPartsPerLane == 2, "the select below reads w[0] or w[1]");
        const float wk = __shfl_sync(0xffffffffu, part < kWarpSize ? w[0] : w[1], part % kWarpSize);
        if (wk == 0.f || !active) continue;  // contributes nothing, whatever o_k holds
        const MergePart& q = p.part[part];
        const int64_t off = b * q.stride[0] + h * q.stride[1] + i * q.stride[2] + d * q.stride[3];
        const float v = p.carry && part == 0 ? to_float(static_cast<const TO*>(q.o)[off])
                                             : to_float(static_cast<const TP*>(q.o)[off]);
        acc = fmaf(wk * inv, v, acc);
      }
      if (active) out[d * p.o_stride[3]] = from_float<TO>(acc);
    }
    if (p.lse != nullptr && lane == 0) p.lse[row] = mx + logf(sum);
  }
}

template <class TP, class TO>
fmha_status launch_rounds(const MergeProblem& p, cudaStream_t stream) {
  MergeLaunch L{};
  L.o = p.o;
  std::copy(p.o_stride, p.o_stride + 4, L.o_stride);
  L.lse = p.lse;
  L.heads = p.heads;
  L.seq = p.seq;
  L.rows = p.rows();
  L.head_dim = p.head_dim;
  const int64_t want = (L.rows + kMergeWarps - 1) / kMergeWarps;
  const dim3 grid(static_cast<unsigned>(want < kMaxBlocks ? want : kMaxBlocks)), block(kMergeWarps * kWarpSize);
  for (int next = 0; next < p.num_parts;) {
    L.carry = next > 0;
    int slot = 0;
    if (L.carry) L.part[slot++] = MergePart{p.o, p.lse, {p.o_stride[0], p.o_stride[1], p.o_stride[2], p.o_stride[3]}};
    for (; slot < kMergeMaxParts && next < p.num_parts; ++slot, ++next) {
      const fmha_tensor& t = p.parts[next];
      L.part[slot] = MergePart{t.data, p.lse_parts[next], {t.strides[0], t.strides[1], t.strides[2], t.strides[3]}};
    }
    L.num_parts = slot;
    merge_kernel<TP, TO><<<grid, block, 0, stream>>>(L);
    const fmha_status s = check_launch("merge");
    if (s != FMHA_SUCCESS) return s;
  }
  return FMHA_SUCCESS;
}

template <class TP>
fmha_status launch_for_parts(const MergeProblem& p, cudaStream_t stream) {
  switch (p.o_dtype) {
    case FMHA_DTYPE_F16: return launch_rounds<TP, __half>(p, stream);
    case FMHA_DTYPE_BF16: return launch_rounds<TP, __nv_bfloat16>(p, stream);
    case FMHA_DTYPE_F32: return launch_rounds<TP, float>(p, stream);
    default: return fail(FMHA_ERROR_INTERNAL, "merge: o dtype %d", static_cast<int>(p.o_dtype));
  }
}

}  // namespace

fmha_status launch_merge(const MergeProblem& p, void* stream) {
  if (p.empty()) return FMHA_SUCCESS;
  if (p.num_parts > kMergeMaxParts && p.lse == nullptr)
    return fail(FMHA_ERROR_UNSUPPORTED,
                "num_parts=%d: a CUDA merge of more than %d parts runs in rounds that carry the running lse "
                "in the result's lse, which is NULL; pass lse",
                p.num_parts, kMergeMaxParts);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (p.parts_dtype) {
    case FMHA_DTYPE_F16: return launch_for_parts<__half>(p, s);
    case FMHA_DTYPE_BF16: return launch_for_parts<__nv_bfloat16>(p, s);
    case FMHA_DTYPE_F32: return launch_for_parts<float>(p, s);
    default: return fail(FMHA_ERROR_INTERNAL, "merge: parts dtype %d", static_cast<int>(p.parts_dtype));
  }
}

}  // namespace fmha::cuda
