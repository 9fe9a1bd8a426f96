// The 0.3 inference numerics on a CUDA handle, kernel by kernel, as the
// table of tests/gpu/numerics_support.h says: for a kernel without a
// feature, a problem using FP8 K/V, another o dtype, descales, a bias or
// ALiBi is FMHA_ERROR_UNSUPPORTED when forced (nothing written) and explain
// names the feature for it; a kernel with it runs the problem when forced
// and explain does not pass it over for that feature. The automatic choice
// runs the problem when some CUDA kernel has the feature. (The numbers are
// tests/gpu/test_gpu_numerics.cpp's.)
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "gpu/gpu_support.h"
#include "gpu/numerics_support.h"

namespace {

using fmha_gpu_test::CudaBuffer;
using fmha_gpu_test::GpuHandle;
using fmha_gpu_test::NumericsFeature;

constexpr int64_t kB = 2, kHq = 4, kHk = 2, kN = 32, kD = 64;
constexpr unsigned char kPoison = 0xff;
// Input bytes: 0x3c3c is 1.06 in F16, 0x3c 1.5 in E4M3, 0x3c3c3c3c 0.0115
// in F32 (descales, slopes, bias): finite, nonzero, positive.
constexpr unsigned char kInput = 0x3c;

void view(fmha_tensor* t, void* data, fmha_dtype dtype, int64_t heads) {
  t->data = data;
  t->dtype = dtype;
  const int64_t dims[4] = {kB, heads, kN, kD}, strides[4] = {heads * kN * kD, kN * kD, kD, 1};
  std::memcpy(t->dims, dims, sizeof dims);
  std::memcpy(t->strides, strides, sizeof strides);
}

std::vector<unsigned char> to_host(const CudaBuffer& b) {
  std::vector<unsigned char> back(b.bytes());
  REQUIRE(cudaMemcpy(back.data(), b.get(), back.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
  return back;
}

bool untouched(const CudaBuffer& o) {
  for (unsigned char c : to_host(o))
    if (c != kPoison) return false;
  return true;
}

// Every one of the `count` elements of `elem_bytes` lost its poison.
bool all_written(const CudaBuffer& o, int64_t count, int elem_bytes) {
  const std::vector<unsigned char> back = to_host(o);
  for (int64_t e = 0; e < count; ++e) {
    bool poisoned = true;
    for (int x = 0; x < elem_bytes; ++x) poisoned = poisoned && back[e * elem_bytes + x] == kPoison;
    if (poisoned) return false;
  }
  return true;
}

struct Feature {
  const char* name;
  // What it needs of a kernel, in the order the registry checks them
  // (dtypes first, then the feature bits, lowest first); at most 2.
  NumericsFeature needs[2];
  int needs_count;
  fmha_dtype o_dtype;
  void (*edit)(fmha_forward_params*, void* bias, void* factors);
};

// explain's reason for the first feature `kernel` lacks, or null when it has them all.
const char* missing_reason(const std::string& kernel, const Feature& f) {
  for (int x = 0; x < f.needs_count; ++x) {
    if (fmha_gpu_test::runs_feature(kernel, f.needs[x])) continue;
    switch (f.needs[x]) {
      case NumericsFeature::kFp8: return "does not run dtype F8E4M3";
      case NumericsFeature::kMixed: return "does not support mixed dtypes";
      case NumericsFeature::kDescale: return "does not support descales";
      case NumericsFeature::kBias: return "does not support an additive bias";
      case NumericsFeature::kAlibi: return "does not support ALiBi slopes";
    }
  }
  return nullptr;
}

// Whether a kernel's reason for passing a problem over is the feature's
// `why` or a limit the registry checks before it: the compute capability,
// or a dtype outside the kernel's list (F32 o for cuda_sm80_tc).
bool names_limit(const std::string& text, const char* why) {
  return text.find(why) != std::string::npos || text.find("needs sm_") != std::string::npos ||
         text.find("does not run dtype") != std::string::npos;
}

}  // namespace

TEST_CASE("CUDA handle: each inference-numerics feature runs or is UNSUPPORTED per kernel, as explain says") {
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);
  const size_t q_bytes = kB * kHq * kN * kD * 4, kv_bytes = kB * kHk * kN * kD * 4;
  CudaBuffer q(q_bytes), k(kv_bytes), v(kv_bytes), o(q_bytes), bias(kN * kN * 4), factors(kB * kHq * 4);
  REQUIRE((q.ok() && k.ok() && v.ok() && o.ok() && bias.ok() && factors.ok()));
  for (const CudaBuffer* b : {&q, &k, &v, &bias, &factors})
    REQUIRE(cudaMemset(b->get(), kInput, b->bytes()) == cudaSuccess);
  const std::vector<std::string> kernels = fmha_gpu_test::cuda_kernel_names();
  REQUIRE(!kernels.empty());

  using NF = NumericsFeature;
  const Feature features[] = {
      {"FP8 K/V", {NF::kFp8, NF::kMixed}, 2, FMHA_DTYPE_F16,
       [](fmha_forward_params* p, void*, void*) { p->k.dtype = p->v.dtype = FMHA_DTYPE_F8E4M3; }},
      {"o in F32 under F16 inputs", {NF::kMixed}, 1, FMHA_DTYPE_F32,
       [](fmha_forward_params* p, void*, void*) { p->o.dtype = FMHA_DTYPE_F32; }},
      {"descales", {NF::kDescale}, 1, FMHA_DTYPE_F16,
       [](fmha_forward_params* p, void*, void* f) { p->k_descale = static_cast<const float*>(f); }},
      {"bias", {NF::kBias}, 1, FMHA_DTYPE_F16,
       [](fmha_forward_params* p, void* b, void*) {
         p->bias.data = b;
         p->bias.dtype = FMHA_DTYPE_F32;
         const int64_t dims[4] = {1, 1, kN, kN}, strides[4] = {0, 0, kN, 1};
         std::memcpy(p->bias.dims, dims, sizeof dims);
         std::memcpy(p->bias.strides, strides, sizeof strides);
       }},
      {"ALiBi", {NF::kAlibi}, 1, FMHA_DTYPE_F16,
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
    const int64_t o_count = kB * kHq * kN * kD;
    const int o_elem = feat.o_dtype == FMHA_DTYPE_F32 ? 4 : 2;

    bool some_kernel_runs = false;
    for (const std::string& name : kernels) some_kernel_runs = some_kernel_runs || !missing_reason(name, feat);

    // The automatic choice.
    char buf[4096];
    const fmha_status want = some_kernel_runs ? FMHA_SUCCESS : FMHA_ERROR_UNSUPPORTED;
    const fmha_status explained = fmha_forward_explain(h.get(), &p, buf, sizeof buf);
    const std::string text = buf;
    CHECK_MESSAGE(explained == want, text);
    CHECK_MESSAGE((text.find("chosen:") != std::string::npos) == some_kernel_runs, text);
    for (const std::string& name : kernels) {
      CAPTURE(name);
      // A kernel lacking the feature names it, unless an earlier limit
      // (its compute capability) passed it over first, or a kernel of lower
      // rank was chosen before the walk reached it; one with it is never
      // passed over for it.
      const char* why = missing_reason(name, feat);
      const size_t at = text.find("passed over " + name + ": ");
      if (why != nullptr) {
        if (at == std::string::npos) {
          CHECK_MESSAGE(some_kernel_runs, text);
          continue;
        }
        const std::string line = text.substr(at, text.find('\n', at) - at);
        CHECK_MESSAGE(names_limit(line, why), text);
      } else {
        for (const char* other : {"dtype F8E4M3", "mixed dtypes", "descales", "additive bias", "ALiBi"})
          CHECK_MESSAGE((at == std::string::npos ||
                         text.substr(at, text.find('\n', at) - at).find(other) == std::string::npos),
                        text);
      }
    }
    size_t ws = 0;
    REQUIRE(cudaMemset(o.get(), kPoison, q_bytes) == cudaSuccess);
    CHECK(fmha_forward_workspace_size(h.get(), &p, &ws) == want);
    if (!some_kernel_runs) {
      CHECK(fmha_forward(h.get(), &p, nullptr, 0) == FMHA_ERROR_UNSUPPORTED);
      REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
      CHECK(untouched(o));
    }

    // Each kernel forced by name.
    for (const std::string& name : kernels) {
      CAPTURE(name);
      p.kernel = name.c_str();
      REQUIRE(cudaMemset(o.get(), kPoison, q_bytes) == cudaSuccess);
      const char* why = missing_reason(name, feat);
      ws = 0;
      const fmha_status ws_status = fmha_forward_workspace_size(h.get(), &p, &ws);
      if (why != nullptr) {
        CHECK(ws_status == FMHA_ERROR_UNSUPPORTED);
        CHECK(fmha_forward(h.get(), &p, nullptr, 0) == FMHA_ERROR_UNSUPPORTED);
        const std::string msg = fmha_last_error_message();
        CHECK_MESSAGE(names_limit(msg, why), msg);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        CHECK(untouched(o));
        continue;
      }
      // It has the feature: it runs unless something else (its compute
      // capability) rules it out; cuda_generic runs on every sm_80+ device.
      if (ws_status == FMHA_ERROR_UNSUPPORTED && name != "cuda_generic") continue;
      REQUIRE_MESSAGE(ws_status == FMHA_SUCCESS, fmha_last_error_message());
      CudaBuffer workspace(ws);
      REQUIRE(workspace.ok());
      CHECK_MESSAGE(fmha_forward(h.get(), &p, workspace.get(), ws) == FMHA_SUCCESS, fmha_last_error_message());
      REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
      CHECK(all_written(o, o_count, o_elem));
    }
  }
}
