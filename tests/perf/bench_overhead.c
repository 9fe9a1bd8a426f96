/* bench_overhead: the host cost of one fmha_forward with its workspace query,
 * through the public C API, on problems so small that the kernel's own time
 * never shows (B=1 H=1 N=16 D=64 F16, and a GQA 4/1 causal variant with lse).
 *
 *   bench_overhead [--iters N] [--warmup W] [--sync-every K] [--device D]
 *                  [--no-cpu] [--no-cuda]
 *
 * Each timed call is bracketed by clock_gettime(CLOCK_MONOTONIC) (the two
 * reads add ~20-40 ns, not subtracted); the table gives the mean, median and
 * 90th percentile in microseconds over --iters calls after --warmup untimed
 * ones. Rows per handle and case:
 *
 *   ws+forward       fmha_forward_workspace_size + fmha_forward, the steady
 *                    state of a caller that asks for the workspace each call.
 *                    CUDA: enqueue only, on a non-blocking stream that is
 *                    synchronized every K calls outside the timed window, so
 *                    the launch queue never fills and nothing waits on the
 *                    GPU; "wall" is the whole loop, syncs included, per call.
 *   ws+forward (capture)  the same calls while the stream is being captured
 *                    into a CUDA graph (cudaStreamCaptureModeGlobal, the
 *                    strictest mode; K calls per graph, begin/end capture
 *                    outside the timed window).
 *   ws+forward (one allocation)  q, k, v, o and lse carved from one
 *                    cudaMalloc, as a caching allocator (PyTorch's) places
 *                    small tensors; on main this costs the same as separate
 *                    allocations.
 *   ws+forward (params alternate)  every other call with the causal flag
 *                    flipped: no call's params equal the previous call's, so
 *                    the workspace query validates from scratch (a serving
 *                    loop whose params change every step; the forward still
 *                    reuses its own query's validation).
 *   workspace_size   fmha_forward_workspace_size alone (same params each
 *                    call), and "(params alternate)" as above: the cost of a
 *                    full validation and dispatch.
 *   invalid          fmha_forward with k.dims[3] != q.dims[3]
 *                    (FMHA_ERROR_INVALID_ARGUMENT, message formatted).
 *   host pointer     CUDA: fmha_forward with q in plain host memory
 *                    (rejected by the memory-location check).
 *
 * The CPU handle (1 thread) runs the tiny forward for real, so its
 * ws+forward row includes the attention itself; it is the second line the
 * issue asks for, and the part of the host path that needs no GPU.
 *
 * With CUDA it also times the runtime primitives the host path is made of
 * (cudaGetDevice, cudaPointerGetAttributes, the driver's
 * cuPointerGetAttributes with the attributes fmha asks for,
 * cudaGetLastError, and cudaMemsetAsync of 4 bytes as the cost of one
 * enqueue), so the ws+forward row can be read as a sum.
 *
 * And the launch floor ("launch" rows, tests/perf/bench_launch.cu): an
 * empty kernel, 1 CTA of 32 threads, enqueued with <<<>>>, cudaLaunchKernel,
 * cudaLaunchKernelEx and the driver's cuLaunchKernel (on a CUfunction from
 * cudaGetFuncBySymbol, and on a CUkernel from cudaGetKernel), with an 8-byte
 * and a sizeof(FwdParams) parameter, with the sm80 tile's 66 KiB of dynamic
 * shared memory, and while the GPU stays busy (each kernel spins ~8 us);
 * same stream protocol as ws+forward (sync every K calls, untimed). The
 * "launch" rows launch through the runtime that created the stream
 * (libcudart.so); "launch-static" through a library with its own static
 * runtime (libbench_launch_static.so), which is how libfmha launches.
 *
 * A profiling build of libfmha (cmake -DFMHA_HOST_PROFILE=ON) exports
 * fmha_internal_host_profile; when it is there (dlsym), each row of the
 * fmha calls is followed by its per-stage breakdown (core/host_profile.h).
 *
 * Goal (issue 9): ws+forward <= 3 us on the CUDA handle. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c11 */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <fmha/fmha.h>

