// The 0.3 inference numerics (fmha.h) on the CUDA kernels: the CPU's case
// matrix (common/serving_case.h's numerics_case_matrix: every dtype
// combination, FP8 K/V and all-FP8, o in another dtype, descales, the bias
// patterns with -inf rows, ALiBi [Hq] and [B, Hq], over dense, ragged,
// seqused_k and paged batches with causal masks, windows, softcap and GQA)
// plus a few shapes of the CUDA tiles, each on every CUDA kernel forced by
// name and on the automatic choice, unsplit, automatically split and with
// forced splits, against the float64 reference on the dequantized inputs
// (poisoned o, lse and workspace; fully masked rows must be O = 0, lse =
// -inf). tests/gpu/numerics_support.h says which kernel must run which
// feature: a kernel without one must decline with FMHA_ERROR_UNSUPPORTED;
// cuda_generic must run every case; a kernel that rounds P to FP8 (the
// sm90 FP8 prefill kernel on all-FP8 inputs) is held to kToleranceFp8P. Also FP8 decoding on the device, every
// byte of both formats, bit for bit.
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "common/fp8_decode_case.h"
#include "common/numeric_types.h"
#include "common/serving_case.h"
#include "common/tolerance.h"
#include "gpu/gpu_support.h"
#include "gpu/numerics_support.h"

namespace {

namespace ft = fmha_test;
using fmha_gpu_test::CudaBuffer;
using fmha_gpu_test::CudaMemory;
using fmha_gpu_test::GpuHandle;
using ft::BiasPattern;
using ft::KvLayout;
using ft::QLayout;
using ft::ServingCase;

struct Tally {
  int ran = 0, unsupported = 0, failed = 0;
};

// Reasons a kernel that has every numerics feature of a case may still
// give for declining it (a dtype, head dim or layout it does not run).
bool names_numerics_feature(const std::string& message) {
  for (const char* f : {"F8E4M3", "F8E5M2", "mixed dtypes", "descales", "additive bias", "ALiBi"})
    if (message.find(f) != std::string::npos) return true;
  return false;
}

void run_group(const char* group, const std::vector<ServingCase>& cases, const std::vector<int32_t>& splits) {
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);
  CudaMemory mem;
  std::vector<std::string> kernels = fmha_gpu_test::cuda_kernel_names();
  kernels.emplace_back("");  // automatic
  const size_t stride = static_cast<size_t>(fmha_gpu_test::quick_stride());
  std::map<std::string, Tally> tally;
  int n = 0, masked_rows = 0;
  for (size_t c = 0; c < cases.size(); ++c) {
    if (c % stride != 0) continue;
    INFO("case " << cases[c].name());
    const ft::PreparedServingCase pc(cases[c]);
    ++n;
    for (const std::string& name : kernels) {
      // The automatic choice must run it when cuda_generic does.
      const bool must_run = name.empty() ? fmha_gpu_test::runs_numerics_of("cuda_generic", cases[c])
                                         : fmha_gpu_test::runs_numerics_of(name, cases[c]);
      for (int32_t s : splits) {
        ft::RunOptions opt;
        opt.kernel = name.empty() ? nullptr : name.c_str();
        opt.num_splits = s;
        ft::CaseResult r = pc.run(h.get(), mem, opt);
        if (fmha_gpu_test::rounds_p_to_fp8(name, cases[c]))
          r.tolerance = ft::loosest(r.tolerance, ft::kToleranceFp8P);
        Tally& t = tally[name.empty() ? "(automatic)" : name];
        INFO("num_splits=" << s << "\n" << r.report());
        if (!must_run) {
          CHECK(r.unsupported());
          ++t.unsupported;
          continue;
        }
        if (r.unsupported() && !name.empty() && name != "cuda_generic") {
          // Declined for something else than the numerics (sm90: serving
          // layouts; sm80: F32 or a head dim).
          CHECK(!names_numerics_feature(r.message));
          ++t.unsupported;
          continue;
        }
        CHECK(r.ok());
        ++(r.ok() ? t.ran : t.failed);
        if (name == "cuda_generic" && s == splits.front()) masked_rows += static_cast<int>(r.masked_rows);
      }
    }
  }
  std::string line = std::string(group) + ": " + std::to_string(n) + " cases, " + std::to_string(masked_rows) +
                     " fully masked rows on cuda_generic;";
  for (const auto& [name, t] : tally) {
    char buf[160];
    std::snprintf(buf, sizeof buf, " %s ran %d, unsupported %d, failed %d;", name.c_str(), t.ran, t.unsupported,
                  t.failed);
    line += buf;
  }
  MESSAGE(line);
  // The bias patterns make whole rows -inf: the runs must have met them.
  if (stride == 1) CHECK(masked_rows > 0);
}

