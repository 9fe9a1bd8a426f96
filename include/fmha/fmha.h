/*
 * fmha: exact scaled-dot-product attention forward.
 *
 *   O = softmax(Q K^T * scale + mask) V
 *
 * computed the FlashAttention way: K/V tiles stream through on-chip memory
 * while an online softmax keeps FP32 running max, sum and output per query
 * row, so the N x N score matrix never reaches memory.
 *
 * This header is the whole public interface. It is C99, compiles as C and as
 * C++, and uses C types only. Everything not declared here is hidden.
 *
 * Thread safety: a handle may be used by one thread at a time. Different
 * handles may be used concurrently. fmha_last_error_message() is per thread.
 */
#ifndef FMHA_FMHA_H_
#define FMHA_FMHA_H_

#include <stddef.h>
#include <stdint.h>

/* ---- version ----------------------------------------------------------- */

#define FMHA_VERSION_MAJOR 0
#define FMHA_VERSION_MINOR 3
#define FMHA_VERSION_PATCH 0
/* MAJOR*10000 + MINOR*100 + PATCH. Same major = ABI compatible. */
#define FMHA_VERSION_NUMBER \
  (FMHA_VERSION_MAJOR * 10000 + FMHA_VERSION_MINOR * 100 + FMHA_VERSION_PATCH)

/* ---- export macro ------------------------------------------------------ */
/* The build defines FMHA_BUILDING_LIBRARY when compiling fmha itself, and
 * FMHA_STATIC_DEFINE for both the library and its users when fmha is built
 * as a static library. Users of the shared library define nothing. */
#if defined(FMHA_STATIC_DEFINE)
#define FMHA_API
#elif defined(_WIN32)
#if defined(FMHA_BUILDING_LIBRARY)
#define FMHA_API __declspec(dllexport)
#else
#define FMHA_API __declspec(dllimport)
#endif
#elif defined(__GNUC__) && __GNUC__ >= 4
#define FMHA_API __attribute__((visibility("default")))
#else
#define FMHA_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status ------------------------------------------------------------ */
/* X(name, value, description). Values are pinned and never reused. */
#define FMHA_STATUS_MAP(X)                                                   \
  X(SUCCESS, 0, "success")                                                   \
  X(ERROR_INVALID_ARGUMENT, 1, "invalid argument")                           \
  X(ERROR_UNSUPPORTED, 2, "no kernel supports this problem")                 \
  X(ERROR_WORKSPACE_TOO_SMALL, 3, "workspace too small")                     \
  X(ERROR_OUT_OF_MEMORY, 4, "out of memory")                                 \
  X(ERROR_DEVICE, 5, "CUDA runtime failure")                                 \
  X(ERROR_NOT_AVAILABLE, 6, "backend not built, or no such device")          \
  X(ERROR_INTERNAL, 7, "internal error")

typedef enum fmha_status {
#define FMHA_STATUS_ENUM_(name, value, text) FMHA_##name = value,
  FMHA_STATUS_MAP(FMHA_STATUS_ENUM_)
#undef FMHA_STATUS_ENUM_
  FMHA_STATUS_COUNT_, /* not a status; one past the last value */
  /* Not a status: keeps the enum 32 bits wide (likewise the other enums'
   * _MAX_ENUM_). The library reads every enum argument and field as an
   * int, so any int a caller passes, negative ones too, is checked and
   * rejected rather than undefined behaviour. */
  FMHA_STATUS_MAX_ENUM_ = 0x7fffffff
} fmha_status;

/* A static description of a status value; "unknown status" for others.
 * Never NULL. */
FMHA_API const char* fmha_status_string(fmha_status status);

/* The detail of the calling thread's most recent failure, naming the field
 * and value at fault (e.g. "k.dims[1]=6 does not divide q.dims[1]=32").
 * "" if the thread's last call succeeded or it made none. The pointer stays
 * valid until the thread's next fmha call. Never NULL. */
FMHA_API const char* fmha_last_error_message(void);

/* ---- tensors ----------------------------------------------------------- */

