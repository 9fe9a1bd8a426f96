// A warp-specialized wgmma + TMA GEMM, C[M][N] = A[M][K] B, FP32 accumulation,
// 16-bit C. It exists to prove fmha's Hopper primitives (wgmma.cuh, tma.h,
// barrier.cuh) before attention uses them: the GPU test checks it against a
// float64 reference (both B layouts, many ring wraps) and bench_gemm_sm90
// times it against torch.matmul.
//
// B is either K-major ([N][K] row-major: wgmma B without transpose, like K
// in Q K^T) or N-major ([K][N] row-major: transposed, like V in P V).
//
// CTA: 128 x 256 tile of C, BlockK = 64 (one 128-byte panel), kStages
// shared-memory stages. Warpgroup 0 is the producer (one thread issues the
// copies); warpgroups 1 and 2 each own 64 rows and run m64n256k16 wgmma.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/sm90/barrier.cuh"
#include "backend/cuda/sm90/tma.h"
#include "backend/cuda/sm90/tma.cuh"
#include "backend/cuda/sm90/wgmma.cuh"

namespace fmha_test::sm90 {

namespace hw = fmha::cuda::sm90;

struct GemmShape {
  static constexpr int kBlockM = 128, kBlockN = 256, kBlockK = 64, kStages = 4;
  static constexpr int kThreads = 384;
  static constexpr int kABytes = kBlockM * kBlockK * 2;  // one panel of 128 rows
  static constexpr int kBBytes = kBlockN * kBlockK * 2;  // K-major: one panel of 256 rows; N-major: 4 panels of 64
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kSmemBytes = kStages * kStageBytes + 1024 /* alignment */ + 256 /* barriers */;
  static constexpr int kGroupM = 16;  // M tiles per raster group (L2 reuse of B)
};

template <class T, bool kBNMajor>
__global__ void __launch_bounds__(GemmShape::kThreads, 1)
    gemm_kernel(const __grid_constant__ CUtensorMap a_map, const __grid_constant__ CUtensorMap b_map, T* c,
                int m, int n, int k) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = GemmShape;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem =
      reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + S::kStages * S::kStageBytes);
  uint64_t* empty = full + S::kStages;

  // Raster: groups of kGroupM M tiles walk N together, so consecutive CTAs
  // share B tiles in L2.
  const int tiles_m = (m + S::kBlockM - 1) / S::kBlockM;
  const int tiles_n = (n + S::kBlockN - 1) / S::kBlockN;
  const int per_group = S::kGroupM * tiles_n;
  const int group = blockIdx.x / per_group;
  const int first_m = group * S::kGroupM;
  const int group_m = min(tiles_m - first_m, S::kGroupM);
  const int in_group = blockIdx.x % per_group;
  const int tile_m = first_m + in_group % group_m;
  const int tile_n = in_group / group_m;
  const int k_tiles = (k + S::kBlockK - 1) / S::kBlockK;

  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < S::kStages; ++s) {
      hw::mbar_init(&full[s], 1);
      hw::mbar_init(&empty[s], 2);  // one arrival per consumer warpgroup
    }
    hw::mbar_init_fence();
  }
  __syncthreads();

  if (wg == 0) {
    hw::regs_release<40>();
    if (threadIdx.x == 0) {
      hw::tma_prefetch(&a_map);
      hw::tma_prefetch(&b_map);
      hw::PipeState<S::kStages> st;
      for (int kt = 0; kt < k_tiles; ++kt, st.advance()) {
        hw::mbar_wait(&empty[st.stage], st.phase ^ 1u);  // a fresh barrier passes parity 1
        unsigned char* sa = smem + st.stage * S::kStageBytes;
        unsigned char* sb = sa + S::kABytes;
        hw::mbar_arrive_expect_tx(&full[st.stage], S::kStageBytes);
        hw::tma_load_panel(sa, &a_map, kt * S::kBlockK, tile_m * S::kBlockM, 0, 0, &full[st.stage]);
        if constexpr (kBNMajor) {
          for (int p = 0; p < S::kBlockN / 64; ++p)
            hw::tma_load_panel(sb + p * S::kBlockK * 128, &b_map, tile_n * S::kBlockN + p * 64, kt * S::kBlockK, 0,
                               0, &full[st.stage]);
        } else {
          hw::tma_load_panel(sb, &b_map, kt * S::kBlockK, tile_n * S::kBlockN, 0, 0, &full[st.stage]);
        }
      }
    }
    return;
  }

  hw::regs_acquire<232>();
  const int cw = wg - 1;  // consumer warpgroup: rows 64 * cw of the tile
  float acc[S::kBlockN / 2];
