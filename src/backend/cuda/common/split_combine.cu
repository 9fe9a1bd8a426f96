// The split-KV combine (split_combine.h), compiled in this translation unit
// only, for every output element type.
//
// It is the merge of the seed's section 4 (the rescale of two running
// states to a common max, alpha = e^(m_old - m_new), l = alpha l_old +
// beta l~, o = alpha o_old + beta o~, O = o / l) applied to S states at once:
//
//   M = max_s m_s,   a_s = e^(m_s - M),
//   L = sum_s a_s l_s,   O = (sum_s a_s o_s) / L,   lse = M + ln L.
//
// Splits that saw no key of a row have m_s = -inf, hence a_s = 0 (M is
// finite), and drop out: a split of weight a_s = 0 is skipped in the O sum,
// so whatever its o_s holds never matters. A row that no split saw (M =
// -inf) exponentiates against 0 instead, so no -inf - -inf arises: L = 0,
// O = 0 and lse = -inf. A NaN logit made some l_s NaN: L, O and lse are NaN
// (fmha.h). The differences m_s - M are taken in natural units, so logits of
// 1e4 lose nothing to the combine.
//
// One warp per row, or (few rows over many splits: a decode step's
// combine, B=1 GQA 32/8 is 32 rows over 64 splits) kWideWarps warps per
// row, each summing a contiguous quarter of the splits, their sums added in
// warp order through shared memory (a row then waits for one quarter of
// the L2 round trips). Lane t reads the states of splits t + 32 k, the
// warp reduces M and L (every warp of a row alike), and the weights a_s
// stay in the lanes' registers (shuffled out in turn); lane t accumulates
// dims t + 32 c, c < kC, over its splits in split order. kC = ceil(head_dim / 32) is a
// template parameter (1, 2, 3, 4 or 8) so that the accumulation loop has no
// branches: its loads are unconditional (dims past head_dim read the row's
// last element and are never stored), so the unrolled iterations keep the
// loads of several splits (kSplitsInFlight) in flight instead of waiting out
// one L2 round trip per split. Every sum has a fixed order (per lane in split order, then a
// fixed butterfly; the o sums in split order), so the result does not depend
// on the launch.
#include "backend/cuda/common/split_combine.h"

#include <atomic>
#include <type_traits>

#include "backend/cuda/common/device_math.cuh"
#include "backend/cuda/common/env_choice.h"
#include "core/error.h"

namespace fmha::cuda {
namespace {

constexpr int kCombineWarps = 4;  // warps per block: rows per block, or one row (kWideWarps)
constexpr int kWideWarps = kCombineWarps;
// A row takes kWideWarps warps when it has at least kWideMinSplits splits
// (4 or more per warp) and there are at most kWideMaxRows rows (a few
// waves of blocks; more rows fill the device one warp per row).
constexpr int kWideMinSplits = 4 * kWideWarps;
constexpr int64_t kWideMaxRows = 2048;

// Whether wide rows are used: yes, unless the environment variable
// FMHA_COMBINE_WIDE is 0 (read once; experiments: the one-warp rows timed
// against the wide ones in one build).
bool wide_rows_allowed() {
  static const bool allowed = env_int("FMHA_COMBINE_WIDE", 1) != 0;
  return allowed;
}
constexpr int kSplitsPerLane = kCombineMaxSplits / kWarpSize;
constexpr int kDimsPerLane = kCombineMaxHeadDim / kWarpSize;
constexpr int64_t kMaxBlocks = int64_t{1} << 20;  // a grid-stride loop takes the rest
static_assert(kCombineMaxSplits % kWarpSize == 0 && kCombineMaxHeadDim % kWarpSize == 0, "whole lanes");

// warps_per_row: 1 or kWideWarps (block-uniform).
template <class T, int kC>
__global__ void __launch_bounds__(kCombineWarps * kWarpSize)
    split_combine_kernel(const __grid_constant__ SplitCombineParams p, int warps_per_row) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // A programmatic dependent launch (SplitCombineParams::dependent_launch)
  // may start before the forward kernel has written its partials; an
  // ordinary launch returns at once.
  cudaGridDependencySynchronize();
#endif
  // Splits whose o loads are issued before the first is used: a decode
  // step's combine is a few rows (B=1 GQA 32/8: 32) over up to 64 splits,
  // bound by L2 round trips, not bandwidth (one split at a time: ~25
  // round trips for 49 splits, a few us; 16 at a time: 5). Multiples of 4.
  constexpr int kSplitsInFlight = kC <= 4 ? 16 : 8;
  static_assert(kSplitsInFlight % 4 == 0, "the tail below takes 4, then 1 at a time");
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  // The block's rows and this warp's row; with several warps per row its
  // part g of the splits: [lo, hi).
  const int rows_per_block = kCombineWarps / warps_per_row;
  const int g = warp % warps_per_row;
  const int lo = static_cast<int>(static_cast<int64_t>(p.splits) * g / warps_per_row);
  const int hi = static_cast<int>(static_cast<int64_t>(p.splits) * (g + 1) / warps_per_row);
  __shared__ float part_acc[kWideWarps][kC][kWarpSize];  // the warps' sums of a wide row
  const int D = p.head_dim;
  const int64_t head_slots = p.heads_q / p.pack;
  const int64_t split_stride = p.rows * D;  // floats between splits of o_s
  // The lane's dims, clamped into the row for the unconditional loads.
  int dim[kC];
#pragma unroll
  for (int c = 0; c < kC; ++c) dim[c] = min(lane + kWarpSize * c, D - 1);

