// bench_cuda: fmha's CUDA kernels on the seed's shapes, through the public
// API only (plus the CUDA runtime). Compiled as CUDA (it carries its own
// FP32 reference kernel and random fill, nothing from inside fmha).
//
// For every selected case and every registered CUDA kernel that supports it
// (forced through params.kernel): median latency over 7 groups of
// CUDA-event-timed repetitions after warm-up (CUDA-graph replay when one run
// is short), TFLOP/s on the exact visible-pair count (causal: 4 D pairs),
// the workspace (fmha's only extra device memory), and max-abs / rel-L2
// error against an FP32 reference on the same inputs (skipped for N > 8192
// unless --check-all). Inputs are random (normal), rotated among several
// copies when one set would sit in L2. The compact table comes last.
//
//   bench_cuda [--suite a,b,...] [--kernels k1,k2] [--n 2048,8192] [--d 128]
//              [--splits n] [--head-major-pages] [--case 'a|b'] [--no-check] [--check-all]
//              [--group-ms x]
// suites: check (correctness matrix, pass/fail), seed (causal FP16 D=128,
// N=512..32768), bf16, noncausal, d64, d256 (causal FP16 D=256, with
// peers), dims (causal FP16 D=32, 96, 256),
// gqa (chunked prefill, and a batched B=8 prefill), decode, large (tensors
// past 2^31 elements, B*H past 65535), serving (issue 9: BF16 GQA decode over contiguous, seqused_k and
// paged KV caches in TB/s against the device copy bandwidth, and a ragged
// causal prefill against a dense batch, in TFLOP/s; cuda_sm80_tc unless
// --kernels names others; with --splits n only the decode cases, each at
// num_splits n; --head-major-pages: paged decode over [pages, Hk, page_size,
// D] pages instead of token-major ones), bias (issue 14: the cost of an additive bias
// [1, 1, N, N] F16 and of ALiBi [H] slopes over none, FP16 B=1 H=32 D=128
// unless --d, causal and not, N=8192 unless --n; the three variants interleaved in
// rounds, each kernel that runs them; softcap 30 rides along), fp8kv
// (issue 14: BF16-q decode over an FP8 KV cache in TB/s against the copy
// bandwidth and against BF16 K/V; cuda_sm80_tc unless --kernels names
// others; D=128 unless --d; with --splits n the decode rows at num_splits
// n and no prefill; with --case 'a|b' only the decode rows whose label
// contains a or b, no prefill), fp8 (issue 14: e4m3 q/k/v prefill, V transposed, against BF16 of
// the same values, causal and not, B=1 H=32 D=128, N=8192 unless --n;
// cuda_sm90_ws unless --kernels names others), all (= every perf suite but
// serving, bias, fp8kv and fp8).
// Default: check,seed,bf16,noncausal,d64,gqa,decode.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "fmha/fmha.h"

namespace {

#define CUDA_OK(x)                                                                       \
  do {                                                                                   \
    cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                             \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(2);                                                                      \
    }                                                                                    \
  } while (0)

// ---- a case -----------------------------------------------------------------

struct Case {
  std::string suite;
  fmha_dtype dtype = FMHA_DTYPE_F16;
  int64_t B = 1, Hq = 32, Hk = 32, Nq = 1024, Nk = 1024, D = 128;
  uint32_t mask = FMHA_MASK_NONE;
  int wl = -1, wr = -1;
  float softcap = 0.f;
  bool lse = true;
  int splits = 0;       // params.num_splits
  bool bnhd = false;    // [B, N, H, D] memory layout instead of [B, H, N, D]
  bool check = true;    // compare with the reference
  int64_t check_rows = -1;  // compare only the last check_rows rows of each head (-1 = all)
  // Peers measured on the lent H200 (shared/data/peers-h200.jsonl, torch
  // SDPA FLASH = FlashAttention-2 and CUDNN backends, median of 7 groups;
  // the better of the plain and the graph-replay median): ms.
  double fa2_ms = 0, cudnn_ms = 0;
};

const char* dtype_str(fmha_dtype t) { return t == FMHA_DTYPE_F16 ? "f16" : t == FMHA_DTYPE_BF16 ? "bf16" : "f32"; }
int dtype_bytes(fmha_dtype t) { return t == FMHA_DTYPE_F32 ? 4 : 2; }

std::string mask_str(const Case& c) {
  std::string s = (c.mask & FMHA_MASK_CAUSAL_TOP_LEFT) ? "causal-tl" : (c.mask & FMHA_MASK_CAUSAL) ? "causal" : "none";
  if (c.wl >= 0 || c.wr >= 0) s += "/w" + std::to_string(c.wl) + "," + std::to_string(c.wr);
  if (c.softcap != 0.f) s += "/cap";
  return s;
}

// The band of the public header: d(i) = i + Nk - Nq (bottom-right) or i
// (top-left); causal sets window_right = 0.
struct Band {
  int64_t diag, wl, wr;
};
Band band_of(const Case& c) {
  Band b{(c.mask & FMHA_MASK_CAUSAL_TOP_LEFT) ? 0 : c.Nk - c.Nq, c.wl, c.wr};
  if (c.mask & (FMHA_MASK_CAUSAL | FMHA_MASK_CAUSAL_TOP_LEFT)) b.wr = 0;
  return b;
}
__host__ __device__ inline void visible(int64_t i, int64_t Nk, Band b, int64_t* lo, int64_t* hi) {
  const int64_t d = i + b.diag;
  int64_t l = b.wl < 0 ? 0 : d - b.wl, h = b.wr < 0 ? Nk : d + b.wr + 1;
  *lo = l < 0 ? 0 : l;
  *hi = h > Nk ? Nk : h;
}
double visible_pairs(const Case& c) {
  const Band b = band_of(c);
  double n = 0;
  for (int64_t i = 0; i < c.Nq; ++i) {
    int64_t lo, hi;
    visible(i, c.Nk, b, &lo, &hi);
    if (hi > lo) n += static_cast<double>(hi - lo);
  }
  return n * static_cast<double>(c.B * c.Hq);
}

// ---- device helpers -----------------------------------------------------------

__device__ __host__ inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

template <class T>
__device__ inline T from_float(float x);
template <>
__device__ inline __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ inline float from_float<float>(float x) { return x; }
template <>
__device__ inline __nv_fp8_e4m3 from_float<__nv_fp8_e4m3>(float x) { return __nv_fp8_e4m3(x); }
template <>
__device__ inline __nv_fp8_e5m2 from_float<__nv_fp8_e5m2>(float x) { return __nv_fp8_e5m2(x); }
__device__ inline float to_float(__half x) { return __half2float(x); }
__device__ inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ inline float to_float(float x) { return x; }

// Standard normal values (Box-Muller on a counter hash).
template <class T>
__global__ void fill_normal(T* p, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t r = mix64(seed * 0x100000001b3ull + static_cast<uint64_t>(i));
    const float u1 = (static_cast<float>(r >> 40) + 1.f) * (1.f / 16777217.f);
    const float u2 = static_cast<float>((r >> 16) & 0xffffff) * (1.f / 16777216.f);
    p[i] = from_float<T>(sqrtf(-2.f * logf(u1)) * cospif(2.f * u2));
  }
}

// NaN everywhere (0xffff is a NaN in FP16 and BF16), so unwritten output shows.
__global__ void poison(uint16_t* p, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) p[i] = 0xffff;
}

struct Strides {
  int64_t s[4];
};

struct RefArgs {
  const void *q, *k, *v;
  Strides qs, ks, vs;
  int64_t B, Hq, Hk, Nq, Nk, D;
  Band band;
  float scale, softcap;
  int64_t row_begin, rows;  // reference rows [row_begin, row_begin + rows) of every head
  float* out;               // [B*Hq][rows][D]
  float* lse;               // [B*Hq][rows]
};

// FP32 reference: one warp per (head, row); lanes take 32 keys at a time
// (each lane one dot product), then every lane accumulates its D/32 output
// dims over those keys. Online softmax in FP32 with expf/logf.
template <class T>
__global__ void reference_kernel(RefArgs a) {
  extern __shared__ float qrow_all[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* qrow = qrow_all + warp * a.D;
  const int64_t items = a.B * a.Hq * a.rows;
  const int64_t step = int64_t(gridDim.x) * (blockDim.x / 32);
  const int64_t group = a.Hq / a.Hk;
  for (int64_t it = blockIdx.x * int64_t(blockDim.x / 32) + warp; it < items; it += step) {
    const int64_t bh = it / a.rows, r = it % a.rows, i = a.row_begin + r;
    const int64_t b = bh / a.Hq, h = bh % a.Hq, hk = h / group;
    const T* q = static_cast<const T*>(a.q) + b * a.qs.s[0] + h * a.qs.s[1] + i * a.qs.s[2];
    const T* k = static_cast<const T*>(a.k) + b * a.ks.s[0] + hk * a.ks.s[1];
    const T* v = static_cast<const T*>(a.v) + b * a.vs.s[0] + hk * a.vs.s[1];
    __syncwarp();
    for (int64_t d = lane; d < a.D; d += 32) qrow[d] = to_float(q[d * a.qs.s[3]]);
    __syncwarp();
    int64_t lo, hi;
    visible(i, a.Nk, a.band, &lo, &hi);
    float m = -INFINITY, l = 0.f, acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // D <= 256
    for (int64_t j0 = lo; j0 < hi; j0 += 32) {
      const int64_t j = j0 + lane;
      float s = -INFINITY;
      if (j < hi) {
        float dot = 0.f;
        const T* kr = k + j * a.ks.s[2];
        for (int64_t d = 0; d < a.D; ++d) dot += qrow[d] * to_float(kr[d * a.ks.s[3]]);
        s = dot * a.scale;
        if (a.softcap != 0.f) s = a.softcap * tanhf(s / a.softcap);
      }
      float cm = s;
      for (int o = 16; o > 0; o >>= 1) cm = fmaxf(cm, __shfl_xor_sync(0xffffffffu, cm, o));
      const float mn = fmaxf(m, cm);  // finite: key j0 is visible
      const float alpha = expf(m - mn);
      const float p = j < hi ? expf(s - mn) : 0.f;
      float ps = p;
      for (int o = 16; o > 0; o >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, o);
      l = l * alpha + ps;
      for (int e = 0; e < 8; ++e) acc[e] *= alpha;
      const int64_t nj = hi - j0 < 32 ? hi - j0 : 32;
      for (int jj = 0; jj < nj; ++jj) {
        const float pj = __shfl_sync(0xffffffffu, p, jj);
        const T* vr = v + (j0 + jj) * a.vs.s[2];
        for (int e = 0; e < 8; ++e) {
          const int64_t d = lane + 32 * e;
          if (d < a.D) acc[e] += pj * to_float(vr[d * a.vs.s[3]]);
        }
      }
      m = mn;
    }
    float* out = a.out + (bh * a.rows + r) * a.D;
    for (int e = 0; e < 8; ++e) {
      const int64_t d = lane + 32 * e;
      if (d < a.D) out[d] = l > 0.f ? acc[e] / l : 0.f;
    }
    if (lane == 0) a.lse[bh * a.rows + r] = l > 0.f ? m + logf(l) : -INFINITY;
  }
}

// The same rows of fmha's output (any strides) and lse, as FP32.
template <class T>
__global__ void gather_rows(const T* o, Strides os, const float* lse, int64_t B, int64_t Hq, int64_t Nq, int64_t D,
                            int64_t row_begin, int64_t rows, float* out, float* lse_out) {
  const int64_t n = B * Hq * rows * D;
  for (int64_t x = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; x < n; x += int64_t(gridDim.x) * blockDim.x) {
    const int64_t d = x % D, r = (x / D) % rows, bh = x / (D * rows);
    const int64_t b = bh / Hq, h = bh % Hq, i = row_begin + r;
    out[x] = to_float(o[b * os.s[0] + h * os.s[1] + i * os.s[2] + d * os.s[3]]);
    if (d == 0 && lse != nullptr) lse_out[bh * rows + r] = lse[bh * Nq + i];
  }
}

unsigned blocks_for(int64_t n, int threads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(b, 1), 1 << 16));
}

