// The CPU backend on the 0.3 inference numerics (fmha.h): FP8 K/V and
// inputs, descales, o in another dtype, bias (broadcast patterns, -inf
// rows) and ALiBi, over dense, ragged and paged batches, against
// reference_forward_serving on the dequantized inputs; FP8 decoding of
// every byte; bitwise determinism over thread counts with all of it on.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "common/numeric_types.h"
#include "common/cpu_handle.h"
#include "common/fp8_decode_case.h"
#include "common/serving_case.h"

namespace ft = fmha_test;

using fmha_test::CpuHandle;

TEST_CASE("cpu_tiled over the inference-numerics matrix") {
  CpuHandle handle;
  ft::HostMemory memory;
  const std::vector<ft::ServingCase> cases = ft::numerics_case_matrix();
  REQUIRE(cases.size() > 30);
  // The worst errors per (q, k/v, o) dtype triple: what docs/api.md quotes.
  struct Worst {
    double rel_l2 = 0, max_abs_rel = 0, lse = 0;
  };
  std::map<std::string, Worst> worst;
  int masked_rows = 0;
  for (const ft::ServingCase& c : cases) {
    const ft::PreparedServingCase pc(c);
    for (const char* kernel : {"cpu_tiled", static_cast<const char*>(nullptr)}) {
      ft::RunOptions opt;
      opt.kernel = kernel;
      const ft::CaseResult r = pc.run(handle.get(), memory, opt);
      CHECK_MESSAGE(r.ok(), r.report());
      masked_rows += static_cast<int>(r.masked_rows);
      const std::string key = std::string(ft::dtype_label(c.dtype)) + "/" + ft::dtype_label(c.k_type()) + "->" +
                              ft::dtype_label(c.o_type());
      Worst& w = worst[key];
      w.rel_l2 = std::max(w.rel_l2, r.o.rel_l2);
      w.max_abs_rel = std::max(w.max_abs_rel, r.o.max_abs_rel());
      w.lse = std::max(w.lse, r.lse.max_err);
    }
  }
  // The bias patterns make whole rows -inf: they must be there (and, by
  // the runner, be O = 0, lse = -inf).
  CHECK(masked_rows > 20);
  for (const auto& [key, w] : worst) {
    char line[160];
    std::snprintf(line, sizeof line, "%-18s rel_l2 %.2e  max_abs_rel %.2e  lse %.2e", key.c_str(), w.rel_l2,
                  w.max_abs_rel, w.lse);
    MESSAGE(line);
  }
}

TEST_CASE("a transposed V (v.strides[2] = 1, the FP8 MMA's layout) runs on cpu_tiled like an ordinary one") {
  // cuda_sm90_ws's FP8 kernel needs V stored as [B, Hk, D, Nk]; the other
  // kernels run it through their strides (registry: kFeatureTransposedV).
  // Here the harness's transposed V (common/serving_case.h, padded rows
  // holding NaN) against the reference, all-FP8 and 16-bit, beside the
  // ordinary layout.
  CpuHandle handle;
  ft::HostMemory memory;
  for (fmha_dtype t : {FMHA_DTYPE_F8E4M3, FMHA_DTYPE_BF16}) {
    ft::ServingCase c;
    c.dtype = c.kv_dtype = t;
    c.o_dtype = FMHA_DTYPE_BF16;
    c.heads_q = 4;
    c.heads_kv = 2;
    c.head_dim = 64;
    c.len_q = c.len_k = {70, 70};
    c.q_layout = ft::QLayout::kDense;
    c.kv_layout = ft::KvLayout::kDense;
    c.mask_flags = FMHA_MASK_CAUSAL;
    c.q_descale = c.k_descale = c.v_descale = t == FMHA_DTYPE_F8E4M3;
    ft::RunOptions opt;
    opt.kernel = "cpu_tiled";
    const ft::CaseResult plain = ft::PreparedServingCase(c).run(handle.get(), memory, opt);
    c.v_transposed = true;
    const ft::CaseResult transposed = ft::PreparedServingCase(c).run(handle.get(), memory, opt);
    CHECK_MESSAGE(plain.ok(), plain.report());
    CHECK_MESSAGE(transposed.ok(), transposed.report());
  }
}

TEST_CASE("FP8: every byte decodes exactly (E4M3 saturating OCP with its one NaN, E5M2 with inf)") {
  // Each byte 0..255 as one column of v with a single key: the softmax
  // weight is exactly 1, so o (F32) is v's decoded value, bit for bit.
  for (fmha_dtype t : {FMHA_DTYPE_F8E4M3, FMHA_DTYPE_F8E5M2}) {
    CAPTURE(ft::dtype_label(t));
    const ft::Fp8DecodeInputs in = ft::fp8_decode_inputs(t);
    std::vector<uint8_t> q = in.qk, k = in.qk, v = in.v;
    std::vector<float> o(ft::kFp8DecodeD, std::nanf("")), lse(1, std::nanf(""));
    fmha_forward_params p;
    ft::fp8_decode_params(&p, t, q.data(), k.data(), v.data(), o.data(), lse.data());
    CpuHandle h;
    size_t bytes = 0;
    REQUIRE(fmha_forward_workspace_size(h.get(), &p, &bytes) == FMHA_SUCCESS);
    std::vector<unsigned char> ws(bytes + 64);
    REQUIRE_MESSAGE(fmha_forward(h.get(), &p, ws.data(), ws.size()) == FMHA_SUCCESS, fmha_last_error_message());
    const ft::Fp8DecodeCounts n = ft::check_fp8_decoded(t, o.data());
    // The formats' definitions, spelled out: E4M3 has only S.1111.111 as
    // NaN and no inf, largest 448; E5M2 has 6 NaNs, 2 infs, largest 57344.
    CHECK(n.nans == (t == FMHA_DTYPE_F8E4M3 ? 2 : 6));
    CHECK(n.infs == (t == FMHA_DTYPE_F8E4M3 ? 0 : 2));
    if (t == FMHA_DTYPE_F8E4M3) {
      CHECK(o[0x7e] == 448.f);
      CHECK(o[0xfe] == -448.f);
      CHECK(o[0x01] == std::ldexp(1.f, -9));
      CHECK(o[0x08] == std::ldexp(1.f, -6));
    } else {
      CHECK(o[0x7b] == 57344.f);
      CHECK(std::isinf(o[0x7c]));
      CHECK(o[0x01] == std::ldexp(1.f, -16));
    }
  }
}