typedef enum fmha_dtype {
  FMHA_DTYPE_F16 = 1,
  FMHA_DTYPE_BF16 = 2,
  FMHA_DTYPE_F32 = 3,
  /* OCP 8-bit floats (0.3), inputs only (see "inference numerics" below).
   * E4M3: bias 7, no inf, NaN = S.1111.111 only, largest finite 448;
   * E5M2: bias 15, IEEE-like (inf, NaNs), largest finite 57344. */
  FMHA_DTYPE_F8E4M3 = 4,
  FMHA_DTYPE_F8E5M2 = 5,
  FMHA_DTYPE_MAX_ENUM_ = 0x7fffffff /* not a dtype */
} fmha_dtype;

typedef enum fmha_device_kind {
  FMHA_DEVICE_CPU = 0,
  FMHA_DEVICE_CUDA = 1,
  FMHA_DEVICE_MAX_ENUM_ = 0x7fffffff /* not a device kind */
} fmha_device_kind;

/* A strided 4-D view. Logical order [batch, heads, seq, head_dim]; strides
 * are in elements (not bytes) and may be any non-negative values, so BHND,
 * BNHD and slices of a packed QKV buffer are all expressible. The head_dim
 * stride should be 1 for the fast kernels. data must be aligned to the
 * element size (1 byte for FP8, 2 for F16/BF16, 4 for F32). heads and head_dim are in
 * [1, FMHA_MAX_DIM]; batch and seq are in [0, FMHA_MAX_DIM] (empty work is
 * not an error: nothing is read, rows that see no key get O = 0 and
 * lse = -inf, and a tensor with no element may have data NULL). The largest element offset, sum((dims-1)*strides), plus one,
 * times the element size, must fit int64 and not wrap the address space. */
/* The largest dims[] entry accepted (2^62). Within it every index, mask
 * bound and tile position the kernels compute fits int64 with room to spare;
 * kernels may support less (fmha_forward_explain says so). */
#define FMHA_MAX_DIM (INT64_C(1) << 62)

typedef struct fmha_tensor {
  void* data;
  fmha_dtype dtype;
  int64_t dims[4];
  int64_t strides[4];
} fmha_tensor;

/* ---- masks ------------------------------------------------------------- */
/* Query i (0-based, of Nq) and key j (of Nk). The diagonal of query i is
 * d(i) = i + Nk - Nq ("bottom-right", FlashAttention >= 2.1, cuDNN
 * BOTTOM_RIGHT) unless FMHA_MASK_CAUSAL_TOP_LEFT is set, then d(i) = i.
 *   FMHA_MASK_CAUSAL           key j visible iff j <= d(i)
 *   FMHA_MASK_CAUSAL_TOP_LEFT  key j visible iff j <= i
 * Sliding window (window_left/right >= 0; -1 = unbounded):
 *   key j visible iff d(i) - window_left <= j <= d(i) + window_right.
 * With a causal flag window_right must be -1 or 0. A row that sees no key
 * gets O = 0 and lse = -inf.
 *
 * Non-finite data (NaN, inf). Keys a row does not see never affect it,
 * whatever their k and v hold. A NaN logit (from a NaN in the row's q or in
 * the k of a key it sees, or inf - inf inside the dot product) and a +inf
 * logit (inf in q or k, or an F32 logit past FLT_MAX) make the row's O and
 * lse NaN, so lse = -inf still means only "no key visible" (or every logit
 * -inf). A -inf logit gives its key weight 0. Softcap maps +-inf logits to
 * +-softcap, so with it only a NaN logit does this. A NaN or inf in the v of
 * a key the row sees makes that column of O NaN or inf; when that key's
 * softmax weight is exactly 0 (underflow, a -inf logit) the column may stay
 * finite instead. Finite inputs whose logits stay finite in FP32 give finite
 * O and lse. */
#define FMHA_MASK_NONE 0u
#define FMHA_MASK_CAUSAL 1u
#define FMHA_MASK_CAUSAL_TOP_LEFT 2u

/* ---- forward parameters ------------------------------------------------ */
/* Grows only at the end. struct_size is set by fmha_forward_params_init();
 * the library accepts every size it has shipped (see
 * FMHA_FORWARD_PARAMS_SIZE_V1) and rejects others. */
