// An FP8 KV cache on cuda_sm80_tc (fmha.h 0.3, issue 14): q in F16 or BF16
// with K/V in F8E4M3 or F8E5M2, o in q's dtype, with q/k/v descales, forced
// by name (and on the automatic choice, which must pick a kernel that runs
// it), against the float64 reference on the dequantized inputs
// (common/serving_case.h: poisoned o, lse and workspace; NaN-filled keys and
// pages that no sequence owns must stay out of every answer). Decode (Nq =
// 1..8 per sequence, GQA-packed into the narrow tile) with forced key
// splits, causal prefill on the wide tile, dense, seqused_k, ragged and
// paged layouts; negative k descales. The in-register FP8 conversion: every
// byte of each format decoded exactly into o, and a NaN / inf v row that
// must reach only the rows that see its key (NonFiniteV's guard on the raw
// FP8 tile). A BF16 q of huge, tiny and spread magnitudes (its Q K^T runs
// in F16 after a power-of-two scale per row). Then what the family still
// refuses, with the reason explain gives: an FP8 q, o in another dtype than
// q, descales with 16-bit K/V.
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/fp8_decode_case.h"
#include "common/numeric_types.h"
#include "common/random.h"
#include "common/serving_case.h"
#include "gpu/gpu_support.h"

using Explain = fmha_gpu_test::ExplainCapture;

namespace {

using fmha_gpu_test::CudaBuffer;
using fmha_gpu_test::CudaMemory;
using fmha_gpu_test::GpuHandle;
using fmha_test::KvLayout;
using fmha_test::PageStorage;
using fmha_test::QLayout;
using fmha_test::ServingCase;

constexpr fmha_dtype kQTypes[] = {FMHA_DTYPE_F16, FMHA_DTYPE_BF16};
constexpr fmha_dtype kKvTypes[] = {FMHA_DTYPE_F8E4M3, FMHA_DTYPE_F8E5M2};

ServingCase fp8_case(fmha_dtype q, fmha_dtype kv, int64_t hq, int64_t hk, int64_t d) {
  ServingCase c;
  c.dtype = q;
  c.kv_dtype = kv;
  c.heads_q = hq;
  c.heads_kv = hk;
  c.head_dim = d;
  c.q_descale = c.k_descale = c.v_descale = true;  // factors in [0.5, 2)
  return c;
}


// Whether cuda_sm80_tc's refusal of an FP8 K/V problem is one a build or
// device may give: a build without this instantiation, without this head
// dim (a reduced FMHA_SM80_INSTANCES list: the registry row's head-dim
// column says "does not run head_dim=...") or without any FP8 K/V unit
// (CMAKE_CUDA_ARCHITECTURES without one from 89 up), or a device below the
// FP8 K/V units' architectures (the registry row's minimum). Sets
// *below_sm for the last.
bool fp8_kv_declined(const std::string& msg, bool* below_sm) {
  *below_sm = msg.find("for FP8 K/V") != std::string::npos;
  return *below_sm || msg.find("not instantiated") != std::string::npos ||
         msg.find("does not run dtype F8E") != std::string::npos ||
         msg.find("does not run head_dim=") != std::string::npos;
}

// `c` on cuda_sm80_tc forced (for each split count) and on the automatic
// choice. *below_sm: the device is below the FP8 K/V units' architectures.
void run_case(fmha_handle h, CudaMemory& mem, const ServingCase& c, const std::vector<int32_t>& splits, int* ran,
              bool* below_sm) {
  INFO("case " << c.name());
  const fmha_test::PreparedServingCase pc(c);
  for (int32_t s : splits) {
    fmha_test::RunOptions opt;
    opt.kernel = "cuda_sm80_tc";
    opt.num_splits = s;
    const fmha_test::CaseResult r = pc.run(h, mem, opt);
    if (r.unsupported()) {
      CHECK_MESSAGE(fp8_kv_declined(r.message, below_sm), r.report());
      break;  // the automatic choice must still run it
    }
    CHECK_MESSAGE(r.ok(), "num_splits=" << s << "\n" << r.report());
    ++*ran;
  }
  fmha_test::RunOptions opt;  // automatic: some kernel runs it, correctly
  const fmha_test::CaseResult r = pc.run(h, mem, opt);
  CHECK_MESSAGE(r.ok(), "automatic\n" << r.report());
}

void run_group(const char* group, const std::vector<ServingCase>& cases, const std::vector<int32_t>& splits) {
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);
  CudaMemory mem;
  const size_t stride = static_cast<size_t>(fmha_gpu_test::quick_stride());
  int ran = 0, n = 0;
  bool below_sm = false;
  for (size_t i = 0; i < cases.size(); ++i) {
    if (i % stride != 0) continue;
    run_case(h.get(), mem, cases[i], splits, &ran, &below_sm);
    ++n;
  }
  MESSAGE(group << ": " << n << " cases, " << ran << " forced cuda_sm80_tc runs"
                << (below_sm ? " (the device is below the FP8 K/V units' architectures)" : ""));
  if (!below_sm) CHECK(ran > 0);  // the default build instantiates every (q dtype, head dim) used here
}

}  // namespace

