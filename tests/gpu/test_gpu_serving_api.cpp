// The 0.2 C contract on a CUDA handle: the metadata arrays must be memory
// of the handle's device (and on a CPU handle, host memory), checked before
// anything is written; empty work needs no kernel and no pointer.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/gpu_support.h"

namespace {

using fmha_gpu_test::CudaBuffer;
using fmha_gpu_test::GpuHandle;

constexpr int64_t kH = 2, kD = 64, kTotal = 24, kSeqs = 3;

void view(fmha_tensor* t, void* data, int64_t b, int64_t n) {
  t->data = data;
  t->dtype = FMHA_DTYPE_F16;
  const int64_t dims[4] = {b, kH, n, kD}, strides[4] = {kH * n * kD, n * kD, kD, 1};
  std::memcpy(t->dims, dims, sizeof dims);
  std::memcpy(t->strides, strides, sizeof strides);
}

// o's bytes all still 0xff (the poison written below).
bool untouched(const CudaBuffer& o) {
  std::vector<unsigned char> back(o.bytes());
  REQUIRE(cudaMemcpy(back.data(), o.get(), back.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
  for (unsigned char c : back)
    if (c != 0xff) return false;
  return true;
}

}  // namespace

TEST_CASE("CUDA handle: metadata arrays must be device memory of the handle's device") {
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);
  const size_t bytes = kH * kTotal * kD * 2;
  CudaBuffer q(bytes), k(bytes), v(bytes), o(bytes), cu_dev((kSeqs + 1) * 4);
  REQUIRE((q.ok() && k.ok() && v.ok() && o.ok() && cu_dev.ok()));
  REQUIRE(cudaMemset(o.get(), 0xff, bytes) == cudaSuccess);
  const int32_t cu_host[kSeqs + 1] = {0, 5, 5, kTotal};
  REQUIRE(cudaMemcpy(cu_dev.get(), cu_host, sizeof cu_host, cudaMemcpyHostToDevice) == cudaSuccess);

  fmha_forward_params p;
  fmha_forward_params_init(&p);
  view(&p.q, q.get(), 1, kTotal);
  view(&p.k, k.get(), 1, kTotal);
  view(&p.v, v.get(), 1, kTotal);
  view(&p.o, o.get(), 1, kTotal);
  p.num_seqs = kSeqs;
  p.max_seqlen_q = p.max_seqlen_k = 19;
  p.cu_seqlens_q = cu_host;  // host memory: refused
  p.cu_seqlens_k = static_cast<const int32_t*>(cu_dev.get());
  size_t ws = 0;
  CHECK(fmha_forward_workspace_size(h.get(), &p, &ws) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(fmha_last_error_message()).find("cu_seqlens_q=") != std::string::npos);
  CHECK(std::string(fmha_last_error_message()).find("is host memory but the handle is CUDA") != std::string::npos);
  CHECK(fmha_forward(h.get(), &p, nullptr, 0) == FMHA_ERROR_INVALID_ARGUMENT);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(untouched(o));

  p.cu_seqlens_q = static_cast<const int32_t*>(cu_dev.get());
  std::vector<int32_t> used_host(kSeqs, 3);
  p.seqused_k = used_host.data();
  CHECK(fmha_forward(h.get(), &p, nullptr, 0) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(fmha_last_error_message()).find("seqused_k=") != std::string::npos);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(untouched(o));

  // The same device metadata on a CPU handle (with host tensors) is refused
  // the other way round (the CUDA runtime is in use, so pointers are asked).
  fmha_handle cpu = nullptr;
  REQUIRE(fmha_create(&cpu, FMHA_DEVICE_CPU, 0) == FMHA_SUCCESS);
  std::vector<uint16_t> hq(kH * kTotal * kD, 0x3c00), hk(hq), hv(hq), ho(hq.size(), 0xffff);
  fmha_forward_params c;
  fmha_forward_params_init(&c);
  view(&c.q, hq.data(), 1, kTotal);
  view(&c.k, hk.data(), 1, kTotal);
  view(&c.v, hv.data(), 1, kTotal);
  view(&c.o, ho.data(), 1, kTotal);
  c.num_seqs = kSeqs;
  c.max_seqlen_q = c.max_seqlen_k = 19;
  c.cu_seqlens_q = cu_host;
  c.cu_seqlens_k = static_cast<const int32_t*>(cu_dev.get());
  CHECK(fmha_forward(cpu, &c, nullptr, 0) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(fmha_last_error_message()).find("cu_seqlens_k=") != std::string::npos);
  CHECK(std::string(fmha_last_error_message()).find("is CUDA device memory but the handle is CPU") != std::string::npos);
  for (uint16_t x : ho) CHECK(x == 0xffff);
  fmha_destroy(cpu);
}

TEST_CASE("CUDA handle: empty work runs no kernel and needs no pointer") {
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);
  fmha_forward_params p;
  fmha_forward_params_init(&p);
  view(&p.q, nullptr, 0, 7);
  view(&p.k, nullptr, 0, 9);
  view(&p.v, nullptr, 0, 9);
  view(&p.o, nullptr, 0, 7);
  size_t ws = 1;
  REQUIRE(fmha_forward_workspace_size(h.get(), &p, &ws) == FMHA_SUCCESS);
  CHECK(ws == 0);
  CHECK(fmha_forward(h.get(), &p, nullptr, 0) == FMHA_SUCCESS);
  for (int i = 0; i < fmha_kernel_count(); ++i) {  // forcing any kernel: still nothing to run
    p.kernel = fmha_kernel_name(i);
    CHECK(fmha_forward(h.get(), &p, nullptr, 0) == FMHA_SUCCESS);
  }
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
}
