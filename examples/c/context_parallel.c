/*
 * context_parallel (C11, CUDA runtime, NCCL): causal ring attention over the
 * GPUs of one machine with fmha_forward (with lse) and fmha_merge; the same
 * algorithm as examples/python/context_parallel.py (see its header and
 * docs/long_context.md), for runtimes that link NCCL directly.
 *
 * One process drives all N GPUs: ncclCommInitAll makes the N communicators
 * and each ring step's sends and receives of every GPU are one
 * ncclGroupStart/ncclGroupEnd. NCCL's usual deployment is one process per
 * GPU (bootstrapped with ncclGetUniqueId over MPI or a socket); a single
 * process keeps the example free of a launcher and lets it gather and check
 * the result itself. The per-GPU code (the step loop body) is what a
 * one-process-per-GPU runtime runs, with its own rank only.
 *
 * The sequence of S tokens is cut into 2N chunks (S / 2N tokens, one more
 * for the first S % 2N); GPU r holds chunks r and 2N-1-r of Q, K and V. At
 * step s GPU r computes against the K/V shard of GPU src = (r - s) mod N
 * while the next shard is sent around the ring on a second stream into the
 * receive buffer not in use (double-buffered):
 *   s = 0:      q chunk r vs k chunk r causal; q chunk 2N-1-r vs both own k
 *               chunks causal, aligned bottom-right (query i of the chunk
 *               sees keys j <= i + len(chunk r));
 *   src < r:    both q chunks vs k chunk src, unmasked;
 *   src > r:    q chunk 2N-1-r vs both k chunks of src, unmasked;
 * each partial merged in place into the running (o, lse) with fmha_merge.
 *
 *   context_parallel_c [S [N]]     BF16, B=1, Hq=8, Hk=2, D=128; default
 *                                  S = 4099 (uneven chunks), N = every GPU
 *
 * Checks the gathered o and lse against one fmha_forward over the whole
 * sequence on GPU 0, prints the errors and the ring's time. Exits 77
 * (skipped) without a GPU, 1 on failure.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <fmha/fmha.h>
#include <nccl.h>

enum { kMaxGpus = 16, kBatch = 1, kHeadsQ = 8, kHeadsKV = 2, kHeadDim = 128 };

#define CUDA_OK(call)                                                                       \
  do {                                                                                      \
    cudaError_t e_ = (call);                                                                \
    if (e_ != cudaSuccess) {                                                                \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      exit(1);                                                                              \
    }                                                                                       \
  } while (0)
#define NCCL_OK(call)                                                                       \
  do {                                                                                      \
    ncclResult_t e_ = (call);                                                               \
    if (e_ != ncclSuccess) {                                                                \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, ncclGetErrorString(e_)); \
      exit(1);                                                                              \
    }                                                                                       \
  } while (0)
#define FMHA_OK(call)                                                                       \
  do {                                                                                      \
    fmha_status e_ = (call);                                                                \
    if (e_ != FMHA_SUCCESS) {                                                               \
      fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call,                    \
              fmha_status_string(e_), fmha_last_error_message());                           \
      exit(1);                                                                              \
    }                                                                                       \
  } while (0)

/* ---- BF16 on the host ------------------------------------------------------- */
static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even (finite inputs) */
  return (uint16_t)(u >> 16);
}

static float from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* ---- the zig-zag layout ------------------------------------------------------ */
static int64_t g_seq;
static int g_n;

static int64_t chunk_start(int c) {
  const int64_t base = g_seq / (2 * g_n), extra = g_seq % (2 * g_n);
  return c * base + (c < extra ? c : extra);
}
static int64_t chunk_len(int c) { return chunk_start(c + 1) - chunk_start(c); }
static int64_t first_len(int r) { return chunk_len(r); }               /* chunk r */
static int64_t second_len(int r) { return chunk_len(2 * g_n - 1 - r); } /* chunk 2N-1-r */
static int64_t local_len(int r) { return first_len(r) + second_len(r); }