typedef struct fmha_forward_params {
  uint32_t struct_size;
  uint32_t mask_flags;  /* FMHA_MASK_* */
  /* q: [B, Hq, Nq, D]; k, v: [B, Hk, Nk, D] with Hq % Hk == 0 (GQA/MQA:
   * query head h reads kv head h / (Hq / Hk)); o: [B, Hq, Nq, D].
   * q, k, v and o share one dtype, except as the 0.3 fields below allow
   * ("inference numerics": FP8 inputs and another o dtype). o shares no byte with q, k, v or itself
   * (checked exactly, element by element: q, k, v and o rows interleaved in
   * one packed buffer are fine); q, k and v may overlap each other. */
  fmha_tensor q;
  fmha_tensor k;
  fmha_tensor v;
  fmha_tensor o;
  /* Optional [B, Hq, Nq] FP32, contiguous, natural-log log-sum-exp of the
   * scaled (and soft-capped) logits of each row; -inf for a row that sees
   * no key, NaN for a row whose logits hold a NaN (see the masks section).
   * NULL = not written. On the handle's device. Shares no byte with q, k, v
   * or o. */
  float* lse;
  float scale;        /* 0 = 1/sqrt(D); else finite and > 0 */
  /* 0 = off; else s -> softcap * tanh(s / softcap), with softcap >= FLT_MIN
   * (no subnormals) and scale / softcap finite in FP32. */
  float softcap;
  int32_t window_left;  /* -1 = unbounded */
  int32_t window_right; /* -1 = unbounded */
  /* NULL = automatic choice; else the name of a registered kernel to force
   * (see fmha_kernel_name). A forced kernel that does not support the
   * problem gives FMHA_ERROR_UNSUPPORTED. */
  const char* kernel;
  /* Split of the key dimension for the CUDA kernels: 0 = automatic, 1 = no
   * split, n > 1 = at most n splits (benchmarks and tests). */
  int32_t num_splits;
  int32_t reserved_;  /* must be 0 */

  /* ---- 0.2: serving layouts (ragged batches, KV caches, paged K/V) ------
   * All zero/NULL (what fmha_forward_params_init sets, and what a caller
   * compiled against 0.1 cannot set) = the dense layout above. The int32
   * arrays below live where the tensors do (device memory on a CUDA
   * handle) and are read by the kernels, never by the host: no sync, so
   * a forward stays graph-capturable. The library cannot validate their
   * contents; garbage there never reads or writes outside the extents the
   * tensors declare (every index is clamped to them), it only gives a wrong
   * answer. Per sequence b with Nq(b) queries and Nk(b) keys, the masks use
   * that sequence's own diagonal d(i) = i + Nk(b) - Nq(b) (or i with
   * FMHA_MASK_CAUSAL_TOP_LEFT). */
  /* Sequences of a ragged batch: required (>= 0) when cu_seqlens_q or
   * cu_seqlens_k is set, and then the batch size B; else must be 0. */
  int32_t num_seqs;
  /* Packed queries: an upper bound on every Nq(b) (host-known, sizes the
   * launch); required with cu_seqlens_q, in [0, q.dims[2]]; else 0. */
  int32_t max_seqlen_q;
  /* [num_seqs + 1], non-decreasing, cu_seqlens_q[0] = 0: q and o hold the
   * sequences packed along the seq axis (q.dims[0] = o.dims[0] = 1,
   * q.dims[2] = total rows); sequence b owns rows cu_seqlens_q[b] ..
   * cu_seqlens_q[b+1]-1, Nq(b) = their count. lse is then [1, Hq, total
   * rows]. Rows no sequence owns are not written. NULL = dense queries,
   * B = q.dims[0]. */
  const int32_t* cu_seqlens_q;
  /* [num_seqs + 1]: packed keys likewise (k.dims[0] = v.dims[0] = 1,
   * k.dims[2] = total keys). NULL = dense or paged keys. Not with a
   * block_table. */
  const int32_t* cu_seqlens_k;
  /* [B]: sequence b sees only its first seqused_k[b] keys (a KV cache's
   * fill level): Nk(b) = min(seqused_k[b], the keys it has). NULL = all. */
  const int32_t* seqused_k;
  /* Paged K/V: k and v are [num_pages, Hk, page_size, D] views (any
   * strides: vLLM's [pages, page_size, Hk, D] storage and FlashInfer's
   * [pages, Hk, page_size, D] both fit); key j of sequence b is slot
   * j % page_size of page block_table[b * block_table_stride + j /
   * page_size]. Requires seqused_k (Nk(b) = seqused_k[b], at most
   * block_table_stride * page_size). Any page_size >= 1 runs; the fast
   * kernels may prefer some (fmha_forward_explain says which). NULL =
   * contiguous K/V. */
  const int32_t* block_table;
  /* Entries per sequence in block_table (>= 1 with a block_table, else 0):
   * the most pages a sequence can hold. */
  int64_t block_table_stride;
  /* An upper bound on every Nk(b): required with cu_seqlens_k, in [0,
   * k.dims[2]]; with a block_table 0 = block_table_stride * page_size,
   * else at most that; else 0. */
  int32_t max_seqlen_k;
  int32_t reserved2_;  /* must be 0 */

  /* ---- 0.3: inference numerics (FP8, descales, bias, ALiBi) -------------
   * All zero/NULL (what fmha_forward_params_init sets, and what a caller
   * compiled against 0.1 or 0.2 cannot set) = none of it.
   *
   * Dtypes. k and v share a dtype. Either all of q, k, v have one dtype of
   * F16, BF16, F32 (as before 0.3), or k/v are FP8 (F8E4M3 or F8E5M2) and q
   * is F16, BF16 or FP8 (either kind): an FP8 KV cache, or FP8 inputs
   * throughout. o is F16, BF16 or F32 whatever the inputs (never FP8). FP8
   * values are decoded exactly (every FP8 value is an F16 value); the
   * softmax state stays FP32 as always.
   *
   * The logits of query i (head h, sequence b) and key j are
   *   s_ij = scale * q_descale[b, h / G] * k_descale[b, h / G] * (q_i . k_j)
   * (G = Hq / Hk), then soft-capped when softcap != 0, then
   *   s_ij += bias[b, h, i, j] - alibi_slope[b, h] * |d(i) - j|,
   * then the causal and window masks apply (a masked key is out whatever
   * the bias says). The output is
   *   o_i = v_descale[b, h / G] * sum_j softmax(s_i)_j v_j
   * and lse is that of the final s_ij (bias and ALiBi included, before
   * v_descale). A row whose every visible s_ij is -inf (a -inf bias) gets
   * o = 0 and lse = -inf, like a row that sees no key. */
  /* Descale factors, [B, Hk] FP32, contiguous (B = the batch, num_seqs for
   * ragged batches): one per batch entry (sequence) and KV head, FA3's
   * convention; q's factor applies to the query heads of that KV group.
   * NULL = 1. Allowed on any dtype, not only FP8 (they are applied). In
   * the handle's memory (device memory for a CUDA handle, host for CPU);
   * read by the kernels, never by the host, and not validated (a NaN or
   * inf factor gives what the formula gives). */
  const float* q_descale;
  const float* k_descale;
  const float* v_descale;
  /* Additive bias, logical dims [B, Hq, Nq, Nk] with B, Nq, Nk as the
   * library resolves them: for dense q/k the q/k dims; for serving layouts
   * B = num_seqs (or q.dims[0]), Nq = the query bound (max_seqlen_q, or
   * q.dims[2]) and Nk = the key bound (max_seqlen_k; paged with
   * max_seqlen_k 0: block_table_stride * page_size; dense with seqused_k:
   * k.dims[2]). Each bias.dims[d] is either that dim or 1 (a dim of 1
   * broadcasts; its stride is then ignored); any strides, 0 broadcasts
   * too: [1, 1, Nq, Nk] is a mask shared by the batch, [B, 1, 1, Nk] a key
   * padding mask. Element [b, h, i, j] applies to query i and key j of
   * sequence b counted from the sequence's start (its local positions:
   * with packed queries, row cu_seqlens_q[b] + i is i; with packed or
   * paged keys, the sequence's key j), so one bias layout serves dense and
   * ragged batches alike; entries past a sequence's Nq(b) or Nk(b) are not
   * read. dtype F16, BF16 or F32 (not FP8); -inf allowed (ggml's mask
   * tensor); +inf or NaN at a key the row sees make the row's O and lse NaN
   * (the masks section's rules for such logits); at a masked key nothing.
   * bias.data = NULL = no bias (then the other bias fields are ignored);
   * else the extent rules of every tensor apply and o and lse share no
   * byte with it. In the handle's memory. */
  fmha_tensor bias;
  /* ALiBi slopes, FP32: s_ij -= slope * |d(i) - j| with d(i) the active
   * diagonal of query i (bottom-right i + Nk(b) - Nq(b) by default, i with
   * FMHA_MASK_CAUSAL_TOP_LEFT; FlashAttention's definition, with or
   * without a causal mask). NULL = none. alibi_slopes_stride 0: [Hq], one
   * slope per query head for every batch entry; else [B, Hq] with row b at
   * alibi_slopes + b * alibi_slopes_stride, stride >= Hq. In the handle's
   * memory; not validated (any finite slope, negative too, is applied). */
  const float* alibi_slopes;
  int64_t alibi_slopes_stride; /* 0 without alibi_slopes */
} fmha_forward_params;

