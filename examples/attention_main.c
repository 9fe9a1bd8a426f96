/*
 * attention_main (C11): one causal FP16 attention forward on the seed's shape
 * (B=1, H=32, D=128) through the public C API.
 *
 *   attention_main [--device auto|cpu|cuda] [--n N] [--heads H] [--bf16]
 *
 * With --device auto (the default) it runs on the first GPU when fmha was
 * built with CUDA and one is present (N=4096), else on the CPU backend
 * (N=1024). It prints the kernel fmha chose, the time, and the error of a
 * sample of rows against a float64 reference computed here.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <fmha/fmha.h>

#if FMHA_EXAMPLE_CUDA
#include <cuda_runtime_api.h>
#endif

/* ---- FP16/BF16 <-> float, round to nearest even ---------------------- */

static float half_to_float(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  float f;
  if (exp == 0) {
    f = ldexpf((float)man, -24); /* zero or subnormal */
  } else if (exp == 31) {
    f = man ? NAN : INFINITY;
  } else {
    f = ldexpf((float)(man | 0x400u), (int)exp - 25);
  }
  return sign ? -f : f;
}

static uint16_t float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  const float a = fabsf(f);
  if (a != a) return sign | 0x7e00u;
  if (a >= 65520.f) return sign | 0x7c00u; /* rounds to inf */
  if (a < 6.103515625e-05f) {              /* subnormal: units of 2^-24 */
    return sign | (uint16_t)lrintf(a * 16777216.f);
  }
  int e;
  const float m = frexpf(a, &e); /* a = m * 2^e, m in [0.5, 1) */
  long mant = lrintf(m * 2048.f); /* 11 significant bits, ties to even */
  if (mant == 2048) { mant = 1024; e += 1; }
  return sign | (uint16_t)(((e + 14) << 10) | (mant - 1024));
}

static float bf16_to_float(uint16_t b) {
  uint32_t x = (uint32_t)b << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

static uint16_t float_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

/* ---- helpers ---------------------------------------------------------- */

static double now_seconds(void) {
  struct timespec ts;
  timespec_get(&ts, TIME_UTC);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float uniform_pm1(void) { /* xorshift64*, uniform in [-1, 1) */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (float)((rng_state * 0x2545f4914f6cdd1dull) >> 40) / 8388608.f - 1.f;
}

static int check(fmha_status s, const char* what) {
  if (s != FMHA_SUCCESS) {
    fprintf(stderr, "%s failed: %s: %s\n", what, fmha_status_string(s), fmha_last_error_message());
    return 1;
  }
  return 0;
}

static void contiguous(fmha_tensor* t, void* data, fmha_dtype dtype, int64_t b, int64_t h,
                       int64_t n, int64_t d) {
  t->data = data;
  t->dtype = dtype;
  t->dims[0] = b; t->dims[1] = h; t->dims[2] = n; t->dims[3] = d;
  t->strides[3] = 1; t->strides[2] = d; t->strides[1] = n * d; t->strides[0] = h * n * d;
}

/* Why auto fell back to the CPU, in a user's words; fmha's message, which
 * carries the CUDA runtime's text, is printed below it. */
static const char* no_gpu_reason(void) {
#if FMHA_EXAMPLE_CUDA
  int driver = 0;
  if (cudaDriverGetVersion(&driver) == cudaSuccess && driver == 0) return "no NVIDIA driver found";
  return "no usable CUDA device";
#else
  return "this fmha was built without CUDA";
#endif
}

int main(int argc, char** argv) {
  const char* device = "auto";
  int64_t n = 0, heads = 32;
  const int64_t batch = 1, dim = 128;
  fmha_dtype dtype = FMHA_DTYPE_F16;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
    else if (!strcmp(argv[i], "--n") && i + 1 < argc) n = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--heads") && i + 1 < argc) heads = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--bf16")) dtype = FMHA_DTYPE_BF16;
    else {
      fprintf(stderr, "usage: %s [--device auto|cpu|cuda] [--n N] [--heads H] [--bf16]\n", argv[0]);
      return 2;
    }
  }

  /* Pick the device: CUDA when asked or available, else CPU. */
  fmha_handle h = NULL;
  fmha_device_kind kind = FMHA_DEVICE_CPU;
  if (strcmp(device, "cpu") != 0) {
    fmha_status s = fmha_create(&h, FMHA_DEVICE_CUDA, 0);
    if (s == FMHA_SUCCESS) {
      kind = FMHA_DEVICE_CUDA;
    } else if (!strcmp(device, "cuda")) {
      return check(s, "fmha_create(CUDA)");
    } else {
      printf("%s — running on the CPU backend\n  (fmha_create: %s)\n", no_gpu_reason(), fmha_last_error_message());
    }
  }
  if (kind == FMHA_DEVICE_CPU && check(fmha_create(&h, FMHA_DEVICE_CPU, 0), "fmha_create(CPU)")) return 1;
  if (n <= 0) n = kind == FMHA_DEVICE_CUDA ? 4096 : 1024;

  /* Random Q, K, V in [-1, 1): logits stay O(1) like a trained model's. */
  const size_t count = (size_t)(batch * heads * n * dim);
  uint16_t* hq = malloc(count * 2);
  uint16_t* hk = malloc(count * 2);
  uint16_t* hv = malloc(count * 2);
  uint16_t* ho = malloc(count * 2);
  if (!hq || !hk || !hv || !ho) { fprintf(stderr, "out of host memory\n"); return 1; }
  uint16_t (*to_bits)(float) = dtype == FMHA_DTYPE_F16 ? float_to_half : float_to_bf16;
  float (*from_bits)(uint16_t) = dtype == FMHA_DTYPE_F16 ? half_to_float : bf16_to_float;
  for (size_t i = 0; i < count; ++i) {
    hq[i] = to_bits(uniform_pm1());
    hk[i] = to_bits(uniform_pm1());
    hv[i] = to_bits(uniform_pm1());
    ho[i] = 0xffffu; /* poison: NaN in both formats */
  }

  void *q = hq, *k = hk, *v = hv, *o = ho, *workspace = NULL;