/* ---- one GPU's state --------------------------------------------------------- */
typedef struct Gpu {
  int rank;
  fmha_handle fmha;
  ncclComm_t comm;
  cudaStream_t compute, transfer;
  cudaEvent_t computed, transferred, start, stop;
  int64_t len;                  /* local rows: chunk r, then chunk 2N-1-r */
  uint16_t *q, *k, *v, *o;      /* [B, H, len, D] BF16 */
  uint16_t *recv_k[2], *recv_v[2];
  uint16_t* part_o;             /* one partial [B, Hq, rows, D] */
  float *lse0, *lse1, *part_lse;
  void* workspace;
  size_t workspace_bytes;
} Gpu;

/* [B, H, rows, D] view of `rows` rows starting at `row` of a [B, H, len, D]
 * BF16 buffer. */
static fmha_tensor view(uint16_t* base, int64_t heads, int64_t len, int64_t row, int64_t rows) {
  fmha_tensor t;
  memset(&t, 0, sizeof t);
  t.data = base + row * kHeadDim;
  t.dtype = FMHA_DTYPE_BF16;
  t.dims[0] = kBatch, t.dims[1] = heads, t.dims[2] = rows, t.dims[3] = kHeadDim;
  t.strides[0] = heads * len * kHeadDim, t.strides[1] = len * kHeadDim, t.strides[2] = kHeadDim;
  t.strides[3] = 1;
  return t;
}

/* o, lse <- attention of q over k, v (causal bottom-right or unmasked), on
 * the GPU's compute stream. */
static void forward(Gpu* g, fmha_tensor q, fmha_tensor k, fmha_tensor v, int causal, fmha_tensor o,
                    float* lse) {
  fmha_forward_params p;
  fmha_forward_params_init(&p);
  p.q = q, p.k = k, p.v = v, p.o = o, p.lse = lse;
  p.mask_flags = causal ? FMHA_MASK_CAUSAL : FMHA_MASK_NONE;
  size_t need = 0;
  FMHA_OK(fmha_forward_workspace_size(g->fmha, &p, &need));
  if (need > g->workspace_bytes) { /* grows during the first run only */
    CUDA_OK(cudaStreamSynchronize(g->compute));
    CUDA_OK(cudaFree(g->workspace));
    CUDA_OK(cudaMalloc(&g->workspace, need));
    g->workspace_bytes = need;
  }
  FMHA_OK(fmha_forward(g->fmha, &p, g->workspace, g->workspace_bytes));
}

/* (o, lse) <- merge of (o, lse) and the attention of q over k, v unmasked. */
static void accumulate(Gpu* g, fmha_tensor q, fmha_tensor k, fmha_tensor v, fmha_tensor o, float* lse) {
  const int64_t rows = q.dims[2];
  if (rows == 0 || k.dims[2] == 0) return;
  const fmha_tensor part = view(g->part_o, kHeadsQ, rows, 0, rows);
  forward(g, q, k, v, 0, part, g->part_lse);
  fmha_merge_params m;
  fmha_merge_params_init(&m);
  const fmha_tensor parts[2] = {o, part};
  const float* lses[2] = {lse, g->part_lse};
  m.num_parts = 2, m.o_parts = parts, m.lse_parts = lses;
  m.o = o, m.lse = lse; /* in place */
  FMHA_OK(fmha_merge(g->fmha, &m));
}