// Shapes the CPU matrix leaves out that change cuda_generic's path: each
// head-dim bucket (32, 64, 96 and 128, 256: the configs), odd head dims,
// token-major q/o, softcap with descales (they meet in the tanh's
// argument), and split decode with every feature at once per dtype pair.
std::vector<ServingCase> cases_cuda_tiles() {
  std::vector<ServingCase> out;
  constexpr fmha_dtype F16 = FMHA_DTYPE_F16, BF16 = FMHA_DTYPE_BF16, F32 = FMHA_DTYPE_F32;
  constexpr fmha_dtype E4M3 = FMHA_DTYPE_F8E4M3, E5M2 = FMHA_DTYPE_F8E5M2;
  const fmha_dtype kTriples[][3] = {{F16, E4M3, F32}, {BF16, E5M2, F16}, {E4M3, E4M3, BF16},
                                    {E5M2, E5M2, F32}, {F32, F32, F16},  {BF16, BF16, F32}};
  int n = 0;
  for (int64_t d : {32, 33, 96, 128, 256}) {
    const fmha_dtype* t = kTriples[n % 6];
    ServingCase c;
    c.dtype = t[0];
    c.kv_dtype = t[1];
    c.o_dtype = t[2];
    c.heads_q = 4;
    c.heads_kv = 2;
    c.head_dim = d;
    c.q_layout = QLayout::kRagged;
    c.kv_layout = n % 2 ? KvLayout::kPaged : KvLayout::kRagged;
    c.page_size = 16;
    c.q_token_major = n % 2 == 0;
    c.len_q = {70, 1, 0, 33};
    c.len_k = {90, 40, 5, 33};
    c.mask_flags = n % 3 == 0 ? FMHA_MASK_CAUSAL : n % 3 == 1 ? FMHA_MASK_CAUSAL_TOP_LEFT : FMHA_MASK_NONE;
    c.window_left = n % 3 == 2 ? 25 : -1;
    c.q_descale = c.k_descale = c.v_descale = true;
    c.softcap = n % 2 ? 8.f : 0.f;
    c.bias = n % 3 == 0 ? BiasPattern::kFull : n % 3 == 1 ? BiasPattern::kKeyPadding : BiasPattern::kMask;
    c.bias_dtype = n % 3 == 0 ? F16 : n % 3 == 1 ? BF16 : F32;
    c.alibi = 1 + n % 2;
    out.push_back(c);
    ++n;
  }
  // Decode over long caches (key splits), every triple, everything on.
  for (const auto& t : kTriples) {
    ServingCase c;
    c.dtype = t[0];
    c.kv_dtype = t[1];
    c.o_dtype = t[2];
    c.heads_q = 8;
    c.heads_kv = 1;
    c.head_dim = 128;
    c.q_layout = QLayout::kDense;
    c.kv_layout = KvLayout::kPaged;
    c.page_size = 64;
    c.len_q = {2, 2, 2};
    c.len_k = {1800, 0, 650};
    c.mask_flags = FMHA_MASK_CAUSAL;
    c.q_descale = c.k_descale = c.v_descale = true;
    c.bias = BiasPattern::kKeyPadding;
    c.alibi = 2;
    out.push_back(c);
  }
  return out;
}

}  // namespace

TEST_CASE("inference numerics: the CPU's numerics matrix on every CUDA kernel") {
  const std::vector<ServingCase> cases = ft::numerics_case_matrix();
  REQUIRE(cases.size() > 30);
  run_group("numerics matrix", cases, {0, 1, 4});
}

TEST_CASE("inference numerics: CUDA tile shapes, odd head dims, split decode with every feature") {
  run_group("numerics tiles", cases_cuda_tiles(), {0, 1, 3, 16});
}

TEST_CASE("inference numerics: cuda_generic decodes every FP8 byte exactly (E4M3 and E5M2)") {
  // Each byte 0..255 as one column of v with a single key: the softmax
  // weight is exactly 1, so o (F32) is v's decoded value, bit for bit.
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);
  for (fmha_dtype t : {FMHA_DTYPE_F8E4M3, FMHA_DTYPE_F8E5M2}) {
    CAPTURE(ft::dtype_label(t));
    constexpr int64_t D = ft::kFp8DecodeD;
    const ft::Fp8DecodeInputs in = ft::fp8_decode_inputs(t);
    CudaBuffer q(D), k(D), v(D), o(D * 4), lse(4);
    REQUIRE((q.ok() && k.ok() && v.ok() && o.ok() && lse.ok()));
    REQUIRE(cudaMemcpy(q.get(), in.qk.data(), D, cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(cudaMemcpy(k.get(), in.qk.data(), D, cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(cudaMemcpy(v.get(), in.v.data(), D, cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(cudaMemset(o.get(), 0xff, o.bytes()) == cudaSuccess);
    fmha_forward_params p;
    ft::fp8_decode_params(&p, t, q.get(), k.get(), v.get(), o.get(), static_cast<float*>(lse.get()));
    p.kernel = "cuda_generic";
    size_t bytes = 0;
    REQUIRE_MESSAGE(fmha_forward_workspace_size(h.get(), &p, &bytes) == FMHA_SUCCESS, fmha_last_error_message());
    CudaBuffer ws(bytes);
    REQUIRE(ws.ok());
    REQUIRE_MESSAGE(fmha_forward(h.get(), &p, ws.get(), bytes) == FMHA_SUCCESS, fmha_last_error_message());
    std::vector<float> out(D);
    REQUIRE(cudaMemcpy(out.data(), o.get(), D * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
    const int nans = ft::check_fp8_decoded(t, out.data()).nans;
    CHECK(nans == (t == FMHA_DTYPE_F8E4M3 ? 2 : 6));
  }
}