// ---- one problem on the device ----------------------------------------------------

struct DeviceProblem {
  const Case& c;
  int sets = 1;  // rotated copies of q, k, v, o
  std::vector<void*> q, k, v, o;
  float* lse = nullptr;
  Strides qs{}, ks{}, vs{}, os{};
  size_t set_bytes = 0;

  static Strides strides_for(const Case& c, int64_t H, int64_t N) {
    if (c.bnhd) return {{N * H * c.D, c.D, H * c.D, 1}};
    return {{H * N * c.D, N * c.D, c.D, 1}};
  }

  DeviceProblem(const Case& cs, size_t l2_bytes, bool rotate) : c(cs) {
    const int64_t eq = c.B * c.Hq * c.Nq * c.D, ek = c.B * c.Hk * c.Nk * c.D;
    const int eb = dtype_bytes(c.dtype);
    set_bytes = static_cast<size_t>(2 * eq + 2 * ek) * eb;
    if (rotate) sets = static_cast<int>(std::min<size_t>(8, std::max<size_t>(1, (3 * l2_bytes + set_bytes - 1) / set_bytes)));
    qs = strides_for(c, c.Hq, c.Nq);
    os = qs;
    ks = strides_for(c, c.Hk, c.Nk);
    vs = ks;
    for (int s = 0; s < sets; ++s) {
      void *a, *b, *d, *e;
      CUDA_OK(cudaMalloc(&a, eq * eb));
      CUDA_OK(cudaMalloc(&b, ek * eb));
      CUDA_OK(cudaMalloc(&d, ek * eb));
      CUDA_OK(cudaMalloc(&e, eq * eb));
      q.push_back(a), k.push_back(b), v.push_back(d), o.push_back(e);
      fill(a, eq, 1000 + 3 * s), fill(b, ek, 1001 + 3 * s), fill(d, ek, 1002 + 3 * s);
      poison<<<blocks_for(eq, 256), 256>>>(static_cast<uint16_t*>(e), eq * eb / 2);
    }
    if (c.lse) CUDA_OK(cudaMalloc(&lse, c.B * c.Hq * c.Nq * sizeof(float)));
    CUDA_OK(cudaDeviceSynchronize());
  }
  ~DeviceProblem() {
    for (int s = 0; s < sets; ++s) cudaFree(q[s]), cudaFree(k[s]), cudaFree(v[s]), cudaFree(o[s]);
    if (lse) cudaFree(lse);
  }
  void fill(void* p, int64_t n, uint64_t seed) {
    if (c.dtype == FMHA_DTYPE_F16) fill_normal<<<blocks_for(n, 256), 256>>>(static_cast<__half*>(p), n, seed);
    else if (c.dtype == FMHA_DTYPE_BF16) fill_normal<<<blocks_for(n, 256), 256>>>(static_cast<__nv_bfloat16*>(p), n, seed);
    else fill_normal<<<blocks_for(n, 256), 256>>>(static_cast<float*>(p), n, seed);
    CUDA_OK(cudaGetLastError());
  }

  static fmha_tensor tensor(void* p, fmha_dtype t, int64_t B, int64_t H, int64_t N, int64_t D, const Strides& s) {
    fmha_tensor x;
    x.data = p;
    x.dtype = t;
    x.dims[0] = B, x.dims[1] = H, x.dims[2] = N, x.dims[3] = D;
    for (int d = 0; d < 4; ++d) x.strides[d] = s.s[d];
    return x;
  }
  fmha_forward_params params(int set, const char* kernel, int splits_override) const {
    fmha_forward_params p;
    fmha_forward_params_init(&p);
    p.mask_flags = c.mask;
    p.q = tensor(q[set], c.dtype, c.B, c.Hq, c.Nq, c.D, qs);
    p.k = tensor(k[set], c.dtype, c.B, c.Hk, c.Nk, c.D, ks);
    p.v = tensor(v[set], c.dtype, c.B, c.Hk, c.Nk, c.D, vs);
    p.o = tensor(o[set], c.dtype, c.B, c.Hq, c.Nq, c.D, os);
    p.lse = lse;
    p.softcap = c.softcap;
    p.window_left = c.wl;
    p.window_right = c.wr;
    p.kernel = kernel;
    p.num_splits = splits_override >= 0 ? splits_override : c.splits;
    return p;
  }
};

// ---- error against the reference ------------------------------------------------------

struct Errors {
  double max_abs = NAN, rel_l2 = NAN, lse_abs = NAN;
  int64_t nan = 0;
  bool done = false;
};

struct Reference {
  std::vector<float> out, lse;
  int64_t row_begin = 0, rows = 0;
};

Reference compute_reference(const DeviceProblem& dp) {
  const Case& c = dp.c;
  Reference ref;
  ref.rows = c.check_rows < 0 ? c.Nq : std::min(c.check_rows, c.Nq);
  ref.row_begin = c.Nq - ref.rows;
  const int64_t n = c.B * c.Hq * ref.rows;
  float *out, *lse;
  CUDA_OK(cudaMalloc(&out, n * c.D * sizeof(float)));
  CUDA_OK(cudaMalloc(&lse, n * sizeof(float)));
  RefArgs a{dp.q[0], dp.k[0], dp.v[0], dp.qs, dp.ks, dp.vs, c.B, c.Hq, c.Hk, c.Nq, c.Nk, c.D, band_of(c),
            static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.D))), c.softcap, ref.row_begin, ref.rows, out, lse};
  const int threads = 256;
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>((n + 7) / 8, 1 << 16));
  const size_t smem = (threads / 32) * c.D * sizeof(float);
  if (c.dtype == FMHA_DTYPE_F16) reference_kernel<__half><<<grid, threads, smem>>>(a);
  else if (c.dtype == FMHA_DTYPE_BF16) reference_kernel<__nv_bfloat16><<<grid, threads, smem>>>(a);
  else reference_kernel<float><<<grid, threads, smem>>>(a);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  ref.out.resize(n * c.D);
  ref.lse.resize(n);
  CUDA_OK(cudaMemcpy(ref.out.data(), out, ref.out.size() * sizeof(float), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(ref.lse.data(), lse, ref.lse.size() * sizeof(float), cudaMemcpyDeviceToHost));
  cudaFree(out);
  cudaFree(lse);
  return ref;
}

