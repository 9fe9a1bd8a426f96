// The registry row's minimum compute capability for FP8 K/V problems
// (KernelEntry::fp8_kv_sm_min; cuda_sm80_tc's FP8 K/V units are built for
// the architectures of CMAKE_CUDA_ARCHITECTURES from 89 up only,
// src/backend/cuda/sources.cmake): a device below it passes cuda_sm80_tc
// over for an FP8 KV cache, naming the minimum and the device, runs its
// 16-bit problems as before, and cuda_generic takes the FP8 one. Host code
// only (why_not on made-up devices); built with the CUDA backend.
#include <doctest/doctest.h>

#if FMHA_WITH_CUDA

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/device_info.h"
#include "core/problem.h"
#include "core/validate.h"
#include "dispatch/registry.h"
#include "fmha/fmha.h"

namespace {

// A decode problem over host buffers: q/o BF16 [1, 8, 1, 128], k/v
// [1, 2, 64, 128] of kv_dtype.
struct DecodeProblem {
  std::vector<unsigned char> q, k, v, o;
  fmha::Problem problem;

  explicit DecodeProblem(fmha_dtype kv_dtype) {
    constexpr int64_t kHq = 8, kHk = 2, kNk = 64, kD = 128;
    const size_t kv_bytes = kv_dtype == FMHA_DTYPE_BF16 ? 2 : 1;
    q.assign(kHq * kD * 2, 0);
    o.assign(kHq * kD * 2, 0);
    k.assign(kHk * kNk * kD * kv_bytes, 0);
    v.assign(kHk * kNk * kD * kv_bytes, 0);
    fmha_forward_params p;
    fmha_forward_params_init(&p);
    auto view = [](fmha_tensor* t, void* data, fmha_dtype dt, int64_t h, int64_t n) {
      t->data = data;
      t->dtype = dt;
      const int64_t dims[4] = {1, h, n, kD}, strides[4] = {h * n * kD, n * kD, kD, 1};
      std::memcpy(t->dims, dims, sizeof dims);
      std::memcpy(t->strides, strides, sizeof strides);
    };
    view(&p.q, q.data(), FMHA_DTYPE_BF16, kHq, 1);
    view(&p.k, k.data(), kv_dtype, kHk, kNk);
    view(&p.v, v.data(), kv_dtype, kHk, kNk);
    view(&p.o, o.data(), FMHA_DTYPE_BF16, kHq, 1);
    REQUIRE(fmha::build_problem(&p, &problem) == FMHA_SUCCESS);
  }
};

fmha::DeviceInfo cuda_device(int sm) {
  fmha::DeviceInfo d;
  d.kind = FMHA_DEVICE_CUDA;
  d.sm = sm;
  d.num_sms = 108;
  d.smem_per_block_optin = 227 * 1024;
  d.l2_bytes = 40u << 20;
  return d;
}

std::string why(const char* kernel, const fmha::Problem& p, int sm) {
  const fmha::KernelEntry* e = fmha::find_kernel(kernel);
  REQUIRE(e != nullptr);
  char buf[256];
  const char* r = fmha::why_not(*e, p, cuda_device(sm), buf, sizeof buf);
  return r == nullptr ? "" : r;
}

}  // namespace

TEST_CASE("registry: cuda_sm80_tc runs FP8 K/V from its FP8 units' lowest architecture up") {
  const fmha::KernelEntry* sm80 = fmha::find_kernel("cuda_sm80_tc");
  REQUIRE(sm80 != nullptr);
  const DecodeProblem fp8(FMHA_DTYPE_F8E4M3), bf16(FMHA_DTYPE_BF16);
  const int min_sm = sm80->fp8_kv_sm_min;
  // Which FP8 K/V architectures this build has: none (no FP8 dtype in the
  // row: CMAKE_CUDA_ARCHITECTURES=80), 80 (native/all: software decode on
  // sm_80 too) or from 89 up.
  if (!(sm80->dtypes & fmha::dtype_bit(FMHA_DTYPE_F8E4M3))) {
    CHECK(why("cuda_sm80_tc", fp8.problem, 90).find("does not run dtype F8E4M3") != std::string::npos);
    MESSAGE("this build has no cuda_sm80_tc FP8 K/V unit");
    return;
  }
  CHECK((min_sm == 80 || min_sm >= 89));
  if (min_sm > 80) {
    const std::string below = why("cuda_sm80_tc", fp8.problem, 80);
    CHECK_MESSAGE(below == "needs sm_" + std::to_string(min_sm) + " or newer for FP8 K/V (k/v F8E4M3), device is sm_80",
                  below);
    // The 16-bit problem still runs on sm_80, the FP8 one on cuda_generic.
    CHECK_MESSAGE(why("cuda_sm80_tc", bf16.problem, 80).empty(), why("cuda_sm80_tc", bf16.problem, 80));
    CHECK_MESSAGE(why("cuda_generic", fp8.problem, 80).empty(), why("cuda_generic", fp8.problem, 80));
  }
  // At the minimum it runs (when this build instantiates D=128 for a BF16 q).
  const std::string at = why("cuda_sm80_tc", fp8.problem, min_sm);
  CHECK_MESSAGE((at.empty() || at.find("not instantiated") != std::string::npos), at);
}

#endif  // FMHA_WITH_CUDA