#include "bench_tensor.h"

#if defined(__linux__) || defined(__APPLE__)
#include <dlfcn.h>
#define BENCH_HAVE_DLSYM 1
#endif

#if BENCH_WITH_CUDA
#include <cuda.h>
#include <cuda_runtime.h>

#include "bench_launch.h"
#endif

/* ---- options and timing --------------------------------------------------- */

typedef struct {
  int iters, warmup, sync_every, device, cpu, cuda;
} options;

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int cmp_i64(const void* a, const void* b) {
  const int64_t x = *(const int64_t*)a, y = *(const int64_t*)b;
  return (x > y) - (x < y);
}

/* Per-call samples of one row. */
typedef struct {
  int64_t* ns;
  int n;
  int64_t wall_ns; /* the whole loop, when it had untimed parts (syncs) */
} samples;

static void print_header(void) {
  printf("%-6s %-16s %-34s %9s %9s %9s %9s\n", "handle", "case", "what", "mean_us", "median_us", "p90_us",
         "wall_us");
}

static void print_row(const char* handle, const char* name, const char* what, samples* s) {
  if (s->n == 0) return;
  double sum = 0;
  for (int i = 0; i < s->n; ++i) sum += (double)s->ns[i];
  qsort(s->ns, (size_t)s->n, sizeof s->ns[0], cmp_i64);
  const double mean = sum / s->n / 1e3;
  const double median = (double)s->ns[s->n / 2] / 1e3;
  const double p90 = (double)s->ns[(int)((int64_t)s->n * 9 / 10)] / 1e3;
  if (s->wall_ns > 0)
    printf("%-6s %-16s %-34s %9.3f %9.3f %9.3f %9.3f\n", handle, name, what, mean, median, p90,
           (double)s->wall_ns / s->n / 1e3);
  else
    printf("%-6s %-16s %-34s %9.3f %9.3f %9.3f %9s\n", handle, name, what, mean, median, p90, "-");
  fflush(stdout);
}

/* ---- the stage breakdown of a profiling build ------------------------------ */

typedef int (*host_profile_fn)(char* buf, size_t len, int reset);
static host_profile_fn g_profile = NULL;

static void find_profile(void) {
#if BENCH_HAVE_DLSYM
  void* self = dlopen(NULL, RTLD_NOW);
  void* sym = self != NULL ? dlsym(self, "fmha_internal_host_profile") : NULL;
  if (sym != NULL) memcpy(&g_profile, &sym, sizeof g_profile); /* object to function pointer */
#endif
}

/* Drops the samples so far (warm-up, the previous row). */
static void profile_reset(void) {
  char none[1];
  if (g_profile != NULL) g_profile(none, sizeof none, 1);
}

/* The breakdown of the row just printed. */
static void profile_print(void) {
  static char text[8192];
  if (g_profile == NULL) return;
  g_profile(text, sizeof text, 1);
  fputs(text, stdout);
  fflush(stdout);
}

static void die_status(const char* what, fmha_status s) {
  fprintf(stderr, "bench_overhead: %s: %s: %s\n", what, fmha_status_string(s), fmha_last_error_message());
  exit(2);
}

static void usage(const char* msg) {
  fprintf(stderr,
          "%s\nusage: bench_overhead [--iters N] [--warmup W] [--sync-every K] [--device D] [--no-cpu] "
          "[--no-cuda]\n",
          msg);
  exit(2);
}

static options parse(int argc, char** argv) {
  options o = {20000, 2000, 64, 0, 1, 1};
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    int* target = NULL;
    if (strcmp(a, "--iters") == 0) target = &o.iters;
    else if (strcmp(a, "--warmup") == 0) target = &o.warmup;
    else if (strcmp(a, "--sync-every") == 0) target = &o.sync_every;
    else if (strcmp(a, "--device") == 0) target = &o.device;
    else if (strcmp(a, "--no-cpu") == 0) { o.cpu = 0; continue; }
    else if (strcmp(a, "--no-cuda") == 0) { o.cuda = 0; continue; }
    else usage("unknown flag");
    if (i + 1 >= argc) usage("flag needs a value");
    *target = atoi(argv[++i]);
  }
  if (o.iters < 1 || o.warmup < 0 || o.sync_every < 1) usage("--iters and --sync-every must be >= 1");
  return o;
}