  // Wide rows (one per block) keep the loop block-uniform: its barriers.
  for (int64_t x = static_cast<int64_t>(blockIdx.x) * rows_per_block + warp / warps_per_row; x < p.rows;
       x += static_cast<int64_t>(gridDim.x) * rows_per_block) {
    // Row x is query i of head h in batch b (pack-interleaved order).
    const int64_t t = x / p.pack;
    const int64_t i = t % p.seq_q;
    const int64_t u = t / p.seq_q;
    const int64_t h = (u % head_slots) * p.pack + x % p.pack;
    const int64_t b = u / head_slots;
    int64_t o_row = b * p.o_stride[0] + i * p.o_stride[2];
    int64_t lse_row = (b * p.heads_q + h) * p.seq_q + i;
    if (p.layout.any()) {
      // Sequence b's own extent (clamped): rows past Nq(b) do not exist.
      // Warp-uniform (one row per warp), so no lane is left out of the
      // shuffles below; block-uniform for a wide row.
      const SeqExtent e = seq_extent(p.layout, b);
      if (i >= e.len_q) continue;
      if (p.layout.ragged_q()) {
        o_row = (e.q_begin + i) * p.o_stride[2];
        lse_row = h * p.layout.total_q + e.q_begin + i;
      }
    }
    T* out = static_cast<T*>(p.o) + o_row + h * p.o_stride[1];
    float* lse = p.lse != nullptr ? p.lse + lse_row : nullptr;

    // The row states of the lane's splits.
    float m[kSplitsPerLane], l[kSplitsPerLane];
#pragma unroll
    for (int k = 0; k < kSplitsPerLane; ++k) {
      const int s = lane + kWarpSize * k;
      const bool any = s < p.splits;
      m[k] = any ? p.part.m[s * p.rows + x] : kNegInf;
      l[k] = any ? p.part.l[s * p.rows + x] : 0.f;
    }

    // M = max_s m_s.
    float mx = m[0];
#pragma unroll
    for (int k = 1; k < kSplitsPerLane; ++k) mx = fmaxf(mx, m[k]);
    mx = warp_max(mx);
    const float m_use = mx == kNegInf ? 0.f : mx;  // no split saw a key: a_s = 0

    // a_s = e^(m_s - M) (0 for a split without keys), L = sum_s a_s l_s.
    float a[kSplitsPerLane];
    float sum = 0.f;
#pragma unroll
    for (int k = 0; k < kSplitsPerLane; ++k) {
      a[k] = expf(m[k] - m_use);
      sum = fmaf(a[k], l[k], sum);
    }
    sum = warp_sum(sum);

    // O = sum_s a_s o_s / L, splits in order (this warp's: lo .. hi - 1).
    float acc[kC];
#pragma unroll
    for (int c = 0; c < kC; ++c) acc[c] = 0.f;
    const float* src = p.part.o + x * D;
#pragma unroll
    for (int k = 0; k < kSplitsPerLane; ++k) {
      const int s0 = kWarpSize * k;
      if (s0 >= hi) break;
      if (s0 + kWarpSize <= lo) continue;
      const int n = hi - s0 < kWarpSize ? hi - s0 : kWarpSize;  // splits s0 + j, j < n, and j >= j0
      const int j0 = lo > s0 ? lo - s0 : 0;
      const float* base = src + s0 * split_stride;
      // Splits j .. j + kB - 1: every o load first, then the sums in split
      // order (in-order issue would otherwise stall each pass's FMAs on its
      // own loads, ~2 splits in flight whatever the unroll).
      auto batch = [&](auto kb, int j) {
        constexpr int kB = decltype(kb)::value;
        float v[kB][kC];
#pragma unroll
        for (int i = 0; i < kB; ++i)
#pragma unroll
          for (int c = 0; c < kC; ++c) v[i][c] = base[(j + i) * split_stride + dim[c]];
#pragma unroll
        for (int i = 0; i < kB; ++i) {
          const float w = __shfl_sync(0xffffffffu, a[k], j + i);
#pragma unroll
          for (int c = 0; c < kC; ++c) acc[c] = w != 0.f ? fmaf(w, v[i][c], acc[c]) : acc[c];
        }
      };
      int j = j0;
      for (; j + kSplitsInFlight <= n; j += kSplitsInFlight) batch(std::integral_constant<int, kSplitsInFlight>{}, j);
      if (j + 4 <= n) {
        batch(std::integral_constant<int, 4>{}, j);
        j += 4;
      }
      for (; j < n; ++j) batch(std::integral_constant<int, 1>{}, j);
    }

    // A wide row: the warps' sums added in warp order by warp 0 of the row,
    // which stores it.
    if (warps_per_row > 1) {
#pragma unroll
      for (int c = 0; c < kC; ++c) part_acc[g][c][lane] = acc[c];
      __syncthreads();
      if (g == 0) {
        for (int w = 1; w < warps_per_row; ++w)
#pragma unroll
          for (int c = 0; c < kC; ++c) acc[c] += part_acc[w][c][lane];
      }
      __syncthreads();  // the next row's sums go to the same place
      if (g != 0) continue;
    }

    // sum >= 1 when a split saw a key (the split at M has l >= 1), 0 when
    // none did, NaN after a NaN logit.
    const float inv = sum == 0.f ? 0.f : 1.f / sum;
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      const int d = lane + kWarpSize * c;
      if (d < D) out[d * p.o_stride[3]] = from_float<T>(acc[c] * inv);
    }
    if (lse != nullptr && lane == 0) *lse = sum == 0.f ? kNegInf : mx + logf(sum);
  }
}