/* Step s of GPU g's ring, computing on the shard (k, v) of GPU src. */
static void compute_step(Gpu* g, int s, int src, uint16_t* k, uint16_t* v) {
  const int r = g->rank;
  const int64_t l0 = first_len(r), l1 = second_len(r), len = g->len;
  const fmha_tensor o0 = view(g->o, kHeadsQ, len, 0, l0), o1 = view(g->o, kHeadsQ, len, l0, l1);
  const fmha_tensor q0 = view(g->q, kHeadsQ, len, 0, l0), q1 = view(g->q, kHeadsQ, len, l0, l1);
  if (s == 0) {
    if (l0 > 0)
      forward(g, q0, view(k, kHeadsKV, len, 0, l0), view(v, kHeadsKV, len, 0, l0), 1, o0, g->lse0);
    if (l1 > 0)
      forward(g, q1, view(k, kHeadsKV, len, 0, len), view(v, kHeadsKV, len, 0, len), 1, o1, g->lse1);
  } else if (src < r) { /* k chunk src precedes both q chunks; k chunk 2N-1-src follows both */
    const int64_t slen = local_len(src), ls0 = first_len(src);
    const fmha_tensor kc = view(k, kHeadsKV, slen, 0, ls0), vc = view(v, kHeadsKV, slen, 0, ls0);
    accumulate(g, q0, kc, vc, o0, g->lse0);
    accumulate(g, q1, kc, vc, o1, g->lse1);
  } else { /* both k chunks of src lie between q chunk r and q chunk 2N-1-r */
    const int64_t slen = local_len(src);
    accumulate(g, q1, view(k, kHeadsKV, slen, 0, slen), view(v, kHeadsKV, slen, 0, slen), o1, g->lse1);
  }
}

/* One ring pass over all GPUs; every call is asynchronous. */
static void ring(Gpu* gpus) {
  const int n = g_n;
  uint16_t *cur_k[kMaxGpus], *cur_v[kMaxGpus];
  for (int r = 0; r < n; ++r) cur_k[r] = gpus[r].k, cur_v[r] = gpus[r].v;
  for (int s = 0; s < n; ++s) {
    const int more = s + 1 < n;
    if (more) {
      /* The receive buffer held step s-1's shard: the transfer waits for the
       * compute enqueued so far. */
      for (int r = 0; r < n; ++r) {
        CUDA_OK(cudaSetDevice(r));
        CUDA_OK(cudaEventRecord(gpus[r].computed, gpus[r].compute));
        CUDA_OK(cudaStreamWaitEvent(gpus[r].transfer, gpus[r].computed, 0));
      }
      NCCL_OK(ncclGroupStart());
      for (int r = 0; r < n; ++r) {
        Gpu* g = &gpus[r];
        const int src = ((r - s) % n + n) % n, next_src = ((r - s - 1) % n + n) % n;
        const size_t send = (size_t)(kBatch * kHeadsKV * kHeadDim) * (size_t)local_len(src);
        const size_t recv = (size_t)(kBatch * kHeadsKV * kHeadDim) * (size_t)local_len(next_src);
        const int next = (r + 1) % n, prev = (r + n - 1) % n;
        NCCL_OK(ncclSend(cur_k[r], send, ncclBfloat16, next, g->comm, g->transfer));
        NCCL_OK(ncclSend(cur_v[r], send, ncclBfloat16, next, g->comm, g->transfer));
        NCCL_OK(ncclRecv(g->recv_k[(s + 1) % 2], recv, ncclBfloat16, prev, g->comm, g->transfer));
        NCCL_OK(ncclRecv(g->recv_v[(s + 1) % 2], recv, ncclBfloat16, prev, g->comm, g->transfer));
      }
      NCCL_OK(ncclGroupEnd());
    }
    for (int r = 0; r < n; ++r) {
      Gpu* g = &gpus[r];
      CUDA_OK(cudaSetDevice(r));
      compute_step(g, s, ((r - s) % n + n) % n, cur_k[r], cur_v[r]);
      if (more) {
        CUDA_OK(cudaEventRecord(g->transferred, g->transfer));
        CUDA_OK(cudaStreamWaitEvent(g->compute, g->transferred, 0));
        cur_k[r] = g->recv_k[(s + 1) % 2], cur_v[r] = g->recv_v[(s + 1) % 2];
      }
    }
  }
}

static void* device_alloc(size_t bytes) {
  void* p = NULL;
  CUDA_OK(cudaMalloc(&p, bytes ? bytes : 1));
  return p;
}