/* ---- the problems ----------------------------------------------------------- */

typedef struct {
  const char* name;
  int64_t hq, hk, n, d;
  uint32_t mask;
  int lse;
} shape;

static const shape kShapes[] = {
    {"dense", 1, 1, 16, 64, FMHA_MASK_NONE, 0},
    {"gqa_causal_lse", 4, 1, 16, 64, FMHA_MASK_CAUSAL, 1},
};

static size_t q_elems(const shape* s) { return (size_t)(s->hq * s->n * s->d); }
static size_t kv_elems(const shape* s) { return (size_t)(s->hk * s->n * s->d); }
static size_t lse_elems(const shape* s) { return (size_t)(s->hq * s->n); }

/* Random F16 bits in [-1, 1) (exponent <= 14: finite, no NaN). */
static void fill_f16(uint16_t* x, size_t n, uint32_t* seed) {
  for (size_t i = 0; i < n; ++i) {
    *seed = *seed * 1664525u + 1013904223u;
    const uint32_t r = *seed >> 8;
    x[i] = (uint16_t)((r & 0x8000u) | (((r >> 10) % 15u) << 10) | (r & 0x3ffu));
  }
}

static fmha_forward_params make_params(const shape* s, void* q, void* k, void* v, void* o, float* lse) {
  fmha_forward_params p;
  fmha_forward_params_init(&p);
  p.q = bench_tensor(q, FMHA_DTYPE_F16, 1, s->hq, s->n, s->d);
  p.k = bench_tensor(k, FMHA_DTYPE_F16, 1, s->hk, s->n, s->d);
  p.v = bench_tensor(v, FMHA_DTYPE_F16, 1, s->hk, s->n, s->d);
  p.o = bench_tensor(o, FMHA_DTYPE_F16, 1, s->hq, s->n, s->d);
  p.mask_flags = s->mask;
  p.lse = s->lse ? lse : NULL;
  return p;
}

/* One call of the steady state: the workspace query, then the forward. */
static fmha_status ws_and_forward(fmha_handle h, const fmha_forward_params* p, void* ws, size_t ws_bytes) {
  size_t need = 0;
  fmha_status s = fmha_forward_workspace_size(h, p, &need);
  if (s != FMHA_SUCCESS) return s;
  if (need > ws_bytes) return FMHA_ERROR_WORKSPACE_TOO_SMALL;
  return fmha_forward(h, p, ws, ws_bytes);
}

/* Times `iters` calls of ws_and_forward (sync: called every sync_every calls,
 * untimed, and before the first). */
typedef void (*sync_fn)(void* user);

static void time_forward(fmha_handle h, const fmha_forward_params* p, const fmha_forward_params* alt, void* ws,
                         size_t ws_bytes, int iters, int sync_every, sync_fn sync, void* user, samples* out) {
  profile_reset();
  const int64_t wall0 = now_ns();
  for (int i = 0; i < iters; ++i) {
    if (sync != NULL && i % sync_every == 0) sync(user);
    const fmha_forward_params* use = alt != NULL && i % 2 ? alt : p;
    const int64_t t0 = now_ns();
    const fmha_status s = ws_and_forward(h, use, ws, ws_bytes);
    out->ns[i] = now_ns() - t0;
    if (s != FMHA_SUCCESS) die_status("ws+forward", s);
  }
  if (sync != NULL) sync(user);
  out->wall_ns = sync != NULL ? now_ns() - wall0 : 0;
  out->n = iters;
}

/* `alt` (may be null): every other call uses these params instead, so no
 * call finds its params equal to the previous call's. */
