/*
 * decoder_layer (C11): the attention call of one decoder layer through fmha's
 * C API, on the CPU backend.
 *
 * Llama-style grouped-query attention: 32 query heads share 8 KV heads,
 * head_dim 128, causal, BF16, with the log-sum-exp returned (what merging
 * attention over KV-cache chunks needs). Q, K and V are read in place from
 * the fused QKV projection's output, laid out [B, N, Hq + 2*Hk, D] the way a
 * linear layer writes it; O is written [B, N, Hq, D], ready for the output
 * projection. Strides express both layouts: nothing is transposed or copied.
 *
 *   decoder_layer [N]      (sequence length, default 256)
 *
 * Checks a few rows against a float64 reference; exits non-zero on failure.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fmha/fmha.h>

enum { kBatch = 1, kHeadsQ = 32, kHeadsKV = 8, kHeadDim = 128 };
enum { kHeadsQKV = kHeadsQ + 2 * kHeadsKV }; /* heads in one fused row */

static float bf16_to_float(uint16_t b) {
  const uint32_t x = (uint32_t)b << 16;
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
}

static uint16_t float_to_bf16(float f) { /* round to nearest even; no NaN here */
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* A view into the fused buffer: heads [first_head, first_head + heads). */
static fmha_tensor fused_view(uint16_t* qkv, int first_head, int heads, int n) {
  fmha_tensor t;
  t.data = qkv + (int64_t)first_head * kHeadDim;
  t.dtype = FMHA_DTYPE_BF16;
  t.dims[0] = kBatch, t.dims[1] = heads, t.dims[2] = n, t.dims[3] = kHeadDim;
  t.strides[0] = (int64_t)n * kHeadsQKV * kHeadDim; /* batch */
  t.strides[1] = kHeadDim;                           /* head */
  t.strides[2] = (int64_t)kHeadsQKV * kHeadDim;      /* token */
  t.strides[3] = 1;
  return t;
}

static int fail(const char* what, fmha_status s) {
  fprintf(stderr, "%s: %s (%s)\n", what, fmha_status_string(s), fmha_last_error_message());
  return 1;
}

/* Element [b, h, i, d] of a view, as float. */
static float at(const fmha_tensor* t, int h, int i, int d) {
  const uint16_t* p = (const uint16_t*)t->data;
  return bf16_to_float(p[h * t->strides[1] + i * t->strides[2] + d * t->strides[3]]);
}

/* Max |o - reference| over query row i of head h; *lse_ref gets its lse. */
static double check_row(const fmha_tensor* q, const fmha_tensor* k, const fmha_tensor* v,
                        const fmha_tensor* o, int h, int i, double* lse_ref) {
  const int n = (int)q->dims[2], kv = h / (kHeadsQ / kHeadsKV);
  double* s = malloc(sizeof(double) * (size_t)n);
  double max_s = -INFINITY, sum = 0, err = 0;
  for (int j = 0; j <= i; ++j) { /* causal, Nq == Nk: keys 0..i */
    double dot = 0;
    for (int d = 0; d < kHeadDim; ++d) dot += (double)at(q, h, i, d) * at(k, kv, j, d);
    s[j] = dot / sqrt((double)kHeadDim);
    if (s[j] > max_s) max_s = s[j];
  }
  for (int j = 0; j <= i; ++j) sum += exp(s[j] - max_s);
  for (int d = 0; d < kHeadDim; ++d) {
    double acc = 0;
    for (int j = 0; j <= i; ++j) acc += exp(s[j] - max_s) * at(v, kv, j, d);
    err = fmax(err, fabs(acc / sum - at(o, h, i, d)));
  }
  *lse_ref = max_s + log(sum);
  free(s);
  return err;
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 256;
  if (n <= 0) return fprintf(stderr, "usage: decoder_layer [N > 0]\n"), 2;

  /* The fused projection output and the attention output, BF16. */
  const size_t qkv_elems = (size_t)kBatch * n * kHeadsQKV * kHeadDim;
  const size_t o_elems = (size_t)kBatch * n * kHeadsQ * kHeadDim;
  uint16_t* qkv = malloc(qkv_elems * sizeof *qkv);
  uint16_t* out = malloc(o_elems * sizeof *out);
  float* lse = malloc((size_t)kBatch * kHeadsQ * n * sizeof *lse);
  if (!qkv || !out || !lse) return fprintf(stderr, "out of memory\n"), 1;
  srand(7);
  for (size_t i = 0; i < qkv_elems; ++i) qkv[i] = float_to_bf16((float)rand() / RAND_MAX * 2.f - 1.f);

  fmha_forward_params params;
  fmha_forward_params_init(&params);
  params.q = fused_view(qkv, 0, kHeadsQ, n);
  params.k = fused_view(qkv, kHeadsQ, kHeadsKV, n);
  params.v = fused_view(qkv, kHeadsQ + kHeadsKV, kHeadsKV, n);
  params.o = fused_view(out, 0, kHeadsQ, n); /* [B, N, Hq, D]: same pattern */
  params.o.strides[0] = (int64_t)n * kHeadsQ * kHeadDim;
  params.o.strides[2] = (int64_t)kHeadsQ * kHeadDim;
  params.mask_flags = FMHA_MASK_CAUSAL;
  params.lse = lse; /* [B, Hq, N] FP32 */

  fmha_handle handle;
  fmha_status s = fmha_create(&handle, FMHA_DEVICE_CPU, 0);
  if (s != FMHA_SUCCESS) return fail("fmha_create", s);
  size_t ws_bytes = 0;
  if ((s = fmha_forward_workspace_size(handle, &params, &ws_bytes)) != FMHA_SUCCESS)
    return fail("fmha_forward_workspace_size", s);
  void* workspace = NULL;
  if (ws_bytes > 0 && !(workspace = aligned_alloc(64, (ws_bytes + 63) / 64 * 64)))
    return fprintf(stderr, "out of memory\n"), 1;
  if ((s = fmha_forward(handle, &params, workspace, ws_bytes)) != FMHA_SUCCESS)
    return fail("fmha_forward", s);

  char why[512];
  fmha_forward_explain(handle, &params, why, sizeof why);
  printf("decoder_layer: B=%d Hq=%d Hk=%d N=%d D=%d causal bf16, %s", kBatch, kHeadsQ, kHeadsKV,
         n, kHeadDim, why);

  /* First, middle and last rows of a few heads (two per KV group). */
  double worst = 0, worst_lse = 0;
  const int heads[] = {0, 3, 17, 31}, rows[] = {0, n / 2, n - 1};
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 3; ++b) {
      double lse_ref;
      worst = fmax(worst, check_row(&params.q, &params.k, &params.v, &params.o, heads[a], rows[b],
                                    &lse_ref));
      worst_lse = fmax(worst_lse, fabs(lse_ref - lse[heads[a] * n + rows[b]]));
    }
  printf("max |o - ref| = %.2e, max |lse - ref| = %.2e\n", worst, worst_lse);

  free(workspace);
  fmha_destroy(handle);
  free(qkv), free(out), free(lse);
  /* BF16 output: 8 significant bits, values within [-1, 1]. */
  return worst < 1e-2 && worst_lse < 1e-3 ? 0 : 1;
}
