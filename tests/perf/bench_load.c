/* bench_load: what a process pays once for libfmha's kernels, through the
 * public C API: fmha_create on a CUDA handle, then the first forward of a
 * few problems that run kernels of different translation units (so of
 * different fat binaries), each against the same forward run again. The
 * difference is mostly module loading: with CUDA's lazy loading (the
 * default), a module's image is read, decompressed when its fat binary is
 * compressed (FMHA_CUDA_COMPRESS_ALL, FMHA_CUDA_COMPRESS_MODE) and loaded
 * the first time one of its kernels runs; CUDA_MODULE_LOADING=EAGER moves
 * all of it into the first call that touches the runtime.
 *
 *   bench_load [--device D]
 *
 * Run it in a fresh process per measurement (tools/device/build_size.sh
 * runs it several times per library and interleaves the libraries). The
 * CUDA context is created before the clock starts (cudaFree(0)), so the
 * numbers are the library's and its modules', not the driver's context.
 * Inputs are zero-filled: only the time matters here. */
#define _POSIX_C_SOURCE 199309L  /* clock_gettime */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_tensor.h"
#include "fmha/fmha.h"

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static void die(const char* what, const char* why) {
  fprintf(stderr, "bench_load: %s: %s\n", what, why);
  exit(1);
}

typedef struct Case {
  const char* name;
  const char* kernel; /* NULL = automatic choice */
  fmha_dtype dtype;
  int64_t B, Hq, Hk, Nq, Nk, D;
  uint32_t mask;
} Case;

static size_t elem_bytes(fmha_dtype t) { return t == FMHA_DTYPE_F32 ? 4 : 2; }

static void* device_zeros(size_t bytes) {
  void* p = NULL;
  if (cudaMalloc(&p, bytes) != cudaSuccess) die("cudaMalloc", "failed");
  if (cudaMemset(p, 0, bytes) != cudaSuccess) die("cudaMemset", "failed");
  return p;
}

/* One forward, synchronized, in milliseconds. */
static double timed_forward(fmha_handle h, const fmha_forward_params* p, void* ws, size_t ws_bytes) {
  const double t0 = now_ms();
  const fmha_status s = fmha_forward(h, p, ws, ws_bytes);
  if (s != FMHA_SUCCESS) die("fmha_forward", fmha_last_error_message());
  if (cudaDeviceSynchronize() != cudaSuccess) die("cudaDeviceSynchronize", "failed");
  return now_ms() - t0;
}

int main(int argc, char** argv) {
  int device = 0;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) device = atoi(argv[++i]);
    else die("usage", "bench_load [--device D]");
  }
  if (cudaSetDevice(device) != cudaSuccess || cudaFree(0) != cudaSuccess) {
    printf("bench_load: skipped: no CUDA device\n");
    return 77;
  }
  const char* loading = getenv("CUDA_MODULE_LOADING");
  const double t0 = now_ms();
  fmha_handle h = NULL;
  if (fmha_create(&h, FMHA_DEVICE_CUDA, device) != FMHA_SUCCESS) die("fmha_create", fmha_last_error_message());
  const double create_ms = now_ms() - t0;

  /* Each case's kernels sit in a different translation unit on sm_90
   * (cuda_sm90_ws f16 D=128; cuda_sm80_tc f16 D=128, narrow then wide
   * tile, the same unit; cuda_generic f32). */
  const Case cases[] = {
      {"prefill f16 d128", NULL, FMHA_DTYPE_F16, 1, 8, 8, 1024, 1024, 128, FMHA_MASK_CAUSAL},
      {"decode f16 d128", NULL, FMHA_DTYPE_F16, 1, 32, 8, 1, 4096, 128, FMHA_MASK_NONE},
      {"prefill f16 d128 sm80", "cuda_sm80_tc", FMHA_DTYPE_F16, 1, 8, 8, 1024, 1024, 128, FMHA_MASK_CAUSAL},
      {"f32 d64", NULL, FMHA_DTYPE_F32, 1, 4, 4, 256, 256, 64, FMHA_MASK_CAUSAL},
  };
  printf("bench_load: CUDA_MODULE_LOADING=%s, fmha_create %.2f ms\n", loading ? loading : "(default)", create_ms);
  printf("| case | kernel | first ms | again ms | first - again |\n|---|---|---|---|---|\n");
  double total = create_ms;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    const Case* k = &cases[c];
    const size_t e = elem_bytes(k->dtype);
    void* q = device_zeros((size_t)(k->B * k->Hq * k->Nq * k->D) * e);
    void* kk = device_zeros((size_t)(k->B * k->Hk * k->Nk * k->D) * e);
    void* v = device_zeros((size_t)(k->B * k->Hk * k->Nk * k->D) * e);
    void* o = device_zeros((size_t)(k->B * k->Hq * k->Nq * k->D) * e);
    fmha_forward_params p;
    fmha_forward_params_init(&p);
    p.q = bench_tensor(q, k->dtype, k->B, k->Hq, k->Nq, k->D);
    p.k = bench_tensor(kk, k->dtype, k->B, k->Hk, k->Nk, k->D);
    p.v = bench_tensor(v, k->dtype, k->B, k->Hk, k->Nk, k->D);
    p.o = bench_tensor(o, k->dtype, k->B, k->Hq, k->Nq, k->D);
    p.mask_flags = k->mask;
    p.kernel = k->kernel;
    size_t ws_bytes = 0;
    if (fmha_forward_workspace_size(h, &p, &ws_bytes) != FMHA_SUCCESS)
      die("fmha_forward_workspace_size", fmha_last_error_message());
    void* ws = ws_bytes ? device_zeros(ws_bytes) : NULL;
    char chosen[512] = "";
    fmha_forward_explain(h, &p, chosen, sizeof chosen);
    const char* name = strstr(chosen, "chosen: ");
    char kernel[64] = "?";
    if (name) sscanf(name + 8, "%63s", kernel);
    const double first = timed_forward(h, &p, ws, ws_bytes);
    const double again = timed_forward(h, &p, ws, ws_bytes);
    total += first;
    printf("| %s | %s | %.2f | %.3f | %.2f |\n", k->name, kernel, first, again, first - again);
    cudaFree(ws);
    cudaFree(o);
    cudaFree(v);
    cudaFree(kk);
    cudaFree(q);
  }
  printf("bench_load: create + first forwards %.2f ms\n", total);
  fmha_destroy(h);
  return 0;
}