TEST_CASE("inference numerics: the same bits for any thread count") {
  // A split FP8 paged decode with a bias, ALiBi and descales, and a packed
  // prefill with a bias mask.
  std::vector<ft::ServingCase> cases(2);
  ft::ServingCase& decode = cases[0];
  decode.dtype = FMHA_DTYPE_BF16;
  decode.kv_dtype = FMHA_DTYPE_F8E4M3;
  decode.heads_q = 8;
  decode.heads_kv = 2;
  decode.head_dim = 128;
  decode.len_q = {2, 2};
  decode.len_k = {3000, 1700};
  decode.q_layout = ft::QLayout::kDense;
  decode.kv_layout = ft::KvLayout::kPaged;
  decode.page_size = 32;
  decode.q_descale = decode.k_descale = decode.v_descale = true;
  decode.bias = ft::BiasPattern::kKeyPadding;
  decode.alibi = 2;
  ft::ServingCase& prefill = cases[1];
  prefill.dtype = FMHA_DTYPE_F16;
  prefill.o_dtype = FMHA_DTYPE_F32;
  prefill.heads_q = 4;
  prefill.heads_kv = 2;
  prefill.head_dim = 64;
  prefill.len_q = {150, 7, 300};
  prefill.len_k = {150, 20, 310};
  prefill.q_layout = ft::QLayout::kRagged;
  prefill.kv_layout = ft::KvLayout::kRagged;
  prefill.mask_flags = FMHA_MASK_CAUSAL;
  prefill.bias = ft::BiasPattern::kMask;
  prefill.bias_dtype = FMHA_DTYPE_BF16;
  prefill.alibi = 1;
  for (const ft::ServingCase& c : cases) {
    CAPTURE(c.name());
    const ft::PreparedServingCase pc(c);
    ft::HostMemory memory;
    ft::RunOptions opt;
    opt.keep_outputs = true;
    std::vector<unsigned char> first;
    for (int threads : {1, 2, 3, 7}) {
      CpuHandle h(threads);
      const ft::CaseResult r = pc.run(h.get(), memory, opt);
      REQUIRE_MESSAGE(r.ok(), r.report());
      if (first.empty())
        first = r.o_bytes;
      else
        CHECK(r.o_bytes == first);
    }
  }
}

TEST_CASE("an F32 o is FP32-accurate whatever the inputs' dtype, on every CPU path") {
  // The reference reads the inputs as stored, so an F32 o owes FP32
  // accuracy (kToleranceF32), not the inputs' dtype's: the amx path's tiles
  // take P in BF16 planes (16 bits at most) and once gave a BF16 problem's
  // F32 o an error of 2e-3 (cpu_attention.cpp: amx_tiles_run). Query blocks
  // of many rows (the padded product, where the tiles run), GQA 6/2, descales
  // up to 2 on q, k and v; this test runs once per path (test_cpu_isa_*).
  CpuHandle handle;
  ft::HostMemory memory;
  const fmha_dtype kPairs[][2] = {{FMHA_DTYPE_BF16, FMHA_DTYPE_BF16},
                                  {FMHA_DTYPE_F16, FMHA_DTYPE_F16},
                                  {FMHA_DTYPE_F16, FMHA_DTYPE_F8E4M3},
                                  {FMHA_DTYPE_BF16, FMHA_DTYPE_F8E5M2}};
  for (const auto& pair : kPairs) {
    for (int64_t d : {64, 128}) {
      ft::ServingCase c;
      c.dtype = pair[0];
      c.kv_dtype = pair[1];
      c.o_dtype = FMHA_DTYPE_F32;
      c.heads_q = 6;
      c.heads_kv = 2;
      c.head_dim = d;
      c.len_q = {200, 200};
      c.len_k = {260, 260};
      c.q_layout = ft::QLayout::kDense;
      c.kv_layout = ft::KvLayout::kDense;
      c.mask_flags = FMHA_MASK_CAUSAL;
      c.q_descale = c.k_descale = c.v_descale = true;
      CAPTURE(c.name());
      ft::RunOptions opt;
      opt.kernel = "cpu_tiled";
      const ft::CaseResult r = ft::PreparedServingCase(c).run(handle.get(), memory, opt);
      REQUIRE_MESSAGE(r.ok(), r.report());
      CHECK_MESSAGE(r.o.rel_l2 <= ft::kToleranceF32.o_rel_l2, r.report());
      CHECK_MESSAGE(r.o.max_abs_rel() <= ft::kToleranceF32.o_max_abs_rel, r.report());
    }
  }
}
