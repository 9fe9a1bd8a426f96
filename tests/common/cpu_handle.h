// A CPU fmha handle owned by a test: created or the test fails, destroyed
// at scope exit; threads = 0 keeps the library's default (one per hardware
// thread).
#pragma once

#include <doctest/doctest.h>

#include "fmha/fmha.h"

namespace fmha_test {

class CpuHandle {
 public:
  explicit CpuHandle(int threads = 0) {
    REQUIRE(fmha_create(&handle_, FMHA_DEVICE_CPU, 0) == FMHA_SUCCESS);
    if (threads > 0) set_threads(threads);
  }
  ~CpuHandle() { fmha_destroy(handle_); }
  CpuHandle(const CpuHandle&) = delete;
  CpuHandle& operator=(const CpuHandle&) = delete;
  void set_threads(int n) { REQUIRE(fmha_set_num_threads(handle_, n) == FMHA_SUCCESS); }
  fmha_handle get() const { return handle_; }

 private:
  fmha_handle handle_ = nullptr;
};

}  // namespace fmha_test