TEST_CASE("sm80 FP8 K/V: decode, GQA-packed, dense / seqused_k / paged, key splits forced") {
  std::vector<ServingCase> cases;
  int n = 0;
  for (fmha_dtype qt : kQTypes)
    for (fmha_dtype kv : kKvTypes) {
      // Nq = 1, GQA 8/2, dense K/V of one length (the dense instantiation).
      ServingCase c = fp8_case(qt, kv, 8, 2, 128);
      c.q_layout = QLayout::kDense;
      c.len_q = {1, 1};
      c.len_k = {1000, 1000};
      cases.push_back(c);
      // Nq = 1, seqused_k over a dense cache: lengths 0, 1, a partial tile.
      c.len_q = {1, 1, 1, 1, 1};
      c.len_k = {300, 0, 1, 77, 1030};
      c.seqused_k = true;
      cases.push_back(c);
      // Nq = 4 and 8 causal (bottom-right: the last query sees every key),
      // GQA 32/8 and 4/1 (MQA-like), head dims 64 and 256.
      c = fp8_case(qt, kv, n % 2 ? 32 : 4, n % 2 ? 8 : 1, n % 2 ? 64 : 256);
      c.q_layout = QLayout::kDense;
      c.len_q = {4, 4};
      c.len_k = {257, 1000};
      c.seqused_k = true;
      c.mask_flags = FMHA_MASK_CAUSAL;
      cases.push_back(c);
      c.len_q = {8, 8, 8};
      c.len_k = {8, 129, 700};
      c.mask_flags = n % 2 ? FMHA_MASK_CAUSAL_TOP_LEFT : FMHA_MASK_CAUSAL;
      c.window_left = n % 2 ? -1 : 100;
      cases.push_back(c);
      // Paged: page sizes that put a tile in one page (64, 256) and ones
      // that do not (16, 1), both storages, shuffled pages.
      for (int64_t ps : {16, 64, 256, 1}) {
        c = fp8_case(qt, kv, 8, 2, 128);
        c.q_layout = QLayout::kDense;
        c.kv_layout = KvLayout::kPaged;
        c.page_size = ps;
        c.storage = ps == 64 || ps == 1 ? PageStorage::kTokenMajor : PageStorage::kHeadMajor;
        c.len_q = {1, 1, 1, 1};
        c.len_k = {ps == 1 ? 300 : 2100, 0, 1, 333};
        c.q_descale = n % 2 == 0;  // some with k/v descales only
        cases.push_back(c);
      }
      // More units than SMs (20 x 8 = 160 > 132): the plain kernel keeps
      // NarrowFp8Kv (4 CTAs per SM); the cases above fit one CTA per SM
      // and take NarrowFp8KvOneCta at D=128 (sm80_forward.cu). Paged and
      // seqused_k (the first two dtype pairs), lengths 0 .. 1000.
      if (n < 2) {
        c = fp8_case(qt, kv, 32, 8, 128);
        c.q_layout = QLayout::kDense;
        c.len_k.clear();
        for (int s = 0; s < 20; ++s) c.len_k.push_back(s % 7 == 3 ? 0 : (s * 389 + 17 * n) % 1000 + 1);
        c.len_q = std::vector<int64_t>(c.len_k.size(), 1);
        if (n % 2) {
          c.kv_layout = KvLayout::kPaged;
          c.page_size = 64;
          c.storage = PageStorage::kTokenMajor;
        } else {
          c.seqused_k = true;
        }
        cases.push_back(c);
      }
      // Ragged decode queries (Nq 1..5) over packed keys.
      c = fp8_case(qt, kv, 8, 2, 128);
      c.q_layout = QLayout::kRagged;
      c.kv_layout = KvLayout::kRagged;
      c.len_q = {1, 5, 2, 3};
      c.len_k = {64, 513, 3, 190};
      c.mask_flags = FMHA_MASK_CAUSAL;
      cases.push_back(c);
      ++n;
    }
  run_group("fp8 kv decode", cases, {1, 0, 3, 16});
}