Errors compare(const DeviceProblem& dp, const Reference& ref) {
  const Case& c = dp.c;
  const int64_t n = c.B * c.Hq * ref.rows;
  float *out, *lse;
  CUDA_OK(cudaMalloc(&out, n * c.D * sizeof(float)));
  CUDA_OK(cudaMalloc(&lse, n * sizeof(float)));
  const unsigned g = blocks_for(n * c.D, 256);
  if (c.dtype == FMHA_DTYPE_F16)
    gather_rows<<<g, 256>>>(static_cast<const __half*>(dp.o[0]), dp.os, dp.lse, c.B, c.Hq, c.Nq, c.D, ref.row_begin, ref.rows, out, lse);
  else if (c.dtype == FMHA_DTYPE_BF16)
    gather_rows<<<g, 256>>>(static_cast<const __nv_bfloat16*>(dp.o[0]), dp.os, dp.lse, c.B, c.Hq, c.Nq, c.D, ref.row_begin, ref.rows, out, lse);
  else
    gather_rows<<<g, 256>>>(static_cast<const float*>(dp.o[0]), dp.os, dp.lse, c.B, c.Hq, c.Nq, c.D, ref.row_begin, ref.rows, out, lse);
  CUDA_OK(cudaGetLastError());
  std::vector<float> got(n * c.D), got_lse(n);
  CUDA_OK(cudaMemcpy(got.data(), out, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(got_lse.data(), lse, got_lse.size() * sizeof(float), cudaMemcpyDeviceToHost));
  cudaFree(out);
  cudaFree(lse);
  Errors e;
  e.done = true;
  double num = 0, den = 0, mx = 0;
  for (size_t x = 0; x < got.size(); ++x) {
    if (std::isnan(got[x])) {
      ++e.nan;
      continue;
    }
    const double d = static_cast<double>(got[x]) - ref.out[x];
    num += d * d;
    den += static_cast<double>(ref.out[x]) * ref.out[x];
    mx = std::max(mx, std::fabs(d));
  }
  e.max_abs = mx;
  e.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  if (c.lse && dp.lse) {
    double lm = 0;
    for (int64_t x = 0; x < n; ++x) {
      const float a = got_lse[x], b = ref.lse[x];
      if (std::isinf(a) && std::isinf(b) && (a < 0) == (b < 0)) continue;
      if (std::isnan(a) || std::isinf(a) || std::isinf(b)) {
        lm = INFINITY;
        continue;
      }
      lm = std::max(lm, std::fabs(static_cast<double>(a) - b));
    }
    e.lse_abs = lm;
  }
  return e;
}

// ---- timing -------------------------------------------------------------------

struct Timing {
  double ms = NAN;
  bool graph = false;
  int reps = 0;
};

// Median over 7 groups of the mean time per run, after warm-up. `run(i)`
// enqueues run i (it rotates input sets); short runs are captured into a CUDA
// graph of `reps` runs and the graph is replayed.
Timing time_runs(const std::function<bool(int)>& run, cudaStream_t stream, double group_ms) {
  Timing t;
  cudaEvent_t e0, e1;
  CUDA_OK(cudaEventCreate(&e0));
  CUDA_OK(cudaEventCreate(&e1));
  for (int i = 0; i < 3; ++i)
    if (!run(i)) return t;
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaEventRecord(e0, stream));
  for (int i = 0; i < 3; ++i) run(i);
  CUDA_OK(cudaEventRecord(e1, stream));
  CUDA_OK(cudaEventSynchronize(e1));
  float one = 0;
  CUDA_OK(cudaEventElapsedTime(&one, e0, e1));
  one /= 3;
  int groups = 7;
  t.reps = static_cast<int>(std::clamp(group_ms / std::max(one, 1e-3f), 1.0, 2000.0));
  if (one > 50) groups = 3;  // long shapes: 3 groups of 1 keep the bench short
  t.graph = one < 0.2f;
  cudaGraphExec_t exec = nullptr;
  if (t.graph) {
    cudaGraph_t graph;
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
    for (int i = 0; i < t.reps; ++i) run(i);
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_OK(cudaGraphDestroy(graph));
    CUDA_OK(cudaGraphLaunch(exec, stream));  // warm the graph
  }
  std::vector<double> g;
  for (int k = 0; k < groups; ++k) {
    CUDA_OK(cudaEventRecord(e0, stream));
    if (t.graph) CUDA_OK(cudaGraphLaunch(exec, stream));
    else
      for (int i = 0; i < t.reps; ++i) run(i);
    CUDA_OK(cudaEventRecord(e1, stream));
    CUDA_OK(cudaEventSynchronize(e1));
    float ms = 0;
    CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
    g.push_back(ms / t.reps);
  }
  if (exec) cudaGraphExecDestroy(exec);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(g.begin(), g.end());
  t.ms = g[g.size() / 2];
  return t;
}

// ---- the cases -------------------------------------------------------------------------

Case mk(const char* suite, fmha_dtype t, int64_t B, int64_t Hq, int64_t Hk, int64_t Nq, int64_t Nk, int64_t D,
        uint32_t mask) {
  Case c;
  c.suite = suite;
  c.dtype = t, c.B = B, c.Hq = Hq, c.Hk = Hk, c.Nq = Nq, c.Nk = Nk, c.D = D, c.mask = mask;
  c.lse = false;
  return c;
}

std::vector<Case> check_cases() {
  std::vector<Case> v;
  auto add = [&](Case c) {
    c.suite = "check";
    c.lse = true;
    v.push_back(c);
  };
  const fmha_dtype F = FMHA_DTYPE_F16, H = FMHA_DTYPE_BF16;
  add(mk("", F, 2, 3, 3, 1000, 1000, 128, FMHA_MASK_CAUSAL));          // tails, both ends
  add(mk("", H, 2, 3, 3, 1000, 1000, 64, FMHA_MASK_CAUSAL));
  add(mk("", F, 1, 4, 4, 300, 1000, 128, FMHA_MASK_CAUSAL_TOP_LEFT));  // Nq < Nk, top-left
  add(mk("", F, 1, 4, 4, 300, 1000, 64, FMHA_MASK_CAUSAL));            // bottom-right
  add(mk("", F, 1, 4, 2, 1000, 300, 128, FMHA_MASK_CAUSAL));           // rows that see nothing
  add(mk("", H, 1, 4, 2, 1000, 300, 128, FMHA_MASK_CAUSAL_TOP_LEFT));
  add(mk("", H, 2, 8, 2, 77, 555, 64, FMHA_MASK_NONE));                // GQA, short rows
  add(mk("", F, 1, 8, 1, 129, 4097, 128, FMHA_MASK_NONE));             // MQA
  {
    Case c = mk("", F, 1, 4, 4, 700, 700, 128, FMHA_MASK_NONE);        // two-sided window
    c.wl = 100, c.wr = 50;
    add(c);
  }
  {
    Case c = mk("", H, 1, 4, 4, 1024, 1024, 64, FMHA_MASK_CAUSAL);     // causal sliding window
    c.wl = 128;
    add(c);
  }
  {
    Case c = mk("", F, 1, 2, 2, 500, 400, 128, FMHA_MASK_NONE);        // one key per row, some none
    c.wl = 0, c.wr = 0;
    add(c);
  }
  {
    Case c = mk("", F, 1, 4, 4, 600, 600, 128, FMHA_MASK_CAUSAL);      // softcap
    c.softcap = 30.f;
    add(c);
  }
  {
    Case c = mk("", H, 1, 4, 2, 333, 999, 64, FMHA_MASK_NONE);
    c.softcap = 5.f;
    add(c);
  }
  {
    Case c = mk("", F, 2, 6, 3, 250, 800, 128, FMHA_MASK_CAUSAL);      // BNHD strides
    c.bnhd = true;
    add(c);
  }
  {
    Case c = mk("", F, 1, 32, 8, 1, 3000, 128, FMHA_MASK_NONE);        // decode, forced splits
    c.splits = 4;
    add(c);
  }
  {
    Case c = mk("", H, 1, 4, 4, 200, 2000, 64, FMHA_MASK_CAUSAL);      // prefill, forced splits
    c.splits = 3;
    add(c);
  }
  {
    Case c = mk("", F, 1, 8, 8, 64, 5000, 128, FMHA_MASK_CAUSAL);      // auto splits
    c.wl = 1000;
    add(c);
  }
  add(mk("", H, 2, 8, 2, 20, 300, 128, FMHA_MASK_CAUSAL));             // GQA rows packed, wide tile
  {
    Case c = mk("", F, 1, 12, 2, 5, 777, 64, FMHA_MASK_CAUSAL);        // packed, narrow tile, window
    c.wl = 300;
    add(c);
  }
  {
    Case c = mk("", F, 2, 8, 1, 8, 1000, 128, FMHA_MASK_CAUSAL_TOP_LEFT);  // packed, BNHD, short rows
    c.bnhd = true;
    add(c);
  }
  {
    Case c = mk("", H, 1, 16, 4, 2, 2500, 128, FMHA_MASK_NONE);        // packed decode, softcap
    c.softcap = 20.f;
    add(c);
  }
  add(mk("", F, 2, 16, 16, 3, 900, 64, FMHA_MASK_CAUSAL));             // narrow tile, no packing
  // head dims 32, 96 (padded shared rows) and 256 (8-warp tile)
  add(mk("", F, 1, 3, 3, 700, 700, 32, FMHA_MASK_CAUSAL));
  {
    Case c = mk("", H, 1, 6, 2, 500, 900, 96, FMHA_MASK_NONE);
    c.wl = 200, c.wr = 100;
    add(c);
  }
  {
    Case c = mk("", F, 1, 2, 2, 1000, 1000, 256, FMHA_MASK_CAUSAL);
    c.softcap = 15.f;
    add(c);
  }
  add(mk("", H, 2, 4, 4, 333, 777, 256, FMHA_MASK_CAUSAL_TOP_LEFT));
  add(mk("", F, 1, 16, 4, 1, 5000, 256, FMHA_MASK_NONE));             // narrow, packed
  add(mk("", F, 1, 8, 8, 2, 3000, 96, FMHA_MASK_CAUSAL));             // narrow
  add(mk("", H, 1, 16, 2, 4, 3000, 32, FMHA_MASK_CAUSAL));            // narrow, packed
  add(mk("", F, 3, 5, 5, 1, 1, 128, FMHA_MASK_NONE));                  // tiny
  add(mk("", F, 1, 2, 2, 1, 70000, 64, FMHA_MASK_NONE));               // long single row
  return v;
}

// Tensors past 2^31 elements and B*H past 65535 (the y/z grid limit).
std::vector<Case> large_cases() {
  std::vector<Case> v;
  Case a = mk("large", FMHA_DTYPE_F16, 1, 1, 1, (int64_t(1) << 24) + 100, 64, 128, FMHA_MASK_NONE);  // q, o: 2^31 + 12800 elements
  a.lse = true;
  a.check_rows = 300;
  v.push_back(a);
  Case b = mk("large", FMHA_DTYPE_BF16, 2048, 40, 8, 1, 64, 64, FMHA_MASK_NONE);  // 81920 heads
  b.lse = true;
  v.push_back(b);
  return v;
}

