/*
 * paged_cascade (C11): one decode step of a serving engine through fmha's C
 * API, then the same step as cascade attention merged with fmha_merge.
 *
 * Four requests share a 48-token prefix (a system prompt, stored once in the
 * cache: prefix caching) and each has its own suffix of 5, 17, 0 or 30
 * tokens. The KV cache is paged, vLLM style: storage [pages, page_size,
 * Hk, D] with page_size 16, read through the [pages, Hk, page_size, D] view
 * fmha takes, the pages of every request scattered over the cache and listed
 * in its row of a block table, its length in seqused_k. GQA 8/2, D = 64,
 * FP32, one new query token per request.
 *
 *   1. decode: one paged forward over each request's prefix + suffix pages;
 *   2. cascade: a paged forward over the shared prefix pages alone and one
 *      over each request's suffix pages alone, each with its lse, merged in
 *      place with fmha_merge (lse = log(e^lse_a + e^lse_b), o = the
 *      lse-weighted sum); the request with no suffix has lse_b = -inf there,
 *      which contributes nothing.
 *
 * The merge must equal the single forward over the concatenated keys, and
 * both must equal a float64 reference. (A cascade that reads the prefix
 * once for all requests would run it as one dense call with the requests as
 * query rows, [1, Hq, R, D]; its lse is then [Hq, R], which fmha_merge,
 * reading contiguous [R, Hq, 1] lse arrays, would need transposed.)
 *
 *   paged_cascade          CPU handle
 *   paged_cascade cuda     CUDA handle (device 0); exits 77 (skipped) without one
 *
 * Prints the largest errors; exits non-zero on failure.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fmha/fmha.h>
#if FMHA_EXAMPLE_CUDA
#include <cuda_runtime_api.h>
#endif

enum { kRequests = 4, kHeadsQ = 8, kHeadsKV = 2, kHeadDim = 64, kPageSize = 16 };
enum { kPrefix = 48, kPrefixPages = kPrefix / kPageSize, kMaxSuffixPages = 2 };
enum { kPages = kPrefixPages + kRequests * kMaxSuffixPages };
enum { kPageFloats = kPageSize * kHeadsKV * kHeadDim, kRowFloats = kHeadsQ * kHeadDim };
static const int kSuffix[kRequests] = {5, 17, 0, 30};

/* ---- memory on the handle's device ---------------------------------------- */
static fmha_device_kind g_kind = FMHA_DEVICE_CPU;

static void* device_copy(const void* host, size_t bytes) {
#if FMHA_EXAMPLE_CUDA
  if (g_kind == FMHA_DEVICE_CUDA) {
    void* p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) return NULL;
    if (host != NULL && cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice) != cudaSuccess) return NULL;
    return p;
  }
#endif
  void* p = malloc(bytes);
  if (p != NULL && host != NULL) memcpy(p, host, bytes);
  return p;
}

static int to_host(void* host, const void* device, size_t bytes) {
#if FMHA_EXAMPLE_CUDA
  if (g_kind == FMHA_DEVICE_CUDA)
    return cudaDeviceSynchronize() == cudaSuccess &&
           cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost) == cudaSuccess;
#endif
  memcpy(host, device, bytes);
  return 1;
}

static void device_free(void* p) {
#if FMHA_EXAMPLE_CUDA
  if (g_kind == FMHA_DEVICE_CUDA) {
    cudaFree(p);
    return;
  }
#endif
  free(p);
}

/* ---- helpers ---------------------------------------------------------------- */
static uint64_t g_rng = 0x9e3779b97f4a7c15u;
static float uniform(void) { /* [-1, 1) */
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return (float)((g_rng * 0x2545f4914f6cdd1du) >> 40) / (float)(1u << 23) - 1.f;
}

static int check(fmha_status s, const char* what) {
  if (s == FMHA_SUCCESS) return 1;
  fprintf(stderr, "%s: %s (%s)\n", what, fmha_status_string(s), fmha_last_error_message());
  return 0;
}

/* The paged cache as fmha reads it: [pages, Hk, page_size, D] over
 * [pages, page_size, Hk, D] storage. */
static fmha_tensor cache_view(void* data) {
  fmha_tensor t = {data, FMHA_DTYPE_F32, {kPages, kHeadsKV, kPageSize, kHeadDim},
                   {kPageFloats, kHeadDim, kHeadsKV * kHeadDim, 1}};
  return t;
}

/* One query token per request: [R, Hq, 1, D]. */
static fmha_tensor rows_view(void* data) {
  fmha_tensor t = {data, FMHA_DTYPE_F32, {kRequests, kHeadsQ, 1, kHeadDim},
                   {kRowFloats, kHeadDim, kHeadDim, 1}};
  return t;
}

/* A paged decode forward: q against the pages of `table` (stride entries per
 * request), `used` keys each; o and lse on the device. */