TEST_CASE("sm80 FP8 K/V: prefill on the wide tile, causal, windows, softcap, ragged") {
  std::vector<ServingCase> cases;
  int n = 0;
  for (fmha_dtype qt : kQTypes)
    for (fmha_dtype kv : kKvTypes)
      for (int64_t d : {64, 128, 256}) {
        // Dense causal GQA prefill, Nq = Nk past several 128-row tiles.
        ServingCase c = fp8_case(qt, kv, 4, 2, d);
        c.q_layout = QLayout::kDense;
        c.len_q = {300, 300};
        c.len_k = {300, 300};
        c.mask_flags = n % 2 ? FMHA_MASK_CAUSAL : FMHA_MASK_CAUSAL_TOP_LEFT;
        cases.push_back(c);
        // Ragged q and k: lengths 0, 1, tile edges, Nq > Nk; a window, and
        // softcap every other case (the descale then scales softcap's input).
        c.q_layout = QLayout::kRagged;
        c.kv_layout = KvLayout::kRagged;
        c.len_q = {5, 0, 70, 129, 33};
        c.len_k = {5, 7, 40, 200, 0};
        c.mask_flags = FMHA_MASK_CAUSAL;
        c.window_left = n % 3 == 0 ? 24 : -1;
        c.softcap = n % 2 ? 0.f : 4.f;
        cases.push_back(c);
        // Paged prefill (queries past the narrow tile's 32 rows).
        c.kv_layout = KvLayout::kPaged;
        c.page_size = 32;
        c.len_q = {40, 97};
        c.len_k = {180, 97};
        c.window_left = -1;
        cases.push_back(c);
        ++n;
      }
  run_group("fp8 kv prefill", cases, {1, 0, 4});
}

TEST_CASE("sm80 FP8 K/V: negative k descales (the scores' sign flips), with and without softcap") {
  std::vector<ServingCase> cases;
  for (fmha_dtype qt : kQTypes)
    for (float cap : {0.f, 5.f}) {
      ServingCase c = fp8_case(qt, FMHA_DTYPE_F8E4M3, 8, 2, 128);
      c.negative_k_descale = true;
      c.softcap = cap;
      c.q_layout = QLayout::kDense;
      c.len_q = {1, 1, 1};
      c.len_k = {700, 3, 64};
      c.seqused_k = true;
      cases.push_back(c);  // decode (narrow tile)
      c.len_q = {150, 150};
      c.len_k = {150, 150};
      c.seqused_k = false;
      c.mask_flags = FMHA_MASK_CAUSAL;
      cases.push_back(c);  // prefill (wide tile)
    }
  run_group("fp8 kv negative descales", cases, {1, 3});
}