std::vector<Case> perf_cases(const std::string& suite, const std::vector<int64_t>& ns) {
  std::vector<Case> v;
  const fmha_dtype F = FMHA_DTYPE_F16, H = FMHA_DTYPE_BF16;
  struct Peer {
    int64_t n;
    double fa2, cudnn;
  };
  auto seq = [&](const char* name, fmha_dtype t, int64_t D, uint32_t mask, std::vector<Peer> peers) {
    for (const Peer& p : peers) {
      if (!ns.empty() && std::find(ns.begin(), ns.end(), p.n) == ns.end()) continue;
      Case c = mk(name, t, 1, 32, 32, p.n, p.n, D, mask);
      c.fa2_ms = p.fa2, c.cudnn_ms = p.cudnn;
      c.check = p.n <= 8192;
      v.push_back(c);
    }
  };
  if (suite == "seed")
    seq("seed", F, 128, FMHA_MASK_CAUSAL,
        {{512, 0.0201, 0.0132}, {1024, 0.0548, 0.0317}, {2048, 0.1644, 0.0859}, {4096, 0.5042, 0.2720},
         {8192, 1.7744, 1.0178}, {16384, 6.7180, 4.0007}, {32768, 26.5196, 15.4336}});
  if (suite == "bf16") seq("bf16", H, 128, FMHA_MASK_CAUSAL, {{2048, 0.1700, 0.0847}, {8192, 1.7355, 1.0198}});
  if (suite == "noncausal") seq("noncausal", F, 128, FMHA_MASK_NONE, {{2048, 0.2040, 0.1151}, {8192, 3.2795, 1.8840}});
  if (suite == "d64") seq("d64", F, 64, FMHA_MASK_CAUSAL, {{2048, 0.0978, 0.0582}, {8192, 0.9995, 0.6518}});
  // Peers from compare_torch.py on the H200 (torch 2.11, cuDNN 9.19; the
  // start of session 2026-12-01, docs/performance.md).
  if (suite == "d256") seq("d256", F, 256, FMHA_MASK_CAUSAL, {{2048, 0.287, 0.157}, {8192, 3.732, 1.879}});
  if (suite == "dims") {  // no peer numbers for these head dims
    for (int64_t D : {32, 96, 256}) {
      std::vector<Peer> none = {{2048, 0, 0}, {8192, 0, 0}};
      seq("dims", F, D, FMHA_MASK_CAUSAL, none);
    }
  }
  if (suite == "gqa") {
    Case c = mk("gqa", H, 1, 32, 8, 512, 16384, 128, FMHA_MASK_CAUSAL);
    c.fa2_ms = 0.4627, c.cudnn_ms = 0.4443;
    v.push_back(c);
    Case f = c;
    f.dtype = F, f.fa2_ms = f.cudnn_ms = 0;
    v.push_back(f);
    // Batched prefill over a GQA cache (issue 8's shape; peers from
    // compare_torch.py on the H200, docs/performance.md "Session 2026-12-01").
    Case b = mk("gqa", H, 8, 32, 8, 2048, 2048, 128, FMHA_MASK_CAUSAL);
    b.fa2_ms = 0.926, b.cudnn_ms = 0.567;
    v.push_back(b);
  }
  if (suite == "decode") {
    const Peer peers[] = {{4096, 0.0182, 0.0095}, {32768, 0.0471, 0.0380}, {131072, 0.1511, 0.1271}};
    for (const Peer& p : peers) {
      Case c = mk("decode", F, 1, 32, 8, 1, p.n, 128, FMHA_MASK_NONE);
      c.fa2_ms = p.fa2, c.cudnn_ms = p.cudnn;
      v.push_back(c);
    }
  }
  return v;
}

std::vector<std::string> split_list(const char* s) {
  std::vector<std::string> out;
  std::string cur;
  for (const char* p = s;; ++p) {
    if (*p == ',' || *p == '\0') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
      if (*p == '\0') break;
    } else {
      cur += *p;
    }
  }
  return out;
}


// ---- the serving suite (issue 9) -----------------------------------------------------
//
// BF16 GQA 32/8 D=128 decode (Nq = 1) over a KV cache: contiguous, then paged
// with page_size 16 and 64 and shuffled pages, on the same lengths; each
// prints K+V bytes read / time in TB/s and its share of the measured
// device-copy bandwidth (read + write bytes of a 1 GiB cudaMemcpyAsync), and
// paged / contiguous. Then a ragged causal prefill (16 sequences, lengths
// spread over 128..8192, packed q and k) against a dense causal batch of
// about the same work, and the ragged prefill over a paged cache (page_size
// 64), in TFLOP/s on the exact visible-pair count.

struct ServingRow {
  std::string what, kernel;
  double ms = NAN, tbps = NAN, tflops = NAN, ratio = NAN;
  std::string ratio_of;
};

// Device copy bandwidth in TB/s, counting bytes read plus bytes written.
double copy_bandwidth(cudaStream_t stream) {
  const size_t bytes = size_t{1} << 30;
  void *a, *b;
  CUDA_OK(cudaMalloc(&a, bytes));
  CUDA_OK(cudaMalloc(&b, bytes));
  const Timing t = time_runs(
      [&](int) { return cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream) == cudaSuccess; }, stream, 20);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * static_cast<double>(bytes) / (t.ms * 1e-3) / 1e12;
}

// A decode or prefill problem in a serving layout, on the device.
struct ServingProblem {
  int64_t B = 1, Hq = 32, Hk = 8, D = 128;
  std::vector<int32_t> len_q, len_k;
  bool ragged_q = false, ragged_k = false, seqused = false;
  int64_t page_size = 0;  // > 0: paged, shuffled pages, [pages, page_size, Hk, D] storage
  bool pages_head_major = false;  // paged: [pages, Hk, page_size, D] storage instead
  bool pages_in_order = false;    // paged: the table lists the pages in order (no shuffle)
  int64_t cap = 0;        // dense k capacity (max len_k)
  uint32_t mask = FMHA_MASK_NONE;
  fmha_dtype dt = FMHA_DTYPE_BF16;
  fmha_dtype kv_dt = FMHA_DTYPE_BF16;  // F8E4M3 / F8E5M2: an FP8 KV cache (1-byte elements)
  bool kv_descales = false;           // k_descale and v_descale [B, Hk] (1.0)

  std::vector<void*> allocs;
  fmha_forward_params p{};
  double kv_bytes = 0, pairs = 0;

