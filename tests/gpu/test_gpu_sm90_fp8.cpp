// FP8 prefill on cuda_sm90_ws (issue 14): q, k and v all F8E4M3 (or
// F8E5M2 where the build instantiates it) on wgmma FP8, V stored transposed
// (v.strides[2] = 1), o in F16 or BF16. Forced by name, against the float64
// reference on the dequantized inputs (common/serving_case.h: poisoned o,
// lse and workspace, inputs unchanged), within kToleranceFp8P: the kernel
// rounds P to FP8 for its P V product. Causal (both alignments) and not, N
// not a multiple of the 128-row / 128-key tiles, GQA, batches, descales
// (a negative k one too), softcap, windows, rows that see no key (causal
// with Nq > Nk), forced key splits; then the automatic choice, and what the
// FP8 kernel declines, with the reason explain gives. Skips on a device
// other than compute capability 9.0 (the forced runs are UNSUPPORTED there
// with "needs sm_90").
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/numeric_types.h"
#include "common/serving_case.h"
#include "common/tolerance.h"
#include "gpu/gpu_support.h"

using Explain = fmha_gpu_test::ExplainCapture;

namespace {

using fmha_gpu_test::CudaMemory;
using fmha_gpu_test::GpuHandle;
using fmha_test::KvLayout;
using fmha_test::QLayout;
using fmha_test::ServingCase;

constexpr const char* kSm90 = "cuda_sm90_ws";

ServingCase fp8_case(fmha_dtype t, fmha_dtype o, int64_t hq, int64_t hk, std::vector<int64_t> nq,
                     std::vector<int64_t> nk) {
  ServingCase c;
  c.dtype = c.kv_dtype = t;
  c.o_dtype = o;
  c.heads_q = hq;
  c.heads_kv = hk;
  c.head_dim = 128;
  c.len_q = std::move(nq);
  c.len_k = std::move(nk);
  c.q_layout = QLayout::kDense;
  c.kv_layout = KvLayout::kDense;
  c.v_transposed = true;
  return c;
}

// The run's verdict with the FP8-P bound (the harness's own bound for
// all-FP8 inputs is o's dtype alone: exact products).
fmha_test::CaseResult with_fp8_p(fmha_test::CaseResult r) {
  r.tolerance = fmha_test::loosest(r.tolerance, fmha_test::kToleranceFp8P);
  return r;
}

bool on_sm90() {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0) != cudaSuccess)
    return false;
  return major == 9 && minor == 0;
}

}  // namespace