TEST_CASE("sm80 FP8 K/V: a BF16 q of any magnitude (Q K^T in F16 after a power-of-two scale per row)") {
  // A BF16 q's rows become F16 scaled by 2^-e(r) (fwd_kernel.cuh:
  // QRowsToF16) and the scores get 2^e(r) back. |q| ~ 2^100 (1.3e30) and
  // 2^-100 (7.9e-31): with q_descale x 2^-+100 (logits of the usual size),
  // and without (huge logits: nearly one-hot rows; tiny ones: nearly
  // uniform). q_spread: rows of GQA-packed units 2^-24 .. 2^24 apart (one
  // e per row, not per unit), and every fourth element 2^-40 below its
  // row, below F16's range after the scale: the flushed part is < 2^-38 of
  // the row's max per element, far inside the tolerance. Decode (narrow
  // tile, key splits) and causal prefill (wide tile), softcap, a negative
  // k descale (its sign folded into the rows' factors).
  std::vector<ServingCase> cases;
  int n = 0;
  for (fmha_dtype kv : kKvTypes)
    for (int exponent : {100, -100, 0})
      for (bool spread : {false, true}) {
        if (exponent == 0 && !spread) continue;  // the other test cases
        ServingCase c = fp8_case(FMHA_DTYPE_BF16, kv, 8, 2, 128);
        c.q_exponent = exponent;
        c.q_spread = spread;
        c.q_descale = n % 2 == 0;
        c.negative_k_descale = n % 3 == 0;
        c.softcap = n % 4 == 1 ? 5.f : 0.f;
        c.q_layout = QLayout::kDense;
        c.len_q = {1, 1, 1};
        c.len_k = {1000, 3, 200};
        c.seqused_k = true;
        cases.push_back(c);  // decode
        c.head_dim = n % 2 ? 64 : 256;
        c.len_q = {150, 150};
        c.len_k = {150, 150};
        c.seqused_k = false;
        c.mask_flags = FMHA_MASK_CAUSAL;
        cases.push_back(c);  // prefill
        ++n;
      }
  run_group("fp8 kv bf16 q magnitudes", cases, {1, 3});
}