/* The local rows of rank r out of a host [B, H, S, D] BF16 array. */
static void gather_local(uint16_t* dst, const uint16_t* full, int64_t heads, int r) {
  const int64_t len = local_len(r);
  const int chunks[2] = {r, 2 * g_n - 1 - r};
  for (int64_t h = 0; h < kBatch * heads; ++h) {
    int64_t row = 0;
    for (int c = 0; c < 2; ++c) {
      memcpy(dst + (h * len + row) * kHeadDim, full + (h * g_seq + chunk_start(chunks[c])) * kHeadDim,
             (size_t)(chunk_len(chunks[c]) * kHeadDim) * 2);
      row += chunk_len(chunks[c]);
    }
  }
}

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    printf("context_parallel_c: skipped: no CUDA device\n");
    return 77;
  }
  g_seq = argc > 1 ? atoll(argv[1]) : 4099;
  g_n = argc > 2 ? atoi(argv[2]) : (devices < kMaxGpus ? devices : kMaxGpus);
  if (g_seq < 1 || g_n < 1 || g_n > devices || g_n > kMaxGpus) {
    fprintf(stderr, "usage: context_parallel_c [S >= 1 [N in 1..%d]]\n", devices);
    return 2;
  }
  const int n = g_n;
  const int64_t hq_rows = (int64_t)kBatch * kHeadsQ * g_seq, hk_rows = (int64_t)kBatch * kHeadsKV * g_seq;

  /* Random Q, K, V of the whole sequence (BF16), the same the reference reads. */
  uint16_t* hq = malloc((size_t)(hq_rows * kHeadDim) * 2);
  uint16_t* hk = malloc((size_t)(hk_rows * kHeadDim) * 2);
  uint16_t* hv = malloc((size_t)(hk_rows * kHeadDim) * 2);
  uint64_t state = 0x9e3779b97f4a7c15u;
  for (int a = 0; a < 3; ++a) {
    uint16_t* dst = a == 0 ? hq : a == 1 ? hk : hv;
    const int64_t count = (a == 0 ? hq_rows : hk_rows) * kHeadDim;
    for (int64_t i = 0; i < count; ++i) {
      state = state * 6364136223846793005u + 1442695040888963407u;
      dst[i] = to_bf16((float)((state >> 40) * (1.0 / 16777216.0)) * 4.0f - 2.0f);
    }
  }

  Gpu gpus[kMaxGpus];
  ncclComm_t comms[kMaxGpus];
  int ordinals[kMaxGpus];
  memset(gpus, 0, sizeof gpus);
  for (int r = 0; r < n; ++r) ordinals[r] = r;
  NCCL_OK(ncclCommInitAll(comms, n, ordinals));
  int64_t lmax = 0;
  for (int r = 0; r < n; ++r) lmax = local_len(r) > lmax ? local_len(r) : lmax;
  for (int r = 0; r < n; ++r) {
    Gpu* g = &gpus[r];
    CUDA_OK(cudaSetDevice(r));
    g->rank = r, g->comm = comms[r], g->len = local_len(r);
    FMHA_OK(fmha_create(&g->fmha, FMHA_DEVICE_CUDA, r));
    CUDA_OK(cudaStreamCreateWithFlags(&g->compute, cudaStreamNonBlocking));
    CUDA_OK(cudaStreamCreateWithFlags(&g->transfer, cudaStreamNonBlocking));
    FMHA_OK(fmha_set_stream(g->fmha, g->compute));
    CUDA_OK(cudaEventCreateWithFlags(&g->computed, cudaEventDisableTiming));
    CUDA_OK(cudaEventCreateWithFlags(&g->transferred, cudaEventDisableTiming));
    CUDA_OK(cudaEventCreate(&g->start));
    CUDA_OK(cudaEventCreate(&g->stop));
    const size_t qb = (size_t)(kBatch * kHeadsQ * kHeadDim) * 2, kb = (size_t)(kBatch * kHeadsKV * kHeadDim) * 2;
    g->q = device_alloc(qb * g->len), g->o = device_alloc(qb * g->len);
    g->k = device_alloc(kb * g->len), g->v = device_alloc(kb * g->len);
    for (int b = 0; b < 2; ++b) g->recv_k[b] = device_alloc(kb * lmax), g->recv_v[b] = device_alloc(kb * lmax);
    g->part_o = device_alloc(qb * lmax);
    g->lse0 = device_alloc(sizeof(float) * kBatch * kHeadsQ * first_len(r));
    g->lse1 = device_alloc(sizeof(float) * kBatch * kHeadsQ * second_len(r));
    g->part_lse = device_alloc(sizeof(float) * kBatch * kHeadsQ * lmax);
    uint16_t* host = malloc(qb * g->len);
    gather_local(host, hq, kHeadsQ, r);
    CUDA_OK(cudaMemcpy(g->q, host, qb * g->len, cudaMemcpyHostToDevice));
    gather_local(host, hk, kHeadsKV, r);
    CUDA_OK(cudaMemcpy(g->k, host, kb * g->len, cudaMemcpyHostToDevice));
    gather_local(host, hv, kHeadsKV, r);
    CUDA_OK(cudaMemcpy(g->v, host, kb * g->len, cudaMemcpyHostToDevice));
    free(host);
  }

  ring(gpus); /* warm-up: NCCL connections, workspaces */
  for (int r = 0; r < n; ++r) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaEventRecord(gpus[r].start, gpus[r].compute));
  }
  ring(gpus);
  float ms = 0.0f;
  for (int r = 0; r < n; ++r) {
    float t = 0.0f;
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaEventRecord(gpus[r].stop, gpus[r].compute));
    CUDA_OK(cudaEventSynchronize(gpus[r].stop));
    CUDA_OK(cudaEventElapsedTime(&t, gpus[r].start, gpus[r].stop));
    ms = t > ms ? t : ms;
  }

  /* Reference: one causal forward over the whole sequence on GPU 0. */
  CUDA_OK(cudaSetDevice(0));
  uint16_t *dq = device_alloc((size_t)(hq_rows * kHeadDim) * 2), *dk = device_alloc((size_t)(hk_rows * kHeadDim) * 2);
  uint16_t *dv = device_alloc((size_t)(hk_rows * kHeadDim) * 2), *dout = device_alloc((size_t)(hq_rows * kHeadDim) * 2);
  float* dlse = device_alloc(sizeof(float) * (size_t)hq_rows);
  CUDA_OK(cudaMemcpy(dq, hq, (size_t)(hq_rows * kHeadDim) * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dk, hk, (size_t)(hk_rows * kHeadDim) * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dv, hv, (size_t)(hk_rows * kHeadDim) * 2, cudaMemcpyHostToDevice));
  forward(&gpus[0], view(dq, kHeadsQ, g_seq, 0, g_seq), view(dk, kHeadsKV, g_seq, 0, g_seq),
          view(dv, kHeadsKV, g_seq, 0, g_seq), 1, view(dout, kHeadsQ, g_seq, 0, g_seq), dlse);
  CUDA_OK(cudaStreamSynchronize(gpus[0].compute));
  uint16_t* ref_o = malloc((size_t)(hq_rows * kHeadDim) * 2);
  float* ref_lse = malloc(sizeof(float) * (size_t)hq_rows);
  CUDA_OK(cudaMemcpy(ref_o, dout, (size_t)(hq_rows * kHeadDim) * 2, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(ref_lse, dlse, sizeof(float) * (size_t)hq_rows, cudaMemcpyDeviceToHost));

  /* Compare every rank's rows: |ring - single| <= tol * (1 + |single|). */
  double worst_o = 0.0, worst_lse = 0.0, bound_o = 0.0, bound_lse = 0.0;
  for (int r = 0; r < n; ++r) {
    Gpu* g = &gpus[r];
    const size_t qb = (size_t)(kBatch * kHeadsQ * kHeadDim) * 2;
    uint16_t* o = malloc(qb * g->len);
    float* lse[2] = {malloc(sizeof(float) * kBatch * kHeadsQ * first_len(r) + 1),
                     malloc(sizeof(float) * kBatch * kHeadsQ * second_len(r) + 1)};
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaMemcpy(o, g->o, qb * g->len, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(lse[0], g->lse0, sizeof(float) * kBatch * kHeadsQ * first_len(r), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(lse[1], g->lse1, sizeof(float) * kBatch * kHeadsQ * second_len(r), cudaMemcpyDeviceToHost));
    const int chunks[2] = {r, 2 * n - 1 - r};
    for (int64_t h = 0; h < kBatch * kHeadsQ; ++h) {
      int64_t row = 0;
      for (int c = 0; c < 2; ++c) {
        const int64_t len = chunk_len(chunks[c]), start = chunk_start(chunks[c]);
        for (int64_t i = 0; i < len; ++i, ++row) {
          const double ref_l = ref_lse[h * g_seq + start + i], got_l = lse[c][h * len + i];
          const double el = fabs(got_l - ref_l);
          worst_lse = el > worst_lse ? el : worst_lse;
          bound_lse = el / (1 + fabs(ref_l)) > bound_lse ? el / (1 + fabs(ref_l)) : bound_lse;
          for (int d = 0; d < kHeadDim; ++d) {
            const double ref = from_bf16(ref_o[(h * g_seq + start + i) * kHeadDim + d]);
            const double got = from_bf16(o[(h * g->len + row) * kHeadDim + d]);
            const double e = fabs(got - ref);
            worst_o = e > worst_o ? e : worst_o;
            bound_o = e / (1 + fabs(ref)) > bound_o ? e / (1 + fabs(ref)) : bound_o;
          }
        }
      }
    }
    free(o), free(lse[0]), free(lse[1]);
  }
  const double tol_o = 1.0 / 64, tol_lse = 1e-3; /* BF16: see context_parallel.py */
  const int ok = bound_o <= tol_o && bound_lse <= tol_lse;
  const double flops = 4.0 * kBatch * kHeadsQ * kHeadDim * (double)g_seq * (double)g_seq / 2;
  printf("context_parallel_c: N=%d GPUs S=%lld B=%d Hq=%d Hk=%d D=%d bf16 causal: ring %.3f ms "
         "(%.1f TFLOP/s per GPU); vs one forward: o max err %.3e (err/(1+|ref|) %.2e, tol %.1e), "
         "lse max err %.3e (tol %.1e): %s\n",
         n, (long long)g_seq, kBatch, kHeadsQ, kHeadsKV, kHeadDim, ms, flops / n / (ms * 1e-3) / 1e12,
         worst_o, bound_o, tol_o, worst_lse, tol_lse, ok ? "PASS" : "FAIL");

  for (int r = 0; r < n; ++r) {
    Gpu* g = &gpus[r];
    CUDA_OK(cudaSetDevice(r));
    void* bufs[] = {g->q, g->k, g->v, g->o, g->recv_k[0], g->recv_k[1], g->recv_v[0], g->recv_v[1],
                    g->part_o, g->lse0, g->lse1, g->part_lse, g->workspace};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; ++i) cudaFree(bufs[i]);
    fmha_destroy(g->fmha);
    ncclCommDestroy(g->comm);
    cudaStreamDestroy(g->compute), cudaStreamDestroy(g->transfer);
    cudaEventDestroy(g->computed), cudaEventDestroy(g->transferred);
    cudaEventDestroy(g->start), cudaEventDestroy(g->stop);
  }
  CUDA_OK(cudaSetDevice(0));
  cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(dout), cudaFree(dlse);
  free(hq), free(hk), free(hv), free(ref_o), free(ref_lse);
  return ok ? 0 : 1;
}