/* The sizes of fmha_forward_params as shipped: 0.1 (everything up to
 * reserved_), 0.2 (the serving layouts, up to reserved2_) and 0.3 (the
 * inference numerics). Literals, so they never move. */
#if UINTPTR_MAX == 0xffffffffffffffffu
#define FMHA_FORWARD_PARAMS_SIZE_V1 ((uint32_t)368)
#define FMHA_FORWARD_PARAMS_SIZE_V2 ((uint32_t)424)
#define FMHA_FORWARD_PARAMS_SIZE_V3 ((uint32_t)544)
#else
#define FMHA_FORWARD_PARAMS_SIZE_V1 ((uint32_t)offsetof(fmha_forward_params, num_seqs))
#define FMHA_FORWARD_PARAMS_SIZE_V2 ((uint32_t)offsetof(fmha_forward_params, q_descale))
#define FMHA_FORWARD_PARAMS_SIZE_V3 ((uint32_t)sizeof(fmha_forward_params))
#endif

/* Sets the defaults of a params struct of struct_size bytes (the caller's
 * sizeof): zeroes all struct_size bytes, then sets struct_size, windows -1
 * (every other default is 0/NULL: no mask, scale 0, softcap 0, kernel NULL,
 * num_splits 0, lse NULL, the dense layout). It never writes past
 * struct_size bytes, so a program built against an older header, whose
 * struct is smaller, keeps its memory intact; a size this library never
 * shipped is then refused by fmha_forward. NULL, or struct_size < 4, is
 * ignored. C and C++ callers use the macro below; bindings that cannot (FFI
 * through ctypes, bindgen) call it with their struct's size. */