#if FMHA_EXAMPLE_CUDA
  if (kind == FMHA_DEVICE_CUDA) {
    if (cudaMalloc(&q, count * 2) || cudaMalloc(&k, count * 2) || cudaMalloc(&v, count * 2) ||
        cudaMalloc(&o, count * 2)) { fprintf(stderr, "cudaMalloc failed\n"); return 1; }
    cudaMemcpy(q, hq, count * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(k, hk, count * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(v, hv, count * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(o, ho, count * 2, cudaMemcpyHostToDevice);
  }
#endif

  fmha_forward_params p;
  fmha_forward_params_init(&p);
  contiguous(&p.q, q, dtype, batch, heads, n, dim);
  contiguous(&p.k, k, dtype, batch, heads, n, dim);
  contiguous(&p.v, v, dtype, batch, heads, n, dim);
  contiguous(&p.o, o, dtype, batch, heads, n, dim);
  p.mask_flags = FMHA_MASK_CAUSAL;

  char explain[2048];
  if (check(fmha_forward_explain(h, &p, explain, sizeof explain), "fmha_forward_explain")) return 1;
  size_t ws_bytes = 0;
  if (check(fmha_forward_workspace_size(h, &p, &ws_bytes), "fmha_forward_workspace_size")) return 1;
#if FMHA_EXAMPLE_CUDA
  if (kind == FMHA_DEVICE_CUDA && ws_bytes && cudaMalloc(&workspace, ws_bytes)) return 1;
#endif
  if (kind == FMHA_DEVICE_CPU && ws_bytes) workspace = aligned_alloc(64, (ws_bytes + 63) / 64 * 64);

  /* Warm up once, then time several runs and keep the fastest. */
  double best = 1e30;
  for (int rep = 0; rep < 4; ++rep) {
    const double t0 = now_seconds();
    if (check(fmha_forward(h, &p, workspace, ws_bytes), "fmha_forward")) return 1;
#if FMHA_EXAMPLE_CUDA
    if (kind == FMHA_DEVICE_CUDA && cudaDeviceSynchronize() != cudaSuccess) return 1;
#endif
    const double t = now_seconds() - t0;
    if (rep > 0 && t < best) best = t;
  }
#if FMHA_EXAMPLE_CUDA
  if (kind == FMHA_DEVICE_CUDA) cudaMemcpy(ho, o, count * 2, cudaMemcpyDeviceToHost);
#endif

  /* float64 reference on a sample of rows of every head. */
  const double scale = 1.0 / sqrt((double)dim);
  double err2 = 0, ref2 = 0, max_abs = 0;
  int unwritten = 0;
  double* s = malloc((size_t)n * sizeof(double));
  for (int64_t hh = 0; hh < heads; ++hh) {
    for (int64_t i = n - 1; i >= 0; i -= n / 7 + 1) {
      const uint16_t* qi = hq + (hh * n + i) * dim;
      double m = -INFINITY, l = 0;
      for (int64_t j = 0; j <= i; ++j) { /* causal, Nq == Nk */
        const uint16_t* kj = hk + (hh * n + j) * dim;
        double dot = 0;
        for (int64_t d = 0; d < dim; ++d) dot += (double)from_bits(qi[d]) * from_bits(kj[d]);
        s[j] = dot * scale;
        if (s[j] > m) m = s[j];
      }
      for (int64_t j = 0; j <= i; ++j) {
        s[j] = exp(s[j] - m); /* now the unnormalized probability */
        l += s[j];
      }
      for (int64_t d = 0; d < dim; ++d) {
        double acc = 0;
        for (int64_t j = 0; j <= i; ++j) acc += s[j] * from_bits(hv[(hh * n + j) * dim + d]);
        const double ref = acc / l;
        const double got = from_bits(ho[(hh * n + i) * dim + d]);
        if (got != got) ++unwritten;
        err2 += (got - ref) * (got - ref);
        ref2 += ref * ref;
        if (fabs(got - ref) > max_abs) max_abs = fabs(got - ref);
      }
    }
  }
  const double rel_l2 = sqrt(err2 / ref2);
  const double pairs = (double)n * (double)(n + 1) / 2.0;
  const double flops = 4.0 * (double)dim * pairs * (double)(batch * heads);

  char* chosen = strstr(explain, "chosen: ");
  if (chosen) chosen[strcspn(chosen, "\n")] = '\0';
  printf("fmha %u.%u.%u  device=%s  B=%lld H=%lld N=%lld D=%lld causal %s\n", fmha_version() / 10000,
         fmha_version() / 100 % 100, fmha_version() % 100, kind == FMHA_DEVICE_CUDA ? "cuda" : "cpu",
         (long long)batch, (long long)heads, (long long)n, (long long)dim,
         dtype == FMHA_DTYPE_F16 ? "FP16" : "BF16");
  printf("kernel: %s\n", chosen ? chosen + 8 : "?");
  const double rate = flops / best;
  if (rate >= 1e12)
    printf("time: %.3f ms  (%.1f TFLOP/s on the causal count)\n", best * 1e3, rate / 1e12);
  else
    printf("time: %.3f ms  (%.1f GFLOP/s on the causal count)\n", best * 1e3, rate / 1e9);
  printf("error vs float64 reference (sampled rows): rel_l2=%.3e max_abs=%.3e unwritten=%d\n", rel_l2,
         max_abs, unwritten);
  const double tolerance = dtype == FMHA_DTYPE_F16 ? 2e-3 : 1e-2;
  const int ok = unwritten == 0 && rel_l2 <= tolerance;
  printf("%s\n", ok ? "OK" : "FAILED");

#if FMHA_EXAMPLE_CUDA
  if (kind == FMHA_DEVICE_CUDA) { cudaFree(q); cudaFree(k); cudaFree(v); cudaFree(o); cudaFree(workspace); }
  else
#endif
  free(workspace);
  free(s); free(hq); free(hk); free(hv); free(ho);
  fmha_destroy(h);
  return ok ? 0 : 1;
}