TEST_CASE("sm90 FP8: e4m3 q/k/v, V transposed, against the float64 reference (forced, then automatic)") {
  if (!on_sm90()) {
    MESSAGE("not compute capability 9.0: cuda_sm90_ws does not run here");
    return;
  }
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);
  CudaMemory mem;
  constexpr fmha_dtype E4M3 = FMHA_DTYPE_F8E4M3, E5M2 = FMHA_DTYPE_F8E5M2;
  constexpr fmha_dtype F16 = FMHA_DTYPE_F16, BF16 = FMHA_DTYPE_BF16;
  std::vector<ServingCase> cases;
  // N = 300: a partial query tile and a partial key tile; no mask, both
  // causal alignments, o in either 16-bit dtype.
  for (uint32_t mask : {0u, static_cast<uint32_t>(FMHA_MASK_CAUSAL), static_cast<uint32_t>(FMHA_MASK_CAUSAL_TOP_LEFT)})
    for (fmha_dtype o : {F16, BF16}) {
      ServingCase c = fp8_case(E4M3, o, 4, 4, {300}, {300});
      c.mask_flags = mask;
      cases.push_back(c);
    }
  // GQA 8/2, a batch of 2, descales (q, k, v; then a negative k), causal.
  ServingCase c = fp8_case(E4M3, BF16, 8, 2, {1000, 1000}, {1000, 1000});
  c.mask_flags = FMHA_MASK_CAUSAL;
  c.q_descale = c.k_descale = c.v_descale = true;
  cases.push_back(c);
  c.negative_k_descale = true;
  c.mask_flags = 0;
  c.len_q = c.len_k = {257, 257};
  cases.push_back(c);
  // Rows that see no key: bottom-right causal with Nq > Nk (the first 130
  // rows see nothing: O = 0, lse = -inf).
  c = fp8_case(E4M3, F16, 2, 1, {200}, {70});
  c.mask_flags = FMHA_MASK_CAUSAL;
  cases.push_back(c);
  // Nq < Nk, a sliding window with causal, and softcap (the descales then
  // scale softcap's input).
  c = fp8_case(E4M3, F16, 4, 2, {129}, {700});
  c.mask_flags = FMHA_MASK_CAUSAL;
  c.window_left = 100;
  cases.push_back(c);
  c.window_left = -1;
  c.softcap = 5.f;
  c.q_descale = c.k_descale = true;
  cases.push_back(c);
  // A longer causal prefill: many key tiles through the 3-stage ring and
  // the persistent grid's tile walk.
  c = fp8_case(E4M3, BF16, 4, 1, {2048}, {2048});
  c.mask_flags = FMHA_MASK_CAUSAL;
  c.v_descale = true;
  cases.push_back(c);
  // E5M2, where the build instantiates it.
  c = fp8_case(E5M2, F16, 4, 4, {300}, {300});
  c.mask_flags = FMHA_MASK_CAUSAL;
  cases.push_back(c);
  // A running max that jumps by 6 to 181 nats from one key tile to the next
  // (serving_case.h's rising_logits), whole warps of rows alike: the
  // rescale paths of the softmax, the largest jump past what p can hold.
  for (uint32_t mask : {0u, static_cast<uint32_t>(FMHA_MASK_CAUSAL)}) {
    c = fp8_case(E4M3, BF16, 2, 1, {64}, {520});
    c.mask_flags = mask;
    c.rising_logits = true;
    cases.push_back(c);
  }

  int ran = 0, declined = 0;
  for (const ServingCase& x : cases) {
    INFO("case " << x.name());
    const fmha_test::PreparedServingCase pc(x);
    for (int32_t splits : {1, 0, 3}) {
      fmha_test::RunOptions opt;
      opt.kernel = kSm90;
      opt.num_splits = splits;
      const fmha_test::CaseResult r = with_fp8_p(pc.run(h.get(), mem, opt));
      INFO("num_splits=" << splits);
      MESSAGE(x.name() << " splits=" << splits << ": o rel_l2 " << r.o.rel_l2 << ", max_abs_rel "
                       << r.o.max_abs_rel() << ", lse max_err " << r.lse.max_err);
      if (x.dtype == E5M2 && r.unsupported()) {
        // A build without e5m2:128 in FMHA_SM90_INSTANCES.
        CHECK_MESSAGE(r.message.find("F8E5M2") != std::string::npos, r.report());
        ++declined;
        break;
      }
      CHECK_MESSAGE(r.ok(), r.report());
      ++ran;
    }
    fmha_test::RunOptions opt;  // automatic: cuda_sm90_ws (or, e5m2 unbuilt, cuda_generic)
    const fmha_test::CaseResult r = with_fp8_p(pc.run(h.get(), mem, opt));
    CHECK_MESSAGE(r.ok(), "automatic\n" << r.report());
  }
  MESSAGE("sm90 FP8: " << ran << " forced runs, " << declined << " declined (e5m2 not built)");
  CHECK(ran >= 3 * 12);
}