FMHA_API void fmha_forward_params_init_sized(fmha_forward_params* params, size_t struct_size);

/* The init every program should call: its own struct's size. */
#define fmha_forward_params_init(params) \
  fmha_forward_params_init_sized((params), sizeof(fmha_forward_params))

/* The 0.1 entry point, kept for programs built against 0.1 (they call the
 * symbol, not the macro): initializes FMHA_FORWARD_PARAMS_SIZE_V1 bytes,
 * forever. The parentheses keep the macro above from expanding. */
FMHA_API void(fmha_forward_params_init)(fmha_forward_params* params);

/* ---- handles ----------------------------------------------------------- */

typedef struct fmha_context* fmha_handle;

/* Creates a handle for one device. CPU: device_ordinal must be 0. CUDA:
 * FMHA_ERROR_NOT_AVAILABLE when the library was built without CUDA, no GPU
 * is present, or the ordinal does not name one. *handle is set to NULL on
 * failure. */
FMHA_API fmha_status fmha_create(fmha_handle* handle, fmha_device_kind kind,
                                 int device_ordinal);

/* Releases the handle. NULL is fine. Destroying a handle twice, or using it
 * after fmha_destroy, is undefined behaviour: a handle is a pointer, and no
 * C library can tell a freed one from a live one. */