static int paged_forward(fmha_handle h, void* q, void* k, void* v, const int32_t* table, int64_t stride,
                         const int32_t* used, void* o, float* lse, const char* what) {
  fmha_forward_params p;
  fmha_forward_params_init(&p);
  p.q = rows_view(q);
  p.k = cache_view(k);
  p.v = cache_view(v);
  p.o = rows_view(o);
  p.lse = lse;
  p.block_table = table;
  p.block_table_stride = stride;
  p.seqused_k = used;
  size_t ws_bytes = 0;
  if (!check(fmha_forward_workspace_size(h, &p, &ws_bytes), what)) return 0;
  void* ws = ws_bytes ? device_copy(NULL, ws_bytes) : NULL;
  if (ws_bytes && ws == NULL) return 0;
  const int ok = check(fmha_forward(h, &p, ws, ws_bytes), what);
#if FMHA_EXAMPLE_CUDA
  if (g_kind == FMHA_DEVICE_CUDA) cudaDeviceSynchronize(); /* before the workspace is freed */
#endif
  device_free(ws);
  return ok;
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "cuda") == 0) {
#if FMHA_EXAMPLE_CUDA
    g_kind = FMHA_DEVICE_CUDA;
#else
    fprintf(stderr, "paged_cascade: this example was built without CUDA\n");
    return 1;
#endif
  } else if (argc > 1 && strcmp(argv[1], "cpu") != 0) {
    fprintf(stderr, "usage: %s [cpu|cuda]\n", argv[0]);
    return 2;
  }

  /* The cache, the queries, and where each page lives: a shuffled
   * assignment of page ids, the prefix's first. */
  static float k_cache[kPages * kPageFloats], v_cache[kPages * kPageFloats];
  static float q[kRequests * kRowFloats];
  for (int i = 0; i < kPages * kPageFloats; ++i) k_cache[i] = uniform(), v_cache[i] = uniform();
  for (int i = 0; i < kRequests * kRowFloats; ++i) q[i] = uniform();
  int32_t order[kPages];
  for (int i = 0; i < kPages; ++i) order[i] = i;
  for (int i = kPages - 1; i > 0; --i) {
    const int j = (int)((uniform() + 1.f) * 0.5f * (float)(i + 1)) % (i + 1);
    const int32_t t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  const int32_t* prefix_pages = order;  /* kPrefixPages, shared */
  const int32_t* suffix_pages = order + kPrefixPages;  /* kMaxSuffixPages per request */

  /* Block tables: prefix + suffix (the whole sequence), prefix alone, suffix
   * alone; and the lengths each one covers. */
  enum { kFullStride = kPrefixPages + kMaxSuffixPages };
  int32_t full_table[kRequests * kFullStride], prefix_table[kRequests * kPrefixPages];
  int32_t suffix_table[kRequests * kMaxSuffixPages];
  int32_t full_used[kRequests], prefix_used[kRequests], suffix_used[kRequests];
  for (int r = 0; r < kRequests; ++r) {
    for (int j = 0; j < kPrefixPages; ++j)
      full_table[r * kFullStride + j] = prefix_table[r * kPrefixPages + j] = prefix_pages[j];
    for (int j = 0; j < kMaxSuffixPages; ++j)
      full_table[r * kFullStride + kPrefixPages + j] = suffix_table[r * kMaxSuffixPages + j] =
          suffix_pages[r * kMaxSuffixPages + j];
    full_used[r] = kPrefix + kSuffix[r];
    prefix_used[r] = kPrefix;
    suffix_used[r] = kSuffix[r];
  }

  fmha_handle h = NULL;
  const fmha_status created = fmha_create(&h, g_kind, 0);
  if (created == FMHA_ERROR_NOT_AVAILABLE && g_kind == FMHA_DEVICE_CUDA) {
    printf("paged_cascade: skipped: no CUDA device (%s)\n", fmha_last_error_message());
    return 77;
  }
  if (!check(created, "fmha_create")) return 1;
  const size_t cache_bytes = sizeof k_cache, rows_bytes = sizeof q, lse_bytes = kRequests * kHeadsQ * sizeof(float);
  void* dk = device_copy(k_cache, cache_bytes);
  void* dv = device_copy(v_cache, cache_bytes);
  void* dq = device_copy(q, rows_bytes);
  int32_t* d_full_table = device_copy(full_table, sizeof full_table);
  int32_t* d_prefix_table = device_copy(prefix_table, sizeof prefix_table);
  int32_t* d_suffix_table = device_copy(suffix_table, sizeof suffix_table);
  int32_t* d_full_used = device_copy(full_used, sizeof full_used);
  int32_t* d_prefix_used = device_copy(prefix_used, sizeof prefix_used);
  int32_t* d_suffix_used = device_copy(suffix_used, sizeof suffix_used);
  void *o_full = device_copy(NULL, rows_bytes), *o_prefix = device_copy(NULL, rows_bytes);
  void* o_suffix = device_copy(NULL, rows_bytes);
  float *lse_full = device_copy(NULL, lse_bytes), *lse_prefix = device_copy(NULL, lse_bytes);
  float* lse_suffix = device_copy(NULL, lse_bytes);
  if (!dk || !dv || !dq || !d_full_table || !d_prefix_table || !d_suffix_table || !d_full_used || !d_prefix_used ||
      !d_suffix_used || !o_full || !o_prefix || !o_suffix || !lse_full || !lse_prefix || !lse_suffix) {
    fprintf(stderr, "paged_cascade: out of memory\n");
    return 1;
  }

  /* 1. The decode step: one forward over every request's whole sequence. */
  int ok = paged_forward(h, dq, dk, dv, d_full_table, kFullStride, d_full_used, o_full, lse_full, "decode");
  /* 2. Cascade: prefix and suffix apart, then merged in place into the
   *    prefix part (o = o_parts[0], lse = lse_parts[0]). */
  ok = ok && paged_forward(h, dq, dk, dv, d_prefix_table, kPrefixPages, d_prefix_used, o_prefix, lse_prefix, "prefix");
  ok = ok && paged_forward(h, dq, dk, dv, d_suffix_table, kMaxSuffixPages, d_suffix_used, o_suffix, lse_suffix,
                           "suffix");
  if (ok) {
    const fmha_tensor parts[2] = {rows_view(o_prefix), rows_view(o_suffix)};
    const float* lses[2] = {lse_prefix, lse_suffix};
    fmha_merge_params m;
    fmha_merge_params_init(&m);
    m.num_parts = 2;
    m.o_parts = parts;
    m.lse_parts = lses;
    m.o = parts[0];
    m.lse = lse_prefix;
    ok = check(fmha_merge(h, &m), "fmha_merge");
  }

  static float full[kRequests * kRowFloats], cascade[kRequests * kRowFloats];
  float full_lse[kRequests * kHeadsQ], cascade_lse[kRequests * kHeadsQ];
  ok = ok && to_host(full, o_full, rows_bytes) && to_host(cascade, o_prefix, rows_bytes) &&
       to_host(full_lse, lse_full, lse_bytes) && to_host(cascade_lse, lse_prefix, lse_bytes);
  if (!ok) return 1;

  /* float64 reference: each request's keys gathered from its pages. */
  double err_decode = 0, err_cascade = 0, err_merge_vs_full = 0;
  for (int r = 0; r < kRequests; ++r)
    for (int hq = 0; hq < kHeadsQ; ++hq) {
      const int kv = hq / (kHeadsQ / kHeadsKV), n = full_used[r];
      double s[kPrefix + kMaxSuffixPages * kPageSize], m = -INFINITY, sum = 0;
      for (int j = 0; j < n; ++j) {
        const int page = full_table[r * kFullStride + j / kPageSize];
        const float* key = k_cache + (size_t)page * kPageFloats + ((j % kPageSize) * kHeadsKV + kv) * kHeadDim;
        double dot = 0;
        for (int d = 0; d < kHeadDim; ++d) dot += (double)q[r * kRowFloats + hq * kHeadDim + d] * key[d];
        s[j] = dot / sqrt((double)kHeadDim);
        if (s[j] > m) m = s[j];
      }
      for (int j = 0; j < n; ++j) sum += exp(s[j] - m);
      const int row = r * kHeadsQ + hq;
      err_decode = fmax(err_decode, fabs(full_lse[row] - (m + log(sum))));
      err_cascade = fmax(err_cascade, fabs(cascade_lse[row] - (m + log(sum))));
      for (int d = 0; d < kHeadDim; ++d) {
        double want = 0;
        for (int j = 0; j < n; ++j) {
          const int page = full_table[r * kFullStride + j / kPageSize];
          want += exp(s[j] - m) / sum *
                  v_cache[(size_t)page * kPageFloats + ((j % kPageSize) * kHeadsKV + kv) * kHeadDim + d];
        }
        const int e = r * kRowFloats + hq * kHeadDim + d;
        err_decode = fmax(err_decode, fabs(full[e] - want));
        err_cascade = fmax(err_cascade, fabs(cascade[e] - want));
        err_merge_vs_full = fmax(err_merge_vs_full, fabs(cascade[e] - full[e]));
      }
    }
  const double tol = 1e-5;
  printf("libfmha %u.%u.%u, device=%s: decode step of %d requests (lengths %d, %d, %d, %d) over %d shuffled "
         "pages of %d keys\n",
         fmha_version() / 10000, fmha_version() / 100 % 100, fmha_version() % 100,
         g_kind == FMHA_DEVICE_CUDA ? "cuda" : "cpu", kRequests, full_used[0], full_used[1], full_used[2],
         full_used[3], kPages, kPageSize);
  printf("  paged decode vs float64:                           max error %.2e\n", err_decode);
  printf("  cascade (prefix + suffix, fmha_merge) vs float64:   max error %.2e\n", err_cascade);
  printf("  cascade vs the single forward over all the keys:    max difference %.2e\n", err_merge_vs_full);

  void* all[] = {dk, dv, dq, d_full_table, d_prefix_table, d_suffix_table, d_full_used, d_prefix_used,
                 d_suffix_used, o_full, o_prefix, o_suffix, lse_full, lse_prefix, lse_suffix};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) device_free(all[i]);
  fmha_destroy(h);
  const int pass = err_decode <= tol && err_cascade <= tol && err_merge_vs_full <= tol;
  printf("%s\n", pass ? "PASS" : "FAIL");
  return pass ? 0 : 1;
}