  void* dev(size_t bytes) {
    void* x = nullptr;
    CUDA_OK(cudaMalloc(&x, bytes < 16 ? 16 : bytes));
    allocs.push_back(x);
    return x;
  }
  int kv_elem() const { return kv_dt == FMHA_DTYPE_F8E4M3 || kv_dt == FMHA_DTYPE_F8E5M2 ? 1 : 2; }
  void* upload(const std::vector<int32_t>& h) {
    void* x = dev(h.size() * sizeof(int32_t));
    CUDA_OK(cudaMemcpy(x, h.data(), h.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    return x;
  }
  void build() {
    B = static_cast<int64_t>(len_q.size());
    fmha_forward_params_init(&p);
    p.mask_flags = mask;
    int64_t total_q = 0, total_k = 0, max_q = 0, max_k = 0;
    for (size_t b = 0; b < len_q.size(); ++b) {
      total_q += len_q[b], total_k += len_k[b];
      max_q = std::max<int64_t>(max_q, len_q[b]), max_k = std::max<int64_t>(max_k, len_k[b]);
      kv_bytes += 2.0 * len_k[b] * Hk * D * kv_elem();
      for (int64_t i = 0; i < len_q[b]; ++i) {  // causal bottom-right (or none) visible pairs
        const int64_t hi = mask ? std::min<int64_t>(len_k[b], i + len_k[b] - len_q[b] + 1) : len_k[b];
        pairs += static_cast<double>(std::max<int64_t>(hi, 0)) * Hq;
      }
    }
    const int64_t qb = ragged_q ? 1 : B, qn = ragged_q ? total_q : max_q;
    auto tensor = [&](void* data, int64_t d0, int64_t h, int64_t n, bool token_major) {
      fmha_tensor t{};
      t.data = data;
      t.dtype = dt;
      t.dims[0] = d0, t.dims[1] = h, t.dims[2] = n, t.dims[3] = D;
      t.strides[0] = h * n * D, t.strides[1] = token_major ? D : n * D, t.strides[2] = token_major ? h * D : D;
      t.strides[3] = 1;
      return t;
    };
    auto filled = [&](int64_t elems, uint64_t seed) {
      void* x = dev(static_cast<size_t>(elems) * 2);
      fill_normal<<<blocks_for(elems, 256), 256>>>(static_cast<__nv_bfloat16*>(x), elems, seed);
      return x;
    };
    // K/V in kv_dt: tensor() gives them dt; kv_tensor re-types them.
    auto filled_kv = [&](int64_t elems, uint64_t seed) {
      if (kv_elem() == 2) return filled(elems, seed);
      void* x = dev(static_cast<size_t>(elems));
      if (kv_dt == FMHA_DTYPE_F8E4M3)
        fill_normal<<<blocks_for(elems, 256), 256>>>(static_cast<__nv_fp8_e4m3*>(x), elems, seed);
      else
        fill_normal<<<blocks_for(elems, 256), 256>>>(static_cast<__nv_fp8_e5m2*>(x), elems, seed);
      return x;
    };
    auto kv_tensor = [&](fmha_tensor t) {
      t.dtype = kv_dt;
      return t;
    };
    p.q = tensor(filled(qb * Hq * qn * D, 7), qb, Hq, qn, false);
    p.o = tensor(dev(static_cast<size_t>(qb * Hq * qn * D) * 2), qb, Hq, qn, false);
    if (ragged_q) {
      std::vector<int32_t> cu(1, 0);
      for (int32_t n : len_q) cu.push_back(cu.back() + n);
      p.cu_seqlens_q = static_cast<const int32_t*>(upload(cu));
      p.max_seqlen_q = static_cast<int32_t>(max_q);
    }
    if (page_size > 0) {
      std::vector<int64_t> pages_of(B);
      int64_t pages = 0, stride = 0;
      for (int64_t b = 0; b < B; ++b) {
        pages_of[b] = (len_k[b] + page_size - 1) / page_size;
        pages += pages_of[b];
        stride = std::max(stride, pages_of[b]);
      }
      std::vector<int32_t> perm(pages);
      for (int64_t i = 0; i < pages; ++i) perm[i] = static_cast<int32_t>(i);
      uint64_t r = 12345;
      for (int64_t i = pages - 1; i > 0 && !pages_in_order; --i) {  // Fisher-Yates
        r = mix64(r);
        std::swap(perm[i], perm[r % static_cast<uint64_t>(i + 1)]);
      }
      std::vector<int32_t> table(B * stride, 0);
      int64_t next = 0;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t e = 0; e < pages_of[b]; ++e) table[b * stride + e] = perm[next++];
      p.k = kv_tensor(tensor(filled_kv(pages * Hk * page_size * D, 8), pages, Hk, page_size, !pages_head_major));
      p.v = kv_tensor(tensor(filled_kv(pages * Hk * page_size * D, 9), pages, Hk, page_size, !pages_head_major));
      p.block_table = static_cast<const int32_t*>(upload(table));
      p.block_table_stride = stride;
      p.seqused_k = static_cast<const int32_t*>(upload(len_k));
    } else if (ragged_k) {
      std::vector<int32_t> cu(1, 0);
      for (int32_t n : len_k) cu.push_back(cu.back() + n);
      p.k = kv_tensor(tensor(filled_kv(Hk * total_k * D, 8), 1, Hk, total_k, false));
      p.v = kv_tensor(tensor(filled_kv(Hk * total_k * D, 9), 1, Hk, total_k, false));
      p.cu_seqlens_k = static_cast<const int32_t*>(upload(cu));
      p.max_seqlen_k = static_cast<int32_t>(max_k);
    } else {
      const int64_t n = std::max(cap, max_k);
      p.k = kv_tensor(tensor(filled_kv(B * Hk * n * D, 8), B, Hk, n, false));
      p.v = kv_tensor(tensor(filled_kv(B * Hk * n * D, 9), B, Hk, n, false));
      if (seqused) p.seqused_k = static_cast<const int32_t*>(upload(len_k));
    }
    if (ragged_q || ragged_k) p.num_seqs = static_cast<int32_t>(B);
    if (kv_descales) {
      std::vector<float> ones(static_cast<size_t>(B * Hk), 1.f);
      void* x = dev(ones.size() * sizeof(float));
      CUDA_OK(cudaMemcpy(x, ones.data(), ones.size() * sizeof(float), cudaMemcpyHostToDevice));
      p.k_descale = p.v_descale = static_cast<const float*>(x);
    }
    CUDA_OK(cudaDeviceSynchronize());
  }
  ~ServingProblem() {
    for (void* x : allocs) cudaFree(x);
  }
};

// Times `sp` on `kernel` (null = automatic); NaN when it cannot run it.
double time_serving(fmha_handle h, cudaStream_t stream, ServingProblem& sp, const char* kernel, double group_ms) {
  sp.p.kernel = kernel;
  size_t ws_bytes = 0;
  if (fmha_forward_workspace_size(h, &sp.p, &ws_bytes) != FMHA_SUCCESS) {
    std::printf("  %s: %s\n", kernel ? kernel : "(auto)", fmha_last_error_message());
    return NAN;
  }
  void* ws = nullptr;
  if (ws_bytes) CUDA_OK(cudaMalloc(&ws, ws_bytes));
  const Timing t = time_runs(
      [&](int) {
        const fmha_status s = fmha_forward(h, &sp.p, ws, ws_bytes);
        if (s != FMHA_SUCCESS) std::printf("forward failed while timing: %s\n", fmha_last_error_message());
        return s == FMHA_SUCCESS;
      },
      stream, group_ms);
  if (ws) cudaFree(ws);
  return t.ms;
}

// splits >= 0 (--splits): the decode cases only, each with that num_splits
// (0 = automatic, 1 = none); the prefill cases are left out.
// head_major_pages (--head-major-pages): the paged decode cases store pages
// [pages, Hk, page_size, D] (a KV head's page_size rows contiguous) instead
// of vLLM's token-major [pages, page_size, Hk, D].
int run_serving(fmha_handle h, cudaStream_t stream, const std::vector<std::string>& kernels, double group_ms,
                int splits, bool head_major_pages) {
  const double copy = copy_bandwidth(stream);
  std::printf("\nserving suite: device copy bandwidth %.2f TB/s (read + write of a 1 GiB cudaMemcpyAsync)\n", copy);
  std::vector<ServingRow> rows;
  auto decode = [&](const char* name, std::vector<int32_t> lens, bool mixed) {
    for (const std::string& kn : kernels) {
      double contiguous_ms = NAN;
      // Page sizes 16 and 64 in vLLM's token-major storage, shuffled; then
      // 16 with the pages in order (the same gather over addresses that
      // follow each other: what the scattered pages cost apart from the
      // gather). (Head-major pages, [pages, Hk, page_size, D], measured the
      // same as token-major, 2026-12-01: pages_head_major.)
      for (int64_t variant : {0, 16, 64, -16}) {
        const int64_t ps = variant < 0 ? -variant : variant;
        ServingProblem sp;
        sp.len_q.assign(lens.size(), 1);
        sp.len_k = lens;
        sp.page_size = ps;
        sp.pages_in_order = variant < 0;
        sp.pages_head_major = head_major_pages;
        sp.seqused = mixed;
        sp.cap = *std::max_element(lens.begin(), lens.end());
        sp.build();
        if (splits >= 0) sp.p.num_splits = splits;
        ServingRow r;
        r.what = std::string(name) + (ps ? " paged ps=" + std::to_string(ps) + (variant < 0 ? " in order" : " shuffled") +
                                               (head_major_pages ? " head-major" : "")
                                         : mixed ? " seqused_k" : " contiguous");
        if (splits >= 0) r.what += " splits=" + std::to_string(splits);
        r.kernel = kn;
        r.ms = time_serving(h, stream, sp, kn.c_str(), group_ms);
        r.tbps = sp.kv_bytes / (r.ms * 1e-3) / 1e12;
        if (ps == 0) contiguous_ms = r.ms;
        r.ratio = ps ? contiguous_ms / r.ms : r.tbps / copy;
        r.ratio_of = ps ? "paged speed / contiguous" : "share of copy bandwidth";
        std::printf("serving  %-13s %-44s ms %9.4f  K+V %6.3f TB/s  %s %.3f\n", kn.c_str(), r.what.c_str(), r.ms,
                    r.tbps, r.ratio_of.c_str(), r.ratio);
        std::fflush(stdout);
        rows.push_back(r);
      }
    }
  };
  decode("decode B=1 Nk=131072", {131072}, false);
  decode("decode B=16 Nk=8192", std::vector<int32_t>(16, 8192), false);
  std::vector<int32_t> mixed(64);
  uint64_t r = 99;
  for (int32_t& n : mixed) {  // fill levels in [1024, 4096]
    r = mix64(r);
    n = static_cast<int32_t>(1024 + r % 3073);
  }
  mixed[0] = 4096;
  decode("decode B=64 Nk<=4096 mixed", mixed, true);
  const std::vector<std::string> prefill_kernels = splits >= 0 ? std::vector<std::string>{} : kernels;

  // Ragged causal prefill vs a dense causal batch of about the same work.
  std::vector<int32_t> lens(16);
  for (int i = 0; i < 16; ++i)  // geometric spread over 128..8192
    lens[i] = static_cast<int32_t>(std::lround(128.0 * std::pow(64.0, i / 15.0) / 64.0) * 64);
  double sum_sq = 0;
  for (int32_t n : lens) sum_sq += static_cast<double>(n) * n;
  const int64_t dense_n = std::max<int64_t>(128, std::lround(std::sqrt(sum_sq / 16) / 128.0) * 128);
  for (const std::string& kn : prefill_kernels) {
    ServingProblem ragged;
    ragged.len_q = lens;
    ragged.len_k = lens;
    ragged.ragged_q = ragged.ragged_k = true;
    ragged.mask = FMHA_MASK_CAUSAL;
    ragged.build();
    ServingProblem dense;
    dense.len_q.assign(16, static_cast<int32_t>(dense_n));
    dense.len_k = dense.len_q;
    dense.mask = FMHA_MASK_CAUSAL;
    dense.build();
    ServingRow rd, rr;
    rd.what = "prefill dense causal B=16 N=" + std::to_string(dense_n);
    rd.kernel = kn;
    rd.ms = time_serving(h, stream, dense, kn.c_str(), group_ms);
    rd.tflops = 4.0 * 128 * dense.pairs / (rd.ms * 1e-3) / 1e12;
    rr.what = "prefill ragged causal 16 seqs 128..8192";
    rr.kernel = kn;
    rr.ms = time_serving(h, stream, ragged, kn.c_str(), group_ms);
    rr.tflops = 4.0 * 128 * ragged.pairs / (rr.ms * 1e-3) / 1e12;
    rr.ratio = rr.tflops / rd.tflops;
    rr.ratio_of = "ragged TFLOP/s / dense";
    // The same ragged prefill over a paged KV cache (chunked prefill's
    // layout): page_size 64, shuffled pages.
    ServingProblem paged;
    paged.len_q = lens;
    paged.len_k = lens;
    paged.ragged_q = true;
    paged.page_size = 64;
    paged.mask = FMHA_MASK_CAUSAL;
    paged.build();
    ServingRow rp;
    rp.what = "prefill ragged causal, paged ps=64 shuffled";
    rp.kernel = kn;
    rp.ms = time_serving(h, stream, paged, kn.c_str(), group_ms);
    rp.tflops = 4.0 * 128 * paged.pairs / (rp.ms * 1e-3) / 1e12;
    rp.ratio = rp.tflops / rr.tflops;
    rp.ratio_of = "paged TFLOP/s / contiguous ragged";
    for (const ServingRow* x : {&rd, &rr, &rp}) {
      std::printf("serving  %-13s %-44s ms %9.4f  %6.1f TFLOP/s", kn.c_str(), x->what.c_str(), x->ms, x->tflops);
      if (!std::isnan(x->ratio)) std::printf("  %s %.3f", x->ratio_of.c_str(), x->ratio);
      std::printf("\n");
      rows.push_back(*x);
    }
  }

  std::printf("\n| serving case | kernel | ms | K+V TB/s | TFLOP/s | ratio | of |\n|---|---|---|---|---|---|---|\n");
  for (const ServingRow& x : rows)
    std::printf("| %s | %s | %.4f | %s | %s | %s | %s |\n", x.what.c_str(), x.kernel.c_str(), x.ms,
                std::isnan(x.tbps) ? "-" : std::to_string(x.tbps).substr(0, 5).c_str(),
                std::isnan(x.tflops) ? "-" : std::to_string(x.tflops).substr(0, 5).c_str(),
                std::isnan(x.ratio) ? "-" : std::to_string(x.ratio).substr(0, 5).c_str(), x.ratio_of.c_str());
  std::printf("(copy bandwidth %.2f TB/s)\n", copy);
  return 0;
}

// ---- the bias suite (issue 14) ---------------------------------------------------------
//
// The bar: a bias or ALiBi costs <= 10% over none. Per kernel, shape and
// round: none, bias, ALiBi and softcap (30, the other user of the kernels'
// score-ops instantiation) timed back to back (so clock and thermal drift
// hit them alike); the medians over the rounds and their ratios to none. The bias holds N(0, 1) values (every key visible), read as [1, 1,
// N, N] F16 with stride-0 broadcasts over batch and heads; slopes are
// ALiBi's 2^(-8 (h + 1) / H). Then, to say where a cost comes from: the
// score-ops kernel with no element transform (q/k/v descales of 1), the
// bias and ALiBi together, and the same bias through the global-load path
// (rows N + 1 elements apart, which the copy engine cannot address).
int run_bias(fmha_handle h, cudaStream_t stream, const std::vector<std::string>& kernels, std::vector<int64_t> ns,
             double group_ms, size_t l2_bytes, int64_t d) {
  if (ns.empty()) ns = {8192};
  constexpr int kRounds = 5;
  int failures = 0;
  std::printf(
      "\n| bias case | kernel | none ms | bias ms | bias / none | ALiBi ms | ALiBi / none | softcap / none | "
      "descales=1 / none | bias+ALiBi / none | bias loaded / none |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::vector<std::string> lines;
  for (int64_t n : ns)
    for (uint32_t mask : {uint32_t{FMHA_MASK_NONE}, uint32_t{FMHA_MASK_CAUSAL}}) {
      Case c = mk("bias", FMHA_DTYPE_F16, 1, 32, 32, n, n, d, mask);
      DeviceProblem dp(c, l2_bytes, false);
      void* bias = nullptr;
      CUDA_OK(cudaMalloc(&bias, static_cast<size_t>(n * (n + 1)) * 2));
      fill_normal<<<blocks_for(n * (n + 1), 256), 256>>>(static_cast<__half*>(bias), n * (n + 1), 77);
      std::vector<float> ones_h(static_cast<size_t>(c.Hk), 1.f);
      float* ones = nullptr;
      CUDA_OK(cudaMalloc(&ones, ones_h.size() * sizeof(float)));
      CUDA_OK(cudaMemcpy(ones, ones_h.data(), ones_h.size() * sizeof(float), cudaMemcpyHostToDevice));
      CUDA_OK(cudaGetLastError());
      std::vector<float> slopes_h(c.Hq);
      for (int64_t x = 0; x < c.Hq; ++x) slopes_h[x] = std::exp2(-8.0f * static_cast<float>(x + 1) / c.Hq);
      float* slopes = nullptr;
      CUDA_OK(cudaMalloc(&slopes, slopes_h.size() * sizeof(float)));
      CUDA_OK(cudaMemcpy(slopes, slopes_h.data(), slopes_h.size() * sizeof(float), cudaMemcpyHostToDevice));
      for (const std::string& kn : kernels) {
        // none, bias, ALiBi, softcap, descales of 1, bias + ALiBi, bias loaded
        constexpr int kVariants = 7;
        fmha_forward_params variant[kVariants];
        for (int v = 0; v < kVariants; ++v) variant[v] = dp.params(0, kn.c_str(), -1);
        auto set_bias = [&](fmha_forward_params& p, int64_t row_stride) {
          fmha_tensor& b = p.bias;
          b.data = bias;
          b.dtype = FMHA_DTYPE_F16;
          const int64_t dims[4] = {1, 1, n, n}, strides[4] = {0, 0, row_stride, 1};
          std::memcpy(b.dims, dims, sizeof dims);
          std::memcpy(b.strides, strides, sizeof strides);
        };
        set_bias(variant[1], n);
        variant[2].alibi_slopes = slopes;
        variant[3].softcap = 30.f;
        variant[4].q_descale = variant[4].k_descale = variant[4].v_descale = ones;
        set_bias(variant[5], n);
        variant[5].alibi_slopes = slopes;
        set_bias(variant[6], n + 1);
        // The descale variant is optional (cuda_sm80_tc declines 16-bit
        // descales): a variant the kernel declines reads n/a.
        size_t ws_bytes = 0;
        bool ok = true, runs[kVariants];
        for (int v = 0; v < kVariants; ++v) {
          size_t w = 0;
          runs[v] = fmha_forward_workspace_size(h, &variant[v], &w) == FMHA_SUCCESS;
          if (!runs[v]) {
            std::printf("bias  %-13s N%lld %s variant %d: %s\n", kn.c_str(), (long long)n, mask_str(c).c_str(), v,
                        fmha_last_error_message());
            if (v != 4) ok = false;
          }
          ws_bytes = std::max(ws_bytes, w);
        }
        if (!ok) continue;
        void* ws = nullptr;
        if (ws_bytes) CUDA_OK(cudaMalloc(&ws, ws_bytes));
        std::vector<double> ms[kVariants];
        for (int round = 0; round < kRounds; ++round)
          for (int v = 0; v < kVariants; ++v) {
            if (!runs[v]) continue;
            const Timing t = time_runs(
                [&](int) {
                  const fmha_status s = fmha_forward(h, &variant[v], ws, ws_bytes);
                  if (s != FMHA_SUCCESS) std::printf("forward failed while timing: %s\n", fmha_last_error_message());
                  return s == FMHA_SUCCESS;
                },
                stream, group_ms);
            ms[v].push_back(t.ms);
          }
        if (ws) cudaFree(ws);
        double med[kVariants];
        for (int v = 0; v < kVariants; ++v) {
          std::sort(ms[v].begin(), ms[v].end());
          med[v] = runs[v] ? ms[v][ms[v].size() / 2] : std::nan("");
          if (runs[v] && std::isnan(med[v])) ++failures;
        }
        auto ratio = [&](int v) {  // "n/a" for a variant the kernel declines
          char r[16];
          if (runs[v]) std::snprintf(r, sizeof r, "%.3f", med[v] / med[0]);
          else std::snprintf(r, sizeof r, "n/a");
          return std::string(r);
        };
        char line[256];
        std::snprintf(line, sizeof line, "| FP16 B1 H32 D%lld N%lld %s | %s | %.4f | %.4f | %s | %.4f | %s | %s | %s | %s | %s |",
                      (long long)d, (long long)n, mask_str(c).c_str(), kn.c_str(), med[0], med[1], ratio(1).c_str(),
                      med[2], ratio(2).c_str(), ratio(3).c_str(), ratio(4).c_str(), ratio(5).c_str(), ratio(6).c_str());
        std::printf("%s\n", line);
        std::fflush(stdout);
        lines.push_back(line);
      }
      cudaFree(bias);
      cudaFree(slopes);
      cudaFree(ones);
    }
  std::printf("\n(bias suite, medians of %d interleaved rounds; the bar: bias / none and ALiBi / none <= 1.10)\n",
              kRounds);
  for (const std::string& l : lines) std::printf("%s\n", l.c_str());
  return failures;
}

// ---- the FP8 KV-cache suite (issue 14) ----------------------------------------------

// Whether `label` contains one of the '|'-separated parts of `parts`.
bool label_matches(const std::string& label, const std::string& parts) {
  for (size_t at = 0; at <= parts.size();) {
    const size_t end = std::min(parts.find('|', at), parts.size());
    if (end > at && label.find(parts.substr(at, end - at)) != std::string::npos) return true;
    at = end + 1;
  }
  return false;
}

// The bar: BF16 q, e4m3 K/V, GQA 32/8, D=128, Nq = 1 decode at B=1
// Nk=131072 and B=16 Nk=8192, in K+V bytes read per second against the
// device copy bandwidth measured in the same run (bar: >= 90%), and against
// the BF16 decode of the same shape (bar: ~1.9x faster). Also e5m2, e4m3
// with k/v descales, e4m3 paged (page_size 64, shuffled), and an F16 q
// (e5m2 under F16 is a byte permute; e4m3 one cvt per pair; a BF16 q adds
// the F16 -> BF16 step: the three rows price the conversion). Then causal
// prefill over an FP8 cache (Nq = Nk = 4096) against BF16 K/V.
//
// d: the decode rows' head dim (--d); splits >= 0 (--splits): their
// num_splits (0 automatic, 1 none); only (--case): just the decode rows
// whose label contains one of its '|'-separated parts, and no prefill
// (candidates timed side by side, one call to profile).
int run_fp8kv(fmha_handle h, cudaStream_t stream, const std::vector<std::string>& kernels, double group_ms,
              int64_t d, int splits, const std::string& only) {
  const double copy = copy_bandwidth(stream);
  std::printf("\nfp8kv suite: device copy bandwidth %.2f TB/s (read + write of a 1 GiB cudaMemcpyAsync)\n", copy);
  std::printf("\n| FP8 KV decode (Hq 32 / Hk 8, D %lld, Nq 1%s) | kernel | ms | K+V TB/s | of copy | "
              "speedup vs BF16 K/V |\n|---|---|---|---|---|---|\n",
              static_cast<long long>(d), splits >= 0 ? (", num_splits " + std::to_string(splits)).c_str() : "");
  struct Variant {
    const char* name;
    fmha_dtype q, kv;
    bool descales;
    int64_t page_size;
  };
  const Variant variants[] = {{"bf16 q, bf16 K/V", FMHA_DTYPE_BF16, FMHA_DTYPE_BF16, false, 0},
                              {"bf16 q, e4m3 K/V", FMHA_DTYPE_BF16, FMHA_DTYPE_F8E4M3, false, 0},
                              {"bf16 q, e5m2 K/V", FMHA_DTYPE_BF16, FMHA_DTYPE_F8E5M2, false, 0},
                              {"bf16 q, e4m3 K/V + k/v descales", FMHA_DTYPE_BF16, FMHA_DTYPE_F8E4M3, true, 0},
                              {"bf16 q, e4m3 K/V paged ps=64 shuffled", FMHA_DTYPE_BF16, FMHA_DTYPE_F8E4M3, false, 64},
                              {"f16 q, e4m3 K/V", FMHA_DTYPE_F16, FMHA_DTYPE_F8E4M3, false, 0},
                              {"f16 q, e5m2 K/V", FMHA_DTYPE_F16, FMHA_DTYPE_F8E5M2, false, 0}};
  for (const std::vector<int32_t>& lens : {std::vector<int32_t>{131072}, std::vector<int32_t>(16, 8192)})
    for (const std::string& kn : kernels) {
      double bf16_ms = NAN;
      for (const Variant& v : variants) {
        char label[96];
        std::snprintf(label, sizeof label, "B=%zu Nk=%d %s", lens.size(), lens[0], v.name);
        if (!only.empty() && !label_matches(label, only)) continue;
        ServingProblem sp;
        sp.D = d;
        sp.len_q.assign(lens.size(), 1);
        sp.len_k = lens;
        sp.cap = lens[0];
        sp.dt = v.q;
        sp.kv_dt = v.kv;
        sp.kv_descales = v.descales;
        sp.page_size = v.page_size;
        sp.build();
        if (splits >= 0) sp.p.num_splits = splits;
        const double ms = time_serving(h, stream, sp, kn.c_str(), group_ms);
        if (v.kv == FMHA_DTYPE_BF16) bf16_ms = ms;
        const double tbps = sp.kv_bytes / (ms * 1e-3) / 1e12;
        std::printf("| %s | %s | %.4f | %.3f | %.3f | %.2f |\n", label, kn.c_str(), ms, tbps, tbps / copy,
                    bf16_ms / ms);
        std::fflush(stdout);
      }
    }
  if (!only.empty() || splits >= 0) return 0;
  // Prefill over an FP8 cache runs cuda_sm80_tc's FP8 tile (16 query rows
  // per CTA), not the 16-bit wide tile: its price against BF16 K/V.
  std::printf("\n| FP8 KV prefill (BF16 q, Hq 32 / Hk 8, D 128, causal Nq = Nk = 4096) | kernel | ms | TFLOP/s | "
              "speed vs BF16 K/V |\n|---|---|---|---|---|\n");
  for (const std::string& kn : kernels) {
    double bf16_ms = NAN;
    for (fmha_dtype kv : {FMHA_DTYPE_BF16, FMHA_DTYPE_F8E4M3}) {
      ServingProblem sp;
      sp.len_q = {4096};
      sp.len_k = {4096};
      sp.cap = 4096;
      sp.mask = FMHA_MASK_CAUSAL;
      sp.kv_dt = kv;
      sp.build();
      const double ms = time_serving(h, stream, sp, kn.c_str(), group_ms);
      if (kv == FMHA_DTYPE_BF16) bf16_ms = ms;
      std::printf("| prefill %s K/V | %s | %.4f | %.1f | %.2f |\n", kv == FMHA_DTYPE_BF16 ? "bf16" : "e4m3",
                  kn.c_str(), ms, 4.0 * 128 * sp.pairs / (ms * 1e-3) / 1e12, bf16_ms / ms);
      std::fflush(stdout);
    }
  }
  std::printf("(copy bandwidth %.2f TB/s)\n", copy);
  return 0;
}

// ---- the FP8 prefill suite (issue 14) -------------------------------------------------
//
// q, k and v all e4m3 (V stored transposed, v.strides[2] = 1, as the FP8
// MMA wants it), o BF16, B=1 H=32 D=128, causal and not, N=8192 unless
// --n, against BF16 of the same shape and the same (decoded) values on the
// same kernel, in the same run (the bar without a cuDNN FP8 SDPA:
// FP8 >= 1.6x BF16 causal at N=8192). rel_l2 is FP8's O against BF16's:
// the rounding of P to FP8 (and BF16's own rounding of P).
__global__ void decode_fp8(const __nv_fp8_e4m3* src, __nv_bfloat16* dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = __float2bfloat16(static_cast<float>(src[i]));
}
// dst [bh][n][d] <- src [bh][d][n] (V^T back to V), decoded.
__global__ void decode_fp8_transposed(const __nv_fp8_e4m3* src, __nv_bfloat16* dst, int64_t bh, int64_t n,
                                      int64_t d) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < bh * n * d;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t x = i % d, j = i / d % n, b = i / d / n;
    dst[i] = __float2bfloat16(static_cast<float>(src[(b * d + x) * n + j]));
  }
}

