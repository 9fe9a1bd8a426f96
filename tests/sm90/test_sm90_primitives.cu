// Hopper primitives (src/backend/cuda/sm90): wgmma descriptors for both
// operand majors, the 128-byte swizzle the copy engine writes, mbarrier
// parity over many ring wraps, and the register-A (RS) fragment layout
// that P V relies on. Each check compares with a float64 reference on fresh
// random data, outputs poisoned first. Skips (77) without a compute
// capability 9.0 GPU: sm_90a code runs nowhere else.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <type_traits>
#include <vector>

#include "sm90/sm90_gemm.cuh"

namespace {

namespace hw = fmha::cuda::sm90;

#define CUDA_OK(x) REQUIRE_EQ(cudaError_t(x), cudaSuccess)

template <class T>
float to_float(T x) {
  if constexpr (std::is_same_v<T, __half>)
    return __half2float(x);
  else
    return __bfloat162float(x);
}

template <class T>
std::vector<T> random_vector(size_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<T> v(n);
  for (auto& x : v) x = T(u(g));
  return v;
}

template <class T>
struct DeviceBuffer {
  T* p = nullptr;
  explicit DeviceBuffer(size_t n) { REQUIRE_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(p); }
};

// ||out - ref|| / ||ref|| of C = A B against float64, and every element written
// (the output was poisoned with NaN bytes).
template <class T>
double gemm_error(const std::vector<T>& a, const std::vector<T>& b, const std::vector<T>& c, int m, int n, int k,
                  bool b_nmajor, bool* all_written) {
  double num = 0, den = 0;
  *all_written = true;
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double ref = 0;
      for (int l = 0; l < k; ++l) {
        const double bv = b_nmajor ? to_float(b[static_cast<size_t>(l) * n + j]) : to_float(b[static_cast<size_t>(j) * k + l]);
        ref += static_cast<double>(to_float(a[static_cast<size_t>(i) * k + l])) * bv;
      }
      const double out = to_float(c[static_cast<size_t>(i) * n + j]);
      if (!std::isfinite(out)) *all_written = false;
      num += (out - ref) * (out - ref);
      den += ref * ref;
    }
  return std::sqrt(num / den);
}