TEST_CASE("sm90 FP8: what the FP8 kernel declines is UNSUPPORTED with the reason, and cuda_generic runs it") {
  if (!on_sm90()) {
    MESSAGE("not compute capability 9.0: cuda_sm90_ws does not run here");
    return;
  }
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);
  CudaMemory mem;
  Explain::handle = h.get();
  constexpr fmha_dtype E4M3 = FMHA_DTYPE_F8E4M3;
  struct Refusal {
    const char* name;
    ServingCase c;
    const char* reason;
  };
  std::vector<Refusal> refusals;
  ServingCase base = fp8_case(E4M3, FMHA_DTYPE_BF16, 4, 2, {150, 150}, {150, 150});
  base.mask_flags = FMHA_MASK_CAUSAL;
  ServingCase c = base;
  c.v_transposed = false;
  refusals.push_back({"V in the ordinary layout", c, "FP8 V must be transposed"});
  c = base;
  c.v_transposed = false;
  c.q_layout = QLayout::kRagged;
  c.kv_layout = KvLayout::kRagged;
  c.len_q = {5, 70};
  c.len_k = {5, 200};
  refusals.push_back({"ragged batch", c, "dense batches only"});
  c = base;
  c.bias = fmha_test::BiasPattern::kMask;
  refusals.push_back({"a bias", c, "no bias or ALiBi"});
  c = base;
  c.o_dtype = FMHA_DTYPE_F32;
  refusals.push_back({"o in F32", c, "does not run dtype F32"});
  c = base;
  c.head_dim = 64;
  refusals.push_back({"head_dim 64", c, "head_dim"});  // not instantiated, or not in this build's list
  c = base;
  c.dtype = c.o_dtype = FMHA_DTYPE_BF16;
  c.v_transposed = false;
  refusals.push_back({"an FP8 K/V cache under a BF16 q", c, "does not run dtype FP8 for only some of q, k, v"});
  c = base;
  c.dtype = c.kv_dtype = c.o_dtype = FMHA_DTYPE_BF16;
  refusals.push_back({"a transposed V with 16-bit inputs", c, "does not support a transposed V"});
  for (const Refusal& x : refusals) {
    CAPTURE(x.name);
    const fmha_test::PreparedServingCase pc(x.c);
    fmha_test::RunOptions opt;
    opt.kernel = kSm90;
    Explain::text.clear();
    const fmha_test::CaseResult r = pc.run(h.get(), mem, opt, Explain::edit);
    CHECK_MESSAGE(r.unsupported(), r.report());
    CHECK_MESSAGE(r.message.find(x.reason) != std::string::npos, r.message);
    CHECK_MESSAGE(Explain::text.find("passed over cuda_sm90_ws") != std::string::npos, Explain::text);
    // Some other kernel runs it (cuda_generic: any layout, FP8, bias).
    fmha_test::RunOptions automatic;
    const fmha_test::CaseResult a = with_fp8_p(pc.run(h.get(), mem, automatic));
    CHECK_MESSAGE(a.ok(), "automatic\n" << a.report());
  }
  Explain::handle = nullptr;
}

