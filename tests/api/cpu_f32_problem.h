// What the API contract fixtures of the serving and numerics fields share:
// a CPU handle, an F32 problem's o and lse (poisoned with NaN), a 64-byte
// aligned workspace, and the check that a rejected call names the field
// and writes nothing. A fixture derives from it, sizes o, lse and the
// workspace, and fills p.
#pragma once

#include <doctest/doctest.h>
#include <fmha/fmha.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace fmha_api_test {

struct CpuF32Problem {
  std::vector<float> o, lse;
  std::vector<unsigned char> workspace;  // 64 bytes more than ws_bytes(), for the alignment
  fmha_handle h = nullptr;
  fmha_forward_params p;

  CpuF32Problem() {
    REQUIRE(fmha_create(&h, FMHA_DEVICE_CPU, 0) == FMHA_SUCCESS);
    fmha_forward_params_init(&p);
  }
  ~CpuF32Problem() { fmha_destroy(h); }
  CpuF32Problem(const CpuF32Problem&) = delete;
  CpuF32Problem& operator=(const CpuF32Problem&) = delete;

  // A contiguous F32 [b, heads, n, d] view of `data`.
  static void view(fmha_tensor* t, void* data, int64_t b, int64_t heads, int64_t n, int64_t d) {
    t->data = data;
    t->dtype = FMHA_DTYPE_F32;
    const int64_t dims[4] = {b, heads, n, d};
    const int64_t strides[4] = {heads * n * d, n * d, d, 1};
    std::memcpy(t->dims, dims, sizeof dims);
    std::memcpy(t->strides, strides, sizeof strides);
  }
  void poison() {
    for (float& e : o) e = std::nanf("");
    for (float& e : lse) e = std::nanf("");
  }
  void* ws() { return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(workspace.data()) + 63) & ~uintptr_t{63}); }
  size_t ws_bytes() const { return workspace.size() - 64; }
  fmha_status run(const fmha_forward_params* params = nullptr) {
    return fmha_forward(h, params ? params : &p, ws(), ws_bytes());
  }
  bool untouched() const {
    for (float e : o)
      if (!std::isnan(e)) return false;
    for (float e : lse)
      if (!std::isnan(e)) return false;
    return true;
  }
  // p is rejected with a message holding `needle`, o and lse untouched; the
  // workspace query and explain reject it too.
  void expect_failure(const char* needle) {
    poison();
    CHECK(run() == FMHA_ERROR_INVALID_ARGUMENT);
    const std::string msg = fmha_last_error_message();
    CHECK_MESSAGE(msg.find(needle) != std::string::npos, "message: ", msg, " | expected: ", needle);
    CHECK(untouched());
    size_t bytes = 0;
    CHECK(fmha_forward_workspace_size(h, &p, &bytes) == FMHA_ERROR_INVALID_ARGUMENT);
    char buf[256];
    CHECK(fmha_forward_explain(h, &p, buf, sizeof buf) == FMHA_ERROR_INVALID_ARGUMENT);
  }
};

}  // namespace fmha_api_test