template <class T, bool kBNMajor>
void check_gemm(int m, int n, int k, uint64_t seed) {
  CAPTURE(m);
  CAPTURE(n);
  CAPTURE(k);
  CAPTURE(kBNMajor);
  const auto a = random_vector<T>(static_cast<size_t>(m) * k, seed);
  const auto b = random_vector<T>(static_cast<size_t>(n) * k, seed + 1);
  DeviceBuffer<T> da(a.size()), db(b.size()), dc(static_cast<size_t>(m) * n);
  CUDA_OK(cudaMemcpy(da.p, a.data(), a.size() * sizeof(T), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(db.p, b.data(), b.size() * sizeof(T), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(dc.p, 0xff, static_cast<size_t>(m) * n * sizeof(T)));  // NaN poison
  CUDA_OK((fmha_test::sm90::gemm<T, kBNMajor>(da.p, db.p, dc.p, m, n, k, nullptr)));
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<T> c(static_cast<size_t>(m) * n);
  CUDA_OK(cudaMemcpy(c.data(), dc.p, c.size() * sizeof(T), cudaMemcpyDeviceToHost));
  bool written = false;
  const double err = gemm_error(a, b, c, m, n, k, kBNMajor, &written);
  CHECK(written);
  // 16-bit output rounding dominates: ~2^-9 (f16) / 2^-8 (bf16) relative.
  CHECK(err < (std::is_same_v<T, __half> ? 2e-3 : 6e-3));
  MESSAGE("rel-L2 " << err);
}

// ---------------------------------------------------------------------------
// RS form: D[64][N] = A[64][16 * kSteps] B with A from registers. Each warp
// loads its 16 rows as m16n8k16 A fragments straight from global memory;
// B ([K][N] row-major, N-major) comes in by the copy engine.
// ---------------------------------------------------------------------------
// Lane (r, c)'s m16n8k16 A fragment of k-step s of the row-major [.][k]
// matrix a: rows r and r + 8, columns 16 s + c, c + 1 and c + 8, c + 9.
template <class T>
__device__ void a_fragment(const T* a, int k, int s, int r, int c, uint32_t (&frag)[4]) {
  auto pack = [&](int row, int col) {
    const T* p = a + row * k + 16 * s + col;
    const uint32_t lo = *reinterpret_cast<const uint16_t*>(p);
    const uint32_t hi = *reinterpret_cast<const uint16_t*>(p + 1);
    return lo | (hi << 16);
  };
  frag[0] = pack(r, c);
  frag[1] = pack(r + 8, c);
  frag[2] = pack(r, c + 8);
  frag[3] = pack(r + 8, c + 8);
}

template <class T, int N>
__global__ void __launch_bounds__(128, 1)
    rs_kernel(const __grid_constant__ CUtensorMap b_map, const T* a, float* d, int k_steps) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem =
      reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  __shared__ uint64_t bar;
  constexpr int kPanels = (N + 63) / 64;
  const int k = 16 * k_steps;
  if (threadIdx.x == 0) {
    hw::mbar_init(&bar, 1);
    hw::mbar_init_fence();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    hw::mbar_arrive_expect_tx(&bar, kPanels * k * 128);
    for (int p = 0; p < kPanels; ++p) hw::tma_load_panel(smem + p * k * 128, &b_map, 64 * p, 0, 0, 0, &bar);
  }
  hw::mbar_wait(&bar, 0);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int r = warp * 16 + lane / 4, c = 2 * (lane % 4);
  float acc[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) acc[i] = 0.f;
  const uint32_t sb = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  for (int s = 0; s < k_steps; ++s) {
    uint32_t frag[4];
    a_fragment(a, k, s, r, c, frag);
    hw::fence_operands(acc);
    hw::wgmma_fence();
    hw::MmaRs<T, N, 1>::run(acc, frag, hw::smem_desc(sb + s * 16 * 128, k * 128, 1024), 1u);
    hw::wgmma_commit();
    hw::wgmma_wait<0>();
    hw::fence_operands(acc);
  }
#pragma unroll
  for (int j = 0; j < N / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) d[(r + 8 * (e / 2)) * N + 8 * j + c + e % 2] = acc[4 * j + e];
#endif
}

template <class T, int N>
void check_rs(int k_steps, uint64_t seed) {
  CAPTURE(N);
  CAPTURE(k_steps);
  const int k = 16 * k_steps;
  const auto a = random_vector<T>(64 * k, seed);
  const auto b = random_vector<T>(static_cast<size_t>(k) * N, seed + 7);
  DeviceBuffer<T> da(a.size()), db(b.size());
  DeviceBuffer<float> dd(64 * N);
  CUDA_OK(cudaMemcpy(da.p, a.data(), a.size() * sizeof(T), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(db.p, b.data(), b.size() * sizeof(T), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(dd.p, 0xff, 64 * N * sizeof(float)));
  hw::Tensor4d tb;
  tb.data = db.p;
  tb.dims[0] = N;
  tb.dims[1] = k;
  tb.strides[0] = N;
  tb.strides[1] = tb.strides[2] = static_cast<int64_t>(k) * N;
  tb.bf16 = std::is_same_v<T, __nv_bfloat16>;
  CUtensorMap map;
  REQUIRE_EQ(hw::make_panel_map(tb, k, &map), FMHA_SUCCESS);
  const int smem = ((N + 63) / 64) * k * 128 + 1024;
  CUDA_OK(cudaFuncSetAttribute(rs_kernel<T, N>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  rs_kernel<T, N><<<1, 128, smem>>>(map, da.p, dd.p, k_steps);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> d(64 * N);
  CUDA_OK(cudaMemcpy(d.data(), dd.p, d.size() * sizeof(float), cudaMemcpyDeviceToHost));
  double num = 0, den = 0;
  bool written = true;
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < N; ++j) {
      double ref = 0;
      for (int l = 0; l < k; ++l)
        ref += static_cast<double>(to_float(a[i * k + l])) * to_float(b[static_cast<size_t>(l) * N + j]);
      const double out = d[i * N + j];
      if (!std::isfinite(out)) written = false;
      num += (out - ref) * (out - ref);
      den += ref * ref;
    }
  CHECK(written);
  const double err = std::sqrt(num / den);
  CHECK(err < 1e-5);  // FP32 accumulation of exact 16-bit products
  MESSAGE("rel-L2 " << err);
}

// ---------------------------------------------------------------------------
// Row sums on the tensor core (the plain kernel's kRowSumMma): D[64][8] =
// A[64][16 * kSteps] x ones, A from registers as in rs_kernel, B the ones
// tile (fill_ones_tile, ones_desc); every column of D is its row's sum.
// ---------------------------------------------------------------------------
template <class T>
__global__ void __launch_bounds__(128, 1) rowsum_kernel(const T* a, float* d, int k_steps) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __shared__ __align__(128) unsigned char ones[hw::kOnesTileBytes];
  hw::fill_ones_tile<T>(ones, threadIdx.x, 128);
  __syncthreads();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int r = warp * 16 + lane / 4, c = 2 * (lane % 4);
  const int k = 16 * k_steps;
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  const uint64_t desc = hw::ones_desc(static_cast<uint32_t>(__cvta_generic_to_shared(ones)));
  for (int s = 0; s < k_steps; ++s) {
    uint32_t frag[4];
    a_fragment(a, k, s, r, c, frag);
    hw::fence_operands(acc);
    hw::wgmma_fence();
    hw::MmaRs<T, 8, 0>::run(acc, frag, desc, 1u);
    hw::wgmma_commit();
    hw::wgmma_wait<0>();
    hw::fence_operands(acc);
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) d[(r + 8 * (e / 2)) * 8 + c + e % 2] = acc[e];
#endif
}

template <class T>
void check_rowsum(int k_steps, uint64_t seed) {
  CAPTURE(k_steps);
  const int k = 16 * k_steps;
  auto a = random_vector<T>(64 * k, seed);
  for (auto& x : a) x = T(std::fabs(to_float(x)));  // probabilities are >= 0
  DeviceBuffer<T> da(a.size());
  DeviceBuffer<float> dd(64 * 8);
  CUDA_OK(cudaMemcpy(da.p, a.data(), a.size() * sizeof(T), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(dd.p, 0xff, 64 * 8 * sizeof(float)));
  rowsum_kernel<T><<<1, 128>>>(da.p, dd.p, k_steps);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> d(64 * 8);
  CUDA_OK(cudaMemcpy(d.data(), dd.p, d.size() * sizeof(float), cudaMemcpyDeviceToHost));
  double worst = 0;
  for (int i = 0; i < 64; ++i) {
    double ref = 0;
    for (int l = 0; l < k; ++l) ref += to_float(a[i * k + l]);
    for (int j = 0; j < 8; ++j) {
      const double out = d[i * 8 + j];
      worst = std::isfinite(out) ? std::max(worst, std::fabs(out - ref) / ref) : INFINITY;
    }
  }
  CHECK(worst < 1e-5);  // FP32 accumulation of exact 16-bit values
  MESSAGE("max relative error " << worst);
}

}  // namespace

TEST_CASE("sm90 wgmma m64n8k16 against the ones tile: the row sums of the RS A fragment") {
  check_rowsum<__half>(1, 21);
  check_rowsum<__half>(8, 22);
  check_rowsum<__nv_bfloat16>(8, 23);
}

TEST_CASE("sm90 GEMM, K-major B (the Q K^T operand layout): tails, ring wraps") {
  check_gemm<__half, false>(128, 256, 64, 1);      // one tile, one k tile
  check_gemm<__half, false>(200, 300, 1000, 2);    // tails in m, n, k; 16 k tiles = 4 wraps
  check_gemm<__nv_bfloat16, false>(384, 512, 4096, 3);  // 64 k tiles = 16 wraps
}

TEST_CASE("sm90 GEMM, N-major B (the V operand of P V)") {
  check_gemm<__half, true>(128, 256, 64, 4);
  check_gemm<__half, true>(256, 512, 1024, 5);
  check_gemm<__nv_bfloat16, true>(130, 264, 520, 6);  // row strides must be 16-byte multiples (TMA)
}

TEST_CASE("sm90 wgmma RS: the register A fragment is m16n8k16's") {
  check_rs<__half, 64>(4, 11);
  check_rs<__half, 128>(8, 12);
  check_rs<__nv_bfloat16, 128>(8, 13);
  check_rs<__half, 256>(4, 14);
}

int main(int argc, char** argv) {
  int count = 0;
  cudaDeviceProp prop{};
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("test_sm90: skipped: no CUDA device\n");
    return 77;
  }
  cudaGetDeviceProperties(&prop, 0);
  if (prop.major != 9 || prop.minor != 0) {
    std::printf("test_sm90: skipped: %s is sm_%d%d; sm_90a code runs on compute capability 9.0 only\n", prop.name,
                prop.major, prop.minor);
    return 77;
  }
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  return context.run();
}