// One forward of [1, H=1, N, D] tensors on cuda_sm80_tc forced: q (and o)
// of dtype qt, k/v of FP8 kind kv, o poisoned first. Returns false when
// this build lacks the instantiation (the message says so), else requires
// success and fills `o_host` with o as floats.
bool run_raw(fmha_dtype qt, fmha_dtype kv, int64_t nq, int64_t nk, int64_t d, uint32_t mask,
             const std::vector<uint16_t>& q_bits, const std::vector<uint8_t>& k_bytes,
             const std::vector<uint8_t>& v_bytes, std::vector<float>* o_host, bool* below_sm = nullptr) {
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);
  CudaBuffer q(nq * d * 2), k(nk * d), v(nk * d), o(nq * d * 2), lse(nq * 4);
  REQUIRE((q.ok() && k.ok() && v.ok() && o.ok() && lse.ok()));
  REQUIRE(cudaMemcpy(q.get(), q_bits.data(), q.bytes(), cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(k.get(), k_bytes.data(), k.bytes(), cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(v.get(), v_bytes.data(), v.bytes(), cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemset(o.get(), 0x7d, o.bytes()) == cudaSuccess);  // poison (a finite value in both dtypes)
  fmha_forward_params p;
  fmha_forward_params_init(&p);
  auto view = [](fmha_tensor* x, void* data, fmha_dtype dt, int64_t n, int64_t dd) {
    x->data = data;
    x->dtype = dt;
    const int64_t dims[4] = {1, 1, n, dd}, strides[4] = {n * dd, n * dd, dd, 1};
    std::memcpy(x->dims, dims, sizeof dims);
    std::memcpy(x->strides, strides, sizeof strides);
  };
  view(&p.q, q.get(), qt, nq, d);
  view(&p.k, k.get(), kv, nk, d);
  view(&p.v, v.get(), kv, nk, d);
  view(&p.o, o.get(), qt, nq, d);
  p.lse = static_cast<float*>(lse.get());
  p.mask_flags = mask;
  p.kernel = "cuda_sm80_tc";
  size_t bytes = 0;
  const fmha_status ws = fmha_forward_workspace_size(h.get(), &p, &bytes);
  if (ws != FMHA_SUCCESS) {
    const std::string msg = fmha_last_error_message();
    bool below = false;
    CHECK_MESSAGE(fp8_kv_declined(msg, &below), msg);
    if (below_sm != nullptr) *below_sm = below;
    return false;
  }
  CudaBuffer w(bytes);
  REQUIRE(w.ok());
  REQUIRE_MESSAGE(fmha_forward(h.get(), &p, w.get(), bytes) == FMHA_SUCCESS, fmha_last_error_message());
  std::vector<uint16_t> out(nq * d);
  REQUIRE(cudaMemcpy(out.data(), o.get(), o.bytes(), cudaMemcpyDeviceToHost) == cudaSuccess);
  o_host->resize(out.size());
  for (size_t i = 0; i < out.size(); ++i)
    (*o_host)[i] = qt == FMHA_DTYPE_F16 ? fmha_test::half_to_float(out[i]) : fmha_test::bf16_to_float(out[i]);
  return true;
}

uint16_t bits_of(fmha_dtype t, float x) {
  return t == FMHA_DTYPE_F16 ? fmha_test::float_to_half(x) : fmha_test::float_to_bf16(x);
}

TEST_CASE("sm80 FP8 K/V: every FP8 byte decodes exactly through the register conversion") {
  // fp8_decode_case.h's inputs with a 16-bit q and o: a single key, so the
  // softmax weight is exactly 1 and o column d is v's byte d decoded, which
  // F16 and BF16 hold exactly; an inf may come out NaN (fmha.h: "NaN or
  // inf"), a NaN must. At each head dim's decode tile (D = 256: one column
  // per byte; D = 128 and 64: the 256 bytes over 2 and 4 runs of D columns).
  int ran = 0;
  bool below_sm = false;
  for (const int64_t D : {int64_t{256}, int64_t{128}, int64_t{64}})
    for (fmha_dtype qt : kQTypes)
      for (fmha_dtype kv : kKvTypes) {
        CAPTURE(D);
        CAPTURE(fmha_test::dtype_label(qt));
        CAPTURE(fmha_test::dtype_label(kv));
        const fmha_test::Fp8DecodeInputs in = fmha_test::fp8_decode_inputs(kv);
        const std::vector<uint16_t> q(D, bits_of(qt, 0.5f));
        const std::vector<uint8_t> k(in.qk.begin(), in.qk.begin() + D);
        int nans = 0, runs = 0;
        for (int64_t first = 0; first < fmha_test::kFp8DecodeD; first += D) {
          const std::vector<uint8_t> v(in.v.begin() + first, in.v.begin() + first + D);
          std::vector<float> o;
          if (!run_raw(qt, kv, 1, 1, D, FMHA_MASK_NONE, q, k, v, &o, &below_sm)) break;
          ++runs;
          for (int64_t d = 0; d < D; ++d) {
            CAPTURE(first + d);
            const float want = fmha_test::fp8_to_float(static_cast<uint8_t>(first + d), kv);
            if (std::isnan(want)) {
              ++nans;
              CHECK(std::isnan(o[d]));
            } else if (std::isinf(want)) {
              CHECK((std::isnan(o[d]) || o[d] == want));
            } else {
              CHECK(o[d] == want);
            }
          }
        }
        if (runs == 0) continue;  // this build lacks the head dim (run_raw checked the reason)
        CHECK(runs * D == fmha_test::kFp8DecodeD);
        CHECK(nans == (kv == FMHA_DTYPE_F8E4M3 ? 2 : 6));
        ++ran;
      }
  MESSAGE("every-byte decode: " << ran << " of 12 (head dim, q dtype, FP8 kind) runs");
  if (!below_sm) CHECK(ran > 0);
}

TEST_CASE("sm80 FP8 K/V: a non-finite v row reaches only the rows that see its key (causal)") {
  // Random finite q / k / v except v row bad: NaN bytes (e4m3 0x7f) or inf
  // (e5m2 0x7c), under a bottom-right causal mask (row i sees key j iff j
  // <= i + Nk - Nq). Rows that never see it must stay finite (a 0 * NaN in
  // the P V product would leak it); rows that see it, with a non-zero
  // weight, are NaN or inf in every column. Nq = Nk = 150 on the prefill
  // tile (several key tiles and 16-row tiles), and 16 rows over Nk = 150
  // and 190 on the decode tile, where the bad key sits in an edge tile in
  // the first and in the second key warp's share of it (D=128: 64-key
  // tiles, 32 keys per key warp; keys 128..191).
  struct Shape {
    int64_t nq, nk, bad;
  };
  constexpr int64_t D = 128;
  std::mt19937 rng(20261201);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  int ran = 0;
  bool below_sm = false;
  for (const Shape& sh : {Shape{150, 150, 70}, Shape{16, 150, 140}, Shape{16, 190, 185}})
    for (fmha_dtype qt : kQTypes)
      for (fmha_dtype kv : kKvTypes) {
        CAPTURE(sh.nq);
        CAPTURE(sh.nk);
        CAPTURE(fmha_test::dtype_label(qt));
        CAPTURE(fmha_test::dtype_label(kv));
        std::vector<uint16_t> q(sh.nq * D);
        std::vector<uint8_t> k(sh.nk * D), v(sh.nk * D);
        for (auto& x : q) x = bits_of(qt, u(rng));
        for (auto& x : k) x = fmha_test::float_to_fp8(u(rng), kv);
        for (auto& x : v) x = fmha_test::float_to_fp8(u(rng), kv);
        for (int64_t e = 0; e < D; ++e) v[sh.bad * D + e] = kv == FMHA_DTYPE_F8E4M3 ? 0x7f : 0x7c;
        std::vector<float> o;
        if (!run_raw(qt, kv, sh.nq, sh.nk, D, FMHA_MASK_CAUSAL, q, k, v, &o, &below_sm)) continue;
        ++ran;
        int leaked = 0, missing = 0;
        for (int64_t i = 0; i < sh.nq; ++i)
          for (int64_t e = 0; e < D; ++e) {
            const float x = o[i * D + e];
            if (sh.bad > i + sh.nk - sh.nq) leaked += !std::isfinite(x);
            else missing += std::isfinite(x);
          }
        CHECK(leaked == 0);
        CHECK(missing == 0);
      }
  if (!below_sm) CHECK(ran > 0);
}

TEST_CASE("sm80 FP8 K/V: what the family refuses names the reason") {
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);
  CudaMemory mem;
  ServingCase c = fp8_case(FMHA_DTYPE_BF16, FMHA_DTYPE_F8E4M3, 8, 2, 128);
  c.q_layout = QLayout::kDense;
  c.len_q = {1, 1};
  c.len_k = {100, 100};
  struct Refusal {
    const char* name;
    fmha_dtype q, kv, o;
    const char* reason;
    const char* other;  // what a build without an F16 instantiation says instead
  };
  const Refusal refusals[] = {
      {"o in F32", FMHA_DTYPE_BF16, FMHA_DTYPE_F8E4M3, FMHA_DTYPE_F32, "does not run dtype F32", nullptr},
      {"o in F16 under a BF16 q", FMHA_DTYPE_BF16, FMHA_DTYPE_F8E4M3, FMHA_DTYPE_F16,
       "o in another dtype than q is not run", "does not run dtype F16"},
      {"an FP8 q", FMHA_DTYPE_F8E4M3, FMHA_DTYPE_F8E4M3, FMHA_DTYPE_BF16, "FP8 q is not run", nullptr},
      {"descales with BF16 K/V", FMHA_DTYPE_BF16, FMHA_DTYPE_BF16, FMHA_DTYPE_BF16,
       "does not support descales with 16-bit K/V", nullptr},
  };
  Explain::handle = h.get();
  for (const Refusal& x : refusals) {
    CAPTURE(x.name);
    c.dtype = x.q;
    c.kv_dtype = x.kv;
    c.o_dtype = x.o;
    const fmha_test::PreparedServingCase pc(c);
    fmha_test::RunOptions opt;
    opt.kernel = "cuda_sm80_tc";
    Explain::text.clear();
    const fmha_test::CaseResult r = pc.run(h.get(), mem, opt, Explain::edit);
    CHECK_MESSAGE(r.unsupported(), r.report());
    auto names = [&](const std::string& text, const std::string& prefix) {
      return text.find(prefix + x.reason) != std::string::npos ||
             (x.other != nullptr && text.find(prefix + x.other) != std::string::npos);
    };
    CHECK_MESSAGE(names(r.message, "cannot run this problem: "), r.message);
    // explain's automatic choice names sm80's reason, unless a kernel ranked
    // above it runs the problem first (cuda_sm90_ws runs 16-bit descales).
    if (Explain::text.find("chosen: cuda_sm90_ws") == std::string::npos)
      CHECK_MESSAGE(names(Explain::text, "passed over cuda_sm80_tc: "), Explain::text);
  }
  Explain::handle = nullptr;
}

TEST_CASE("sm80 FP8 K/V: explain names the decode tile per grid (one CTA per SM when the units fit)") {
  // explain only (the decode group above runs both tiles against the
  // reference): GQA 32/8 D=128 Nq=1, BF16 q over e4m3 K/V, seqused_k over a
  // dense cache. 2 sequences = 16 units fit one CTA per SM:
  // NarrowFp8KvOneCta (256 keys over 8 key warps); 40 = 320 units, more
  // than the SMs: NarrowFp8Kv; softcap keeps NarrowFp8Kv; paged K/V whose
  // one-CTA grid would split: NarrowFp8KvPagedSplit.
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);
  cudaDeviceProp prop{};
  REQUIRE(cudaGetDeviceProperties(&prop, 0) == cudaSuccess);
  const int64_t D = 128, Hq = 32, Hk = 8, nk = 4096;
  const fmha_gpu_test::ExplainBuffers buffers;
  REQUIRE(buffers.ok());
  void* const out_base = buffers.out();
  void* const in_base = buffers.in();
  auto plan_of = [&](int64_t B, float softcap, bool paged) {
    fmha_forward_params p;
    fmha_forward_params_init(&p);
    p.q = fmha_gpu_test::contiguous_tensor(in_base, FMHA_DTYPE_BF16, B, Hq, 1, D);
    p.o = fmha_gpu_test::contiguous_tensor(out_base, FMHA_DTYPE_BF16, B, Hq, 1, D);
    const int64_t ps = 64;  // paged: [pages, Hk, 64, D] over B x nk keys
    p.k = paged ? fmha_gpu_test::contiguous_tensor(in_base, FMHA_DTYPE_F8E4M3, B * nk / ps, Hk, ps, D)
                : fmha_gpu_test::contiguous_tensor(in_base, FMHA_DTYPE_F8E4M3, B, Hk, nk, D);
    p.v = p.k;
    if (paged) {
      p.block_table = static_cast<const int32_t*>(in_base);
      p.block_table_stride = nk / ps;
    }
    p.seqused_k = static_cast<const int32_t*>(in_base);
    p.softcap = softcap;
    p.kernel = "cuda_sm80_tc";
    return fmha_gpu_test::explain_text(h.get(), p);
  };
  if (std::getenv("FMHA_SM80_FP8KV_TILE") != nullptr) {
    MESSAGE("FMHA_SM80_FP8KV_TILE names the tile (experiments build): not checked");
    return;
  }
  struct Row {
    int64_t batch;
    float softcap;
    bool paged;
    const char* tile;
  };
  // Paged: 16 units = 16 one-CTA rows split 8 ways (132 SMs): the paged
  // split tile; 16 x 8 units = 128 run unsplit on the one-CTA tile.
  const Row rows[] = {
      {2, 0.f, false, "plan: decode tile NarrowFp8KvOneCta: 16 rows x 256 keys (8 key warps of 32), 3 stages, 1 CTAs per SM"},
      {40, 0.f, false, "plan: decode tile NarrowFp8Kv: 16 rows x 64 keys (2 key warps of 32), 3 stages, 4 CTAs per SM"},
      {2, 25.f, false, "plan: decode tile NarrowFp8Kv: "},
      {2, 0.f, true, "plan: decode tile NarrowFp8KvPagedSplit: 16 rows x 128 keys (4 key warps of 32), 2 stages, 3 CTAs per SM"},
      {16, 0.f, true, "plan: decode tile NarrowFp8KvOneCta: "}};
  for (const Row& row : rows) {
    CAPTURE(row.batch);
    CAPTURE(row.softcap);
    const int64_t units = row.batch * Hk;  // the GQA group packed: one unit per (sequence, KV head)
    if (row.softcap == 0.f && (row.batch != 40) != (units <= prop.multiProcessorCount)) continue;  // another GPU
    if (row.paged && prop.multiProcessorCount != 132) continue;  // the split counts depend on the SM count
    const auto [st, text] = plan_of(row.batch, row.softcap, row.paged);
    INFO(text);
    if (st != FMHA_SUCCESS || text.find("chosen: cuda_sm80_tc") == std::string::npos) {
      MESSAGE("cuda_sm80_tc does not run BF16 q over e4m3 K/V at D=128 here: not checked");
      continue;
    }
    CHECK(text.find(row.tile) != std::string::npos);
  }
}
