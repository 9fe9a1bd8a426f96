// bench_gemm_sm90: the Hopper primitives' proof GEMM (tests/sm90/sm90_gemm.cuh)
// timed with CUDA events, C = A B in FP16 or BF16 with FP32 accumulation.
//
//   bench_gemm_sm90 [M N K] [--bf16] [--nmajor] [--reps R]
//
// Prints one line: shape, median time, TFLOP/s, and the max relative error
// of 512 sampled outputs against float64. tests/perf/gemm_vs_torch.py runs
// it beside torch.matmul in the same process tree and prints the speed.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "sm90/sm90_gemm.cuh"

namespace {

#define CHECK_CUDA(x)                                                                  \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

__global__ void fill(uint16_t* p, size_t n, uint64_t seed, bool bf16) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    const float f = static_cast<float>(x >> 40) / static_cast<float>(1 << 24) * 2.f - 1.f;
    p[i] = bf16 ? __bfloat16_as_ushort(__float2bfloat16(f)) : __half_as_ushort(__float2half(f));
  }
}

float host_float(uint16_t v, bool bf16) {
  if (bf16) {
    uint32_t u = static_cast<uint32_t>(v) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  __half_raw r;
  r.x = v;
  return __half2float(__half(r));
}

template <class T, bool kNMajor>
int run(int m, int n, int k, int reps) {
  const bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  T *a, *b, *c;
  CHECK_CUDA(cudaMalloc(&a, size_t(m) * k * 2));
  CHECK_CUDA(cudaMalloc(&b, size_t(n) * k * 2));
  CHECK_CUDA(cudaMalloc(&c, size_t(m) * n * 2));
  fill<<<1024, 256>>>(reinterpret_cast<uint16_t*>(a), size_t(m) * k, 1, bf16);
  fill<<<1024, 256>>>(reinterpret_cast<uint16_t*>(b), size_t(n) * k, 2, bf16);
  CHECK_CUDA(cudaMemset(c, 0xff, size_t(m) * n * 2));
  CHECK_CUDA((fmha_test::sm90::gemm<T, kNMajor>(a, b, c, m, n, k, nullptr)));
  CHECK_CUDA(cudaDeviceSynchronize());

  // 512 sampled outputs against float64.
  std::vector<uint16_t> ha(size_t(m) * k), hb(size_t(n) * k), hc(size_t(m) * n);
  CHECK_CUDA(cudaMemcpy(ha.data(), a, ha.size() * 2, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(hb.data(), b, hb.size() * 2, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(hc.data(), c, hc.size() * 2, cudaMemcpyDeviceToHost));
  std::mt19937 g(7);
  double max_rel = 0;
  for (int s = 0; s < 512; ++s) {
    const int i = g() % m, j = g() % n;
    double ref = 0, mag = 0;
    for (int l = 0; l < k; ++l) {
      const double bv = host_float(kNMajor ? hb[size_t(l) * n + j] : hb[size_t(j) * k + l], bf16);
      const double t = host_float(ha[size_t(i) * k + l], bf16) * bv;
      ref += t;
      mag += std::fabs(t);
    }
    const double out = host_float(hc[size_t(i) * n + j], bf16);
    max_rel = std::max(max_rel, std::isfinite(out) ? std::fabs(out - ref) / std::max(mag, 1e-30) : 1e30);
  }

  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  for (int w = 0; w < 3; ++w) CHECK_CUDA((fmha_test::sm90::gemm<T, kNMajor>(a, b, c, m, n, k, nullptr)));
  std::vector<float> ms;
  for (int r = 0; r < reps; ++r) {
    CHECK_CUDA(cudaEventRecord(e0));
    CHECK_CUDA((fmha_test::sm90::gemm<T, kNMajor>(a, b, c, m, n, k, nullptr)));
    CHECK_CUDA(cudaEventRecord(e1));
    CHECK_CUDA(cudaEventSynchronize(e1));
    float t;
    CHECK_CUDA(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  const double tflops = 2.0 * m * n * k / (med * 1e-3) / 1e12;
  std::printf("gemm_sm90 %s %s M=%d N=%d K=%d: %.4f ms  %.1f TFLOP/s  max_rel_err %.2e\n", bf16 ? "bf16" : "f16",
              kNMajor ? "B[K][N]" : "B[N][K]", m, n, k, med, tflops, max_rel);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  return max_rel < 1e-2 ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  int dims[3] = {8192, 8192, 8192}, nd = 0, reps = 20;
  bool bf16 = false, nmajor = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--bf16")) bf16 = true;
    else if (!std::strcmp(argv[i], "--nmajor")) nmajor = true;
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (nd < 3) dims[nd++] = std::atoi(argv[i]);
  }
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  if (prop.major != 9 || prop.minor != 0) {
    std::printf("bench_gemm_sm90: needs compute capability 9.0, device is %d.%d\n", prop.major, prop.minor);
    return 77;
  }
  const int m = dims[0], n = dims[1], k = dims[2];
  if (bf16) return nmajor ? run<__nv_bfloat16, true>(m, n, k, reps) : run<__nv_bfloat16, false>(m, n, k, reps);
  return nmajor ? run<__half, true>(m, n, k, reps) : run<__half, false>(m, n, k, reps);
}