TEST_CASE("sm90 FP8: a NaN in V reaches exactly the rows that see its key (fmha.h's NaN rule)") {
  // test_gpu_large.cpp's NaN test for the FP8 kernel: causal N=300, key
  // 200's V column is NaN (e4m3 0x7f) in every head and d. Rows below 200
  // must come out as without it (its weight there is an exact 0, and the
  // tensor core's 0 x NaN must not happen: the key tile 128..255 straddles
  // the diagonal), rows from 200 on must be NaN in every column; lse never
  // sees V.
  if (!on_sm90()) {
    MESSAGE("not compute capability 9.0: cuda_sm90_ws does not run here");
    return;
  }
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);
  constexpr int64_t H = 2, N = 300, D = 128, kPitch = 304, kKey = 200;
  std::mt19937_64 rng(0x5eed8);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<unsigned char> q(H * N * D), k(H * N * D), vt(H * D * kPitch, 0);
  for (auto& x : q) x = fmha_test::float_to_fp8(normal(rng), FMHA_DTYPE_F8E4M3);
  for (auto& x : k) x = fmha_test::float_to_fp8(normal(rng), FMHA_DTYPE_F8E4M3);
  for (int64_t r = 0; r < H * D; ++r)
    for (int64_t j = 0; j < N; ++j) vt[r * kPitch + j] = fmha_test::float_to_fp8(normal(rng), FMHA_DTYPE_F8E4M3);
  fmha_gpu_test::CudaBuffer dq(q.size()), dk(k.size()), dv(vt.size()), o(H * N * D * 2), lse(H * N * 4);
  REQUIRE((dq.ok() && dk.ok() && dv.ok() && o.ok() && lse.ok()));
  REQUIRE(cudaMemcpy(dq.get(), q.data(), q.size(), cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(dk.get(), k.data(), k.size(), cudaMemcpyHostToDevice) == cudaSuccess);
  auto tensor = [](fmha_tensor* t, void* data, fmha_dtype dtype, bool transposed) {
    t->data = data;
    t->dtype = dtype;
    const int64_t dims[4] = {1, H, N, D};
    const int64_t plain[4] = {H * N * D, N * D, D, 1}, vt_strides[4] = {H * D * kPitch, D * kPitch, 1, kPitch};
    std::memcpy(t->dims, dims, sizeof dims);
    std::memcpy(t->strides, transposed ? vt_strides : plain, sizeof plain);
  };
  fmha_forward_params p;
  fmha_forward_params_init(&p);
  tensor(&p.q, dq.get(), FMHA_DTYPE_F8E4M3, false);
  tensor(&p.k, dk.get(), FMHA_DTYPE_F8E4M3, false);
  tensor(&p.v, dv.get(), FMHA_DTYPE_F8E4M3, true);
  tensor(&p.o, o.get(), FMHA_DTYPE_BF16, false);
  p.lse = static_cast<float*>(lse.get());
  p.mask_flags = FMHA_MASK_CAUSAL;
  p.kernel = kSm90;
  for (int32_t splits : {1, 3}) {
    CAPTURE(splits);
    p.num_splits = splits;
    auto run = [&](std::vector<unsigned char>* o_host, std::vector<float>* lse_host) {
      size_t ws_bytes = 0;
      REQUIRE(fmha_forward_workspace_size(h.get(), &p, &ws_bytes) == FMHA_SUCCESS);
      fmha_gpu_test::CudaBuffer ws(ws_bytes);
      REQUIRE(cudaMemset(o.get(), 0xff, o.bytes()) == cudaSuccess);
      const fmha_status s = fmha_forward(h.get(), &p, ws.get(), ws_bytes);
      REQUIRE_MESSAGE(s == FMHA_SUCCESS, fmha_last_error_message());
      REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
      o_host->resize(o.bytes());
      lse_host->resize(H * N);
      REQUIRE(cudaMemcpy(o_host->data(), o.get(), o.bytes(), cudaMemcpyDeviceToHost) == cudaSuccess);
      REQUIRE(cudaMemcpy(lse_host->data(), lse.get(), lse.bytes(), cudaMemcpyDeviceToHost) == cudaSuccess);
    };
    std::vector<unsigned char> o_clean, o_nan;
    std::vector<float> lse_clean, lse_nan;
    REQUIRE(cudaMemcpy(dv.get(), vt.data(), vt.size(), cudaMemcpyHostToDevice) == cudaSuccess);
    run(&o_clean, &lse_clean);
    std::vector<unsigned char> poisoned = vt;
    for (int64_t r = 0; r < H * D; ++r) poisoned[r * kPitch + kKey] = 0x7f;  // e4m3 NaN
    REQUIRE(cudaMemcpy(dv.get(), poisoned.data(), poisoned.size(), cudaMemcpyHostToDevice) == cudaSuccess);
    run(&o_nan, &lse_nan);
    int64_t leaked = 0, missed = 0, drift = 0, lse_changed = 0;
    for (int64_t hd = 0; hd < H; ++hd)
      for (int64_t i = 0; i < N; ++i) {
        for (int64_t c = 0; c < D; ++c) {
          const int64_t e = (hd * N + i) * D + c;
          const double clean = fmha_test::load_element(o_clean.data(), FMHA_DTYPE_BF16, e);
          const double got = fmha_test::load_element(o_nan.data(), FMHA_DTYPE_BF16, e);
          if (i < kKey) {
            if (!std::isfinite(got)) ++leaked;
            else if (std::fabs(got - clean) > 2e-2 * (1.0 + std::fabs(clean))) ++drift;
          } else if (!std::isnan(got)) {
            ++missed;
          }
        }
        if (!(std::fabs(lse_nan[hd * N + i] - lse_clean[hd * N + i]) <= 1e-3f)) ++lse_changed;
      }
    CHECK(leaked == 0);
    CHECK(missed == 0);
    CHECK(drift == 0);
    CHECK(lse_changed == 0);
  }
}