int run_fp8(fmha_handle h, cudaStream_t stream, const std::vector<std::string>& kernels,
            const std::vector<int64_t>& ns, double group_ms) {
  constexpr int64_t B = 1, H = 32, D = 128;
  int failures = 0;
  std::printf("\n| FP8 prefill (e4m3 q/k/v, V^T; o BF16; B 1, H 32, D 128) | kernel | N | mask | e4m3 ms | TFLOP/s | "
              "bf16 ms | TFLOP/s | e4m3 speedup | rel_l2 vs bf16 |\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (const int64_t N : ns.empty() ? std::vector<int64_t>{8192} : ns)
    for (uint32_t mask : {static_cast<uint32_t>(FMHA_MASK_CAUSAL), static_cast<uint32_t>(FMHA_MASK_NONE)}) {
      const int64_t elems = B * H * N * D;
      std::vector<void*> bufs;
      auto dev = [&](size_t bytes) {
        void* x = nullptr;
        CUDA_OK(cudaMalloc(&x, bytes));
        bufs.push_back(x);
        return x;
      };
      auto* q8 = static_cast<__nv_fp8_e4m3*>(dev(elems));
      auto* k8 = static_cast<__nv_fp8_e4m3*>(dev(elems));
      auto* vt8 = static_cast<__nv_fp8_e4m3*>(dev(elems));
      auto* q16 = static_cast<__nv_bfloat16*>(dev(elems * 2));
      auto* k16 = static_cast<__nv_bfloat16*>(dev(elems * 2));
      auto* v16 = static_cast<__nv_bfloat16*>(dev(elems * 2));
      auto* o8 = static_cast<__nv_bfloat16*>(dev(elems * 2));
      auto* o16 = static_cast<__nv_bfloat16*>(dev(elems * 2));
      fill_normal<<<blocks_for(elems, 256), 256>>>(q8, elems, 31);
      fill_normal<<<blocks_for(elems, 256), 256>>>(k8, elems, 32);
      fill_normal<<<blocks_for(elems, 256), 256>>>(vt8, elems, 33);
      decode_fp8<<<blocks_for(elems, 256), 256>>>(q8, q16, elems);
      decode_fp8<<<blocks_for(elems, 256), 256>>>(k8, k16, elems);
      decode_fp8_transposed<<<blocks_for(elems, 256), 256>>>(vt8, v16, B * H, N, D);
      CUDA_OK(cudaDeviceSynchronize());
      auto tensor = [&](void* data, fmha_dtype t, bool transposed) {
        fmha_tensor x{};
        x.data = data;
        x.dtype = t;
        x.dims[0] = B, x.dims[1] = H, x.dims[2] = N, x.dims[3] = D;
        x.strides[0] = H * N * D, x.strides[1] = N * D;
        x.strides[2] = transposed ? 1 : D, x.strides[3] = transposed ? N : 1;
        return x;
      };
      fmha_forward_params p8, p16;
      fmha_forward_params_init(&p8);
      p8.mask_flags = mask;
      p16 = p8;
      p8.q = tensor(q8, FMHA_DTYPE_F8E4M3, false);
      p8.k = tensor(k8, FMHA_DTYPE_F8E4M3, false);
      p8.v = tensor(vt8, FMHA_DTYPE_F8E4M3, true);
      p8.o = tensor(o8, FMHA_DTYPE_BF16, false);
      p16.q = tensor(q16, FMHA_DTYPE_BF16, false);
      p16.k = tensor(k16, FMHA_DTYPE_BF16, false);
      p16.v = tensor(v16, FMHA_DTYPE_BF16, false);
      p16.o = tensor(o16, FMHA_DTYPE_BF16, false);
      const double flops = 4.0 * B * H * N * N * D * (mask ? 0.5 : 1.0);
      for (const std::string& kn : kernels) {
        double ms[2] = {NAN, NAN};
        fmha_forward_params* ps[2] = {&p8, &p16};
        for (int x = 0; x < 2; ++x) {
          ps[x]->kernel = kn.c_str();
          size_t ws_bytes = 0;
          if (fmha_forward_workspace_size(h, ps[x], &ws_bytes) != FMHA_SUCCESS) {
            std::printf("  %s %s: %s\n", kn.c_str(), x ? "bf16" : "e4m3", fmha_last_error_message());
            continue;
          }
          void* ws = ws_bytes ? dev(ws_bytes) : nullptr;
          const Timing t = time_runs(
              [&](int) {
                const fmha_status st = fmha_forward(h, ps[x], ws, ws_bytes);
                if (st != FMHA_SUCCESS) std::printf("forward failed while timing: %s\n", fmha_last_error_message());
                return st == FMHA_SUCCESS;
              },
              stream, group_ms);
          ms[x] = t.ms;
        }
        if (std::isnan(ms[0]) || std::isnan(ms[1])) continue;
        CUDA_OK(cudaStreamSynchronize(stream));
        std::vector<__nv_bfloat16> a(elems), b(elems);
        CUDA_OK(cudaMemcpy(a.data(), o8, elems * 2, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(b.data(), o16, elems * 2, cudaMemcpyDeviceToHost));
        double num = 0, den = 0;
        for (int64_t i = 0; i < elems; ++i) {
          const double x = __bfloat162float(a[i]), y = __bfloat162float(b[i]);
          num += (x - y) * (x - y);
          den += y * y;
        }
        const double rel = std::sqrt(num / den);
        if (!(rel < 3e-2)) ++failures;  // tests/common/tolerance.h: kToleranceFp8P
        std::printf("| fp8 prefill | %s | %lld | %s | %.4f | %.1f | %.4f | %.1f | %.2f | %.2e |\n", kn.c_str(),
                    (long long)N, mask ? "causal" : "none", ms[0], flops / (ms[0] * 1e-3) / 1e12, ms[1],
                    flops / (ms[1] * 1e-3) / 1e12, ms[1] / ms[0], rel);
        std::fflush(stdout);
      }
      for (void* x : bufs) cudaFree(x);
    }
  return failures;
}

struct Row {
  Case c;
  std::string kernel;
  Timing t;
  double tflops = NAN;
  size_t ws = 0;
  Errors e;
  std::string note;
  bool pass = true;
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> suites = {"check", "seed", "bf16", "noncausal", "d64", "gqa", "decode"};
  std::vector<std::string> want_kernels;
  std::vector<int64_t> ns;
  int64_t bias_d = 128;  // --d: the bias and fp8kv suites' head dim
  std::string only_case;  // --case: the fp8kv decode rows whose label contains one of its '|' parts
  int splits_override = -1;
  bool head_major_pages = false;  // serving: paged decode pages [pages, Hk, page_size, D]
  bool no_check = false, check_all = false;
  double group_ms = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--suite") {
      suites = split_list(next());
      if (suites.size() == 1 && suites[0] == "all") suites = {"seed", "bf16", "noncausal", "d64", "d256", "dims", "gqa", "decode"};
    } else if (a == "--kernels") want_kernels = split_list(next());
    else if (a == "--n") {
      for (const std::string& s : split_list(next())) ns.push_back(std::atoll(s.c_str()));
    } else if (a == "--splits") splits_override = std::atoi(next());
    else if (a == "--head-major-pages") head_major_pages = true;
    else if (a == "--d") bias_d = std::atoll(next());
    else if (a == "--case") only_case = next();
    else if (a == "--no-check") no_check = true;
    else if (a == "--check-all") check_all = true;
    else if (a == "--group-ms") group_ms = std::atof(next());
    else {
      std::fprintf(stderr,
                   "usage: bench_cuda [--suite check,seed,bf16,noncausal,d64,d256,dims,gqa,decode,large,serving,bias,fp8kv,fp8|all] "
                   "[--kernels a,b] [--n 2048,8192] [--d 128] [--splits n] [--head-major-pages] [--case 'a|b'] "
                   "[--no-check] [--check-all] [--group-ms x]\n");
      return 2;
    }
  }

  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, sm_%d%d, %d SMs, L2 %d MB\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount,
              prop.l2CacheSize >> 20);
  fmha_handle h = nullptr;
  if (fmha_create(&h, FMHA_DEVICE_CUDA, 0) != FMHA_SUCCESS) {
    std::fprintf(stderr, "fmha_create: %s\n", fmha_last_error_message());
    return 77;
  }
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  fmha_set_stream(h, stream);

  std::vector<std::string> kernels;
  for (int i = 0; i < fmha_kernel_count(); ++i) {
    const std::string n = fmha_kernel_name(i);
    if (n.rfind("cuda_", 0) != 0) continue;
    if (!want_kernels.empty() && std::find(want_kernels.begin(), want_kernels.end(), n) == want_kernels.end()) continue;
    kernels.push_back(n);
  }
  std::printf("kernels:");
  for (auto& k : kernels) std::printf(" %s", k.c_str());
  std::printf("\n");

  std::vector<Case> cases;
  bool serving = false, bias = false, fp8kv = false, fp8 = false;
  for (const std::string& s : suites) {
    if (s == "serving") {
      serving = true;
      continue;
    }
    if (s == "bias") {
      bias = true;
      continue;
    }
    if (s == "fp8kv") {
      fp8kv = true;
      continue;
    }
    if (s == "fp8") {
      fp8 = true;
      continue;
    }
    std::vector<Case> add = s == "check" ? check_cases() : s == "large" ? large_cases() : perf_cases(s, ns);
    if (add.empty()) std::fprintf(stderr, "unknown or empty suite '%s'\n", s.c_str());
    cases.insert(cases.end(), add.begin(), add.end());
  }

  std::vector<Row> rows;
  int failures = 0;
  for (const Case& c : cases) {
    const bool timed = c.suite != "check" && c.suite != "large";
    const bool do_check = !no_check && (c.check || check_all);
    DeviceProblem dp(c, prop.l2CacheSize, timed);
    Reference ref;
    if (do_check) ref = compute_reference(dp);
    for (const std::string& kn : kernels) {
      Row r;
      r.c = c;
      r.kernel = kn;
      fmha_forward_params prm = dp.params(0, kn.c_str(), splits_override);
      size_t ws_bytes = 0;
      fmha_status st = fmha_forward_workspace_size(h, &prm, &ws_bytes);
      if (st == FMHA_ERROR_UNSUPPORTED) continue;
      if (st != FMHA_SUCCESS) {
        std::printf("%-10s %-14s workspace_size failed: %s\n", c.suite.c_str(), kn.c_str(), fmha_last_error_message());
        ++failures;
        continue;
      }
      void* ws = nullptr;
      if (ws_bytes) CUDA_OK(cudaMalloc(&ws, ws_bytes));
      r.ws = ws_bytes;
      // One checked run on input set 0 (the output was poisoned at allocation;
      // poison again for each kernel).
      const int64_t oe = c.B * c.Hq * c.Nq * c.D * dtype_bytes(c.dtype) / 2;
      poison<<<blocks_for(oe, 256), 256, 0, stream>>>(static_cast<uint16_t*>(dp.o[0]), oe);
      st = fmha_forward(h, &prm, ws, ws_bytes);
      if (st != FMHA_SUCCESS) {
        std::printf("%-10s %-14s forward failed: %s\n", c.suite.c_str(), kn.c_str(), fmha_last_error_message());
        ++failures;
        if (ws) cudaFree(ws);
        continue;
      }
      CUDA_OK(cudaStreamSynchronize(stream));
      CUDA_OK(cudaGetLastError());
      if (do_check) {
        r.e = compare(dp, ref);
        const bool bf = c.dtype == FMHA_DTYPE_BF16;
        const double tol_rel = bf ? 1e-2 : 2e-3, tol_abs = bf ? 6e-2 : 1e-2;
        r.pass = r.e.nan == 0 && r.e.rel_l2 <= tol_rel && r.e.max_abs <= tol_abs && !(r.e.lse_abs > 2e-3);
        if (!r.pass) ++failures;
      }
      if (timed) {
        std::vector<fmha_forward_params> per_set;
        for (int s = 0; s < dp.sets; ++s) per_set.push_back(dp.params(s, kn.c_str(), splits_override));
        r.t = time_runs(
            [&](int i) {
              const fmha_status s = fmha_forward(h, &per_set[i % dp.sets], ws, ws_bytes);
              if (s != FMHA_SUCCESS) std::printf("forward failed while timing: %s\n", fmha_last_error_message());
              return s == FMHA_SUCCESS;
            },
            stream, group_ms);
        r.tflops = 4.0 * static_cast<double>(c.D) * visible_pairs(c) / (r.t.ms * 1e-3) / 1e12;
      }
      if (ws) cudaFree(ws);
      std::printf("%-9s %-13s %-4s B%-4lld H%lld/%lld Nq%-6lld Nk%-6lld D%-3lld %-18s ms %9.4f %s TF %6.1f ws %7.2fMiB "
                  "max_abs %.3g rel_l2 %.3g lse %.3g nan %lld %s\n",
                  c.suite.c_str(), kn.c_str(), dtype_str(c.dtype), (long long)c.B, (long long)c.Hq, (long long)c.Hk,
                  (long long)c.Nq, (long long)c.Nk, (long long)c.D, mask_str(c).c_str(), r.t.ms, r.t.graph ? "g" : " ",
                  r.tflops, r.ws / 1048576.0, r.e.max_abs, r.e.rel_l2, r.e.lse_abs, (long long)r.e.nan,
                  do_check ? (r.pass ? "PASS" : "FAIL") : "");
      std::fflush(stdout);
      rows.push_back(r);
    }
  }

  // ---- the compact table ------------------------------------------------------------
  std::printf("\n| suite | kernel | dtype | B | Hq/Hk | Nq | Nk | D | mask | ms | TFLOP/s | ws MiB | max_abs | rel_l2 | FA2 ms | FA2/fmha | cuDNN/fmha |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    const Case& c = r.c;
    char fa2[32] = "-", rf[32] = "-", rc[32] = "-", ms[32] = "-", tf[32] = "-", ma[32] = "-", rl[32] = "-";
    if (!std::isnan(r.t.ms)) {
      std::snprintf(ms, sizeof ms, "%.4f%s", r.t.ms, r.t.graph ? "g" : "");
      std::snprintf(tf, sizeof tf, "%.1f", r.tflops);
      if (c.fa2_ms > 0) {
        std::snprintf(fa2, sizeof fa2, "%.4f", c.fa2_ms);
        std::snprintf(rf, sizeof rf, "%.2f", c.fa2_ms / r.t.ms);
      }
      if (c.cudnn_ms > 0) std::snprintf(rc, sizeof rc, "%.2f", c.cudnn_ms / r.t.ms);
    }
    if (r.e.done) {
      std::snprintf(ma, sizeof ma, "%.2e", r.e.max_abs);
      std::snprintf(rl, sizeof rl, "%.2e%s", r.e.rel_l2, r.pass ? "" : " FAIL");
    }
    std::printf("| %s | %s | %s | %lld | %lld/%lld | %lld | %lld | %lld | %s | %s | %s | %.2f | %s | %s | %s | %s | %s |\n",
                c.suite.c_str(), r.kernel.c_str(), dtype_str(c.dtype), (long long)c.B, (long long)c.Hq,
                (long long)c.Hk, (long long)c.Nq, (long long)c.Nk, (long long)c.D, mask_str(c).c_str(), ms, tf,
                r.ws / 1048576.0, ma, rl, fa2, rf, rc);
  }
  if (serving) {
    std::vector<std::string> sk;
    for (const std::string& k : kernels)
      if (!want_kernels.empty() || k == "cuda_sm80_tc") sk.push_back(k);
    failures += run_serving(h, stream, sk, group_ms, splits_override, head_major_pages);
  }
  if (bias) {
    std::vector<std::string> bk;
    for (const std::string& k : kernels)
      if (!want_kernels.empty() || k == "cuda_sm80_tc" || k == "cuda_sm90_ws") bk.push_back(k);
    failures += run_bias(h, stream, bk, ns, group_ms, prop.l2CacheSize, bias_d);
  }
  if (fp8kv) {
    std::vector<std::string> sk;
    for (const std::string& k : kernels)
      if (!want_kernels.empty() || k == "cuda_sm80_tc") sk.push_back(k);
    failures += run_fp8kv(h, stream, sk, group_ms, bias_d, splits_override, only_case);
  }
  if (fp8) {
    std::vector<std::string> sk;
    for (const std::string& k : kernels)
      if (!want_kernels.empty() || k == "cuda_sm90_ws") sk.push_back(k);
    failures += run_fp8(h, stream, sk, ns, group_ms);
  }
  std::printf("\n%d failures\n", failures);
  fmha_destroy(h);
  cudaStreamDestroy(stream);
  return failures == 0 ? 0 : 1;
}