static void time_workspace(fmha_handle h, const fmha_forward_params* p, const fmha_forward_params* alt, int iters,
                           samples* out) {
  profile_reset();
  for (int i = 0; i < iters; ++i) {
    size_t need = 0;
    const fmha_forward_params* use = alt != NULL && i % 2 ? alt : p;
    const int64_t t0 = now_ns();
    const fmha_status s = fmha_forward_workspace_size(h, use, &need);
    out->ns[i] = now_ns() - t0;
    if (s != FMHA_SUCCESS) die_status("workspace_size", s);
  }
  out->n = iters;
  out->wall_ns = 0;
}

/* Times a forward that validation must refuse with `expect`. */
static void time_refused(fmha_handle h, const fmha_forward_params* p, fmha_status expect, int iters,
                         samples* out) {
  for (int i = 0; i < iters; ++i) {
    const int64_t t0 = now_ns();
    const fmha_status s = fmha_forward(h, p, NULL, 0);
    out->ns[i] = now_ns() - t0;
    if (s != expect) {
      fprintf(stderr, "bench_overhead: expected %s, got %s (%s)\n", fmha_status_string(expect),
              fmha_status_string(s), fmha_last_error_message());
      exit(2);
    }
  }
  out->n = iters;
  out->wall_ns = 0;
}

static fmha_forward_params mismatched(fmha_forward_params p) {
  p.k.dims[3] = p.q.dims[3] / 2; /* head_dim of k differs from q's */
  return p;
}

/* The same problem with the causal flag flipped: a valid neighbour, so that
 * alternating the two defeats the reuse of the last call's validation (a
 * serving loop whose params change every step). */
static fmha_forward_params flipped(fmha_forward_params p) {
  p.mask_flags = p.mask_flags == FMHA_MASK_NONE ? FMHA_MASK_CAUSAL : FMHA_MASK_NONE;
  return p;
}

/* ---- CPU handle -------------------------------------------------------------- */

static void run_cpu(const options* opt, samples* s) {
  fmha_handle h = NULL;
  fmha_status st = fmha_create(&h, FMHA_DEVICE_CPU, 0);
  if (st != FMHA_SUCCESS) die_status("fmha_create(CPU)", st);
  if ((st = fmha_set_num_threads(h, 1)) != FMHA_SUCCESS) die_status("fmha_set_num_threads", st);
  uint32_t seed = 12345;
  for (size_t c = 0; c < sizeof kShapes / sizeof kShapes[0]; ++c) {
    const shape* sh = &kShapes[c];
    uint16_t* q = malloc(q_elems(sh) * 2);
    uint16_t* k = malloc(kv_elems(sh) * 2);
    uint16_t* v = malloc(kv_elems(sh) * 2);
    uint16_t* o = malloc(q_elems(sh) * 2);
    float* lse = malloc(lse_elems(sh) * sizeof(float));
    if (!q || !k || !v || !o || !lse) usage("out of host memory");
    fill_f16(q, q_elems(sh), &seed);
    fill_f16(k, kv_elems(sh), &seed);
    fill_f16(v, kv_elems(sh), &seed);
    const fmha_forward_params p = make_params(sh, q, k, v, o, lse);
    size_t ws_bytes = 0;
    if ((st = fmha_forward_workspace_size(h, &p, &ws_bytes)) != FMHA_SUCCESS) die_status("workspace_size", st);
    void* ws = NULL;
    if (ws_bytes > 0 && (ws = aligned_alloc(64, (ws_bytes + 63) / 64 * 64)) == NULL) usage("out of host memory");

    const fmha_forward_params alt = flipped(p);
    time_forward(h, &p, NULL, ws, ws_bytes, opt->warmup > 0 ? opt->warmup : 1, 1, NULL, NULL, s);
    time_forward(h, &p, NULL, ws, ws_bytes, opt->iters, 1, NULL, NULL, s);
    print_row("cpu", sh->name, "ws+forward (1 thread, computes)", s);
    profile_print();
    time_workspace(h, &p, NULL, opt->iters, s);
    print_row("cpu", sh->name, "workspace_size", s);
    profile_print();
    time_workspace(h, &p, &alt, opt->iters, s);
    print_row("cpu", sh->name, "workspace_size (params alternate)", s);
    profile_print();
    const fmha_forward_params bad = mismatched(p);
    time_refused(h, &bad, FMHA_ERROR_INVALID_ARGUMENT, opt->iters, s);
    print_row("cpu", sh->name, "invalid (k.dims[3] != q.dims[3])", s);

    free(ws);
    free(q);
    free(k);
    free(v);
    free(o);
    free(lse);
  }
  fmha_destroy(h);
}