// Whether `kernel`'s code for the current device waits for its primary
// grid: only code compiled for sm_90 or newer (PTX version >= 90, what
// __CUDA_ARCH__ saw) calls cudaGridDependencySynchronize. A build without
// sm_90 code running on an sm_90 device (compute_80 PTX, JIT-compiled)
// must not launch it as a dependent: it would read partials still being
// written. Asked once per kernel (the sm_90 devices of a process run the
// same code of it).
template <class Kernel>
bool waits_for_primary(Kernel kernel) {
  static std::atomic<int> known{-1};
  int v = known.load(std::memory_order_relaxed);
  if (v < 0) {
    cudaFuncAttributes attr{};
    v = cudaFuncGetAttributes(&attr, kernel) == cudaSuccess && attr.ptxVersion >= 90 ? 1 : 0;
    if (v == 0) cudaGetLastError();  // a failed query is "no", not a launch error
    known.store(v, std::memory_order_relaxed);
  }
  return v == 1;
}

template <class T, int kC>
cudaError_t launch_combine(cudaLaunchConfig_t config, bool dependent, const SplitCombineParams& p,
                           int warps_per_row) {
  cudaLaunchAttribute pdl[1];
  pdl[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  pdl[0].val.programmaticStreamSerializationAllowed = 1;
  if (dependent && waits_for_primary(split_combine_kernel<T, kC>)) {
    config.attrs = pdl;
    config.numAttrs = 1;
  }
  return cudaLaunchKernelEx(&config, split_combine_kernel<T, kC>, p, warps_per_row);
}

}  // namespace

template <class T>
fmha_status launch_split_combine(const SplitCombineParams& p, cudaStream_t stream) {
  if (p.splits < 2 || p.splits > kCombineMaxSplits || p.head_dim < 1 || p.head_dim > kCombineMaxHeadDim ||
      p.pack < 1 || p.heads_q % p.pack != 0)
    return fail(FMHA_ERROR_INTERNAL, "split-KV combine: splits=%d head_dim=%d pack=%lld out of range", p.splits,
                p.head_dim, static_cast<long long>(p.pack));
  if (p.rows <= 0) return FMHA_SUCCESS;
  const int warps_per_row =
      p.splits >= kWideMinSplits && p.rows <= kWideMaxRows && wide_rows_allowed() ? kWideWarps : 1;
  const int64_t rows_per_block = kCombineWarps / warps_per_row;
  const int64_t want = (p.rows + rows_per_block - 1) / rows_per_block;
  const unsigned blocks = static_cast<unsigned>(want < kMaxBlocks ? want : kMaxBlocks);
  const int dims_per_lane = (p.head_dim + kWarpSize - 1) / kWarpSize;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(kCombineWarps * kWarpSize);
  config.stream = stream;
  const bool dep = p.dependent_launch;
  static_assert(kDimsPerLane == 8, "buckets below cover head_dim <= 256");
  cudaError_t err;
  switch (dims_per_lane) {
    case 1: err = launch_combine<T, 1>(config, dep, p, warps_per_row); break;
    case 2: err = launch_combine<T, 2>(config, dep, p, warps_per_row); break;
    case 3: err = launch_combine<T, 3>(config, dep, p, warps_per_row); break;
    case 4: err = launch_combine<T, 4>(config, dep, p, warps_per_row); break;
    default: err = launch_combine<T, 8>(config, dep, p, warps_per_row); break;
  }
  if (err != cudaSuccess) {
    cudaGetLastError();  // the runtime records a failed launch as its last error too
    return fail(FMHA_ERROR_DEVICE, "split-KV combine launch failed: %s", cudaGetErrorString(err));
  }
  return FMHA_SUCCESS;
}

template fmha_status launch_split_combine<__half>(const SplitCombineParams&, cudaStream_t);
template fmha_status launch_split_combine<__nv_bfloat16>(const SplitCombineParams&, cudaStream_t);
template fmha_status launch_split_combine<float>(const SplitCombineParams&, cudaStream_t);

}  // namespace fmha::cuda
