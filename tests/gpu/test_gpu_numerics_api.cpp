// The 0.3 inference numerics on a CUDA handle before any CUDA kernel runs
// them: every CUDA registry row leaves the new feature bits undeclared, so a
// problem using FP8 K/V, another o dtype, descales, a bias or ALiBi is
// FMHA_ERROR_UNSUPPORTED (nothing written), explain names the feature for
// each CUDA kernel, and forcing a kernel names it too. When a kernel family
// gains a feature, its row declares the bit and this test's expectation for
// that family must change with it. cuda_sm80_tc runs FP8 K/V under an
// F16/BF16 q (its row declares mixed dtypes and descales, descales with FP8
// K/V only): that feature is checked on cuda_generic forced by name only
// (tests/gpu/test_gpu_fp8_kv.cpp runs it on cuda_sm80_tc).
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "gpu/gpu_support.h"

namespace {

using fmha_gpu_test::CudaBuffer;
using fmha_gpu_test::GpuHandle;

constexpr int64_t kB = 2, kHq = 4, kHk = 2, kN = 32, kD = 64;

void view(fmha_tensor* t, void* data, fmha_dtype dtype, int64_t heads) {
  t->data = data;
  t->dtype = dtype;
  const int64_t dims[4] = {kB, heads, kN, kD}, strides[4] = {heads * kN * kD, kN * kD, kD, 1};
  std::memcpy(t->dims, dims, sizeof dims);
  std::memcpy(t->strides, strides, sizeof strides);
}

bool untouched(const CudaBuffer& o) {
  std::vector<unsigned char> back(o.bytes());
  REQUIRE(cudaMemcpy(back.data(), o.get(), back.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
  for (unsigned char c : back)
    if (c != 0xff) return false;
  return true;
}

}  // namespace

TEST_CASE("CUDA handle: the inference-numerics features are UNSUPPORTED, and explain names them") {
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);
  const size_t q_bytes = kB * kHq * kN * kD * 4, kv_bytes = kB * kHk * kN * kD * 4;
  CudaBuffer q(q_bytes), k(kv_bytes), v(kv_bytes), o(q_bytes), bias(kN * kN * 4), factors(kB * kHq * 4);
  REQUIRE((q.ok() && k.ok() && v.ok() && o.ok() && bias.ok() && factors.ok()));
  REQUIRE(cudaMemset(q.get(), 0, q_bytes) == cudaSuccess);
  REQUIRE(cudaMemset(k.get(), 0, kv_bytes) == cudaSuccess);
  REQUIRE(cudaMemset(v.get(), 0, kv_bytes) == cudaSuccess);
  REQUIRE(cudaMemset(bias.get(), 0, bias.bytes()) == cudaSuccess);
  REQUIRE(cudaMemset(factors.get(), 0, factors.bytes()) == cudaSuccess);
  const std::vector<std::string> kernels = fmha_gpu_test::cuda_kernel_names();
  REQUIRE(!kernels.empty());

  struct Feature {
    const char* name;
    const char* reason;  // what explain says for every CUDA kernel
    void (*edit)(fmha_forward_params*, void* bias, void* factors);
    bool sm80_runs = false;  // cuda_sm80_tc runs it: automatic dispatch succeeds
  };
  const Feature features[] = {
      {"FP8 K/V", "does not run dtype F8E4M3",
       [](fmha_forward_params* p, void*, void*) { p->k.dtype = p->v.dtype = FMHA_DTYPE_F8E4M3; }, true},
      {"o in F32 under F16 inputs", "does not support mixed dtypes",
       [](fmha_forward_params* p, void*, void*) { p->o.dtype = FMHA_DTYPE_F32; }},
      {"descales", "does not support descales",
       [](fmha_forward_params* p, void*, void* f) { p->k_descale = static_cast<const float*>(f); }},
      {"bias", "does not support an additive bias",
       [](fmha_forward_params* p, void* b, void*) {
         p->bias.data = b;
         p->bias.dtype = FMHA_DTYPE_F32;
         const int64_t dims[4] = {1, 1, kN, kN}, strides[4] = {0, 0, kN, 1};
         std::memcpy(p->bias.dims, dims, sizeof dims);
         std::memcpy(p->bias.strides, strides, sizeof strides);
       }},
      {"ALiBi", "does not support ALiBi slopes",
       [](fmha_forward_params* p, void*, void* f) { p->alibi_slopes = static_cast<const float*>(f); }},
  };
  for (const Feature& feat : features) {
    CAPTURE(feat.name);
    fmha_forward_params p;
    fmha_forward_params_init(&p);
    view(&p.q, q.get(), FMHA_DTYPE_F16, kHq);
    view(&p.k, k.get(), FMHA_DTYPE_F16, kHk);
    view(&p.v, v.get(), FMHA_DTYPE_F16, kHk);
    view(&p.o, o.get(), FMHA_DTYPE_F16, kHq);
    p.mask_flags = FMHA_MASK_CAUSAL;
    feat.edit(&p, bias.get(), factors.get());
    REQUIRE(cudaMemset(o.get(), 0xff, q_bytes) == cudaSuccess);

    if (!feat.sm80_runs) {
      size_t ws = 0;
      CHECK(fmha_forward_workspace_size(h.get(), &p, &ws) == FMHA_ERROR_UNSUPPORTED);
      CHECK(fmha_forward(h.get(), &p, nullptr, 0) == FMHA_ERROR_UNSUPPORTED);
      REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
      CHECK(untouched(o));

      char buf[4096];
      CHECK(fmha_forward_explain(h.get(), &p, buf, sizeof buf) == FMHA_ERROR_UNSUPPORTED);
      const std::string text = buf;
      CHECK_MESSAGE(text.find("chosen:") == std::string::npos, text);
      // cuda_generic runs on every sm >= 80 and every head_dim here: its line
      // names the feature. The others name it unless an earlier limit (their
      // compute capability) passed them over first.
      CHECK_MESSAGE(text.find(std::string("passed over cuda_generic: ") + feat.reason) != std::string::npos, text);
      for (const std::string& name : kernels) {
        CAPTURE(name);
        CHECK_MESSAGE(text.find("passed over " + name + ": ") != std::string::npos, text);
      }
    }

    p.kernel = "cuda_generic";
    CHECK(fmha_forward(h.get(), &p, nullptr, 0) == FMHA_ERROR_UNSUPPORTED);
    CHECK_MESSAGE(std::string(fmha_last_error_message()).find(feat.reason) != std::string::npos,
                  fmha_last_error_message());
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(untouched(o));
  }
}