/* ---- CUDA handle ------------------------------------------------------------- */

#if BENCH_WITH_CUDA

#define CUDA_OK(x)                                                                                \
  do {                                                                                            \
    cudaError_t e_ = (x);                                                                         \
    if (e_ != cudaSuccess) {                                                                      \
      fprintf(stderr, "bench_overhead: %s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(2);                                                                                    \
    }                                                                                             \
  } while (0)

static void sync_stream(void* user) { CUDA_OK(cudaStreamSynchronize((cudaStream_t)user)); }

/* Device copies of random F16 data. */
static void* device_random(size_t elems, uint32_t* seed) {
  uint16_t* host = malloc(elems * 2);
  if (host == NULL) usage("out of host memory");
  fill_f16(host, elems, seed);
  void* dev = NULL;
  CUDA_OK(cudaMalloc(&dev, elems * 2));
  CUDA_OK(cudaMemcpy(dev, host, elems * 2, cudaMemcpyHostToDevice));
  free(host);
  return dev;
}

static void upload_random(void* dev, size_t elems, uint32_t* seed) {
  uint16_t* host = malloc(elems * 2);
  if (host == NULL) usage("out of host memory");
  fill_f16(host, elems, seed);
  CUDA_OK(cudaMemcpy(dev, host, elems * 2, cudaMemcpyHostToDevice));
  free(host);
}

/* ws+forward while capturing: K calls per captured graph. */
static void time_captured(fmha_handle h, cudaStream_t stream, const fmha_forward_params* p, void* ws,
                          size_t ws_bytes, int iters, int per_graph, samples* out) {
  out->n = 0;
  out->wall_ns = 0;
  profile_reset();
  for (int i = 0; i < iters;) {
    cudaError_t err = cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);
    if (err != cudaSuccess) {
      printf("  capture: cudaStreamBeginCapture failed (%s); row skipped\n", cudaGetErrorString(err));
      cudaGetLastError();
      return;
    }
    fmha_status failed = FMHA_SUCCESS;
    for (int j = 0; j < per_graph && i < iters; ++j, ++i) {
      const int64_t t0 = now_ns();
      const fmha_status s = ws_and_forward(h, p, ws, ws_bytes);
      out->ns[out->n++] = now_ns() - t0;
      if (s != FMHA_SUCCESS) {
        failed = s;
        break;
      }
    }
    cudaGraph_t graph = NULL;
    err = cudaStreamEndCapture(stream, &graph);
    if (graph != NULL) cudaGraphDestroy(graph);
    if (failed != FMHA_SUCCESS || err != cudaSuccess) {
      printf("  capture: %s / %s (%s); row skipped\n", fmha_status_string(failed), cudaGetErrorString(err),
             fmha_last_error_message());
      cudaGetLastError();
      out->n = 0;
      return;
    }
  }
}

typedef CUresult (*pointer_attrs_fn)(unsigned, CUpointer_attribute*, void**, CUdeviceptr);

static void time_primitives(const options* opt, cudaStream_t stream, void* dev_ptr, samples* s) {
  const int n = opt->iters;
  int device = -1;
  for (int i = 0; i < n; ++i) {
    const int64_t t0 = now_ns();
    cudaGetDevice(&device);
    s->ns[i] = now_ns() - t0;
  }
  s->n = n;
  s->wall_ns = 0;
  print_row("cuda", "runtime", "cudaGetDevice", s);

  for (int i = 0; i < n; ++i) {
    struct cudaPointerAttributes attr;
    const int64_t t0 = now_ns();
    cudaPointerGetAttributes(&attr, dev_ptr);
    s->ns[i] = now_ns() - t0;
  }
  print_row("cuda", "runtime", "cudaPointerGetAttributes (device)", s);

  char host_bytes[64];
  for (int i = 0; i < n; ++i) {
    struct cudaPointerAttributes attr;
    const int64_t t0 = now_ns();
    cudaPointerGetAttributes(&attr, host_bytes);
    s->ns[i] = now_ns() - t0;
  }
  print_row("cuda", "runtime", "cudaPointerGetAttributes (host)", s);

  void* fn = NULL;
  enum cudaDriverEntryPointQueryResult found;
  if (cudaGetDriverEntryPointByVersion("cuPointerGetAttributes", &fn, 12000, cudaEnableDefault, &found) ==
          cudaSuccess &&
      found == cudaDriverEntryPointSuccess && fn != NULL) {
    pointer_attrs_fn get;
    memcpy(&get, &fn, sizeof get); /* object to function pointer, without ISO C's complaint */
    CUpointer_attribute attrs[6] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,     CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,  CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                    CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    unsigned type = 0;
    int managed = 0, ordinal = -1, ipc = 0;
    CUdeviceptr start = 0;
    size_t size = 0;
    void* data[6] = {&type, &managed, &ordinal, &ipc, &start, &size};
    for (int i = 0; i < n; ++i) {
      const int64_t t0 = now_ns();
      get(6, attrs, data, (CUdeviceptr)(uintptr_t)dev_ptr);
      s->ns[i] = now_ns() - t0;
    }
    print_row("cuda", "driver", "cuPointerGetAttributes x6 (device)", s);
    for (int i = 0; i < n; ++i) {
      const int64_t t0 = now_ns();
      get(3, attrs, data, (CUdeviceptr)(uintptr_t)dev_ptr);
      s->ns[i] = now_ns() - t0;
    }
    print_row("cuda", "driver", "cuPointerGetAttributes x3 (device)", s);
    for (int i = 0; i < n; ++i) {
      const int64_t t0 = now_ns();
      get(6, attrs, data, (CUdeviceptr)(uintptr_t)host_bytes);
      s->ns[i] = now_ns() - t0;
    }
    print_row("cuda", "driver", "cuPointerGetAttributes x6 (host)", s);
  }

  for (int i = 0; i < n; ++i) {
    const int64_t t0 = now_ns();
    cudaGetLastError();
    s->ns[i] = now_ns() - t0;
  }
  print_row("cuda", "runtime", "cudaGetLastError", s);

  for (int i = 0; i < n; ++i) {
    if (i % opt->sync_every == 0) sync_stream(stream);
    const int64_t t0 = now_ns();
    cudaMemsetAsync(dev_ptr, 0, 4, stream);
    s->ns[i] = now_ns() - t0;
  }
  sync_stream(stream);
  print_row("cuda", "runtime", "cudaMemsetAsync 4 B (one enqueue)", s);
}

/* One build of bench_launch.cu (bench_launch.h): the functions of a prefix. */
typedef struct {
  const char* label; /* the case column */
  int (*rows)(void);
  const char* (*name)(int);
  size_t (*param_bytes)(void);
  int (*prepare)(void);
  int (*once)(int, void*);
} launch_set;

/* The launch floor: bench_launch.cu's empty kernels, same protocol as the
 * ws+forward (stream) row. */
static void time_launches(const options* opt, const launch_set* set, cudaStream_t stream, samples* s) {
  if (set->prepare() != 0) {
    printf("cuda %s: setup failed (%s); rows skipped\n", set->label, cudaGetErrorString(cudaGetLastError()));
    return;
  }
  printf("cuda %s: empty kernel, 1 x 32 threads; FwdParams = %zu bytes\n", set->label, set->param_bytes());
  for (int row = 0; row < set->rows(); ++row) {
    int rc = 0;
    for (int i = 0; i < opt->warmup && rc == 0; ++i) {
      if (i % opt->sync_every == 0) sync_stream(stream);
      rc = set->once(row, stream);
    }
    const int64_t wall0 = now_ns();
    for (int i = 0; i < opt->iters && rc == 0; ++i) {
      if (i % opt->sync_every == 0) sync_stream(stream);
      const int64_t t0 = now_ns();
      rc = set->once(row, stream);
      s->ns[i] = now_ns() - t0;
    }
    sync_stream(stream);
    s->wall_ns = now_ns() - wall0;
    s->n = opt->iters;
    if (rc == 1) {
      printf("cuda   %-16s %-34s (not available here)\n", set->label, set->name(row));
      continue;
    }
    if (rc != 0) {
      printf("cuda   %-16s %-34s failed: %s\n", set->label, set->name(row), cudaGetErrorString(cudaGetLastError()));
      continue;
    }
    print_row("cuda", set->label, set->name(row), s);
  }
}

static void run_cuda(const options* opt, samples* s) {
  fmha_handle h = NULL;
  fmha_status st = fmha_create(&h, FMHA_DEVICE_CUDA, opt->device);
  if (st == FMHA_ERROR_NOT_AVAILABLE) {
    printf("cuda: no CUDA handle (%s); CUDA rows skipped\n", fmha_last_error_message());
    return;
  }
  if (st != FMHA_SUCCESS) die_status("fmha_create(CUDA)", st);
  CUDA_OK(cudaSetDevice(opt->device));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  if ((st = fmha_set_stream(h, stream)) != FMHA_SUCCESS) die_status("fmha_set_stream", st);
  uint32_t seed = 777;
  void* spare = NULL;

  for (size_t c = 0; c < sizeof kShapes / sizeof kShapes[0]; ++c) {
    const shape* sh = &kShapes[c];
    void* q = device_random(q_elems(sh), &seed);
    void* k = device_random(kv_elems(sh), &seed);
    void* v = device_random(kv_elems(sh), &seed);
    void* o = NULL;
    float* lse = NULL;
    CUDA_OK(cudaMalloc(&o, q_elems(sh) * 2));
    CUDA_OK(cudaMalloc((void**)&lse, lse_elems(sh) * sizeof(float)));
    const fmha_forward_params p = make_params(sh, q, k, v, o, lse);
    size_t ws_bytes = 0;
    if ((st = fmha_forward_workspace_size(h, &p, &ws_bytes)) != FMHA_SUCCESS) die_status("workspace_size", st);
    void* ws = NULL;
    if (ws_bytes > 0) CUDA_OK(cudaMalloc(&ws, ws_bytes));
    char kernel[512];
    if (fmha_forward_explain(h, &p, kernel, sizeof kernel) == FMHA_SUCCESS) {
      char* nl = strstr(kernel, "chosen: ");
      printf("cuda %s: %s", sh->name, nl ? nl : "\n");
      printf("cuda %s: workspace %zu bytes\n", sh->name, ws_bytes);
    }

    const fmha_forward_params alt = flipped(p);
    time_forward(h, &p, NULL, ws, ws_bytes, opt->warmup > 0 ? opt->warmup : 1, opt->sync_every, sync_stream,
                 stream, s);
    time_forward(h, &p, NULL, ws, ws_bytes, opt->iters, opt->sync_every, sync_stream, stream, s);
    print_row("cuda", sh->name, "ws+forward (stream)", s);
    profile_print();
    time_forward(h, &p, &alt, ws, ws_bytes, opt->iters, opt->sync_every, sync_stream, stream, s);
    print_row("cuda", sh->name, "ws+forward (params alternate)", s);
    profile_print();
    time_captured(h, stream, &p, ws, ws_bytes, opt->iters, opt->sync_every, s);
    print_row("cuda", sh->name, "ws+forward (capture)", s);
    profile_print();
    time_workspace(h, &p, NULL, opt->iters, s);
    print_row("cuda", sh->name, "workspace_size", s);
    profile_print();
    time_workspace(h, &p, &alt, opt->iters, s);
    print_row("cuda", sh->name, "workspace_size (params alternate)", s);
    profile_print();
    const fmha_forward_params bad = mismatched(p);
    time_refused(h, &bad, FMHA_ERROR_INVALID_ARGUMENT, opt->iters, s);
    print_row("cuda", sh->name, "invalid (k.dims[3] != q.dims[3])", s);
    void* host_q = malloc(q_elems(sh) * 2);
    if (host_q == NULL) usage("out of host memory");
    fmha_forward_params on_host = p;
    on_host.q.data = host_q;
    time_refused(h, &on_host, FMHA_ERROR_INVALID_ARGUMENT, opt->iters, s);
    print_row("cuda", sh->name, "host pointer (q in host memory)", s);
    free(host_q);

    /* The same tensors carved from one allocation (256-byte aligned). */
    const size_t qb = (q_elems(sh) * 2 + 255) / 256 * 256, kvb = (kv_elems(sh) * 2 + 255) / 256 * 256;
    const size_t lb = (lse_elems(sh) * 4 + 255) / 256 * 256;
    unsigned char* arena = NULL;
    CUDA_OK(cudaMalloc((void**)&arena, 2 * qb + 2 * kvb + lb));
    upload_random(arena, q_elems(sh), &seed);
    upload_random(arena + qb, kv_elems(sh), &seed);
    upload_random(arena + qb + kvb, kv_elems(sh), &seed);
    const fmha_forward_params pa = make_params(sh, arena, arena + qb, arena + qb + kvb,
                                               arena + qb + 2 * kvb, (float*)(arena + 2 * qb + 2 * kvb));
    time_forward(h, &pa, NULL, ws, ws_bytes, opt->warmup > 0 ? opt->warmup : 1, opt->sync_every, sync_stream,
                 stream, s);
    time_forward(h, &pa, NULL, ws, ws_bytes, opt->iters, opt->sync_every, sync_stream, stream, s);
    print_row("cuda", sh->name, "ws+forward (one allocation)", s);
    profile_print();
    CUDA_OK(cudaFree(arena));

    CUDA_OK(cudaGetLastError());
    if (spare == NULL) {
      spare = q;
      q = NULL;
    }
    cudaFree(ws);
    cudaFree(q);
    cudaFree(k);
    cudaFree(v);
    cudaFree(o);
    cudaFree(lse);
  }
  time_primitives(opt, stream, spare, s);
  /* The runtime that created the stream, then a static runtime of its own
   * (as libfmha's) enqueueing on that stream. */
  const launch_set own = {"launch", bench_launch_rows, bench_launch_name, bench_launch_param_bytes,
                          bench_launch_prepare, bench_launch_once};
  const launch_set foreign = {"launch-static", bench_launch_static_rows, bench_launch_static_name,
                              bench_launch_static_param_bytes, bench_launch_static_prepare,
                              bench_launch_static_once};
  time_launches(opt, &own, stream, s);
  time_launches(opt, &foreign, stream, s);
  cudaFree(spare);
  CUDA_OK(cudaStreamDestroy(stream));
  fmha_destroy(h);
}

#endif /* BENCH_WITH_CUDA */

int main(int argc, char** argv) {
  const options opt = parse(argc, argv);
  samples s;
  s.ns = malloc((size_t)(opt.iters > opt.warmup ? opt.iters : opt.warmup + 1) * sizeof(int64_t));
  s.n = 0;
  s.wall_ns = 0;
  if (s.ns == NULL) usage("out of host memory");
  printf("bench_overhead: fmha %u, %d iterations after %d warm-up, CUDA sync every %d calls\n", fmha_version(),
         opt.iters, opt.warmup, opt.sync_every);
  find_profile();
  if (g_profile != NULL) printf("profiling build: per-stage breakdown after each fmha row (stamps add to each stage)\n");
  print_header();
  if (opt.cpu) run_cpu(&opt, &s);
#if BENCH_WITH_CUDA
  if (opt.cuda) run_cuda(&opt, &s);
#else
  if (opt.cuda) printf("cuda: this bench_overhead was built without CUDA; CUDA rows skipped\n");
#endif
  free(s.ns);
  return 0;
}