#pragma unroll
  for (int i = 0; i < S::kBlockN / 2; ++i) acc[i] = 0.f;

  const uint32_t smem_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  hw::PipeState<S::kStages> st;
  int prev_stage = -1;
  for (int kt = 0; kt < k_tiles; ++kt, st.advance()) {
    hw::mbar_wait(&full[st.stage], st.phase);
    const uint32_t sa = smem_base + st.stage * S::kStageBytes + cw * 64 * 128;
    const uint32_t sb = smem_base + st.stage * S::kStageBytes + S::kABytes;
    const uint64_t da = hw::smem_desc(sa, 0, 1024);
    const uint64_t db = kBNMajor ? hw::smem_desc(sb, S::kBlockK * 128, 1024) : hw::smem_desc(sb, 0, 1024);
    hw::fence_operands(acc);
    hw::wgmma_fence();
#pragma unroll
    for (int s = 0; s < S::kBlockK / 16; ++s) {
      const uint64_t b = kBNMajor ? hw::desc_advance(db, s * 16 * 128) : hw::desc_advance(db, s * 32);
      hw::MmaSs<T, S::kBlockN, 0, kBNMajor ? 1 : 0>::run(acc, hw::desc_advance(da, s * 32), b, 1u);
    }
    hw::wgmma_commit();
    hw::wgmma_wait<1>();  // the previous k tile's group is done: release its stage
    hw::fence_operands(acc);
    if (prev_stage >= 0 && threadIdx.x % 128 == 0) hw::mbar_arrive(&empty[prev_stage]);
    prev_stage = st.stage;
  }
  hw::wgmma_wait<0>();
  hw::fence_operands(acc);

  // Accumulator layout: warp w of the warpgroup holds rows 16w + lane/4
  // (+8); element 4j + e is column 8j + 2(lane%4) + e%2.
  const int lane = threadIdx.x % 32;
  const int warp = (threadIdx.x % 128) / 32;
  const int row0 = tile_m * S::kBlockM + cw * 64 + warp * 16 + lane / 4;
  const int col0 = tile_n * S::kBlockN + 2 * (lane % 4);
#pragma unroll
  for (int j = 0; j < S::kBlockN / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row0 + 8 * h;
      const int col = col0 + 8 * j;
      if (r >= m) continue;
      T* dst = c + static_cast<int64_t>(r) * n + col;
      const float x = acc[4 * j + 2 * h], y = acc[4 * j + 2 * h + 1];
      if (col + 1 < n && n % 2 == 0) {
        if constexpr (sizeof(T) == 2 && std::is_same_v<T, __half>)
          *reinterpret_cast<__half2*>(dst) = __floats2half2_rn(x, y);
        else
          *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(x, y);
      } else {
        if (col < n) dst[0] = T(x);
        if (col + 1 < n) dst[1] = T(y);
      }
    }
#endif
}

// Launches C = A B. a: [m][k] row-major; b: [n][k] (K-major) or [k][n]
// (N-major) row-major; c: [m][n]. Returns the CUDA error of the launch.
template <class T, bool kBNMajor>
cudaError_t gemm(const T* a, const T* b, T* c, int m, int n, int k, cudaStream_t stream) {
  using S = GemmShape;
  CUtensorMap a_map, b_map;
  hw::Tensor4d ta;
  ta.data = a;
  ta.dims[0] = k;
  ta.dims[1] = m;
  ta.strides[0] = k;
  ta.strides[1] = static_cast<int64_t>(k) * m;
  ta.strides[2] = ta.strides[1];
  ta.bf16 = std::is_same_v<T, __nv_bfloat16>;
  hw::Tensor4d tb = ta;
  tb.data = b;
  if (kBNMajor) {
    tb.dims[0] = n;
    tb.dims[1] = k;
    tb.strides[0] = n;
  } else {
    tb.dims[0] = k;
    tb.dims[1] = n;
    tb.strides[0] = k;
  }
  tb.strides[1] = tb.strides[2] = static_cast<int64_t>(k) * n;
  if (hw::make_panel_map(ta, S::kBlockM, &a_map) != FMHA_SUCCESS) return cudaErrorInvalidValue;
  if (hw::make_panel_map(tb, kBNMajor ? S::kBlockK : S::kBlockN, &b_map) != FMHA_SUCCESS)
    return cudaErrorInvalidValue;
  const auto kernel = gemm_kernel<T, kBNMajor>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, S::kSmemBytes);
  if (e != cudaSuccess) return e;
  const int tiles = ((m + S::kBlockM - 1) / S::kBlockM) * ((n + S::kBlockN - 1) / S::kBlockN);
  kernel<<<tiles, S::kThreads, S::kSmemBytes, stream>>>(a_map, b_map, c, m, n, k);
  return cudaGetLastError();
}

}  // namespace fmha_test::sm90
