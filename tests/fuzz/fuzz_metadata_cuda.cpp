// fuzz_metadata_cuda: garbage device metadata must never read or write out
// of bounds (issue 9). Meant to run under compute-sanitizer memcheck
// (tools/device/sanitize.sh, tools/device/issue9_cuda.sh):
//
//   fuzz_metadata_cuda [--iters N] [--seed S] [--cpu]
//
// (--cpu: the same problems in host memory on a CPU handle and cpu_tiled,
// which also checks the generator's problems pass validation without a
// GPU.)
//
// Each iteration builds a serving-layout problem whose host-known fields are
// valid (num_seqs, max_seqlen_q/k, shapes, strides, block_table_stride) and
// whose device metadata is garbage: cu_seqlens_q/k, seqused_k and
// block_table entries drawn from negatives, INT32_MIN/MAX, values just past
// the tensors' extents, random bits and plausible values, in any order (not
// monotonic). Every buffer is its own cudaMalloc of exactly the bytes its
// tensor declares, so memcheck sees any access past it; o and lse also sit
// between poisoned guard bytes that must come back unchanged. The problem
// then runs on cuda_sm80_tc, cuda_generic and the automatic choice, with
// automatic and forced split counts. A run must return FMHA_SUCCESS (the
// host cannot see the garbage), leave no CUDA error and keep the guards.
// Refused problems (a validation rule this generator missed) are counted
// and printed, not failures, but more than a tenth of them fails the run:
// the fuzz would be testing nothing.
//
// Exit code 0 when every run held, 1 otherwise, 77 (skipped) without a GPU.
#include <cuda_runtime.h>

#include <cinttypes>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fmha/fmha.h"

namespace {

constexpr size_t kGuard = 256;        // poisoned bytes around o and lse
constexpr unsigned char kPoison = 0xA5;
bool g_cpu = false;  // --cpu: host memory, a CPU handle

void copy(void* dst, const void* src, size_t n) {
  if (n == 0) return;
  if (g_cpu)
    std::memcpy(dst, src, n);
  else
    cudaMemcpy(dst, src, n, cudaMemcpyDefault);
}

struct Rng {
  uint64_t s;
  uint64_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  int64_t range(int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1)); }
  bool coin(int percent) { return static_cast<int>(next() % 100) < percent; }
};

// One garbage metadata value: in range around `extent` or anything at all.
int32_t garbage(Rng& r, int64_t extent) {
  switch (r.next() % 9) {
    case 0: return -static_cast<int32_t>(r.range(1, 1000));
    case 1: return INT32_MIN;
    case 2: return INT32_MAX;
    case 3: return static_cast<int32_t>(extent + r.range(0, 3));
    case 4: return static_cast<int32_t>(r.next());
    case 5: return static_cast<int32_t>(extent + r.range(1, 1 << 20));
    default: return static_cast<int32_t>(r.range(0, extent > 0 ? extent : 0));
  }
}