FMHA_API void fmha_destroy(fmha_handle handle);

/* CUDA handles: the cudaStream_t later forwards are enqueued on (NULL = the
 * legacy default stream). CPU handles accept only NULL. */
FMHA_API fmha_status fmha_set_stream(fmha_handle handle, void* cuda_stream);

/* CPU handles: worker threads for later forwards; 0 = one per hardware
 * thread. Ignored by CUDA handles. Negative is invalid. When the system
 * cannot start that many threads: FMHA_ERROR_OUT_OF_MEMORY and the handle
 * keeps its previous threads (with 0: runs with the threads it could start).
 * fmha_create likewise runs with what it could start.
 * CPU instruction sets: the backend picks its path by cpuid on x86-64
 * (avx512bf16, avx512, avx2, baseline) and by hwcaps on AArch64 Linux
 * (neonfp16, neon, baseline); the environment variable FMHA_CPU_ISA, read
 * once per process at the first CPU forward, forces one of those names
 * ("auto": the default). A value that is unknown, unavailable on this CPU or
 * not built (amx, avx512fp16) falls back to the best path with one line on
 * stderr. Every path meets the same accuracy. */
FMHA_API fmha_status fmha_set_num_threads(fmha_handle handle, int num_threads);

/* A caller's parallel-for, for engines that own their threads: it runs
 * task(ctx, i) exactly once for every i in [0, count), on any threads in any
 * order, and returns when all have finished. user is the pointer given to
 * fmha_set_parallel_for. The tasks never throw, never wait on each other and
 * never call back into the job system. */
typedef void (*fmha_parallel_for_fn)(void* user, int64_t count,
                                     void (*task)(void* ctx, int64_t index),
                                     void* ctx);

/* CPU handles: later forwards run their work items through fn (called from
 * the thread that calls fmha_forward, once or more per forward) instead of
 * fmha's own worker threads, which are stopped. fn = NULL (with user = NULL) restores fmha's threads.
 * Results are bitwise identical either way, whatever threads and order fn
 * uses. fmha_set_num_threads still sets how many tasks compute at once (the
 * per-thread scratch the workspace holds; 0 = one per hardware thread): when
 * fn runs more tasks at once than that, the extra ones wait for a slot. A
 * forward whose fn ran fewer tasks than count, or an index outside
 * [0, count), returns FMHA_ERROR_INVALID_ARGUMENT (its output is then
 * unspecified). CUDA handles have no CPU work items: they accept any fn and
 * ignore it (FMHA_SUCCESS). Errors: handle NULL, or user non-NULL with fn
 * NULL (FMHA_ERROR_INVALID_ARGUMENT); FMHA_ERROR_OUT_OF_MEMORY when restoring
 * fmha's threads cannot start them (the handle keeps fn). */
FMHA_API fmha_status fmha_set_parallel_for(fmha_handle handle,
                                           fmha_parallel_for_fn fn, void* user);

/* ---- forward ----------------------------------------------------------- */

/* The workspace fmha_forward needs for these params on this handle, in
 * bytes (may be 0). Validates params exactly as fmha_forward does. */
FMHA_API fmha_status fmha_forward_workspace_size(
    fmha_handle handle, const fmha_forward_params* params, size_t* bytes);

/* Computes o (and lse when given). workspace: device memory of the handle's
 * device, 16-byte aligned, at least fmha_forward_workspace_size() bytes;
 * may be NULL when that size is 0; the bytes it uses must not overlap q,
 * k, v, o or lse. Allocates nothing itself, so a CUDA forward can be
 * captured in a CUDA graph. On CUDA the call is asynchronous on the handle's
 * stream. Validation happens before anything is written: on any error o and
 * lse are untouched. What validation cannot see is the data: the library
 * never reads tensor contents to check them (they may be device memory), so
 * pointers into memory smaller than the described extent, or freed, are
 * the caller's error and undefined behaviour. */
FMHA_API fmha_status fmha_forward(fmha_handle handle,
                                  const fmha_forward_params* params,
                                  void* workspace, size_t workspace_bytes);

/* ---- merge of partial results ------------------------------------------
 * Attention over keys split into parts (a shared prefix and a per-request
 * suffix, KV shards on several devices, ...) is the merge of each part's
 * normalized output and lse:
 *   lse = log(sum_i exp(lse_i)),   o = sum_i exp(lse_i - lse) * o_i
 * computed in FP32. Parts with lse_i = -inf contribute nothing; a row whose
 * parts are all -inf gets o = 0, lse = -inf; a NaN lse_i makes the row NaN. */
typedef struct fmha_merge_params {
  uint32_t struct_size;
  int32_t num_parts;          /* >= 1 */
  /* [num_parts] views of one shape [B, H, N, D], one dtype (F16, BF16 or
   * F32), any strides. */
  const fmha_tensor* o_parts;
  /* [num_parts] pointers to FP32 [B, H, N] contiguous lse arrays. */
  const float* const* lse_parts;
  /* The result, shape [B, H, N, D], any of the three dtypes. It may be
   * o_parts[0] itself (same data and strides: an in-place merge) but must
   * share no other byte with any part or lse array. */
  fmha_tensor o;
  /* Optional [B, H, N] FP32 contiguous result; may be lse_parts[0] (in
   * place), else shares no byte with the other operands. NULL = not
   * written. */
  float* lse;
} fmha_merge_params;

/* The size of fmha_merge_params as shipped in 0.2 (a literal: it never
 * moves; later versions grow the struct at the end). */
#if UINTPTR_MAX == 0xffffffffffffffffu
#define FMHA_MERGE_PARAMS_SIZE_V1 ((uint32_t)112)
#else
#define FMHA_MERGE_PARAMS_SIZE_V1 ((uint32_t)sizeof(fmha_merge_params))
#endif

/* As fmha_forward_params_init_sized: zeroes struct_size bytes (the
 * caller's sizeof), then sets struct_size; never writes past them. NULL,
 * or struct_size < 4, is ignored. */
FMHA_API void fmha_merge_params_init_sized(fmha_merge_params* params, size_t struct_size);

/* The init every program should call: its own struct's size. */
#define fmha_merge_params_init(params) \
  fmha_merge_params_init_sized((params), sizeof(fmha_merge_params))

/* The exported symbol, for FFI callers without the macro: initializes
 * FMHA_MERGE_PARAMS_SIZE_V1 bytes, forever. */
FMHA_API void(fmha_merge_params_init)(fmha_merge_params* params);

/* Merges on the handle's device (CUDA: asynchronously on its stream; every
 * pointer, including the o_parts and lse_parts arrays' targets, in device
 * memory, while the o_parts and lse_parts arrays themselves are host
 * memory). Validation as fmha_forward: on any error nothing is written.
 * B, N = 0 are empty work (SUCCESS). Needs no workspace. On CUDA more than
 * 64 parts are merged in rounds that carry the running result in o and lse
 * (o rounded to its dtype between rounds): lse is then required, else
 * FMHA_ERROR_UNSUPPORTED. */
FMHA_API fmha_status fmha_merge(fmha_handle handle, const fmha_merge_params* params);

/* ---- introspection ----------------------------------------------------- */

/* Registered kernels in this build (CPU and, when built, CUDA). */
FMHA_API int fmha_kernel_count(void);
/* The name of kernel i, or NULL when i is out of range. */
FMHA_API const char* fmha_kernel_name(int index);

/* Writes to buf (NUL-terminated, truncated to len) which kernel would run
 * for these params and why each better-ranked kernel was passed over.
 * Returns FMHA_SUCCESS when a kernel would run, FMHA_ERROR_UNSUPPORTED when
 * none would (buf still says why), or the validation error. */
FMHA_API fmha_status fmha_forward_explain(fmha_handle handle,
                                          const fmha_forward_params* params,
                                          char* buf, size_t len);

/* FMHA_VERSION_NUMBER of the library actually loaded. */
FMHA_API uint32_t fmha_version(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FMHA_FMHA_H_ */