// A device buffer of exactly `bytes` (so memcheck bounds it), with host
// staging.
struct Buf {
  void* ptr = nullptr;
  size_t bytes = 0;
  explicit Buf(size_t n) : bytes(n) {
    if (n > 0 && g_cpu) ptr = std::malloc(n);
    if (n > 0 && !g_cpu && cudaMalloc(&ptr, n) != cudaSuccess) ptr = nullptr;
  }
  ~Buf() {
    if (ptr && g_cpu) std::free(ptr);
    if (ptr && !g_cpu) cudaFree(ptr);
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
};

bool fill_random(Buf& b, Rng& r, fmha_dtype dt) {
  std::vector<unsigned char> h(b.bytes);
  const size_t es = dt == FMHA_DTYPE_F32 ? 4 : 2;
  for (size_t i = 0; i + es <= h.size(); i += es) {
    // Small finite values: exponent bits never all ones.
    const uint32_t x = static_cast<uint32_t>(r.next());
    if (es == 2) {
      const uint16_t v = static_cast<uint16_t>((x & 0x83ff) | 0x3800);  // |v| in [0.5, 1) for f16; finite bf16
      std::memcpy(&h[i], &v, 2);
    } else {
      const float f = static_cast<float>(static_cast<int>(x % 2001) - 1000) / 1000.f;
      std::memcpy(&h[i], &f, 4);
    }
  }
  copy(b.ptr, h.data(), h.size());
  return true;
}

fmha_tensor tensor(void* data, fmha_dtype dt, int64_t d0, int64_t d1, int64_t d2, int64_t d3, bool token_major) {
  fmha_tensor t{};
  t.data = data;
  t.dtype = dt;
  const int64_t dims[4] = {d0, d1, d2, d3};
  int64_t s[4] = {d1 * d2 * d3, d2 * d3, d3, 1};
  if (token_major) {  // [d0, d2, d1, d3] storage
    s[1] = d3;
    s[2] = d1 * d3;
  }
  for (int i = 0; i < 4; ++i) {
    t.dims[i] = dims[i];
    t.strides[i] = s[i];
  }
  return t;
}

struct Counts {
  long runs = 0, ok = 0, refused = 0, failed = 0;
};

// One problem, run on every kernel and split count.
void one(fmha_handle h, Rng& r, int iter, Counts* c) {
  const fmha_dtype dt = r.coin(50) ? FMHA_DTYPE_F16 : FMHA_DTYPE_BF16;
  static const int64_t kHeads[][2] = {{4, 1}, {8, 2}, {2, 2}, {32, 8}};
  const int64_t* hh = kHeads[r.next() % 4];
  const int64_t Hq = hh[0], Hk = hh[1];
  const int64_t D = r.coin(50) ? 64 : 128;
  const int64_t B = r.range(1, 6);
  // Layout kind: 0 ragged q + ragged k, 1 ragged q + paged, 2 dense q + paged,
  // 3 dense q + seqused_k over dense k, 4 dense q + ragged k.
  const int kind = static_cast<int>(r.next() % 5);
  const bool ragged_q = kind <= 1;
  const bool paged = kind == 1 || kind == 2;
  const bool ragged_k = kind == 0 || kind == 4;
  const bool seqused = paged || kind == 3 || r.coin(30);
  const bool token_major = r.coin(50);

  const int64_t total_q = ragged_q ? r.range(1, 80) : 0;
  const int64_t nq_dense = r.range(1, 9);
  const int32_t max_q = ragged_q ? static_cast<int32_t>(r.range(1, total_q)) : 0;
  const int64_t total_k = ragged_k ? r.range(1, 300) : 0;
  const int64_t cap = r.range(1, 200);  // dense k capacity
  const int64_t page_size = paged ? std::vector<int64_t>{1, 3, 16, 64}[r.next() % 4] : 0;
  const int64_t num_pages = paged ? r.range(1, 20) : 0;
  const int64_t table_stride = paged ? r.range(1, 8) : 0;
  int32_t max_k = 0;
  if (ragged_k) max_k = static_cast<int32_t>(r.range(0, total_k));
  if (paged && r.coin(50)) max_k = static_cast<int32_t>(r.range(1, table_stride * page_size));

  // Tensors, each its own allocation of its declared extent.
  const int64_t qrows = ragged_q ? total_q : nq_dense;
  const int64_t qb = ragged_q ? 1 : B;
  const size_t es = 2;
  Buf q(static_cast<size_t>(qb * Hq * qrows * D) * es);
  int64_t kd0, kd2;
  if (paged) {
    kd0 = num_pages;
    kd2 = page_size;
  } else if (ragged_k) {
    kd0 = 1;
    kd2 = total_k;
  } else {
    kd0 = B;
    kd2 = cap;
  }
  Buf k(static_cast<size_t>(kd0 * Hk * kd2 * D) * es), v(static_cast<size_t>(kd0 * Hk * kd2 * D) * es);
  const size_t o_bytes = static_cast<size_t>(qb * Hq * qrows * D) * es;
  const size_t lse_bytes = static_cast<size_t>(qb * Hq * qrows) * sizeof(float);
  Buf o(o_bytes + 2 * kGuard), lse(lse_bytes + 2 * kGuard);
  if (!q.ptr || !k.ptr || !v.ptr || !o.ptr || !lse.ptr || !fill_random(q, r, dt) || !fill_random(k, r, dt) ||
      !fill_random(v, r, dt)) {
    std::printf("fuzz_metadata_cuda: iteration %d: allocation failed\n", iter);
    ++c->failed;
    return;
  }

  // Garbage metadata, exact-size buffers.
  std::vector<int32_t> cu_q(ragged_q ? B + 1 : 0), cu_k(ragged_k ? B + 1 : 0), used(seqused ? B : 0),
      table(paged ? B * table_stride : 0);
  for (int32_t& x : cu_q) x = garbage(r, total_q);
  for (int32_t& x : cu_k) x = garbage(r, total_k);
  for (int32_t& x : used) x = garbage(r, paged ? table_stride * page_size : ragged_k ? total_k : cap);
  for (int32_t& x : table) x = garbage(r, num_pages);
  auto upload = [](const std::vector<int32_t>& h) {
    auto b = std::make_unique<Buf>(h.size() * sizeof(int32_t));
    copy(b->ptr, h.data(), b->bytes);
    return b;
  };
  auto d_cu_q = upload(cu_q), d_cu_k = upload(cu_k), d_used = upload(used), d_table = upload(table);

  fmha_forward_params p;
  fmha_forward_params_init(&p);
  unsigned char* o_view = static_cast<unsigned char*>(o.ptr) + kGuard;
  float* lse_view = reinterpret_cast<float*>(static_cast<unsigned char*>(lse.ptr) + kGuard);
  p.q = tensor(q.ptr, dt, qb, Hq, qrows, D, false);
  p.o = tensor(o_view, dt, qb, Hq, qrows, D, false);
  p.k = tensor(k.ptr, dt, kd0, Hk, kd2, D, paged && token_major);
  p.v = tensor(v.ptr, dt, kd0, Hk, kd2, D, paged && token_major);
  p.lse = r.coin(80) ? lse_view : nullptr;
  p.mask_flags = std::vector<uint32_t>{FMHA_MASK_NONE, FMHA_MASK_CAUSAL, FMHA_MASK_CAUSAL_TOP_LEFT}[r.next() % 3];
  if (r.coin(25)) p.window_left = static_cast<int32_t>(r.range(0, 50));
  if (ragged_q || ragged_k) p.num_seqs = static_cast<int32_t>(B);
  if (ragged_q) {
    p.cu_seqlens_q = static_cast<const int32_t*>(d_cu_q->ptr);
    p.max_seqlen_q = max_q;
  }
  if (ragged_k) p.cu_seqlens_k = static_cast<const int32_t*>(d_cu_k->ptr);
  if (seqused) p.seqused_k = static_cast<const int32_t*>(d_used->ptr);
  if (paged) {
    p.block_table = static_cast<const int32_t*>(d_table->ptr);
    p.block_table_stride = table_stride;
  }
  p.max_seqlen_k = max_k;

  std::vector<unsigned char> poison_o(o.bytes, kPoison), poison_lse(lse.bytes, kPoison);
  const std::vector<const char*> kernels =
      g_cpu ? std::vector<const char*>{"cpu_tiled", nullptr}
            : std::vector<const char*>{"cuda_sm80_tc", "cuda_generic", nullptr};
  for (const char* kernel : kernels) {
    for (int32_t splits : {0, 1, 3}) {
      ++c->runs;
      copy(o.ptr, poison_o.data(), o.bytes);
      copy(lse.ptr, poison_lse.data(), lse.bytes);
      p.kernel = kernel;
      p.num_splits = splits;
      size_t ws_bytes = 0;
      fmha_status s = fmha_forward_workspace_size(h, &p, &ws_bytes);
      if (s != FMHA_SUCCESS) {
        if (c->refused < 10)
          std::printf("fuzz_metadata_cuda: iteration %d kind %d kernel %s refused: %s\n", iter, kind,
                      kernel ? kernel : "(auto)", fmha_last_error_message());
        ++c->refused;
        continue;
      }
      Buf ws(ws_bytes);
      s = fmha_forward(h, &p, ws.ptr, ws_bytes);
      const cudaError_t e = g_cpu ? cudaSuccess : cudaDeviceSynchronize();
      std::vector<unsigned char> back_o(o.bytes), back_lse(lse.bytes);
      copy(back_o.data(), o.ptr, o.bytes);
      copy(back_lse.data(), lse.ptr, lse.bytes);
      const bool guards = std::memcmp(back_o.data(), poison_o.data(), kGuard) == 0 &&
                          std::memcmp(back_o.data() + kGuard + o_bytes, poison_o.data(), kGuard) == 0 &&
                          std::memcmp(back_lse.data(), poison_lse.data(), kGuard) == 0 &&
                          std::memcmp(back_lse.data() + kGuard + lse_bytes, poison_lse.data(), kGuard) == 0 &&
                          (p.lse != nullptr || std::memcmp(back_lse.data(), poison_lse.data(), lse.bytes) == 0);
      if (s != FMHA_SUCCESS || e != cudaSuccess || !guards) {
        std::printf("fuzz_metadata_cuda: iteration %d kind %d kernel %s splits %d: status %s (%s), cuda %s, "
                    "guards %s\n",
                    iter, kind, kernel ? kernel : "(auto)", splits, fmha_status_string(s),
                    fmha_last_error_message(), cudaGetErrorString(e), guards ? "kept" : "OVERWRITTEN");
        ++c->failed;
        if (e != cudaSuccess) std::exit(1);  // the context is gone
        continue;
      }
      ++c->ok;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 200;
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--iters" && i + 1 < argc) {
      iters = std::atoi(argv[++i]);
    } else if (a == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 0);
    } else if (a == "--cpu") {
      g_cpu = true;
    } else {
      std::fprintf(stderr, "usage: fuzz_metadata_cuda [--iters N] [--seed S] [--cpu]\n");
      return 2;
    }
  }
  int devices = 0;
  if (!g_cpu && (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)) {
    std::printf("fuzz_metadata_cuda: skipped: no CUDA device\n");
    return 77;
  }
  fmha_handle h = nullptr;
  if (fmha_create(&h, g_cpu ? FMHA_DEVICE_CPU : FMHA_DEVICE_CUDA, 0) != FMHA_SUCCESS) {
    std::printf("fuzz_metadata_cuda: fmha_create failed: %s\n", fmha_last_error_message());
    return 1;
  }
  Rng r{seed | 1};
  Counts c;
  for (int i = 0; i < iters; ++i) one(h, r, i, &c);
  fmha_destroy(h);
  std::printf("fuzz_metadata_cuda: %d problems, %ld runs: %ld held, %ld refused by validation, %ld failed "
              "(seed 0x%" PRIx64 ")\n",
              iters, c.runs, c.ok, c.refused, c.failed, seed);
  const bool useful = c.refused * 10 <= c.runs;
  if (!useful) std::printf("fuzz_metadata_cuda: too many refusals: the generator misses a validation rule\n");
  return c.failed == 0 && useful ? 0 : 1;
}
